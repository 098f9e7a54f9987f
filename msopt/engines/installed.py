"""The baseline as the original tool took it: what the user runs today.

The original measured, as its baseline, the installed configuration: a field at a
``BackendConfig...`` position took its value from the config.json MindIE reads, and a field at
``config_position = "env"`` from the environment variable of its name (msserviceprofiler@9582f434
ms_serviceparam_optimizer/optimizer/optimizer.py, ``prepare_plugin``, lines 426-432). msopt's
default is the field's ``value`` (the middle of its range without one); :func:`installed_baseline`
takes each searched field's value where the original took it, when it is a value the field can
take, whatever the field's dtype (a ``ratio`` field's baseline is the ratio that decodes to the installed
integer, as the original converted it back: config/config.py:729-800), and says for every field where
its baseline value came from. :func:`installed_changes` also pins the fields the installed configuration
leaves one value (:meth:`~msopt.engines.base.EngineAdapter.installed_constraints`).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from msopt.checks import is_number
from msopt.engines import EngineAdapter, get_engine
from msopt.space import SearchSpace
from msopt.space.dtypes import DTYPES, RangeType
from msopt.space.fields import FieldDecl

if TYPE_CHECKING:
    from msopt.config import Config, EngineConfig

#: The dtypes whose baseline can come from the installation as the value itself.
PLAIN_DTYPES = ("int", "float", "bool", "enum", "range")
#: The dtypes whose baseline is a ratio of another field's (the installed integer over the target's baseline).
RATIO_DTYPES = ("ratio",)


def _plain(value: Any) -> Any:
    """An environment variable's text as the number or boolean it spells (else the text)."""
    if not isinstance(value, str):
        return value
    text = value.strip()
    if text.lower() in ("true", "false"):
        return text.lower() == "true"
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def _fits(decl: FieldDecl, value: Any) -> tuple[bool, Any, str]:
    """Whether ``value`` is one the field can take (as the field's type), and why not."""
    value = _plain(value)
    if decl.dtype == "bool":
        if isinstance(value, bool) or value in (0, 1):
            return True, bool(value), ""
        return False, value, "not a boolean"
    if decl.dtype == "enum":
        options = list(decl.dtype_param or ())
        return (value in options, value, "" if value in options else f"not one of {options}")
    if not is_number(value) or isinstance(value, bool):
        return False, value, "not a number"
    if decl.dtype == "int":
        if float(value) != int(value):
            return False, value, "not an integer"
        value = int(value)
    if not decl.min <= value <= decl.max:
        return False, value, f"outside [{decl.min:g}, {decl.max:g}]"
    if decl.dtype == "range":
        kind = RangeType(decl)
        if kind.value_at(kind.index(kind.encode(value, {}))) != value:
            return False, value, f"not one of the range's values ({decl.min:g} + k x {decl.dtype_param:g})"
    return True, value, ""


def _own_baseline(decl: FieldDecl) -> Any:
    """The value a field's baseline has without the installation (its constant, its value, the middle)."""
    kind = DTYPES.get(decl.dtype)(decl)
    if kind.is_constant():
        return kind.constant_raw()
    return kind.decode(kind.default_coordinate())


def _ratio(decl: FieldDecl, value: Any, target: Any) -> tuple[bool, Any, str]:
    """The ratio that decodes (``int(ratio x target)``, :class:`~msopt.space.dtypes.RatioType`) to the installed
    integer, as the original converted an installed value back (config/config.py:729-800), and why not."""
    value = _plain(value)
    if not is_number(value) or isinstance(value, bool) or float(value) != int(value) or value < 0:
        return False, value, "not a non-negative integer"
    value = int(value)
    if not is_number(target) or isinstance(target, bool) or target <= 0:
        if value == 0 and decl.min <= 0:
            return True, 0.0, ""
        return False, value, f"its target {decl.dtype_param!r} has no positive baseline ({target!r})"
    for r in (value / target, (value + 0.5) / target):
        if decl.min <= r <= decl.max and int(r * target) == value:
            return True, r, ""
    return False, value, (f"{value} / {decl.dtype_param} {target} = {value / target:g}, outside the ratio's "
                          f"[{decl.min:g}, {decl.max:g}]")


def installed_baseline(engine: EngineConfig, environ: Mapping[str, str] | None = None,
                       pinned: Mapping[str, Any] | None = None) -> tuple[dict[str, Any], list[str]]:
    """The searched fields' installed values, and one line per searched field saying where its baseline
    value comes from (the installation, or the field's own ``value``/the middle of its range, and why).
    A ratio field's value is the ratio (the installed integer over its target's baseline); ``pinned`` fields
    (:func:`installed_pins`) are left out."""
    environ = os.environ if environ is None else environ
    pinned = pinned or {}
    adapter = get_engine(engine.name)
    found = adapter.installed_values(engine.fields, engine.section.table, environ)
    values: dict[str, Any] = {}
    lines: dict[str, str] = {}
    decls = [d for d in engine.fields if d.name not in pinned
             and not (d.constant is not None or d.min == d.max and d.dtype in ("int", "float"))]
    by_name = {d.name: d for d in engine.fields}
    # a ratio reads its target's baseline, so the plain fields go first
    for decl in sorted(decls, key=lambda d: d.dtype in RATIO_DTYPES):
        own = f"{decl.value!r} (the field's value)" if decl.value is not None else "the middle of its range"
        got = found.get(decl.name)
        if got is None:
            lines[decl.name] = f"baseline {decl.name} = {own}: {_absent(decl, adapter)}"
            continue
        value, where = got
        if decl.dtype in RATIO_DTYPES:
            target = by_name.get(str(decl.dtype_param))
            t = values.get(target.name) if target is not None and target.name in values else (
                pinned.get(target.name, _own_baseline(target)) if target is not None else None)
            ok, ratio, why = _ratio(decl, value, t)
            if not ok:
                lines[decl.name] = f"baseline {decl.name} = {own}: {where} has {value!r}, {why}"
                continue
            values[decl.name] = ratio
            lines[decl.name] = (f"baseline {decl.name} = {int(ratio * t) if t else 0} (ratio {ratio:g} of "
                                f"{decl.dtype_param} {t}): {where} (as the original tool took it)")
            continue
        if decl.dtype not in PLAIN_DTYPES:
            lines[decl.name] = (f"baseline {decl.name} = {own}: {where} has {value!r}, but a {decl.dtype} field's "
                                "baseline is its own")
            continue
        ok, value, why = _fits(decl, value)
        if not ok:
            lines[decl.name] = f"baseline {decl.name} = {own}: {where} has {value!r}, {why}"
            continue
        values[decl.name] = value
        lines[decl.name] = f"baseline {decl.name} = {value!r}: {where} (as the original tool took it)"
    return values, [lines[d.name] for d in decls]


def installed_pins(engine: EngineConfig) -> tuple[dict[str, Any], list[str]]:
    """The fields the installed configuration leaves one value (the adapter's ``installed_constraints``), as
    the ``constant`` each gets, and one line each.

    Raises:
        ConfigError: that value is not one the field can take (every candidate would be refused).
    """
    adapter = get_engine(engine.name)
    out: dict[str, Any] = {}
    lines = []
    constraints = adapter.installed_constraints(engine.fields, engine.section.table)
    for decl in engine.fields:
        pin = constraints.get(decl.name)
        if pin is None:
            continue
        value, why = pin
        if decl.dtype in RATIO_DTYPES:
            ok, raw, reason = (True, 0.0, "") if value == 0 and decl.min <= 0 else (
                False, value, f"a ratio of [{decl.min:g}, {decl.max:g}] cannot decode to it")
        else:
            ok, raw, reason = _fits(decl, value)
        if not ok:
            raise decl.error(f"{why}; the field cannot take {value!r} ({reason})",
                             "widen the field's range to include it, or change the installed config.json")
        if decl.constant is not None and decl.constant != raw:
            raise decl.error(f"constant = {decl.constant!r}, but {why}", f"set constant = {raw!r} or drop the field")
        out[decl.name] = raw
        lines.append(f"constant {decl.name} = {value!r}: {why}")
    return out, lines


@dataclass(frozen=True)
class Installed:
    """What a run takes from the installed configuration (:func:`installed_changes`).

    Attributes:
        values: each searched field's baseline ``value`` read from the installation.
        constants: the fields the installation leaves one value, with that ``constant``.
        devices: the devices a trial holds as the installation has them, and where that was read; None: the
            user sets them or the installation does not say.
        lines: what ``msopt validate`` and the first lines of a run say about all of it.
    """

    values: dict[str, Any]
    constants: dict[str, Any]
    devices: tuple[int, str] | None
    lines: list[str]

    @property
    def changes(self) -> bool:
        """Whether the configuration changes (anything was taken from the installation)."""
        return bool(self.values or self.constants or self.devices)


def installed_changes(config: Config, environ: Mapping[str, str] | None = None) -> Installed:
    """What ``config`` takes from the installed configuration: the fields it leaves one value (constant), the
    others' baselines (a simulated run reads only the engine's files, not the environment), the devices of a
    trial, and the lines that say so; ``Settings.with_installed`` applies it.

    Raises:
        ConfigError: one line naming the file, the key and the fix.
    """
    engine = config.engine
    if config.run.simulate:
        environ = {}
    pins, lines = installed_pins(engine)
    values, said = installed_baseline(engine, environ, pins)
    devices, line = _trial_devices(config)
    return Installed(values, pins, devices, lines + said + ([line] if line else []))


#: Config positions at which a field sets MindIE's devices itself.
DEVICE_POSITIONS = ("BackendConfig.ModelDeployConfig.ModelConfig.0.worldSize", "BackendConfig.npuDeviceIds")


def _trial_devices(config: Config) -> tuple[tuple[int, str] | None, str]:
    """The devices a trial holds as the installation has them (the adapter's ``installed_devices``), unless
    the user sets them ([cluster] devices_per_trial, a ternary_factories product, a field at worldSize or
    npuDeviceIds), and the line that says which; (None, "") when the installation does not say."""
    found = get_engine(config.engine.name).installed_devices(config.engine.section.table)
    if found is None or config.cluster.accelerator_key is None:
        return None, ""
    n, where = found
    cluster = config.cluster
    if cluster.trial.explicit:
        by = "[cluster] devices_per_trial"
    elif SearchSpace(config.engine.fields).ternary_products():
        by = "the ternary_factories field's product"
    elif any(d.config_position.startswith(DEVICE_POSITIONS) for d in config.engine.fields):
        by = "a field at worldSize or npuDeviceIds (set [cluster] devices_per_trial to match it)"
    else:
        return (n, where), f"devices per trial = {n}: {where} (the installed deployment's; set [cluster] " \
                           "devices_per_trial to change it)"
    return None, f"devices per trial = {cluster.trial.devices}: {by} (the installed {where})"


def _absent(decl: FieldDecl, adapter: EngineAdapter) -> str:
    if decl.config_position == "env":
        return f"${decl.name} is not set here"
    return adapter.installed_absent(decl) or ("the installation does not say (the original tool took only "
                                              "config.json and env values)")
