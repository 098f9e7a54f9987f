"""``msopt optimize --engine E --model DIR`` without ``-c``: the configuration ``msopt init`` writes, built in
memory, saved as the run directory's config.toml, and the way to run it again with ``-c``."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import pytest

from msopt.cli import optimize
from msopt.cli.init import build
from msopt.cli.main import build_parser, main
from msopt.config import load_settings


def _load(*argv: str):
    args = build_parser().parse_args(["optimize", *argv])
    return optimize._load(args)


def test_builds_what_init_writes_with_the_flags_on_top():
    checked, store = _load("--engine", "mindie", "--model", "qwen3-30b-a3b", "--devices", "8", "--simulate",
                           "--slo", "ttft:p90<3s", "--max-launches", "9", "--particles", "4")
    assert store is None
    s = checked.config
    assert s.engine.name == "mindie" and s.run.simulate and s.run.max_launches == 9 and s.run.n_particles == 4
    assert s.run.slos.ttft_metric == "ttft_p90" and s.run.slos.ttft == 3.0
    init = tomllib.loads(build("mindie", "qwen3-30b-a3b", devices=8, probe={}).text)
    assert [f.name for f in s.engine.fields] == [f["name"] for f in init["mindie"]["target_field"]]


@pytest.mark.parametrize("argv,why", [
    (["-c", "x.toml", "--model", "qwen3-8b"], "--model builds the configuration (as msopt init does) and -c x.toml"),
    (["-c", "x.toml", "--devices", "8"], "--devices and --workload build a configuration with --model"),
    (["--engine", "tgi", "--model", "qwen3-8b", "--devices", "8"], "--engine 'tgi': init writes for vllm, "),
    (["--resume", "/nonexistent", "--model", "qwen3-8b"], "drop --model"),
])
def test_conflicting_flags_are_one_line_exit_2(argv, why, capsys, tmp_path):
    assert main(["optimize", *argv, "-o" if "--resume" not in argv else "--plain",
                 *([str(tmp_path)] if "--resume" not in argv else [])]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and why in err


@pytest.mark.slow
def test_a_simulated_run_saves_the_configuration_and_says_how_to_rerun(tmp_path, capsys):
    rc = main(["optimize", "--engine", "vllm", "--model", "llama-tiny-2l-128", "--devices", "2", "--simulate",
               "--slo", "ttft:p99<2s", "--max-launches", "4", "--no-ray", "--plain", "-o", str(tmp_path)])
    out = capsys.readouterr().out
    assert rc == 0
    (run_dir,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    saved = run_dir / "config.toml"
    assert f"run it again with: msopt optimize -c {saved}" in out
    again = load_settings(saved)
    assert again.config.run.slos.ttft_metric == "ttft_p99" and again.config.run.max_launches == 4
    assert [f.name for f in again.fields][:3] == ["tp", "pp", "dp"]
    assert "TTFT p99" in out and Path(run_dir / "best_command.sh").is_file()


def test_the_prior_names_where_model_and_hardware_came_from_not_a_deleted_file(tmp_path):
    """Without -c the configuration is built in a temporary file, gone once loaded: the prior's lines and every
    key's origin name the model's config.json, init's look at the machine or the build, never that file."""
    from msopt.prior import prior_source
    from tests.prior.test_source import H100
    from tests.sim.test_hf_config import LLAMA_70B

    model = tmp_path / "weights"
    model.mkdir()
    (model / "config.json").write_text(json.dumps(LLAMA_70B))
    checked, _ = _load("--engine", "vllm", "--model", str(model), "--devices", "8", "--particles", "4")
    lines = prior_source(checked.config, [H100], tmp_path).lines
    assert f"prior: model {model} from [simulator] model ({model / 'config.json'}, read for --model)" in lines
    assert any(line.startswith("prior: hardware h100-sxm from [simulator] hardware (msopt init's look at this "
                               "machine: --devices 8") for line in lines), lines
    config = checked.config
    assert config.scalars.where("n_particles") == "<command line>"
    built = f"the configuration msopt init builds for --model {model}"
    assert config.engine.section.where("target_field") == built and config.engine.fields[0].where.startswith(built)
    sections = [config.engine.section, config.benchmark, config.simulator, config.capacity, config.scalars, config.slo]
    named = [src for part in sections for src in (*part.origin.values(), *part.layers, part.fallback)]
    assert named and all(Path(src).name != "config.toml" for src in named), named
