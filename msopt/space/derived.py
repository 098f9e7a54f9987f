"""Derived dtypes: a field's value computed from other fields, never a dimension of the search.

``share`` (``target.min + target.max - target.value``), ``factories`` (``product / target``),
``times`` (``product x target``), ``ternary_times`` (``product x a x b``) and ``ternary_factories``
(``product / (a x b)``, with repair of ``a`` and ``b``). They register in :data:`DTYPES` beside the
searched dtypes of :mod:`msopt.space.dtypes`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from msopt.errors import DecodeError
from msopt.space.context import DecodeContext, resolve_priority
from msopt.space.dtypes import (
    DTYPES,
    MAX_ENUMERABLE,
    FieldType,
    Report,
    as_number,
    convert,
    is_missing,
    target_of,
)
from msopt.space.fields import FieldDecl


class _Derived(FieldType):
    searched = False

    def is_constant(self) -> bool:
        return True

    def bounds(self) -> tuple[float, float]:
        return (0.0, 0.0)

    def default_coordinate(self) -> float:
        return 0.0

    def constant_raw(self) -> Any:
        return self.decl.value

    def _kept(self, report: Report, why: str) -> Any:
        report.warnings.append(f"{self.name}: {why}; kept the declared value {self.decl.value!r}")
        return self.decl.value


@DTYPES.register("share")
class ShareType(_Derived):
    """``target.min + target.max − target.value``: what the target leaves of its range."""

    def __init__(self, decl: FieldDecl) -> None:
        super().__init__(decl)
        self.target = target_of(decl, "share")
        self.deps = (self.target,)

    def bind(self, fields: Mapping[str, FieldType]) -> None:
        super().bind(fields)
        t = fields[self.target].decl
        self._sum = t.min + t.max
        self._int = isinstance(t.min, int) and isinstance(t.max, int)

    def derive(self, values: dict[str, Any], context: DecodeContext | None, report: Report) -> Any:
        v: Any = values.get(self.target)
        if is_missing(v) or isinstance(v, str):
            return self._kept(report, f"target '{self.target}' has no numeric value")
        out = self._sum - v
        return int(out) if self._int and float(out).is_integer() else out


class _Binary(_Derived):
    """factories / times: ``dtype_param = {target_name, product, dtype}``."""

    def __init__(self, decl: FieldDecl) -> None:
        super().__init__(decl)
        p = decl.dtype_param
        if not isinstance(p, Mapping):
            raise decl.error(f"{decl.dtype} needs a table in dtype_param, got {p!r}",
                             'write dtype_param = { target_name = "tp", product = 8, dtype = "int" }')
        self.target = target_of(decl, decl.dtype)
        self.product = as_number(decl, p.get("product", 1), "dtype_param.product")
        self.out = p.get("dtype", "int")
        if self.out not in ("int", "float", "bool"):
            raise decl.error(f"dtype_param.dtype {self.out!r} is not int, float or bool",
                             'write dtype = "int" or "float"')
        self.deps = (self.target,)


@DTYPES.register("factories")
class FactoriesType(_Binary):
    """``product / target``, converted to ``dtype_param.dtype`` (int truncates, as the original)."""

    def derive(self, values: dict[str, Any], context: DecodeContext | None, report: Report) -> Any:
        t: Any = values.get(self.target)
        if is_missing(t) or isinstance(t, str) or t == 0:
            return self._kept(report, f"target '{self.target}' is {t!r}")
        return convert(self.out, self.product / t)


@DTYPES.register("times")
class TimesType(_Binary):
    """``product × target``, converted to ``dtype_param.dtype``."""

    def derive(self, values: dict[str, Any], context: DecodeContext | None, report: Report) -> Any:
        t: Any = values.get(self.target)
        if is_missing(t) or isinstance(t, str):
            return self._kept(report, f"target '{self.target}' is {t!r}")
        return convert(self.out, self.product * t)


class _Ternary(_Derived):
    """Shared parsing of ``dtype_param`` for the two-source relations."""

    def __init__(self, decl: FieldDecl) -> None:
        super().__init__(decl)
        p = decl.dtype_param
        example = 'dtype_param = { target_names = ["tp", "pp"], product = 8 }'
        if not isinstance(p, Mapping):
            raise decl.error(f"{decl.dtype} needs a table in dtype_param, got {p!r}", f"write {example}")
        names = p.get("target_names")
        if not isinstance(names, (list, tuple)) or len(names) != 2 or \
                not all(isinstance(n, str) and n for n in names):
            raise decl.error(f"{decl.dtype} needs exactly two target_names, got {names!r}", f"write {example}")
        if names[0] == names[1]:
            raise decl.error(f"target_names {list(names)!r} name the same field twice", "name two fields")
        if decl.name in names:
            raise decl.error(f"{decl.dtype} names itself in target_names", "name two other fields")
        self.targets: tuple[str, str] = (names[0], names[1])
        self.product = as_number(decl, p.get("product", 1), "dtype_param.product")
        if self.product == 0:
            raise decl.error("dtype_param.product is 0", "give the product of the relation, e.g. 8")
        self.out = p.get("dtype", "int")
        if self.out not in ("int", "float"):
            raise decl.error(f"dtype_param.dtype {self.out!r} is not int or float", 'write dtype = "int"')
        self.deps = self.targets


@DTYPES.register("ternary_times")
class TernaryTimesType(_Ternary):
    """``product × a × b``; a missing or NaN source keeps the declared value."""

    def derive(self, values: dict[str, Any], context: DecodeContext | None, report: Report) -> Any:
        a: Any = values.get(self.targets[0])
        b: Any = values.get(self.targets[1])
        if is_missing(a) or is_missing(b) or isinstance(a, str) or isinstance(b, str):
            return self._kept(report, f"a source of {self.targets} is {a!r}/{b!r}")
        return convert(self.out, self.product * a * b)


@DTYPES.register("ternary_factories")
class TernaryFactoriesType(_Ternary):
    """``product / (a × b)`` with priority-aware repair of the sources.

    The result must be within [min_value, max_value] and, for int, divide exactly. Otherwise:
    stage 1 keeps the high-priority source and tries the other's candidates nearest first;
    stage 2 tries both, the kept one's candidates outer, nearest first; ties go to the smaller
    value. Candidates are an enum's values or an int range of at most 256 values. When no
    combination works, a float result is clamped to its bounds and reported; an int result
    raises :class:`DecodeError` (a clamped int would break ``a × b × value == product``).
    """

    def __init__(self, decl: FieldDecl) -> None:
        super().__init__(decl)
        p = decl.dtype_param
        default_min = 1 if self.out == "int" else -math.inf
        self.min_value = as_number(decl, p.get("min_value", default_min), "dtype_param.min_value") \
            if p.get("min_value") is not None else default_min
        self.max_value = as_number(decl, p["max_value"], "dtype_param.max_value") \
            if p.get("max_value") is not None else math.inf
        if self.min_value > self.max_value:
            raise decl.error(f"min_value ({self.min_value}) > max_value ({self.max_value})",
                             "swap them or fix the bounds")
        self.policy = p.get("priority_policy", "balanced")
        if self.policy not in ("balanced", "fixed"):
            raise decl.error(f"priority_policy {self.policy!r} is not 'balanced' or 'fixed'",
                             'write priority_policy = "balanced"')
        pr = p.get("priority")
        self.priority = tuple(pr) if isinstance(pr, (list, tuple)) else None
        unknown = set(p) - {"target_names", "product", "dtype", "min_value", "max_value",
                            "priority_policy", "priority"}
        if unknown:
            raise decl.error(f"unknown dtype_param key(s) {sorted(unknown)}",
                             "valid: target_names, product, dtype, min_value, max_value, "
                             "priority_policy, priority")

    def bind(self, fields: Mapping[str, FieldType]) -> None:
        super().bind(fields)
        self.sources = {n: fields[n] for n in self.targets}
        cand = {n: f.candidates() if f.searched and not f.is_constant() else None
                for n, f in self.sources.items()}
        self._cands = cand
        a, b = self.targets
        ca, cb = cand[a], cand[b]
        if self.out == "int" and ca is not None and cb is not None:
            if not any(self.valid(x, y) is not None for x in ca for y in cb):
                raise self.decl.error(
                    f"no pair of {a} {list(ca)} and {b} {list(cb)} gives an integer "
                    f"in [{self.min_value}, {self.max_value}] for product {self.product}",
                    "change the product or the candidates")

    def valid(self, a: Any, b: Any) -> Any:
        """The derived value for sources (a, b), or None when that pair is not allowed."""
        if not a or not b or isinstance(a, str) or isinstance(b, str):
            return None
        q = self.product / (a * b)
        if self.out == "int":
            r = round(q)
            if abs(q - r) > 1e-9 * max(1.0, abs(q)):
                return None
            q = int(r)
        if q < self.min_value or q > self.max_value:
            return None
        return q

    def _options(self, name: str, current: Any) -> list[Any]:
        cands = self._cands.get(name)
        if cands is None:
            return [current]
        return sorted(cands, key=lambda c: (abs(c - current), c))

    def derive(self, values: dict[str, Any], context: DecodeContext | None, report: Report) -> Any:
        na, nb = self.targets
        a: Any = values.get(na)
        b: Any = values.get(nb)
        if type(a) is int and type(b) is int and a and b and self.out == "int":  # fast path
            q, r = divmod(self.product, a * b)
            if not r and self.min_value <= q <= self.max_value:
                return int(q)
        if is_missing(a) or is_missing(b) or isinstance(a, str) or isinstance(b, str) \
                or a == 0 or b == 0:
            return self._kept(report, f"source {na}={a!r} or {nb}={b!r} is zero or missing")
        out = self.valid(a, b)
        if out is not None:
            return out
        keep, adjust = resolve_priority(self.targets, self.policy, self.priority, context)
        kv, av = values[keep], values[adjust]

        def pair(k: Any, j: Any) -> Any:
            return self.valid(k, j) if keep == na else self.valid(j, k)

        # stage 1: keep the high-priority source
        for cand in self._options(adjust, av):
            out = pair(kv, cand)
            if out is not None:
                return self._moved(values, report, {adjust: cand}, out)
        # stage 2: both, the kept one outer
        for kc in self._options(keep, kv):
            for cand in self._options(adjust, av):
                out = pair(kc, cand)
                if out is not None:
                    return self._moved(values, report, {keep: kc, adjust: cand}, out)
        if any(self._cands.get(n) is None for n in self.targets):
            report.warnings.append(f"{self.name}: a source of {self.targets} is not enumerable "
                                   f"(over {MAX_ENUMERABLE} values or not searched); no repair")
        q = self.product / (a * b)
        if self.out == "float":
            clamped = min(max(q, self.min_value), self.max_value)
            report.warnings.append(f"{self.name}: no valid pair near {na}={a}, {nb}={b}; "
                                   f"clamped {q} to {clamped}")
            return clamped
        raise DecodeError(
            f"{self.name} = {self.product} / ({na} × {nb}) = {self.product}/({a}×{b}) cannot be made "
            f"an integer in [{self.min_value}, {self.max_value}] by any candidate pair",
            values,
        )

    def _moved(self, values: dict[str, Any], report: Report, moves: dict[str, Any], out: Any) -> Any:
        for name, v in moves.items():
            if values[name] != v:
                values[name] = v
                report.changed.append(name)
        return out
