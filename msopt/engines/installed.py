"""The baseline as the original tool took it: what the user runs today.

The original measured, as its baseline, the installed configuration: a field at a
``BackendConfig...`` position took its value from the config.json MindIE reads, and a field at
``config_position = "env"`` from the environment variable of its name (msserviceprofiler@9582f434
ms_serviceparam_optimizer/optimizer/optimizer.py, ``prepare_plugin``, lines 426-432). msopt's
default is the field's ``value`` (the middle of its range without one); :func:`installed_baseline`
takes each searched field's value where the original took it, when it is a value the field can
take, and says for every field where its baseline value came from.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from msopt.checks import is_number
from msopt.engines import EngineAdapter, get_engine
from msopt.space.fields import FieldDecl

if TYPE_CHECKING:
    from msopt.config import EngineConfig

#: The dtypes whose baseline can come from the installation (a plain value of the field's own kind).
PLAIN_DTYPES = ("int", "float", "bool", "enum")


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
    return True, value, ""


def installed_baseline(engine: EngineConfig, environ: Mapping[str, str] | None = None) -> tuple[dict[str, Any],
                                                                                          list[str]]:
    """The searched fields' installed values, and one line per searched field saying where its baseline
    value comes from (the installation, or the field's own ``value``/the middle of its range, and why)."""
    environ = os.environ if environ is None else environ
    adapter = get_engine(engine.name)
    found = adapter.installed_values(engine.fields, engine.section.table, environ)
    values: dict[str, Any] = {}
    lines: list[str] = []
    for decl in engine.fields:
        if decl.constant is not None or decl.min == decl.max and decl.dtype in ("int", "float"):
            continue
        own = f"{decl.value!r} (the field's value)" if decl.value is not None else "the middle of its range"
        got = found.get(decl.name)
        if got is None:
            lines.append(f"baseline {decl.name} = {own}: {_absent(decl, adapter)}")
            continue
        value, where = got
        if decl.dtype not in PLAIN_DTYPES:
            lines.append(f"baseline {decl.name} = {own}: {where} has {value!r}, but a {decl.dtype} field's "
                         "baseline is its own")
            continue
        ok, value, why = _fits(decl, value)
        if not ok:
            lines.append(f"baseline {decl.name} = {own}: {where} has {value!r}, {why}")
            continue
        values[decl.name] = value
        lines.append(f"baseline {decl.name} = {value!r}: {where} (as the original tool took it)")
    return values, lines


def _absent(decl: FieldDecl, adapter: EngineAdapter) -> str:
    if decl.config_position == "env":
        return f"${decl.name} is not set here"
    return adapter.installed_absent(decl) or ("the installation does not say (the original tool took only "
                                              "config.json and env values)")
