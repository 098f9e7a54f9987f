"""docs/configuration.md's key tables, generated from the one declaration of each checked key.

Each table lists a section's keys of :mod:`msopt.config.keys` (:data:`~msopt.config.keys.TABLES` and
:data:`~msopt.config.keys.SECTION_TABLES`) in their declared order: the key, its default
(defaults.toml's value, else what unset means), the values loading accepts (the rule its error message states)
and what it means (the key's ``doc``). configuration.md holds each table between two markers;
``scripts/generators/config_reference.py`` rewrites them and tests/config/test_reference.py fails when they drift.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from msopt.config.keys import SCALARS, SECTION_TABLES, TABLES, Key

__all__ = ["BEGIN", "END", "SECTIONS", "keys_of", "render", "table"]

#: The sections that have a generated table: "" is the top-level keys.
SECTIONS: tuple[str, ...] = ("", *TABLES, *SECTION_TABLES)


def keys_of(section: str) -> Mapping[str, Key]:
    """The declared keys of ``section`` ("" for the top level)."""
    return SCALARS if section == "" else {**TABLES, **SECTION_TABLES}[section]
BEGIN = "<!-- generated from msopt/config/keys.py: {section} -->"
END = "<!-- end of generated table -->"


def _value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return f'`"{value}"`'
    return str(value)


def _default(name: str, key: Key, defaults: Mapping[str, Any]) -> str:
    if name in defaults:
        return _value(defaults[name])
    if key.unset:
        return key.unset if key.default is None else _value(key.default)
    return "–"


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def table(section: str, defaults: Mapping[str, Any]) -> str:
    """The markdown table of ``section``'s keys ("" for the top level) given the packaged defaults."""
    keys = keys_of(section)
    values = defaults if section == "" else defaults.get(section, {})
    rows = ["| key | default | accepted | meaning |", "|---|---|---|---|"]
    rows += [f"| `{name}` | {_cell(_default(name, key, values))} | {_cell(key.rule)} | {_cell(key.doc)} |"
             for name, key in keys.items()]
    return "\n".join(rows)


def render(text: str, defaults: Mapping[str, Any]) -> str:
    """``text`` (configuration.md) with each generated table rewritten from the declarations.

    Raises:
        ValueError: a section's markers are missing.
    """
    for section in SECTIONS:
        begin = BEGIN.format(section=f"[{section}]" if section else "top level")
        found = re.search(re.escape(begin) + r"\n.*?" + re.escape(END), text, re.S)
        if found is None:
            raise ValueError(f"docs/configuration.md: no generated table for {begin!r} ... {END!r}")
        text = f"{text[:found.start()]}{begin}\n{table(section, defaults)}\n{END}{text[found.end():]}"
    return text
