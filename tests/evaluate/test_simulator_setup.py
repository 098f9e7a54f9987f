"""``[simulator]`` parsed once (issue 50 item 1): each key checked as msopt/config/keys.py declares it, by
:class:`msopt.evaluate.simulated.SimulatorSetup`, and ``catalog_dirs`` parsed once at load time
(:attr:`msopt.config.Config.catalog_dirs`), which every catalog lookup of the run reads."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from msopt.errors import ConfigError
from msopt.run.validate import load
from tests.support.fields_toml import TP_PP_DP


def test_catalog_dirs_as_one_directory_is_parsed_once(tmp_path: Path, write_toml: Any) -> None:
    path = write_toml(f"simulate = true\n[simulator]\ncatalog_dirs = \"{tmp_path}\"\n" + TP_PP_DP)
    checked = load(str(path), None, environ={})
    assert checked.config.catalog_dirs == (str(tmp_path),)
    assert checked.simulator is not None and checked.simulator.catalog_dirs == (str(tmp_path),)
    assert checked.simulator.model().name and checked.simulator.hardware.devices_per_node > 0
    assert load(str(write_toml("simulate = true\n" + TP_PP_DP, "plain.toml")), None, environ={}).config.catalog_dirs == ()


@pytest.mark.parametrize("simulate", ["true", "false"])
def test_a_bad_catalog_dirs_is_refused_at_load_time_naming_file_key_and_fix(write_toml: Any, simulate: str) -> None:
    """Refused for a real run too: its prior reads the catalog (before, a number crashed the prior's tuple())."""
    path = write_toml(f"simulate = {simulate}\n[simulator]\ncatalog_dirs = 5\n" + TP_PP_DP)
    with pytest.raises(ConfigError) as info:
        load(str(path), None, environ={})
    assert str(info.value) == (f"{path}: [simulator] catalog_dirs must be a directory or a list of directories, "
                               "got 5; e.g. catalog_dirs = [\"my_catalog\"]")


@pytest.mark.parametrize("line, message", [
    ("emulate_wall_time = 1", "[simulator] emulate_wall_time must be true or false, got 1; e.g. emulate_wall_time = true"),
    ("time_scale = -1", "[simulator] time_scale must be a number from 0 to 1e6, got -1; e.g. time_scale = 1.0"),
    ("noise = 11", "[simulator] noise must be a number from 0 to 10 (a relative standard deviation), got 11; "
                   "e.g. noise = 0.02"),
    ("kv_dtype = \"fp7\"", "[simulator] kv_dtype must be one of bf16, fp16, fp8, int4, int8, got 'fp7'; "
                           "e.g. kv_dtype = \"fp8\""),
    ("hardware = 3", "[simulator] hardware must be a catalog name or a TOML file path, got 3; "
                     "e.g. hardware = \"h100-sxm\""),
    ("hardwre = \"h100-sxm\"", "unknown key 'hardwre' in [simulator]; did you mean 'hardware'?"),
])
def test_each_simulator_key_is_checked_as_declared(write_toml: Any, line: str, message: str) -> None:
    path = write_toml(f"simulate = true\n[simulator]\n{line}\n" + TP_PP_DP)
    with pytest.raises(ConfigError) as info:
        load(str(path), None, environ={})
    assert str(info.value) == f"{path}: {message}"


def test_the_wall_keys_are_read_once_and_kept_from_the_simulator(write_toml: Any) -> None:
    path = write_toml("simulate = true\n[simulator]\nemulate_wall_time = true\ntime_scale = 0.5\n" + TP_PP_DP)
    setup = load(str(path), None, environ={}).simulator
    assert setup is not None and (setup.emulate, setup.time_scale, setup.eval_seconds) == (True, 0.5, None)
    assert not {"emulate_wall_time", "time_scale", "eval_seconds", "catalog_dirs"} & set(setup.table)
