"""The third-party engine of docs/plugins.md, for real: docs/examples/msopt-tgi registered
through its entry point (a dist-info directory on the path, as ``pip install`` would leave it),
then ``msopt validate`` and ``msopt optimize --no-ray`` with ``engine = "tgi"`` and a ``[tgi]``
section, the server being ``msopt sim-serve`` (which takes the launch's unknown flags)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "docs" / "examples" / "msopt-tgi"

CONFIG = """
engine = "tgi"
benchmark = "builtin"
n_particles = 2
iters = 1
sample_size = 8
particles_time_out = 120
[data_storage]
pso_top_k = 0
[cluster]
accelerator = "none"
[tgi]
wait_start_time = 60
[tgi.command]
executable = {exe}
model = {model}
others = "--time-scale 0.01"
[[tgi.target_field]]
name = "max_concurrent_requests"
config_position = "--max-concurrent-requests"
min = 4
max = 64
dtype = "int"
value = 8
[builtin]
input_len = 32
output_len = 4
concurrency = 2
num_prompts = 8
"""


def _install(site: Path) -> None:
    """What ``pip install docs/examples/msopt-tgi`` leaves for importlib.metadata: a dist-info
    directory whose entry_points.txt comes from the example's pyproject.toml."""
    project = tomllib.loads((EXAMPLE / "pyproject.toml").read_text())["project"]
    info = site / f"{project['name'].replace('-', '_')}-{project['version']}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {project['name']}\nVersion: {project['version']}\n")
    lines = []
    for group, entries in project["entry-points"].items():
        lines.append(f"[{group}]")
        lines += [f"{name} = {target}" for name, target in entries.items()]
    (info / "entry_points.txt").write_text("\n".join(lines) + "\n")


def _msopt(args: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "msopt.cli", *args], capture_output=True, text=True,
                          timeout=300, env=env, cwd=cwd)


@pytest.mark.slow
def test_third_party_engine_validates_and_optimizes(tmp_path):
    cfg = tmp_path / "cfg.toml"
    model = tmp_path / "sim-model"  # the pre-flight checks that the model path exists on this node
    model.mkdir()
    cfg.write_text(CONFIG.format(exe=json.dumps([sys.executable, "-m", "msopt.cli", "sim-serve"]),
                                 model=json.dumps(str(model))))
    bare = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), str(EXAMPLE)]))
    out = _msopt(["validate", "-c", str(cfg)], bare, tmp_path)
    assert out.returncode != 0 and "tgi" in out.stderr  # not installed: neither the engine nor [tgi] exists

    site = tmp_path / "site"
    _install(site)
    env = dict(bare, PYTHONPATH=os.pathsep.join([str(site), str(ROOT), str(EXAMPLE)]),
               MSOPT_SIM_SERVE_ARGV_FILE=str(tmp_path / "argv"))
    (tmp_path / "argv").mkdir()
    out = _msopt(["validate", "-c", str(cfg)], env, tmp_path)
    assert out.returncode == 0, out.stderr
    assert "max_concurrent_requests" in out.stdout

    out = _msopt(["optimize", "-c", str(cfg), "--no-ray", "--plain", "-o", str(tmp_path / "runs")], env, tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr
    (run,) = (tmp_path / "runs").iterdir()
    journal = [json.loads(line) for line in (run / "journal.jsonl").read_text().splitlines()]
    assert len(journal) == 3 and all(r["error"] is None for r in journal if not r["reused"])
    best = json.loads((run / "best.json").read_text())
    assert best["engine"] == "tgi" and "max_concurrent_requests" in best["values"]
    launched = [json.loads(p.read_text()) for p in (tmp_path / "argv").iterdir()]
    assert launched and all("--model-id" in a and "--max-concurrent-requests" in a for a in launched)
    command = json.loads((run / "best_command.json").read_text())
    assert command["port"] == 3000 and "--max-concurrent-requests" in command["argv"]


SIM_CONFIG = """
engine = "tgi"
benchmark = "builtin"
simulate = true
n_particles = 4
iters = 2
seed = 0
sample_size = 64
[data_storage]
pso_top_k = 0
[cluster]
accelerator = "none"
[simulator]
hardware = "h100-sxm"
model = "qwen3-8b"
[simulator.workload]
input_len = 256
output_len = 32
num_prompts = 64
concurrency = 16
[search]
prior_evaluations = 16
[tgi.command]
model = "Qwen/Qwen3-8B"
others = "--max-input-tokens 1024"
[[tgi.target_field]]
name = "max_batch_size"
config_position = "--max-batch-size"
min = 4
max = 64
dtype = "int"
value = 16
[[tgi.target_field]]
name = "max_total_tokens"
config_position = "--max-total-tokens"
min = 0
max = 1
dtype = "enum"
dtype_param = [1024, 2048, 4096]
value = 2048
[builtin]
input_len = 256
output_len = 32
concurrency = 16
num_prompts = 64
"""


@pytest.mark.slow
def test_third_party_engine_brings_its_rules_health_patterns_and_a_prior(tmp_path):
    """docs/examples/msopt-tgi declares start-up rules and a simulator personality; with nothing in
    msopt naming it, a refused candidate is refused by TGI's own rule, and a simulated run of it
    gets the simulator prior (prior.json, predictions in the journal)."""
    cfg = tmp_path / "tgi-sim.toml"
    cfg.write_text(SIM_CONFIG)
    site = tmp_path / "site"
    _install(site)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(site), str(ROOT), str(EXAMPLE)]))

    out = _msopt(["simulate", "-c", str(cfg), "--set", "max_total_tokens=1024", "--json"], env, tmp_path)
    assert out.returncode == 1, out.stdout + out.stderr
    assert "tgi.max_input_tokens_vs_max_total_tokens" in out.stdout
    assert "`max_input_tokens must be < `max_total_tokens`" in out.stdout
    out = _msopt(["simulate", "-c", str(cfg), "--json"], env, tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr  # the simulator models TGI through its personality

    out = _msopt(["optimize", "-c", str(cfg), "--no-ray", "--plain", "-o", str(tmp_path / "runs")], env, tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr
    (run,) = (tmp_path / "runs").iterdir()
    assert json.loads((run / "prior.json").read_text())
    journal = [json.loads(line) for line in (run / "journal.jsonl").read_text().splitlines()]
    assert any(r.get("predicted") for r in journal)
    assert all(r["values"]["max_total_tokens"] != 1024 or r.get("refused") for r in journal)


def test_plugin_health_patterns_join_the_configured_ones():
    """The adapter's health_patterns classify its own log lines; the table's error types stay the table's."""
    from msopt.evaluate.health import HealthCheck

    TgiAdapter = _tgi_module().TgiAdapter

    check = HealthCheck.default().with_patterns(TgiAdapter.health_patterns)
    verdict = check.check(["ERROR text_generation_launcher: text-generation-server not found in PATH"])
    assert verdict.kind == "fatal" and verdict.error_type == "tgi_not_installed"
    assert HealthCheck.default().check(["Error: ShardCannotStart"]).ok
    assert check.check(["Error: ShardCannotStart"]).error_type == "tgi_shard"
    clash = HealthCheck.default().with_patterns({"fatal": {"oom": ("Error: ShardFailed",)}})
    assert clash.check(["Error: ShardFailed"]).ok  # "oom" is the table's: the engine's patterns for it are dropped


def _tgi_module():
    sys.path.insert(0, str(EXAMPLE))
    try:
        import msopt_tgi
    finally:
        sys.path.remove(str(EXAMPLE))
    return msopt_tgi


def test_plugin_start_up_rules_refuse_through_the_generic_machinery():
    """TGI's rules, declared on its adapter, refuse through msopt.engines.rules.check_rules as a
    built-in engine's do: both values known, else no refusal."""
    from msopt.engines import LaunchSpec
    from msopt.engines.rules import ModelFacts, check_rules
    from msopt.errors import RefusedError

    tgi = _tgi_module().TgiAdapter()
    base = ("text-generation-launcher", "--model-id", "M", "--port", "3000")

    def refused(*flags: str, model: ModelFacts | None = None) -> str | None:
        try:
            check_rules(LaunchSpec("tgi", (*base, *flags)), {}, {}, model=model or ModelFacts(), environ={},
                        rules=tgi.startup_rules)
        except RefusedError as exc:
            return exc.rule
        return None

    assert refused("--max-input-tokens", "1024", "--max-total-tokens", "1024") == \
        "tgi.max_input_tokens_vs_max_total_tokens"
    assert refused("--max-input-tokens", "1023", "--max-total-tokens", "1024") is None
    assert refused("--max-input-tokens", "8192") is None  # the model's length unknown: no refusal
    assert refused("--max-input-tokens", "8192", model=ModelFacts(max_position=40960)) == \
        "tgi.max_input_tokens_vs_max_total_tokens"  # max_total_tokens defaults to min(40960, 4096)
    assert refused("--max-total-tokens", "4096", "--max-batch-total-tokens", "2048") == \
        "tgi.max_total_tokens_vs_max_batch_total_tokens"
