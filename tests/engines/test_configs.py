"""The shipped real-engine configurations load, validate and render."""

from __future__ import annotations

from pathlib import Path

import pytest

from msopt.benchmarks import get_benchmark
from msopt.config import load_settings, thaw
from msopt.engines import LaunchSpec, get_engine
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
        spec = engine.render(decoded.values, settings.fields, section, port=9000 + i,
                             devices=[str(d) for d in range(8)], workdir=tmp_path)
        assert isinstance(spec, LaunchSpec) and spec.port == 9000 + i
        if settings.engine == "mindie":
            (doc,) = spec.files.values()
            mc = doc["BackendConfig"]["ModelDeployConfig"]["ModelConfig"][0]
            assert mc["tp"] * mc["pp"] * mc["dp"] == mc["worldSize"] == 8
            assert doc["BackendConfig"]["npuDeviceIds"] == [list(range(8))]
        bench = get_benchmark(settings.get("benchmark"))
        argv, _ = bench.render(decoded.values, settings.fields, settings.section(bench.name),
                                 server=spec, num_prompts=16, load={}, result_dir=tmp_path)
        assert argv and all(isinstance(a, str) for a in argv)
