"""Issue 26: one server start per configuration.

The server key (the rendered launch without the benchmark's load), the routing by key, and a
kept server reused through ``msopt sim-serve`` (counted from the journal and the recorded pids).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from msopt.benchmarks import get_benchmark
from msopt.benchmarks.builtin import synthetic_prompts
from msopt.config import load_settings
from msopt.engines import get_engine
from msopt.evaluate import Evaluator
from msopt.evaluate.results import EvalRequest
from msopt.evaluate.runner import server_key
from msopt.launch.render import Candidate, LaunchSpec
from msopt.run.pool import InProcessPool, route
from msopt.space import SearchSpace
from tests.support.procs import recorded, started, survivors

FIELDS = """
[[vllm.target_field]]
name = "max_num_seqs"
config_position = "--max-num-seqs"
min = 4
max = 64
dtype = "int"
value = 8
[[vllm.target_field]]
name = "CONCURRENCY"
config_position = "env"
min = 1
max = 8
dtype = "int"
value = 4
[[vllm.target_field]]
name = "MSOPT_TEST_SERVER_VAR"
config_position = "env"
min = 1
max = 4
dtype = "int"
value = 2
"""

KEY_CONFIG = """
engine = "vllm"
benchmark = "vllm_benchmark"
[cluster]
accelerator = "none"
{cluster}
[vllm.command]
model = "/models/m"
served_model_name = "m"
""" + FIELDS


def _key(write_toml, cluster: str = "", **values: object) -> str | None:
    settings = load_settings(write_toml(KEY_CONFIG.format(cluster=cluster)), environ={})
    base = {"max_num_seqs": 8, "CONCURRENCY": 4, "MSOPT_TEST_SERVER_VAR": 2}
    return server_key(settings.config, get_engine("vllm"), {**base, **values})


def test_load_only_differences_share_a_server_key(write_toml) -> None:
    key = _key(write_toml)
    assert key is not None and len(key) == 16
    assert _key(write_toml, CONCURRENCY=7) == key  # the benchmark's load: not the server's


@pytest.mark.parametrize("change", [{"max_num_seqs": 9}, {"MSOPT_TEST_SERVER_VAR": 3}])
def test_any_server_value_gives_another_key(write_toml, change) -> None:
    assert _key(write_toml, **change) != _key(write_toml)


def test_reuse_servers_false_gives_no_key(write_toml) -> None:
    assert _key(write_toml, cluster="reuse_servers = false") is None
    path = write_toml(KEY_CONFIG.format(cluster='reuse_servers = "yes"'))
    with pytest.raises(ValueError, match="reuse_servers"):
        load_settings(path, environ={})


def test_route_prefers_the_worker_keeping_the_server() -> None:
    def req(i: int, key: str | None) -> EvalRequest:
        return EvalRequest(i, "capacity", None, 0, (0.0,), server_key=key)

    # worker 1 keeps "b": the "b" request goes there; "a" goes to the worker keeping nothing first
    assert sorted(route([req(0, "a"), req(1, "b")], ["c", "b", None])) == [(0, 2), (1, 1)]
    assert route([req(0, "a")], ["b"]) == [(0, 0)]  # no match: any free worker (its server stops)
    assert route([req(0, "a"), req(1, "a")], ["a"]) == [(0, 0)]
    # "a" runs on a busy worker: it waits for it rather than stop the idle worker's "b" ...
    assert route([req(0, "a")], ["b"], busy={"a"}) == []
    # ... but takes an idle worker keeping nothing
    assert route([req(0, "a")], [None], busy={"a"}) == [(0, 0)]


def test_a_reused_measurement_sends_other_prompts() -> None:
    """Honest repeats: each measurement on a reused server is seeded apart (prefix caching)."""
    builtin = get_benchmark("builtin")
    assert builtin.with_seed({"seed": 3}, 0) == {"seed": 3}
    assert builtin.with_seed({"seed": 3}, 2)["seed"] == 5
    assert synthetic_prompts(4, 32, 3) != synthetic_prompts(4, 32, 5)
    vb = get_benchmark("vllm_benchmark")
    server = LaunchSpec("vllm", ("vllm",), port=1234, served_model_name="m", model="m")
    for offset, seed in ((0, None), (1, "1")):
        argv, _ = vb.render(Candidate({}, [], vb.with_seed({"command": {}}, offset)), server=server, num_prompts=4, load={},
                            result_dir=Path("/tmp/r"))
        assert (argv[argv.index("--seed") + 1] if "--seed" in argv else None) == seed


SERVE_CONFIG = """
engine = "vllm"
benchmark = "builtin"
particles_time_out = 120
[cluster]
accelerator = "none"
{cluster}
[vllm]
wait_start_time = 60
[vllm.command]
executable = {exe}
model = "/models/Qwen3-8B"
served_model_name = "qwen3-8b"
host = "127.0.0.1"
others = "--time-scale 0.01 --startup-delay 0.2"
[builtin]
endpoint = "/v1/completions"
input_len = 32
output_len = 4
concurrency = 2
num_prompts = 4
""" + FIELDS


def _request(settings, eval_id: int, values: dict[str, object], load: dict[str, float] | None = None) -> EvalRequest:
    space = SearchSpace.from_settings(settings)
    position = tuple(float(x) for x in space.encode(values))
    return EvalRequest(eval_id, "capacity", None, 0, position, load=load or {})


@pytest.mark.parametrize("reuse", [True, False])
@pytest.mark.slow
def test_the_runner_keeps_the_server_for_the_same_key(write_toml, tmp_path: Path, reuse: bool) -> None:
    pids = tmp_path / "pids"
    exe = json.dumps(recorded([sys.executable, "-m", "msopt.cli", "sim-serve"], pids))
    cluster = "" if reuse else "reuse_servers = false"
    settings = load_settings(write_toml(SERVE_CONFIG.format(exe=exe, cluster=cluster)), environ={})
    ev = Evaluator(settings.config, run_dir=tmp_path / "run")
    a = {"max_num_seqs": 8, "CONCURRENCY": 4, "MSOPT_TEST_SERVER_VAR": 2}
    try:
        results = [ev.evaluate(_request(settings, 0, a)),
                   ev.evaluate(_request(settings, 1, a, {"concurrency": 1})),   # a capacity probe
                   ev.evaluate(_request(settings, 2, {**a, "CONCURRENCY": 2})),  # a load-only candidate
                   ev.evaluate(_request(settings, 3, {**a, "max_num_seqs": 16}))]
        for r in results:
            assert r.error is None, r.error
        starts = [r.server["start"] for r in results if r.server]
        if reuse:
            assert starts == ["started", "reused", "reused", "started"]
            assert [r.server["seed_offset"] for r in results[1:3] if r.server] == [1, 2]
            assert results[0].server and results[0].server["start_s"] > 0
            assert ev.kept_key == results[3].server["key"] if results[3].server else False
            assert started(pids) == 2 and len(survivors(pids)) == 1  # the kept one runs
        else:
            assert starts == ["started"] * 4 and started(pids) == 4 and survivors(pids) == []
    finally:
        ev.close()
    assert ev.kept_key is None and survivors(pids) == []


@pytest.mark.slow
def test_a_kept_server_that_died_is_started_again(write_toml, tmp_path: Path) -> None:
    pids = tmp_path / "pids"
    exe = json.dumps(recorded([sys.executable, "-m", "msopt.cli", "sim-serve"], pids))
    settings = load_settings(write_toml(SERVE_CONFIG.format(exe=exe, cluster="")), environ={})
    ev = Evaluator(settings.config, run_dir=tmp_path / "run")
    a = {"max_num_seqs": 8, "CONCURRENCY": 4, "MSOPT_TEST_SERVER_VAR": 2}
    try:
        assert ev.evaluate(_request(settings, 0, a)).error is None
        (pid,) = survivors(pids)
        os.kill(pid, 9)
        r = ev.evaluate(_request(settings, 1, a, {"concurrency": 1}))  # the health check fails: a fresh start
        assert r.error is None and r.server and r.server["start"] == "started"
        assert started(pids) == 2
    finally:
        ev.close()
    assert survivors(pids) == []


def test_the_in_process_pool_routes_by_key_and_stops_kept_servers(write_toml, tmp_path: Path) -> None:
    pids = tmp_path / "pids"
    exe = json.dumps(recorded([sys.executable, "-m", "msopt.cli", "sim-serve"], pids))
    settings = load_settings(write_toml(SERVE_CONFIG.format(exe=exe, cluster="")), environ={})
    engine = get_engine("vllm")
    a = {"max_num_seqs": 8, "CONCURRENCY": 4, "MSOPT_TEST_SERVER_VAR": 2}
    b = {**a, "max_num_seqs": 16}
    pool = InProcessPool(settings.config, size=2, run_dir=str(tmp_path / "run"))
    try:
        got = []
        for i, values in enumerate((a, b)):
            pool.submit(_request(settings, i, values))
        while len(got) < 2:
            got += pool.wait(60)
        # each worker now keeps one; the probes go to their own server's worker
        for i, values in enumerate((b, a, b, a), start=2):
            pool.submit(replace(_request(settings, i, values, {"concurrency": 1}),
                                server_key=server_key(settings.config, engine, values)))
            r = pool.wait(60)
            assert len(r) == 1 and r[0].error is None, r
            got += r
        assert [r.server["start"] for r in got if r.server].count("started") == 2
        for seqs in (8, 16):  # each configuration ran on one worker only
            assert len({r.actor for r in got if r.values.get("max_num_seqs") == seqs}) == 1
        assert started(pids) == 2
    finally:
        pool.close()
    assert survivors(pids) == []


RUN_CONFIG = """
engine = "vllm"
benchmark = "builtin"
n_particles = 2
iters = 1
sample_size = 4
particles_time_out = 120
ttft_slo = 100
tpot_slo = 100
[data_storage]
pso_top_k = 2
[capacity]
enabled = true
load = "concurrency"
max_probes = 3
repeats = 1
[cluster]
accelerator = "none"
{cluster}
[vllm]
wait_start_time = 60
[vllm.command]
executable = {exe}
model = "{model}"
served_model_name = "qwen3-8b"
host = "127.0.0.1"
others = "--time-scale 0.01 --startup-delay 0.2"
[[vllm.target_field]]
name = "max_num_seqs"
config_position = "--max-num-seqs"
min = 4
max = 64
dtype = "int"
value = 8
[[vllm.target_field]]
name = "CONCURRENCY"
config_position = "env"
min = 1
max = 4
dtype = "int"
value = 2
[builtin]
endpoint = "/v1/completions"
input_len = 32
output_len = 4
num_prompts = 4
"""


@pytest.mark.slow  # whole runs through sim-serve
@pytest.mark.parametrize("ray, workers", [(False, 2), (True, 2), (False, 1), (True, 1)])
def test_a_run_starts_one_server_per_configuration(tmp_path: Path, ray: bool, workers: int) -> None:
    """Two workers: one start per configuration. One worker (issue 38): a start only on a change of
    configuration, and each configuration's capacity probes back to back on one server."""
    pids = tmp_path / "pids"
    exe = json.dumps(recorded([sys.executable, "-m", "msopt.cli", "sim-serve"], pids))
    (tmp_path / "Qwen3-8B").mkdir()
    cfg = tmp_path / "cfg.toml"
    cfg.write_text(RUN_CONFIG.format(exe=exe, model=tmp_path / "Qwen3-8B", cluster=""))
    out = subprocess.run([sys.executable, "-m", "msopt.cli", "optimize", "-c", str(cfg), "--plain",
                          "--max-concurrent", str(workers), *([] if ray else ["--no-ray"]),
                          "-o", str(tmp_path / "runs")],
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    (run,) = list((tmp_path / "runs").iterdir())
    lines = [json.loads(x) for x in (run / "journal.jsonl").read_text().splitlines()]
    launched = [r for r in lines if not r["reused"] and r["server"]]
    starts = [r for r in launched if r["server"]["start"] == "started"]
    reuses = [r for r in launched if r["server"]["start"] == "reused"]
    assert len(starts) == started(pids)  # the journal's starts are the processes that ran
    assert reuses and len(starts) + len(reuses) == len(launched)
    probes = [r for r in launched if r["phase"] == "capacity"]
    keys = [r["server"]["key"] for r in launched]
    if workers == 2:  # each worker keeping the server of its configuration: one start per configuration
        assert len(starts) == len(set(keys))
        assert probes and all(r["server"]["start"] == "reused" for r in probes)
    else:  # the journal is the run's order: a start is a change of configuration, nothing else
        assert len(set(keys)) == 2
        assert [r["server"]["start"] == "started" for r in launched] == \
            [i == 0 or keys[i - 1] != k for i, k in enumerate(keys)]
        seq = [r["server"]["key"] for r in probes]
        assert [k for i, k in enumerate(seq) if i == 0 or seq[i - 1] != k] == list(dict.fromkeys(seq))
        assert probes[0]["server"]["start"] == "reused"  # the server kept from the re-measurements first
        # server by server (issue 50 item 4): the least starts the stage order allows
        assert len(starts) == least_starts([(r["phase"], r["iteration"], r["server"]["key"]) for r in launched])
    assert f"{len(starts)} server starts" in out.stdout and f"{len(reuses)} on a kept server" in out.stdout
    report = (run / "report.html").read_text()  # the report: the starts, their time, the starts saved and theirs
    assert f"{len(starts)} server starts (" in report and f"{len(reuses)} on a kept server (~" in report
    assert survivors(pids) == []  # every server stopped, the kept ones included


# -- a kept server is stopped when nothing pending needs it ---------------------------------------------------

def test_unneeded_kept_servers_are_the_idle_ones_nothing_needs() -> None:
    from msopt.run.pool import unneeded

    pending = [EvalRequest(0, "capacity", None, 0, (0.0,), server_key="c")]
    assert unneeded(["a", None, "b", "c"], {"a"}, pending) == [2]
    assert unneeded(["a", "b"], set()) == [0, 1]
    assert unneeded([None, None], set()) == []


def _result(eval_id: int, phase: str, seqs: int, fitness: float, iteration: int = 0):
    from msopt.evaluate.results import EvaluationResult

    return EvaluationResult(eval_id, phase, None, iteration, [0.0], [0.0], {"max_num_seqs": seqs}, {}, fitness,
                            num_prompts=None)


def test_the_plan_of_each_stage() -> None:
    from msopt.run.leaderboard import Leaderboard
    from msopt.run.servers import planned

    def seqs(configs):
        return sorted(r.values["max_num_seqs"] for r in configs)

    board = Leaderboard(top_k=1, full_prompts=None)
    board.add(_result(0, "baseline", 8, 3.0))
    board.add(_result(1, "search", 16, 1.0))
    board.add(_result(2, "search", 32, 2.0))  # off the board of one: nothing will measure it again
    kw = {"top_k": 1, "capacity": True, "budget": False}
    assert seqs(planned("search", board, **kw)) == [8, 16]
    assert seqs(planned("search", board, top_k=0, capacity=False, budget=False)) == [16]  # the board only
    assert seqs(planned("refine", board, **kw)) == [8, 16]
    board.add(_result(3, "refine", 16, 1.0))
    assert seqs(planned("refine", board, **kw)) == [8, 16]  # the capacity stage comes back to 16
    assert seqs(planned("refine", board, top_k=1, capacity=False, budget=False)) == [8]  # only the baseline's repeats
    assert seqs(planned("capacity", board, **kw)) == [16]
    assert planned("capacity", board, **kw, expected=[]) == []  # every capacity search done
    assert planned("done", board, **kw) == []


def _wait_for(pred, what: str, hang: float = 300.0) -> None:
    import time

    deadline = time.monotonic() + hang  # a guard against a hang only; nothing is timed against it
    while not pred():
        if time.monotonic() > deadline:
            raise AssertionError(f"stalled before {what}")
        time.sleep(0.05)


@pytest.mark.slow
def test_the_in_process_pool_stops_a_kept_server_nothing_needs(write_toml, tmp_path: Path) -> None:
    pids = tmp_path / "pids"
    exe = json.dumps(recorded([sys.executable, "-m", "msopt.cli", "sim-serve"], pids))
    settings = load_settings(write_toml(SERVE_CONFIG.format(exe=exe, cluster="")), environ={})
    engine = get_engine("vllm")
    a = {"max_num_seqs": 8, "CONCURRENCY": 4, "MSOPT_TEST_SERVER_VAR": 2}
    b = {**a, "max_num_seqs": 16}
    ka, kb = server_key(settings.config, engine, a), server_key(settings.config, engine, b)
    assert ka is not None and kb is not None
    pool = InProcessPool(settings.config, size=2, run_dir=str(tmp_path / "run"))
    try:
        for i, values in enumerate((a, b)):
            pool.submit(_request(settings, i, values))
        got: list = []
        while len(got) < 2:
            got += pool.wait(60)
        assert all(r.error is None and r.server["kept"] for r in got), got
        assert len(survivors(pids)) == 2
        pool.retain({ka})  # only a's server is still needed
        assert pool.stopped == 1
        _wait_for(lambda: len(survivors(pids)) == 1, "b's kept server stopped")
        # a request queued for b keeps b's server even when the plan does not name it
        pool.submit(replace(_request(settings, 2, a, {"concurrency": 1}), server_key=ka))
        r = pool.wait(60)
        assert len(r) == 1 and r[0].server and r[0].server["start"] == "reused"
        pool.submit(replace(_request(settings, 3, b, {"concurrency": 1}), server_key=kb))
        pool.retain(set())  # b is queued: its server (started again) stays, a's goes
        r = pool.wait(60)
        assert len(r) == 1 and r[0].server and r[0].server["start"] == "started", r
        assert started(pids) == 3
    finally:
        pool.close()
    assert survivors(pids) == []


class _Spy(InProcessPool):
    """An in-process pool that records what it was told to retain."""

    def __init__(self, *args, **kw) -> None:
        super().__init__(*args, **kw)
        self.told: list[set[str]] = []

    def retain(self, keys) -> None:
        self.told.append(set(keys))
        super().retain(keys)


def run_stops_kept_servers(tmp_path: Path, ray: bool) -> None:
    """A whole run through sim-serve: when its capacity searches are done, the kept servers stop while
    the pool is still open (before its close); one start per configuration all the same."""
    from msopt.run.driver import Driver

    pids = tmp_path / "pids"
    exe = json.dumps(recorded([sys.executable, "-m", "msopt.cli", "sim-serve"], pids))
    (tmp_path / "Qwen3-8B").mkdir()
    cfg = tmp_path / "cfg.toml"
    cfg.write_text(RUN_CONFIG.format(exe=exe, model=tmp_path / "Qwen3-8B", cluster=""))
    settings = load_settings(cfg, environ={})
    if ray:
        from actors.pool import RayPool

        pool: Any = RayPool(settings.config, simulate=False, run_dir=str(tmp_path / "run"), max_concurrent=2)
    else:
        pool = _Spy(settings.config, size=2, run_dir=str(tmp_path / "run"))
    try:
        outcome = Driver(settings.config, pool, keep_results=True, screen=False).run()
        assert outcome.capacity and not outcome.failures
        launched = [r for r in outcome.results if r.server and not r.reused]
        keys = {r.server["key"] for r in launched if r.server}
        assert sum(r.server["start"] == "started" for r in launched if r.server) == len(keys) == started(pids)
        assert pool.stopped == len(keys)
        _wait_for(lambda: survivors(pids) == [], "every kept server stopped before the pool closed")
        if not ray:
            assert pool.told[-1] == set() and all(t <= keys for t in pool.told)
    finally:
        pool.close()
    assert survivors(pids) == []


@pytest.mark.slow  # a whole run through sim-serve (with Ray: tests/actors/test_server_retain.py)
def test_a_run_stops_every_kept_server_once_nothing_needs_it(tmp_path: Path) -> None:
    run_stops_kept_servers(tmp_path, ray=False)


@pytest.mark.slow  # a whole run, killed (Ray starts for the Ray one)
@pytest.mark.parametrize("ray", [False, True])
def test_no_kept_server_outlives_a_killed_driver(tmp_path: Path, ray: bool) -> None:
    """The lifecycle rule with reuse: the driver is SIGKILLed while the baseline's server is kept (its
    journal line says ``kept``) and runs; every process of every server group it started goes."""
    import signal

    from tests.support.lifecycle import HANG, optimize, wait_until
    from tests.support.procs import left_behind

    pids = tmp_path / "pids"
    exe = json.dumps(recorded([sys.executable, "-m", "msopt.cli", "sim-serve"], pids))
    (tmp_path / "Qwen3-8B").mkdir()
    cfg = tmp_path / "cfg.toml"
    cfg.write_text(RUN_CONFIG.format(exe=exe, model=tmp_path / "Qwen3-8B", cluster=""))
    output = tmp_path / "runs"

    def kept_and_running() -> bool:
        runs = list(output.glob("*/journal.jsonl"))
        lines = [json.loads(x) for x in runs[0].read_text().splitlines()] if runs else []
        base = next((r for r in lines if r["phase"] == "baseline" and r["iteration"] == 0), None)
        return bool(base and base["server"] and base["server"]["kept"]) and bool(survivors(pids))

    proc = optimize(cfg, output, "--max-concurrent", "2", *([] if ray else ["--no-ray"]))
    try:
        wait_until(kept_and_running, proc, "the baseline's server was kept")
        assert left_behind(pids)
        os.kill(proc.pid, signal.SIGKILL)
        proc.communicate(timeout=HANG)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    wait_until(lambda: left_behind(pids) == [], None, f"every server process stopped (left: {left_behind(pids)})")
    assert started(pids) >= 1


# -- the pool weighs a launch's cost ---------------------------------------------------------------------------

def test_launch_costs_from_a_simulated_evaluation() -> None:
    """The simulator's modelled start-up and the simulated benchmark's duration, both simulated seconds."""
    from msopt.run.pool import LaunchCosts

    settings = load_settings(Path(__file__).resolve().parents[2] / "configs" / "quickstart.toml", environ={})
    ev = Evaluator(settings.config, simulate=True)
    space = SearchSpace.from_settings(settings)
    r = ev.evaluate(EvalRequest(0, "baseline", None, 0, tuple(space.default_position().tolist())))
    assert r.error is None and r.server and r.server["start"] == "started"
    costs = LaunchCosts()
    assert costs.start_s is None and costs.wait_for_busy()  # nothing known: wait, as before
    costs.add(r)
    assert costs.start_s == r.server["start_s"] > 0
    assert costs.measure_s == r.metrics["duration"] > 0
    costs.add(replace(r, reused=True, server=None))  # a duplicate's reuse launched nothing
    assert costs.start_s == r.server["start_s"]


def test_route_starts_rather_than_wait_when_a_measurement_outlasts_two_starts() -> None:
    from msopt.evaluate.results import EvaluationResult
    from msopt.run.pool import LaunchCosts

    def measured(start_s: float, duration: float, start: str = "started") -> EvaluationResult:
        return EvaluationResult(0, "refine", None, 0, [0.0], [0.0], {}, {"duration": duration}, 1.0,
                                server={"start": start, "start_s": start_s, "key": "k", "kept": True})

    req = EvalRequest(0, "capacity", None, 0, (0.0,), server_key="a")
    short, long_ = LaunchCosts(), LaunchCosts()
    short.add(measured(60.0, 30.0))
    short.add(measured(0.0, 40.0, "reused"))
    long_.add(measured(20.0, 300.0))
    assert short.start_s == 60.0 and short.measure_s == 35.0
    # "a" runs on a busy worker, the idle one keeps "b": a short measurement is worth the wait ...
    assert route([req], ["b"], busy={"a"}, costs=short) == []
    # ... a long one is not: start "a" now (b's server stops)
    assert route([req], ["b"], busy={"a"}, costs=long_) == [(0, 0)]


# -- fewer workers than server keys: the capacity stage goes by server key (issue 38 item 5) --------------------

def _capacity_run(write_toml, workers: int, *, evaluator_factory=None, name: str = "cfg.toml"):
    """A simulated run (no noise) whose capacity stage probes three configurations of three server keys."""
    from msopt.run.driver import Driver
    from tests.run.test_capacity import CFG

    text = CFG.format(n=4, iters=2, top_k=3, ttft=0.5, noise=0.0, capacity="enabled = true\nmax_probes = 4",
                      load="concurrency = 4", extra="")
    settings = load_settings(write_toml(text, name), environ={})
    pool = InProcessPool(settings.config, size=workers, evaluator_factory=evaluator_factory)
    try:
        driver = Driver(settings.config, pool, keep_results=True)
        out = driver.run()
    finally:
        pool.close()
    return driver, out


def _by_worker(results) -> dict[str, list]:
    """Each worker's launches, in the order it ran them."""
    out: dict[str, list] = {}
    for r in sorted((r for r in results if r.server and not r.reused), key=lambda r: r.started):
        out.setdefault(r.actor, []).append(r)
    return out


@pytest.mark.parametrize("workers", [1, 2])
def test_fewer_workers_than_keys_run_each_keys_probes_back_to_back(write_toml, workers: int) -> None:
    driver, out = _capacity_run(write_toml, workers)
    probes = [r for r in out.results if r.phase == "capacity"]
    keys = {r.server["key"] for r in probes}
    assert len(out.capacity) == len(keys) == 3 > workers  # the stage goes by server key
    for key in keys:
        mine = [r for r in probes if r.server["key"] == key]
        assert len({r.actor for r in mine}) == 1  # one worker holds the key's server for all its probes
        # one start at most in the stage (none for a server a worker kept from the re-measurements)
        assert sum(r.server["start"] == "started" for r in mine) <= 1
        assert [r.server["start"] for r in mine[1:]] == ["reused"] * (len(mine) - 1)
    # a server kept from the re-measurements serves its configuration's probes without a start
    assert any(all(r.server["start"] == "reused" for r in probes if r.server["key"] == key) for key in keys)
    for runs in _by_worker(out.results).values():
        seq = [r.server["key"] for r in runs if r.phase == "capacity"]
        blocks = [k for i, k in enumerate(seq) if i == 0 or seq[i - 1] != k]
        assert len(blocks) == len(set(blocks))  # each key's probes back to back on its worker
        # a start is a change of key on the worker, nothing else
        starts = [r.server["start"] == "started" for r in runs]
        assert starts == [i == 0 or runs[i - 1].server["key"] != r.server["key"] for i, r in enumerate(runs)]
    # a probe's eval id is a function of its resume key, whatever order the probes ran in
    first = min(r.eval_id for r in probes)
    assert all(r.eval_id == first + r.particle * 4 + r.iteration for r in probes)
    # the same capacities as a worker per key (round by round)
    _, rounds = _capacity_run(write_toml, 3, name="rounds.toml")
    assert [(c["values"], c["sustainable_load"]) for c in out.capacity] == \
        [(c["values"], c["sustainable_load"]) for c in rounds.capacity]


def test_a_fault_during_a_probe_by_server_key_is_run_again(write_toml) -> None:
    """One worker, three keys: a probe whose evaluation raised (a fault of the machinery) is submitted
    again, nothing measured is lost, and the stage completes as without the fault."""
    from msopt.evaluate.evaluator import Evaluator as _Evaluator

    faults: list[int] = []

    class Faulty(_Evaluator):
        def evaluate(self, req):
            if req.phase == "capacity" and not faults:
                faults.append(req.eval_id)
                raise RuntimeError("the worker lost its server")
            return super().evaluate(req)

    def factory(k: int):
        return Faulty(settings.config, actor=f"worker-{k}", devices=[])

    from tests.run.test_capacity import CFG

    text = CFG.format(n=4, iters=2, top_k=3, ttft=0.5, noise=0.0, capacity="enabled = true\nmax_probes = 4",
                      load="concurrency = 4", extra="")
    settings = load_settings(write_toml(text, "faulty.toml"), environ={})
    _, out = _capacity_run(write_toml, 1, evaluator_factory=factory, name="faulty.toml")
    _, clean = _capacity_run(write_toml, 1, name="clean.toml")
    assert faults and any(r.eval_id == faults[0] for r in out.results)
    assert out.capacity == clean.capacity
    assert sorted(r.eval_id for r in out.results) == sorted(r.eval_id for r in clean.results)


def test_by_server_key_a_launch_budget_is_shared_between_the_configurations(write_toml) -> None:
    """One worker, a budget that cannot pay every probe: each configuration may spend an equal share of
    the launches left when the stage begins (the better ranks get the remainder), and no more."""
    from msopt.run.driver import Driver
    from tests.run.test_capacity import CFG

    text = CFG.format(n=4, iters=2, top_k=3, ttft=0.5, noise=0.0, capacity="enabled = true\nmax_probes = 6",
                      load="concurrency = 4", extra="")
    settings = load_settings(write_toml(text), environ={}).replace(max_launches=16)
    pool = InProcessPool(settings.config, size=1)
    try:
        out = Driver(settings.config, pool, keep_results=True).run()
    finally:
        pool.close()
    probes = [r for r in out.results if r.phase == "capacity"]
    left = 16 - (out.launches - len(probes))  # what the stage began with
    assert out.launches <= 16 and len(out.capacity) >= 2 and len({r.server["key"] for r in probes}) > 1
    k = len(out.capacity)
    for c in out.capacity:
        assert len(c["probes"]) <= left // k + (c["rank"] < left % k)
    assert any(len(c["probes"]) == left // k + (c["rank"] < left % k) for c in out.capacity)  # a share binds


# -- stages that follow the warm server (issue 50 item 4) ----------------------------------------------------------

def least_starts(launched: list[tuple[str, int, str]]) -> int:
    """The least server starts one worker makes for the launches ``launched`` ((phase, iteration, server key), in
    run order) that the stage order allows: the baseline's and the search's as they come (a start per change of
    key), then one per other key the re-measurements and capacity probes need, none for the one left warm."""
    head = [k for phase, it, k in launched if phase == "search" or (phase == "baseline" and it == 0)]
    rest = {k for phase, it, k in launched if not (phase == "search" or (phase == "baseline" and it == 0))}
    changes = sum(1 for i, k in enumerate(head) if i == 0 or head[i - 1] != k)
    return changes + len(rest - set(head[-1:]))


class _Notes:
    def __init__(self) -> None:
        self.lines: list[str] = []

    def on_event(self, event) -> None:
        from msopt.run.events import Note

        if isinstance(event, Note):
            self.lines.append(event.text)


def _warm_run(write_toml, workers: int, top_k: int = 2, name: str = "warm.toml", previous=(), store=None):
    """A simulated run (no noise) of two particles, one iteration, ``pso_top_k`` and a capacity stage of 3 probes."""
    from msopt.run.driver import Driver
    from tests.run.test_capacity import CFG

    text = CFG.format(n=2, iters=1, top_k=top_k, ttft=0.5, noise=0.0, capacity="enabled = true\nmax_probes = 3",
                      load="concurrency = 4", extra="")
    settings = load_settings(write_toml(text, name), environ={})
    notes = _Notes()
    pool = InProcessPool(settings.config, size=workers)
    try:
        out = Driver(settings.config, pool, keep_results=True, callbacks=[notes], previous=previous,
                     store=store).run()
    finally:
        pool.close()
    return out, notes.lines


def test_one_worker_re_measures_and_probes_server_by_server_with_the_least_starts(write_toml) -> None:
    """One worker, ``pso_top_k`` 2, a capacity stage: the search ends on B's server, so B is re-measured and probed
    on it before A's server starts again for A's: 3 starts for 2 configurations (the stage-by-stage order made 4:
    A:baseline, B:search, B:refine, A:refine, A:capacity, B:capacity), and the run says it saved one."""
    out, notes = _warm_run(write_toml, 1)
    launched = [r for r in out.results if r.server and not r.reused]  # one worker: in run order
    keys = [r.server["key"] for r in launched]
    starts = [r.server["start"] == "started" for r in launched]
    assert len(set(keys)) == 2 and len(out.capacity) == 2
    assert starts == [i == 0 or keys[i - 1] != k for i, k in enumerate(keys)]  # a start only on a change of key
    assert sum(starts) == least_starts([(r.phase, r.iteration, r.server["key"]) for r in launched]) == 3
    post = [(r.phase, r.server["key"]) for r in launched if r.phase in ("refine", "capacity")]
    blocks = [k for i, (_, k) in enumerate(post) if i == 0 or post[i - 1][1] != k]
    assert blocks == list(dict.fromkeys(blocks)) == [keys[1], keys[0]]  # B's (kept from the search) first
    for key in blocks:  # each configuration's re-measurement, then its probes on the server it left warm
        phases = [p for p, k in post if k == key]
        assert phases[0] == "refine" and set(phases[1:]) == {"capacity"}
    assert any("server by server: 1 server start, 1 fewer than the 2 at least" in line for line in notes), notes


def test_server_by_server_gives_the_capacities_of_a_worker_per_key(write_toml) -> None:
    """The order changes nothing measured: the same capacities, by mean fitness, and the same re-measurements as
    with a worker per server key (which goes stage by stage, round by round)."""
    one, _ = _warm_run(write_toml, 1)
    two, notes = _warm_run(write_toml, 2, name="two.toml")
    assert not any("server by server" in line for line in notes)
    assert [(c["rank"], c["values"], c["sustainable_load"]) for c in one.capacity] == \
        [(c["rank"], c["values"], c["sustainable_load"]) for c in two.capacity]
    refined = sorted((r.eval_id, r.phase, r.iteration, r.fitness) for r in one.results if r.phase != "capacity")
    assert refined == sorted((r.eval_id, r.phase, r.iteration, r.fitness) for r in two.results
                             if r.phase != "capacity")
