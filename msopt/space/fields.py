"""Field declarations: one ``[[<engine>.target_field]]`` table, validated at load time."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from msopt.checks import is_number
from msopt.errors import ConfigError
from msopt.registry import close_matches

FIELD_KEYS = ("name", "config_position", "min", "max", "dtype", "dtype_param", "value", "constant")


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

    def error(self, rule: str, fix: str) -> ConfigError:
        """Build a ConfigError naming this field's file and key."""
        return ConfigError(f"{self.where}: {rule}; {fix}")


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
    lo = _number(raw, "min", where, 0)
    hi = _number(raw, "max", where, 0)
    if lo > hi:
        raise ConfigError(f"{where}: min ({lo}) > max ({hi}); swap them or fix the bounds")
    for key in ("value", "constant"):
        v = raw.get(key)
        if isinstance(v, float) and not math.isfinite(v):
            raise ConfigError(f"{where}: '{key}' must be finite, got {v!r}")
        if isinstance(v, (Mapping, list)):
            raise ConfigError(f"{where}: '{key}' must be a single value, got {v!r}")
    return FieldDecl(
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
