"""Issue 25, bug 1 against the real vLLM CPU build: SIGTERM, Ctrl-C (SIGINT) and SIGKILL of the driver,
with and without Ray, and an actor killed mid-benchmark, each followed by ``--resume``.

vLLM's CPU processes rename themselves (``VLLM::EngineCore``) and, orphaned, ignore SIGTERM: every
server is judged by the pid tests/support/record_pid.py recorded and by its process group (the server
leads its own), never by command line. The journal must end as an uninterrupted run's (same
evaluations, phases and outcomes; tests/support/lifecycle.py). The uninterrupted run through Ray actors is also the check
that each metric journaled from the builtin benchmark is builtin_result.json's. Each run is tiny: two particles, one
iteration, no re-measurement, the builtin benchmark with 16 prompts (two launches, the second
search candidate a reuse or a launch). Sized by the configuration, not --max-launches: a resumed run
plans a launch budget differently from an uninterrupted one (issue 25, bug 5). One uninterrupted run, through
Ray actors, is the expected journal of every case: the journal's shape (tests/support/lifecycle.py ``shape``:
each evaluation's id, phase, success and reuse) follows the driver's plan, not the pool, so a run without Ray,
interrupted and resumed, must end as the uninterrupted run with Ray; CI starts vLLM twice for it, not four times.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.real_engine.conftest import STOPPED_GROUP, VllmCpu
from tests.real_engine.test_vllm_cpu import assert_metrics_equal, result_file, write_config
from tests.support.lifecycle import interrupt_then_resume, journal, optimize, run_dir, shape, wait_until
from tests.support.procs import left_behind, recorded

pytestmark = [pytest.mark.real_engine, pytest.mark.slow, STOPPED_GROUP]

REPO = Path(__file__).resolve().parents[2]
#: Processes of a ready vLLM CPU server's group: the API server, VLLM::EngineCore, multiprocessing's
#: resource tracker and msopt's watcher.
MEMBERS = 3
#: The five metrics every benchmark reports (builtin_result.json has percentiles besides).
METRICS = ("generate_speed", "time_to_first_token", "time_per_output_token", "success_rate", "throughput")


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}


def _config(tmp: Path, cpu: VllmCpu) -> tuple[Path, Path]:
    pids = tmp / "pids"
    over: dict[str, Any] = {
        "n_particles": 2, "iters": 1, "sample_size": 16, "benchmark": "builtin",
        "data_storage": {"pso_top_k": 0},
        "builtin": {"num_prompts": 16, "concurrency": 4, "output_len": 16},
        "vllm": {"command": {"executable": recorded([cpu.vllm, "serve"], pids)}},
    }
    return write_config(tmp, cpu, over), pids


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory: pytest.TempPathFactory, vllm_cpu: VllmCpu) -> list[tuple]:
    """The journal's shape of one uninterrupted run through Ray actors; each journaled metric of its two launches
    is builtin_result.json's."""
    tmp = tmp_path_factory.mktemp("whole")
    cfg, pids = _config(tmp, vllm_cpu)
    proc = optimize(cfg, tmp / "runs", env=_env())
    out, err = proc.communicate(timeout=1800)
    assert proc.returncode == 0, out[-2000:] + err[-3000:]
    run = run_dir(tmp / "runs")
    recs = journal(run)
    assert left_behind(pids) == []
    measured = [r for r in recs if r.get("metrics") and not r.get("reused")]
    assert len(measured) == 2, [(r["eval_id"], r["phase"], r["error"]) for r in recs]
    for rec in measured:
        data = json.loads(result_file(run, rec, "builtin_result.json").read_text())
        assert_metrics_equal(rec["metrics"], {k: data[k] for k in METRICS}, f"eval {rec['eval_id']}")
        assert data["success_rate"] == 1.0 and rec["error"] is None
    return shape(recs)


# Every signal with and without Ray runs against msopt sim-serve (tests/reliability/test_lifecycle.py); against
# the real engine, each signal once, which keeps CI's real-engine part short. SIGTERM (the 143 of bug 1) is
# tests/real_engine/test_readme_real_path.py's run with Ray (the README's real path, stopped and resumed; no process
# working in its directory outlives the driver). Without Ray, SIGTERM and Ctrl-C take one path to vLLM (the driver
# stops its servers' groups itself, then exits 143 or 130), so Ctrl-C stands for both here.
@pytest.mark.parametrize(("sig", "ray"), [(signal.SIGINT, False), (signal.SIGKILL, True)],
                         ids=["SIGINT-no-ray", "SIGKILL-ray"])
def test_no_vllm_process_outlives_the_driver(tmp_path: Path, vllm_cpu: VllmCpu, uninterrupted: list[tuple],
                                            sig: signal.Signals, ray: bool) -> None:
    flags = () if ray else ("--no-ray",)
    cfg, pids = _config(tmp_path, vllm_cpu)
    got = interrupt_then_resume(cfg, tmp_path, pids, sig, flags, uninterrupted, members=MEMBERS, env=_env())
    print(f"\nreal vLLM, {'Ray' if ray else '--no-ray'}, {sig.name}: {got}")


def test_an_actor_killed_mid_benchmark_takes_its_vllm_server(tmp_path: Path, vllm_cpu: VllmCpu,
                                                             uninterrupted: list[tuple]) -> None:
    cfg, pids = _config(tmp_path, vllm_cpu)
    output = tmp_path / "runs"
    proc = optimize(cfg, output, env=_env())
    try:
        def benchmarking() -> bool:
            return bool(list(output.glob("*/logs/eval-*-benchmark-a1.log"))) and len(left_behind(pids)) >= MEMBERS
        wait_until(benchmarking, proc, "a benchmark started")
        group = left_behind(pids)
        (leader,) = [p for p in group if (pids / str(p)).exists()]
        actor = int(Path(f"/proc/{leader}/stat").read_text().rsplit(")", 1)[1].split()[1])
        os.kill(actor, signal.SIGKILL)
        wait_until(lambda: not set(group) & set(left_behind(pids)), proc, "the killed actor's server stopped")
        out, err = proc.communicate(timeout=1800)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == 0, out[-2000:] + err[-3000:]
    got = journal(run_dir(output))
    assert shape(got) == uninterrupted
    assert max(r["attempts"] for r in got) >= 2
    assert left_behind(pids) == []
    print(f"\nreal vLLM, actor killed: {len(group)} processes of its server's group stopped", file=sys.stderr)
