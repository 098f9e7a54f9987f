"""Field dtypes: how one field maps between a swarm coordinate and a concrete value.

Each dtype is a class built once per field from its declaration (bounds and candidates are
computed at build time, Optuna ``_transform`` style), validated at load time, and registered in
:data:`DTYPES`. Plugins add dtypes through the ``msopt.dtypes`` entry-point group.

Searched dtypes take one dimension unless the field is constant (``constant`` set, or
``min == max``); they live here. Derived dtypes never take a dimension; their value is computed
from other fields in dependency order (:mod:`msopt.space.derived`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from msopt.checks import is_finite, is_number
from msopt.errors import ConfigError
from msopt.registry import Registry, close_matches
from msopt.space.context import DecodeContext
from msopt.space.fields import FieldDecl

#: Largest int range whose values are enumerated as repair candidates.
MAX_ENUMERABLE = 256


class Report:
    """What one decode noticed: warnings, and the source fields a repair moved."""

    __slots__ = ("warnings", "changed")

    def __init__(self) -> None:
        self.warnings: list[str] = []
        self.changed: list[str] = []


def convert(dtype: str, value: float) -> Any:
    """``value`` as the Python type of ``dtype`` ("int", "bool", else float)."""
    if dtype == "int":
        return int(value)
    if dtype == "bool":
        return bool(value)
    return float(value)


def is_missing(value: Any) -> bool:
    """Whether a decoded value is absent (None or NaN)."""
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


def as_number(decl: FieldDecl, raw: Any, key: str) -> float:
    """``raw`` (the declaration's ``key``) when it is a finite number; else the field's ConfigError."""
    if not is_finite(raw):
        fix = "give a finite number" if key.startswith("dtype_param") else f"write e.g. {key} = {decl.min}"
        raise decl.error(f"'{key}' must be a finite number, got {raw!r}", fix)
    return raw


def _real_within(decl: FieldDecl, raw: Any, key: str) -> float:
    """``raw`` (the declaration's ``key``) as a float, once it is a finite number and, for ``value``, within
    [min, max]; else the field's ConfigError."""
    v = float(as_number(decl, raw, key))
    if key == "value" and not decl.min <= v <= decl.max:
        raise decl.error(f"'value' = {raw!r} lies outside [min, max] = [{decl.min}, {decl.max}]",
                         "give a value within the bounds, or widen them")
    return v

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
        v = as_number(self.decl, raw, key)
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
        return _real_within(self.decl, raw, key)


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
        return self.value_at(self.index(self.encode(as_number(self.decl, raw, key), {})))


def target_of(decl: FieldDecl, dtype: str) -> str:
    """The target field named by ``dtype_param`` (a name, or ``{target_name = ...}``), never the field itself."""
    param = decl.dtype_param
    if isinstance(param, Mapping):
        param = param.get("target_name")
    if not isinstance(param, str) or not param:
        raise decl.error(f"{dtype} needs its target field name in dtype_param, got {decl.dtype_param!r}",
                         'write dtype_param = "max_batch_size"')
    if param == decl.name:
        raise decl.error(f"{dtype} names itself as its target", "name another field")
    return param


@DTYPES.register("ratio")
class RatioType(FieldType):
    """``int(ratio × target)``, the ratio searched in [min, max].

    ``value`` and ``constant`` are the ratio; the decoded value is the integer.
    """

    def __init__(self, decl: FieldDecl) -> None:
        super().__init__(decl)
        self.target = target_of(decl, "ratio")
        self.deps = (self.target,)

    def decode(self, x: float) -> float:
        lo, hi = self.decl.min, self.decl.max
        return float(lo if x < lo else hi if x > hi else x)

    def finish(self, raw: Any, values: Mapping[str, Any], report: Report) -> Any:
        t: Any = values.get(self.target)
        if is_missing(t):
            report.warnings.append(f"{self.name}: target '{self.target}' has no value; kept {self.decl.value!r}")
            return self.decl.value
        return int(raw * t)

    def encode(self, value: Any, values: Mapping[str, Any]) -> float:
        t: Any = values.get(self.target)
        lo, hi = self.decl.min, self.decl.max
        if is_missing(t) or not t:
            return (lo + hi) / 2
        r = (float(value) + 0.5) / t
        return float(min(max(r, lo), hi))

    def encode_raw(self, raw: Any) -> float:
        return float(min(max(float(raw), self.decl.min), self.decl.max))

    def check_raw(self, raw: Any, key: str) -> Any:
        return _real_within(self.decl, raw, key)
