"""The shipped real-engine configurations load, validate and render."""

from __future__ import annotations

from pathlib import Path

import pytest

from msopt.benchmarks import get_benchmark
from msopt.config import load_settings, thaw
from msopt.engines import LaunchSpec, get_engine
from msopt.launch.render import Candidate
from msopt.space import DecodeContext, SearchSpace

CONFIGS = Path(__file__).parents[2] / "configs"


@pytest.mark.parametrize("name", ["vllm_real", "mindie_real", "sglang_real", "quickstart"])
def test_config_renders_with_its_engine_and_benchmark(name: str, tmp_path: Path) -> None:
    settings = load_settings(CONFIGS / f"{name}.toml")
    section = thaw(settings.section(settings.engine))
    section.pop("config_path", None)  # MindIE is not installed here: use the built-in template
    engine = get_engine(settings.engine)
    engine.check(settings.fields, section)
    space = SearchSpace.from_settings(settings)
    rng = __import__("numpy").random.default_rng(0)
    low, high = space.bounds
    for i in range(5):
        decoded = space.decode(rng.uniform(low, high), DecodeContext(i, 5, 0))
        spec = engine.render(Candidate(decoded.values, settings.fields, section), port=9000 + i,
                             devices=[str(d) for d in range(8)], workdir=tmp_path)
        assert isinstance(spec, LaunchSpec) and spec.port == 9000 + i
        if settings.engine == "mindie":
            (doc,) = spec.files.values()
            mc = doc["BackendConfig"]["ModelDeployConfig"]["ModelConfig"][0]
            assert mc["tp"] * mc["pp"] * mc["dp"] == mc["worldSize"] == 8
            assert doc["BackendConfig"]["npuDeviceIds"] == [list(range(8))]
        bench = get_benchmark(settings.get("benchmark"))
        argv, _ = bench.render(Candidate(decoded.values, settings.fields, settings.section(bench.name)),
                                 server=spec, num_prompts=16, load={}, result_dir=tmp_path)
        assert argv and all(isinstance(a, str) for a in argv)


def test_no_shipped_config_has_roce_addresses_listed_by_hand() -> None:
    """Issue 51 item 11: every node reads its NPUs' RoCE addresses itself (hccn_tool, msopt/launch/hccn.py), so
    a shipped configuration that mentions [mindie.device_ips] says it is only for nodes where hccn_tool cannot
    run, and lists none."""
    for path in sorted(CONFIGS.glob("*.toml")):
        text = path.read_text(encoding="utf-8")
        if "device_ips" in text:
            assert "hccn_tool" in text, path
            assert "list the NPUs' RoCE addresses" not in text, path
            assert "device_ips" not in load_settings(path).section(load_settings(path).engine), path


def test_a_simulation_needs_no_installed_mindie(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 51 item 11: `msopt simulate -c configs/mindie_real.toml` on a machine without MindIE (its config_path
    is not here) simulates the built-in template, as `msopt validate` says, instead of failing to read it."""
    from msopt.cli.main import main

    settings = load_settings(CONFIGS / "mindie_real.toml")
    assert not Path(str(settings.section("mindie")["config_path"])).exists()
    assert main(["simulate", "-c", str(CONFIGS / "mindie_real.toml")]) == 0
    assert "fitness:" in capsys.readouterr().out
