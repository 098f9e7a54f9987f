"""Issue 36 item 12: docs/migrating.md's port of the original's plugins names msopt entry points that exist."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

from msopt.benchmarks.base import BENCHMARKS, BenchmarkAdapter
from msopt.engines.base import ENGINES, EngineAdapter
from msopt.launch import render as engine_launch

DOC = Path(__file__).parents[2] / "docs" / "migrating.md"


def _section() -> str:
    text = DOC.read_text(encoding="utf-8")
    return text[text.index("## Porting a plugin of the original"):text.index("## Built for migration")]


def test_every_original_plugin_api_is_mapped() -> None:
    section = _section()
    for name in ("register_simulator", "register_benchmarks", "register_settings", "SimulatorInterface",
                 "BenchmarkInterface", "update_command", "update_config", "get_performance_index", "base_url",
                 "data_field", "get_settings", "ms_serviceparam_optimizer.plugins"):
        assert f"`{name}" in section or f".{name}" in section or f"{name}(" in section, name


def test_the_msopt_names_it_gives_exist() -> None:
    section = _section()
    groups = set(re.findall(r'entry-points\."(msopt\.[a-z_]+)"', section))
    assert groups == {ENGINES.entry_point_group, BENCHMARKS.entry_point_group}
    for helper in ("command_table", "executable", "flag_args", "env_fields", "split_others", "substitute"):
        assert f"`{helper}`" in section and callable(getattr(engine_launch, helper))
    render = inspect.signature(EngineAdapter.render).parameters
    assert {"candidate", "port", "devices", "workdir"} <= set(render)
    bench = inspect.signature(BenchmarkAdapter.render).parameters
    assert {"candidate", "server", "num_prompts", "load", "result_dir"} <= set(bench)
    assert set(inspect.signature(BenchmarkAdapter.parse).parameters) >= {"result_dir", "log_path"}
    for member in ("health_path", "stop_grace", "health_patterns", "startup_rules", "check"):
        assert f"`{member}`" in section and hasattr(EngineAdapter, member)
    assert (Path(__file__).parents[2] / "docs" / "examples" / "msopt-tgi" / "pyproject.toml").is_file()
