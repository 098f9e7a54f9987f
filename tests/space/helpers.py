"""Build spaces from plain dicts in tests."""

from __future__ import annotations

from typing import Any

from msopt.space import SearchSpace, parse_field


def space_of(*fields: dict[str, Any]) -> SearchSpace:
    return SearchSpace([parse_field(f, source="t.toml", section="vllm", index=i) for i, f in enumerate(fields)])


def tern(product: Any = 8, **kw: Any) -> dict[str, Any]:
    param = {"target_names": ["tp", "pp"], "product": product}
    param.update(kw)
    return dict(name="dp", min=0, max=0, dtype="ternary_factories", dtype_param=param)


TP = dict(name="tp", min=0, max=1, dtype="enum", dtype_param=[1, 2, 4, 8], value=1)
PP = dict(name="pp", min=0, max=1, dtype="enum", dtype_param=[1, 2, 4], value=1)
