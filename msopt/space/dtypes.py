"""Field dtypes: how one field maps between a swarm coordinate and a concrete value.

Each dtype is a class built once per field from its declaration (bounds and candidates are
computed at build time, Optuna ``_transform`` style), validated at load time, and registered in
:data:`DTYPES`. Plugins add dtypes through the ``msopt.dtypes`` entry-point group.

Searched dtypes take one dimension unless the field is constant (``constant`` set, or
``min == max``). Derived dtypes never take a dimension; their value is computed from other
fields in dependency order.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from msopt.checks import is_finite, is_number
from msopt.errors import ConfigError, DecodeError
from msopt.registry import Registry, close_matches
from msopt.space.context import DecodeContext, resolve_priority
from msopt.space.fields import FieldDecl

#: Largest int range whose values are enumerated as repair candidates.
MAX_ENUMERABLE = 256


class Report:
    """What one decode noticed: warnings, and the source fields a repair moved."""

    __slots__ = ("warnings", "changed")

    def __init__(self) -> None:
        self.warnings: list[str] = []
        self.changed: list[str] = []


def _convert(dtype: str, value: float) -> Any:
    if dtype == "int":
        return int(value)
    if dtype == "bool":
        return bool(value)
    return float(value)


def _is_missing(value: Any) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


class FieldType:
    """Base of every dtype.

    Subclasses set ``searched`` and implement ``bounds``/``decode``/``encode`` (searched) or
    ``derive`` (derived). ``deps`` names the fields whose values this one reads.
    """

    searched: ClassVar[bool] = True

    def __init__(self, decl: FieldDecl) -> None:
        self.decl = decl
        self.name = decl.name
        self.deps: tuple[str, ...] = ()

    # -- binding ---------------------------------------------------------------------------
    def bind(self, fields: Mapping[str, FieldType]) -> None:
        """Resolve references to other fields; called once all fields are built."""
        for dep in self.deps:
            if dep not in fields:
                hint = close_matches(dep, list(fields))
                fix = f"did you mean '{hint[0]}'? (names are case-sensitive)" if hint else (
                    f"name one of: {', '.join(fields)}"
                )
                raise self.decl.error(f"{self.decl.dtype} target '{dep}' is not a field", fix)

    # -- searched --------------------------------------------------------------------------
    def bounds(self) -> tuple[float, float]:
        """Return the (low, high) of this field's dimension."""
        return (float(self.decl.min), float(self.decl.max))

    def decode(self, x: float) -> Any:
        """Map an in-bounds coordinate to a raw value."""
        raise NotImplementedError

    def encode(self, value: Any, values: Mapping[str, Any]) -> float:
        """Map a value to a coordinate that decodes back to it."""
        raise NotImplementedError

    def finish(self, raw: Any, values: Mapping[str, Any], report: Report) -> Any:
        """Turn a raw decoded value into the field's value (ratio reads its target here)."""
        return raw

    def candidates(self) -> Sequence[Any] | None:
        """Every value this field can take, or None when there are too many to enumerate."""
        return None

    def is_constant(self) -> bool:
        """True when the field takes no dimension."""
        return self.decl.constant is not None or self.decl.min == self.decl.max

    def constant_raw(self) -> Any:
        """The raw value of a constant field."""
        if self.decl.constant is not None:
            return self.check_raw(self.decl.constant, "constant")
        if self.decl.value is not None:
            return self.check_raw(self.decl.value, "value")
        return self.decode(self.bounds()[0])

    def default_coordinate(self) -> float:
        """The coordinate of the declared ``value`` (bounds midpoint without one)."""
        lo, hi = self.bounds()
        if self.decl.value is None:
            return (lo + hi) / 2
        return self.encode_raw(self.check_raw(self.decl.value, "value"))

    def encode_raw(self, raw: Any) -> float:
        """Encode a raw value (the ratio itself for ratio; the value for the others)."""
        return self.encode(raw, {})

    def check_raw(self, raw: Any, key: str) -> Any:
        """Validate a declared raw value (``value``/``constant``) at load time."""
        return raw

    # -- derived ---------------------------------------------------------------------------
    def derive(self, values: dict[str, Any], context: DecodeContext | None, report: Report) -> Any:
        """Compute a derived value from ``values`` (already holding every dependency)."""
        raise NotImplementedError


DTYPES: Registry[type[FieldType]] = Registry("dtype", entry_point_group="msopt.dtypes")


def _num(decl: FieldDecl, raw: Any, key: str) -> float:
    if not is_finite(raw):
        fix = "give a finite number" if key.startswith("dtype_param") else f"write e.g. {key} = {decl.min}"
        raise decl.error(f"'{key}' must be a finite number, got {raw!r}", fix)
    return raw


@DTYPES.register("int")
class IntType(FieldType):
    """Integers in [min, max]; each integer owns an equal share (width 1) of the position range.

    Correction to the original tool, which truncated and never clamped: the dimension spans
    [min - 0.5, max + 0.5], a coordinate is rounded to the nearest integer and clamped.
    """

    def __init__(self, decl: FieldDecl) -> None:
        super().__init__(decl)
        self.lo = math.ceil(decl.min)
        self.hi = math.floor(decl.max)
        if self.lo > self.hi:
            raise decl.error(f"no integer lies in [{decl.min}, {decl.max}]", "widen the bounds")
        span = self.hi - self.lo + 1
        self._candidates = list(range(self.lo, self.hi + 1)) if span <= MAX_ENUMERABLE else None

    def bounds(self) -> tuple[float, float]:
        return (self.lo - 0.5, self.hi + 0.5)

    def is_constant(self) -> bool:
        return self.decl.constant is not None or self.lo == self.hi

    def decode(self, x: float) -> int:
        v = math.floor(x + 0.5)
        return self.lo if v < self.lo else self.hi if v > self.hi else v

    def encode(self, value: Any, values: Mapping[str, Any]) -> float:
        v = float(value)
        return float(self.lo) if v < self.lo else float(self.hi) if v > self.hi else v

    def candidates(self) -> Sequence[Any] | None:
        return self._candidates

    def check_raw(self, raw: Any, key: str) -> Any:
        v = _num(self.decl, raw, key)
        if v != int(v):
            raise self.decl.error(f"'{key}' = {raw!r} is not an integer", f"write an integer for {key}")
        if key == "value" and not self.lo <= v <= self.hi:
            raise self.decl.error(f"'value' = {raw!r} lies outside [min, max] = [{self.lo}, {self.hi}]",
                                  "give a value within the bounds, or widen them")
        return int(v)


@DTYPES.register("float")
class FloatType(FieldType):
    """Real numbers in [min, max]; the coordinate is the value, clamped (and, with ``step``,
    rounded to the nearest ``min + k × step`` inside the bounds)."""

    def __init__(self, decl: FieldDecl) -> None:
        super().__init__(decl)
        step = decl.step
        # decimals of the step, so 0.7 + 9 x 0.01 prints 0.79, not 0.7900000000000001
        self._digits = max(0, -math.floor(math.log10(step)) + 3) if step else 0
        self._last = math.floor((decl.max - decl.min) / step + 1e-9) if step else 0

    def decode(self, x: float) -> float:
        lo, hi = self.decl.min, self.decl.max
        v = float(lo if x < lo else hi if x > hi else x)
        step = self.decl.step
        if step:
            k = min(max(round((v - lo) / step), 0), self._last)
            v = round(lo + k * step, self._digits)
        return v

    def encode(self, value: Any, values: Mapping[str, Any]) -> float:
        v = float(value)
        lo, hi = self.decl.min, self.decl.max
        return float(lo) if v < lo else float(hi) if v > hi else v

    def check_raw(self, raw: Any, key: str) -> Any:
        v = float(_num(self.decl, raw, key))
        if key == "value" and not self.decl.min <= v <= self.decl.max:
            raise self.decl.error(f"'value' = {raw!r} lies outside [min, max] = [{self.decl.min}, {self.decl.max}]",
                                  "give a value within the bounds, or widen them")
        return v


@DTYPES.register("bool")
class BoolType(FieldType):
    """False on the lower half of [min, max], True on the upper half."""

    def __init__(self, decl: FieldDecl) -> None:
        super().__init__(decl)
        self._mid = (decl.min + decl.max) / 2

    def decode(self, x: float) -> bool:
        return x >= self._mid

    def encode(self, value: Any, values: Mapping[str, Any]) -> float:
        lo, hi = self.decl.min, self.decl.max
        return (self._mid + hi) / 2 if value else (lo + self._mid) / 2

    def candidates(self) -> Sequence[Any] | None:
        return (False, True)

    def constant_raw(self) -> Any:
        if self.decl.constant is None and self.decl.value is None:
            return bool(self.decl.min)
        return super().constant_raw()

    def check_raw(self, raw: Any, key: str) -> Any:
        if isinstance(raw, bool) or raw in (0, 1):
            return bool(raw)
        raise self.decl.error(f"'{key}' = {raw!r} is not a boolean", f"write {key} = true or false")


class _Choice(FieldType):
    """[min, max] cut into equal segments, one per candidate (the original's enum decode)."""

    def _setup(self, n: int) -> None:
        self.n = n
        self._width = (self.decl.max - self.decl.min) / n if n else 0.0

    def index(self, x: float) -> int:
        if self._width <= 0:
            return 0
        i = int((x - self.decl.min) / self._width)
        return 0 if i < 0 else self.n - 1 if i >= self.n else i

    def coordinate(self, i: int) -> float:
        return self.decl.min + (i + 0.5) * self._width

    def is_constant(self) -> bool:
        return self.decl.constant is not None or self.decl.min == self.decl.max or self.n == 1


@DTYPES.register("enum")
class EnumType(_Choice):
    """One of the values listed in ``dtype_param`` (numbers or strings).

    Encoding a value not in the list maps a number to the nearest candidate and rejects a
    string; it never changes the declaration (the original inserted unknown values).
    """

    def __init__(self, decl: FieldDecl) -> None:
        super().__init__(decl)
        vals = decl.dtype_param
        if not isinstance(vals, (list, tuple)) or not vals:
            raise decl.error(f"enum needs a non-empty list in dtype_param, got {vals!r}",
                             "write dtype_param = [1, 2, 4, 8]")
        for v in vals:
            if isinstance(v, float) and not math.isfinite(v):
                raise decl.error(f"enum value {v!r} is not finite", "remove it from dtype_param")
            if isinstance(v, (list, dict, tuple)):
                raise decl.error(f"enum value {v!r} is not a number or a string", "list plain values")
        if len(set(map(repr, vals))) != len(vals):
            raise decl.error(f"enum values {list(vals)!r} repeat", "list each value once")
        self.values: tuple[Any, ...] = tuple(vals)
        self.numeric = all(is_number(v) for v in vals)
        self._index = {v: i for i, v in enumerate(self.values)}
        self._setup(len(self.values))
        self._lo = float(decl.min)
        self._coords = {v: self.coordinate(i) for i, v in enumerate(self.values)}

    def decode(self, x: float) -> Any:
        w = self._width
        if w <= 0:
            return self.values[0]
        i = int((x - self._lo) / w)
        return self.values[0 if i < 0 else self.n - 1 if i >= self.n else i]

    def lookup(self, value: Any) -> int:
        """Index of ``value``, or of the nearest numeric candidate."""
        i = self._index.get(value)
        if i is not None:
            return i
        if self.numeric and is_number(value):
            return min(range(self.n), key=lambda k: (abs(self.values[k] - value), self.values[k]))
        raise ConfigError(
            f"{self.decl.where}: value {value!r} is not one of {list(self.values)!r}; "
            "use one of the listed values"
        )

    def encode(self, value: Any, values: Mapping[str, Any]) -> float:
        try:
            c = self._coords.get(value)
        except TypeError:  # unhashable
            c = None
        return c if c is not None else self.coordinate(self.lookup(value))

    def candidates(self) -> Sequence[Any] | None:
        return self.values

    def constant_raw(self) -> Any:
        if self.decl.constant is None and self.decl.value is None:
            return self.values[0]
        return super().constant_raw()

    def check_raw(self, raw: Any, key: str) -> Any:
        if raw not in self.values:
            raise self.decl.error(f"'{key}' = {raw!r} is not one of {list(self.values)!r}",
                                  f"set {key} to one of the enum values")
        return self.values[self.lookup(raw)]


@DTYPES.register("range")
class RangeType(_Choice):
    """An enum of ``min, min + step, ...`` up to ``max`` (``dtype_param`` is the step).

    Correction: values never exceed ``max`` (``range(min, max + step, step)`` could).
    """

    def __init__(self, decl: FieldDecl) -> None:
        super().__init__(decl)
        step = decl.dtype_param
        if not is_number(step) or not step > 0 \
                or not math.isfinite(step):
            raise decl.error(f"range needs a positive step in dtype_param, got {step!r}",
                             "write dtype_param = 10")
        self.step = step
        self.start = decl.min
        self.integral = all(float(v).is_integer() for v in (step, decl.min))
        n = int(math.floor((decl.max - decl.min) / step + 1e-9)) + 1
        if n > 10_000_000:
            raise decl.error(f"range has {n} values", "use a larger step or an int field")
        self._setup(n)

    def bounds(self) -> tuple[float, float]:
        return (0.0, 1.0)

    def is_constant(self) -> bool:
        return self.decl.constant is not None or self.n == 1

    def index(self, x: float) -> int:
        i = int(x * self.n)
        return 0 if i < 0 else self.n - 1 if i >= self.n else i

    def coordinate(self, i: int) -> float:
        return (i + 0.5) / self.n

    def value_at(self, i: int) -> Any:
        v = self.start + i * self.step
        return int(round(v)) if self.integral else v

    def decode(self, x: float) -> Any:
        n = self.n
        i = int(x * n)
        i = 0 if i < 0 else n - 1 if i >= n else i
        v = self.start + i * self.step
        return int(round(v)) if self.integral else v

    def encode(self, value: Any, values: Mapping[str, Any]) -> float:
        n = self.n
        i = int(round((float(value) - self.start) / self.step))
        return ((0 if i < 0 else n - 1 if i >= n else i) + 0.5) / n

    def candidates(self) -> Sequence[Any] | None:
        if self.n > MAX_ENUMERABLE:
            return None
        return [self.value_at(i) for i in range(self.n)]

    def constant_raw(self) -> Any:
        if self.decl.constant is None and self.decl.value is None:
            return self.value_at(0)
        return super().constant_raw()

    def check_raw(self, raw: Any, key: str) -> Any:
        return self.value_at(self.index(self.encode(_num(self.decl, raw, key), {})))


def _target_of(decl: FieldDecl, dtype: str) -> str:
    param = decl.dtype_param
    if isinstance(param, Mapping):
        param = param.get("target_name")
    if not isinstance(param, str) or not param:
        raise decl.error(f"{dtype} needs its target field name in dtype_param, got {decl.dtype_param!r}",
                         'write dtype_param = "max_batch_size"')
    return param


@DTYPES.register("ratio")
class RatioType(FieldType):
    """``int(ratio × target)``, the ratio searched in [min, max].

    ``value`` and ``constant`` are the ratio; the decoded value is the integer.
    """

    def __init__(self, decl: FieldDecl) -> None:
        super().__init__(decl)
        self.target = _target_of(decl, "ratio")
        if self.target == decl.name:
            raise decl.error("ratio names itself as its target", "name another field")
        self.deps = (self.target,)

    def decode(self, x: float) -> float:
        lo, hi = self.decl.min, self.decl.max
        return float(lo if x < lo else hi if x > hi else x)

    def finish(self, raw: Any, values: Mapping[str, Any], report: Report) -> Any:
        t: Any = values.get(self.target)
        if _is_missing(t):
            report.warnings.append(f"{self.name}: target '{self.target}' has no value; kept {self.decl.value!r}")
            return self.decl.value
        return int(raw * t)

    def encode(self, value: Any, values: Mapping[str, Any]) -> float:
        t: Any = values.get(self.target)
        lo, hi = self.decl.min, self.decl.max
        if _is_missing(t) or not t:
            return (lo + hi) / 2
        r = (float(value) + 0.5) / t
        return float(min(max(r, lo), hi))

    def encode_raw(self, raw: Any) -> float:
        return float(min(max(float(raw), self.decl.min), self.decl.max))

    def check_raw(self, raw: Any, key: str) -> Any:
        v = float(_num(self.decl, raw, key))
        if key == "value" and not self.decl.min <= v <= self.decl.max:
            raise self.decl.error(f"'value' = {raw!r} lies outside [min, max] = [{self.decl.min}, {self.decl.max}]",
                                  "give a value within the bounds, or widen them")
        return v


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
        self.target = _target_of(decl, "share")
        if self.target == decl.name:
            raise decl.error("share names itself as its target", "name another field")
        self.deps = (self.target,)

    def bind(self, fields: Mapping[str, FieldType]) -> None:
        super().bind(fields)
        t = fields[self.target].decl
        self._sum = t.min + t.max
        self._int = isinstance(t.min, int) and isinstance(t.max, int)

    def derive(self, values: dict[str, Any], context: DecodeContext | None, report: Report) -> Any:
        v: Any = values.get(self.target)
        if _is_missing(v) or isinstance(v, str):
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
        self.target = _target_of(decl, decl.dtype)
        if self.target == decl.name:
            raise decl.error(f"{decl.dtype} names itself as its target", "name another field")
        self.product = _num(decl, p.get("product", 1), "dtype_param.product")
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
        if _is_missing(t) or isinstance(t, str) or t == 0:
            return self._kept(report, f"target '{self.target}' is {t!r}")
        return _convert(self.out, self.product / t)


@DTYPES.register("times")
class TimesType(_Binary):
    """``product × target``, converted to ``dtype_param.dtype``."""

    def derive(self, values: dict[str, Any], context: DecodeContext | None, report: Report) -> Any:
        t: Any = values.get(self.target)
        if _is_missing(t) or isinstance(t, str):
            return self._kept(report, f"target '{self.target}' is {t!r}")
        return _convert(self.out, self.product * t)


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
        self.product = _num(decl, p.get("product", 1), "dtype_param.product")
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
        if _is_missing(a) or _is_missing(b) or isinstance(a, str) or isinstance(b, str):
            return self._kept(report, f"a source of {self.targets} is {a!r}/{b!r}")
        return _convert(self.out, self.product * a * b)


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
        self.min_value = _num(decl, p.get("min_value", default_min), "dtype_param.min_value") \
            if p.get("min_value") is not None else default_min
        self.max_value = _num(decl, p["max_value"], "dtype_param.max_value") \
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
        if _is_missing(a) or _is_missing(b) or isinstance(a, str) or isinstance(b, str) \
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
