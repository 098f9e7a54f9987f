"""Issue 50 item 1: each checked key declared once (msopt/config/keys.py); docs/configuration.md's key tables
are generated from it and defaults.toml, defaults.toml comments each, and a test fails when they drift."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any

import pytest

from msopt.config import DEFAULTS_PATH, read_toml
from msopt.config.keys import DTYPES, PERCENTILES, SECTION_TABLES, TABLES
from msopt.config.reference import SECTIONS, keys_of, render, table
from tests.support.scripts_load import load_script

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "configuration.md"
#: Tables documented in docs/engines.md rather than configuration.md.
ENGINE_PAGE = ROOT / "docs" / "engines.md"


def _section_lines(text: str) -> dict[str, list[str]]:
    """defaults.toml's lines by the table they sit in ("" for the top level)."""
    out: dict[str, list[str]] = {"": []}
    current = ""
    for line in text.splitlines():
        head = re.match(r"\[+([^\]]+)\]+", line)
        if head:
            current = head.group(1)
            out.setdefault(current, [])
        out[current].append(line)
    return out


def test_configuration_md_tables_are_generated_from_keys_py():
    """Regenerating the tables gives the committed page: a key added, a rule, doc or default changed in keys.py
    or defaults.toml without `python scripts/generators/config_reference.py` fails here."""
    text = PAGE.read_text(encoding="utf-8")
    assert render(text, read_toml(DEFAULTS_PATH)) == text, "run python scripts/generators/config_reference.py"


def test_each_checked_key_has_a_row_with_its_default_rule_and_doc():
    defaults = read_toml(DEFAULTS_PATH)
    text = PAGE.read_text(encoding="utf-8")
    for section in SECTIONS:
        keys = keys_of(section)
        rows = table(section, defaults).splitlines()[2:]
        assert [r.split(" | ")[0] for r in rows] == [f"| `{name}`" for name in keys]
        for name, key in keys.items():
            assert key.doc and key.rule, f"{section}.{name}: declare its rule and doc in keys.py"
            row = next(r for r in rows if r.startswith(f"| `{name}` |"))
            assert key.rule in row and key.doc in row and row in text


def test_a_drift_fails_the_check():
    """The check can fail: a default changed in defaults.toml, or a table's markers gone."""
    defaults: dict[str, Any] = read_toml(DEFAULTS_PATH)
    text = PAGE.read_text(encoding="utf-8")
    assert render(text, {**defaults, "n_particles": 11}) != text
    assert render(text, {**defaults, "search": {**defaults["search"], "screen": 8}}) != text
    assert render(text, {**defaults, "capacity": {**defaults["capacity"], "tolerance": 0.1}}) != text
    simulator = {k: v for k, v in defaults["simulator"].items() if k != "time_scale"}
    assert render(text, {**defaults, "simulator": simulator}) != text  # a key dropped from defaults.toml
    with pytest.raises(ValueError, match=r"\[cluster\]"):
        render(text.replace("msopt/config/keys.py: [cluster]", "msopt/config/keys.py"), defaults)


def test_the_generator_script_writes_the_page(tmp_path, monkeypatch):
    script = load_script("generators/config_reference")
    page = tmp_path / "configuration.md"
    page.write_text(PAGE.read_text(encoding="utf-8").replace("| `iters` | 5 |", "| `iters` | 6 |"), encoding="utf-8")
    monkeypatch.setattr(script, "PAGE", page)
    monkeypatch.setattr(script, "ROOT", tmp_path)
    assert script.main(["--check"]) == 1
    assert script.main([]) == 0 and script.main(["--check"]) == 0
    assert page.read_text(encoding="utf-8") == PAGE.read_text(encoding="utf-8")


def test_defaults_toml_comments_each_checked_key():
    """Each checked key defaults.toml sets has an inline comment; each it leaves unset is named in a comment of
    its table (what unset means)."""
    lines = _section_lines(DEFAULTS_PATH.read_text(encoding="utf-8"))
    defaults = read_toml(DEFAULTS_PATH)
    for section in SECTIONS:
        keys = keys_of(section)
        values = defaults if section == "" else defaults[section]
        for name in keys:
            if name in values:
                (line,) = [x for x in lines[section] if re.match(rf"{name}\s*=", x)]
                assert re.search(r"#\s*\S", line), f"defaults.toml: comment '{name}' ({section or 'top level'})"
            elif keys[name].unset:
                assert any(x.lstrip().startswith("#") and name in x for x in lines[section]), name


def _leaves(data: dict[str, Any], prefix: str = "") -> list[str]:
    out = []
    for name, value in data.items():
        if isinstance(value, dict):
            out += _leaves(value, f"{prefix}{name}.")
        elif not (isinstance(value, list) and value and isinstance(value[0], dict)):
            out.append(prefix + name)
    return out


def test_every_key_of_defaults_toml_is_documented():
    """Every key defaults.toml sets is named in configuration.md, or, for the engine, benchmark and health-check
    tables, in engines.md (a health-check error type is a free name, its patterns listed there)."""
    docs = PAGE.read_text(encoding="utf-8") + ENGINE_PAGE.read_text(encoding="utf-8")
    missing = [dotted for dotted in _leaves(read_toml(DEFAULTS_PATH))
               if not dotted.startswith("health_check.service.") and not dotted.startswith("health_check.benchmark.")
               and f"`{dotted.rpartition('.')[2]}`" not in docs and f"{dotted.rpartition('.')[2]} =" not in docs]
    assert missing == []


def _stated_defaults(text: str) -> list[tuple[str, str, str]]:
    """(section, key, default cell) of each configuration.md table row naming keys and their defaults, the
    section from the `### [section]` heading above it ("" under a `##` heading)."""
    out, section = [], ""
    for line in text.splitlines():
        head = re.match(r"#{2,3} (\[([^\]]+)\])?", line)
        if head:
            section = head.group(2) or ""
            continue
        cells = [c.strip() for c in line.strip().strip("|").split(" | ")] if line.startswith("| `") else []
        names = re.findall(r"`([a-z_0-9]+)`", cells[0]) if len(cells) > 2 else []
        values = [v.strip() for v in cells[1].split(",")] if names else []
        out += [(section, n, v) for n, v in zip(names, values, strict=False) if len(values) == len(names)]
    return out


def test_every_default_configuration_md_states_is_defaults_toml_s():
    """Beyond the generated tables ([pso_options], [capacity], [simulator], ...): a
    default the page states as a value, for a key defaults.toml sets, is the value defaults.toml sets."""
    defaults = read_toml(DEFAULTS_PATH)
    compared, differ = 0, []
    for section, name, cell in _stated_defaults(PAGE.read_text(encoding="utf-8")):
        values: Any = defaults
        for part in section.split(".") if section else ():
            values = values.get(part, {}) if isinstance(values, dict) else {}
        try:
            stated = tomllib.loads(f"x = {cell.strip('`')}")["x"]
        except tomllib.TOMLDecodeError:
            continue  # prose ("the workload's", "1 simulated, 2 on real engines")
        if isinstance(values, dict) and name in values:
            compared += 1
            if (stated, type(stated)) != (values[name], type(values[name])):
                differ.append(f"[{section}] {name}: {cell} in the page, {values[name]!r} in defaults.toml")
    assert differ == []
    assert compared >= 40  # the rows it reads: the check cannot pass by reading none


def test_defaults_toml_comment_names_each_value_a_choice_key_accepts():
    """A checked key whose rule lists the values it accepts ("sync" or "async") has a defaults.toml comment that
    names each of them, so the comment cannot fall behind the check (accelerator's left out "cpu")."""
    lines = _section_lines(DEFAULTS_PATH.read_text(encoding="utf-8"))
    checked = 0
    for section in SECTIONS:
        for name, key in keys_of(section).items():
            choices = re.findall(r'"([^"]+)"', key.rule)
            found = [x for x in lines[section] if re.match(rf"{name}\s*=", x)]
            if not choices or "such as" in key.rule or not found:
                continue
            comment = found[0].partition("#")[2]
            assert all(f'"{c}"' in comment for c in choices), f"defaults.toml: '{name}' comment, {key.rule}"
            checked += 1
    assert checked >= 7  # mode, duplicate_policy, [search] prior, [cluster] accelerator, [pso_options] boundary,
    # [capacity] percentile and load


def test_the_component_sections_are_generated_too():
    """[pso_options], [capacity] and [simulator] have generated tables, and every key their parsers accept is
    declared (keys.py), so a key added to a parser without its declaration fails here."""
    assert {"pso_options", "capacity", "simulator"} <= set(SECTIONS)
    from msopt.evaluate.simulated import WALL_KEYS
    from msopt.search.options import OPTION_KEYS
    from msopt.sim.simulator import SIM_KEYS

    assert set(SECTION_TABLES["simulator"]) == (SIM_KEYS | set(WALL_KEYS)) - {"workload"}
    assert tuple(SECTION_TABLES["pso_options"]) == OPTION_KEYS
    assert set(TABLES).isdisjoint(SECTION_TABLES)


def test_declared_choices_are_the_components_own():
    """keys.py sits below the simulator and the search: its dtype, boundary and percentile lists are theirs."""
    from msopt.search.options import BOUNDARIES
    from msopt.sim.catalog_types import DTYPE_BYTES

    assert DTYPES == tuple(sorted(DTYPE_BYTES))
    boundary = SECTION_TABLES["pso_options"]["boundary"]
    assert all(boundary.ok(b) for b in BOUNDARIES) and not boundary.ok("wrap")
    percentile = SECTION_TABLES["capacity"]["percentile"]
    assert all(percentile.ok(p) for p in (*PERCENTILES, "mean", "p99")) and not percentile.ok(95)
