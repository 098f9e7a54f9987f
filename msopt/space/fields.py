"""Field declarations: one ``[[<engine>.target_field]]`` table, validated at load time."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from msopt.checks import is_number
from msopt.errors import ConfigError
from msopt.registry import close_matches

#: Position span of an enum or bool field declared without min/max, as in the original tool.
CHOICE_SPAN = 100

FIELD_KEYS = ("name", "config_position", "min", "max", "dtype", "dtype_param", "value", "constant", "step")


@dataclass(frozen=True)
class FieldDecl:
    """One field as declared in TOML.

    Attributes:
        name: unique field name, used by ``$NAME`` substitution and by relations.
        config_position: where the value goes ("env", a CLI flag, a dotted JSON path, ...).
        min: lower bound of the searched value (for enum/range/bool: of the position).
        max: upper bound.
        dtype: registered dtype name.
        dtype_param: dtype-specific parameter (enum values, range step, ratio target, ...).
        value: the default value (particle 0 and the baseline start here).
        constant: when set, the field is fixed to this value and takes no dimension.
        step: (float fields) the precision that matters: decoded values are multiples of it
            from ``min``, so what is measured, shown and launched is the same short number.
        where: "FILE: [section.target_field] 'name'", for error messages.
    """

    name: str
    config_position: str
    min: float
    max: float
    dtype: str
    dtype_param: Any = None
    value: Any = None
    constant: Any = None
    where: str = ""
    step: float | None = None

    def show(self, value: Any) -> str:
        """``value`` at the precision that matters: a float at its ``step``'s decimals (4
        significant digits without one), a bool as true/false, anything else as is."""
        return show_value(value, self.step)

    def error(self, rule: str, fix: str) -> ConfigError:
        """Build a ConfigError naming this field's file and key."""
        return ConfigError(f"{self.where}: {rule}; {fix}")


def show_value(value: Any, step: float | None = None) -> str:
    """Display text of a field value (see :meth:`FieldDecl.show`)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        if not math.isfinite(value):
            return str(value)
        if step:
            decimals = len(f"{step:.10f}".rstrip("0").partition(".")[2])  # the step's own decimals
            return f"{value:.{decimals}f}"
        return f"{value:.4g}"
    return str(value)


def _number(raw: Mapping[str, Any], key: str, where: str, default: float | None = None) -> float:
    value = raw.get(key, default)
    if not is_number(value):
        raise ConfigError(f"{where}: '{key}' must be a number, got {value!r}; write e.g. {key} = 1")
    if not math.isfinite(value):
        raise ConfigError(f"{where}: '{key}' must be finite, got {value!r}; give a finite number")
    if abs(value) > 1e15:
        raise ConfigError(f"{where}: '{key}' = {value!r} is absurdly large; use a value below 1e15")
    return value


def parse_field(raw: Any, *, source: str, section: str, index: int) -> FieldDecl:
    """Validate one raw target_field table and return its declaration.

    Raises:
        ConfigError: naming the file, the field and the fix.
    """
    where0 = f"{source}: [[{section}.target_field]] #{index + 1}"
    if not isinstance(raw, Mapping):
        raise ConfigError(f"{where0}: each target_field must be a table; write [[{section}.target_field]]")
    name = raw.get("name")
    if not isinstance(name, str) or not name.strip():
        raise ConfigError(f"{where0}: 'name' must be a non-empty string; add name = \"...\"")
    where = f"{source}: [{section}.target_field] '{name}'"
    for key in raw:
        if key not in FIELD_KEYS:
            hint = close_matches(str(key), FIELD_KEYS)
            did = f"did you mean '{hint[0]}'?" if hint else f"valid keys: {', '.join(FIELD_KEYS)}"
            raise ConfigError(f"{where}: unknown key '{key}'; {did}")
    dtype = raw.get("dtype", "float")
    if not isinstance(dtype, str):
        raise ConfigError(f"{where}: 'dtype' must be a string, got {dtype!r}; e.g. dtype = \"int\"")
    position = raw.get("config_position", "env")
    if not isinstance(position, str):
        raise ConfigError(f"{where}: 'config_position' must be a string, got {position!r}")
    # The original tool's segments: an enum or bool without bounds spans 0-100 and is searched
    # (a user listing candidates means them to be tried); other dtypes need their bounds.
    default_hi = CHOICE_SPAN if dtype in ("enum", "bool") and "min" not in raw and "max" not in raw else 0
    lo = _number(raw, "min", where, 0)
    hi = _number(raw, "max", where, default_hi)
    if lo > hi:
        raise ConfigError(f"{where}: min ({lo}) > max ({hi}); swap them or fix the bounds")
    for key in ("value", "constant"):
        v = raw.get(key)
        if isinstance(v, float) and not math.isfinite(v):
            raise ConfigError(f"{where}: '{key}' must be finite, got {v!r}")
        if isinstance(v, (Mapping, list)):
            raise ConfigError(f"{where}: '{key}' must be a single value, got {v!r}")
    step = raw.get("step")
    if step is not None:
        if dtype != "float":
            raise ConfigError(f"{where}: 'step' applies to float fields, not {dtype}; for an integer step "
                              "write dtype = \"range\" with dtype_param = STEP")
        step = _number(raw, "step", where)
        if not step > 0:
            raise ConfigError(f"{where}: 'step' must be > 0, got {step!r}; write e.g. step = 0.01")
    return FieldDecl(
        step=step,
        name=name,
        config_position=position,
        min=lo,
        max=hi,
        dtype=dtype,
        dtype_param=raw.get("dtype_param"),
        value=raw.get("value"),
        constant=raw.get("constant"),
        where=where,
    )
