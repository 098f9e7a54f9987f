"""The capacity stage: the highest load each top configuration sustains within the SLOs.

Simulated end to end (Driver + InProcessPool + the real Evaluator) on tiny workloads, plus the
search state machine against synthetic edges.
"""

from __future__ import annotations

import csv
import json
import math
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from msopt.config import load_settings
from msopt.errors import ConfigError
from msopt.evaluate.evaluator import Evaluator
from msopt.evaluate.results import EvalRequest
from msopt.run.capacity import CapacityOptions, CapacitySearch, Probe, capacity_options
from msopt.run.driver import Driver
from msopt.run.pool import InProcessPool
from msopt.run.store import RunStore
from msopt.space import SearchSpace

CFG = """
simulate = true
n_particles = {n}
iters = {iters}
ttft_slo = {ttft}
tpot_slo = 0.05
seed = 1
[data_storage]
pso_top_k = {top_k}
[capacity]
{capacity}
[simulator]
hardware = "atlas-800i-a2"
model = "qwen3-8b"
noise = {noise}
[simulator.workload]
input_len = 512
output_len = 16
num_prompts = 48
{load}
[[vllm.target_field]]
name = "max_num_seqs"
config_position = "--max-num-seqs"
min = 2
max = 12
dtype = "int"
value = 8
[[vllm.target_field]]
name = "tp"
config_position = "--tensor-parallel-size"
min = 0
max = 1
dtype = "enum"
dtype_param = [1, 2]
value = 1
{extra}
"""


def settings_for(write_toml, *, n=1, iters=1, top_k=1, ttft=0.5, noise=0.0, capacity="enabled = true",
                 load="concurrency = 4", extra="", name="cfg.toml"):
    text = CFG.format(n=n, iters=iters, top_k=top_k, ttft=ttft, noise=noise, capacity=capacity, load=load,
                      extra=extra)
    return load_settings(str(write_toml(text, name)), environ={})


def run(settings, previous=(), store=None, size=2):
    pool = InProcessPool(settings.config, size=size)
    try:
        # every result in memory for the comparisons (with a store the journal is the record)
        driver = Driver(settings.config, pool, previous=previous, store=store, keep_results=True)
        out = driver.run()
    finally:
        pool.close()
    return driver, out


def passes(settings, values, load):
    """The test's own verdict for one load, with the same Evaluator."""
    ev = Evaluator(settings.config, simulate=True)
    pos = tuple(SearchSpace.from_settings(settings).encode(values).tolist())
    r = ev.evaluate(EvalRequest(10_000 + int(load), "capacity", 0, 0, pos, None, load={"concurrency": load}))
    m = r.metrics
    return (m["time_to_first_token"] <= settings.config.run.slos.ttft and m["time_per_output_token"] <= settings.config.run.slos.tpot
            and m["success_rate"] >= settings.config.run.slos.success_rate)


# -- the search against synthetic edges --------------------------------------------------------
def drive(search: CapacitySearch, ok) -> None:
    eid = 0
    while loads := search.next_loads():
        probes = []
        for x in loads:
            eid += 1
            probes.append(Probe(eid, x, *ok(x)))
        search.tell(probes)


@pytest.mark.parametrize("edge", [0.37, 3.0, 7.9, 41.5, 250.0])
@pytest.mark.parametrize("tol", [0.05, 0.2])
def test_rate_search_is_within_tolerance_of_the_edge(edge, tol):
    opts = CapacityOptions(enabled=True, tolerance=tol, max_probes=30, load="request_rate", start_load=5.0)
    s = CapacitySearch(opts, 5.0)
    drive(s, lambda x: (x <= edge, None if x <= edge else "slow"))
    got = s.result()["sustainable_load"]
    assert edge / (1 + tol) <= got <= edge and s.result()["limited_by"] == "slo"
    assert len(s.probes) <= 30


def test_search_never_reports_a_load_that_failed_a_repeat():
    runs: dict[float, int] = {}

    def flaky(x):  # loads above 6 pass once, then fail on a repeat
        runs[x] = runs.get(x, 0) + 1
        ok = x <= 6 or (x <= 10 and runs[x] == 1)
        return ok, None if ok else "flaky"

    opts = CapacityOptions(enabled=True, tolerance=0.05, max_probes=30, repeats=3, load="concurrency")
    s = CapacitySearch(opts, 2.0)
    drive(s, flaky)
    res = s.result()
    assert res["sustainable_load"] == 6 and res["verified"]
    failed = {p["load"] for p in res["probes"] if not p["passed"]}
    assert res["sustainable_load"] not in failed
    assert sum(p["load"] == 6 and p["passed"] for p in res["probes"]) == 3


def test_probe_budget_is_kept():
    opts = CapacityOptions(enabled=True, tolerance=0.001, max_probes=5, repeats=2, load="request_rate")
    s = CapacitySearch(opts, 1.0)
    drive(s, lambda x: (x <= 1000, None))  # never fails within the budget
    res = s.result()
    assert len(s.probes) <= 5 and res["verified"] and res["limited_by"] == "probes"
    assert res["sustainable_load"] == 8.0  # 1, 2, 4, 8 then the repeat of 8


# -- end to end on the simulator --------------------------------------------------------------
def test_found_load_is_the_true_edge_within_tolerance(write_toml):
    settings = settings_for(write_toml, n=2, iters=1, top_k=2, capacity="enabled = true\ntolerance = 0.05")
    driver, out = run(settings)
    assert len(out.capacity) == 2
    for c in out.capacity:
        truth = 0  # fine sweep: the largest concurrency up to which every load passes
        for load in range(1, 49):
            if not passes(settings, c["values"], load):
                break
            truth = load
        got = c["sustainable_load"]
        assert truth > 0
        assert truth * (1 - 0.05) - 1 <= got <= truth, (c, truth)
        assert c["goodput"] == c["edge_metrics"]["generate_speed"] > 0
        assert c["edge_metrics"]["time_to_first_token"] <= settings.config.run.slos.ttft
        assert len(c["probes"]) <= 12
    probes = [r for r in out.results if r.phase == "capacity"]
    assert probes and all(set(r.load) == {"concurrency"} for r in probes)
    assert sorted(r.eval_id for r in probes) == list(range(1 + 2 * 1 + 2, 1 + 2 * 1 + 2 + len(probes)))
    best = driver.best()  # the recommendation: highest goodput, at its sustainable load
    top = max(out.capacity, key=lambda c: c["goodput"])
    assert best.phase == "capacity" and best.eval_id == top["edge_eval_id"]
    assert best.load == {"concurrency": int(top["sustainable_load"])}


def test_tighter_slo_never_yields_a_higher_load(write_toml):
    loads = []
    for ttft, pct in ((0.8, "\"mean\""), (0.5, "\"mean\""), (0.5, "99"), (0.3, "99")):
        settings = settings_for(write_toml, ttft=ttft, capacity=f"enabled = true\npercentile = {pct}")
        _, out = run(settings)
        (c,) = out.capacity
        loads.append(c["sustainable_load"])
    assert loads == sorted(loads, reverse=True) and loads[0] > loads[-1]


def test_failing_even_at_the_lowest_load_is_zero_capacity(write_toml):
    settings = settings_for(write_toml, ttft=0.001)
    driver, out = run(settings)
    (c,) = out.capacity
    assert c["sustainable_load"] == 0 and c["goodput"] == 0 and c["limited_by"] == "floor"
    assert c["edge_eval_id"] is None and c["failed_load"] == 1
    best = driver.best()  # no load sustained: the recommendation falls back to the refined result
    assert best is not None and best.phase == "refine"


def test_repeats_at_the_edge(write_toml):
    settings = settings_for(write_toml, noise=0.05, capacity="enabled = true\nrepeats = 3\nmax_probes = 14")
    _, out = run(settings)
    (c,) = out.capacity
    edge = c["sustainable_load"]
    assert edge > 0 and c["verified"]
    at_edge = [p for p in c["probes"] if p["load"] == edge]
    assert len(at_edge) >= 3 and all(p["passed"] for p in at_edge)
    assert edge not in {p["load"] for p in c["probes"] if not p["passed"]}
    assert len(c["probes"]) <= 14


@pytest.mark.parametrize("mode, size", [("sync", 2), ("async", 2), ("sync", 1)])
def test_resume_replays_capacity_probes(write_toml, tmp_path, mode, size):
    """With one worker for two configurations the probes go by server key (one configuration's, then
    the other's), and a resumed run replays them the same."""
    settings = settings_for(write_toml, n=2, iters=1, top_k=2).replace(mode=mode)
    store = RunStore.create(tmp_path / "runs", settings.config)
    _, full = run(settings, store=store, size=size)
    store.close()
    journal = RunStore.open(store.run_dir).load_journal()
    probes = [r for r in journal if r.phase == "capacity"]
    assert len(probes) >= 6
    if size == 1:  # back to back: the particle (rank) changes once
        ranks = [r.particle for r in probes]
        assert sum(a != b for a, b in zip(ranks, ranks[1:])) == 1, ranks
    previous = journal[:-3]  # the driver died with three capacity probes unjournaled
    driver, resumed = run(settings, previous=previous, size=size)
    assert driver.launched == 3
    assert resumed.capacity == full.capacity
    key = lambda r: (r.eval_id, r.phase, r.particle, r.iteration, r.load, r.values, r.metrics)
    assert sorted(map(key, resumed.results)) == sorted(map(key, full.results))


class _FirstPickWorse(Evaluator):
    """The first pick's re-measurement 10 worse: the ranking by mean fitness turns the picks' order round."""

    def evaluate(self, req):
        r = super().evaluate(req)
        return replace(r, fitness=r.fitness + 10) if req.phase == "refine" and req.iteration == 0 else r


def test_server_by_server_resumes_with_the_same_eval_ids(write_toml, tmp_path):
    """One worker, ``pso_top_k`` 2: each pick is re-measured and probed server by server (issue 50 item 4).
    Interrupted anywhere after the search, a resumed run asks for the same requests under the same eval ids;
    resumed with a worker per key (stage by stage, round by round) it probes the same configurations, since a
    probe's resume key names its configuration by its slot (the first pick is ranked second here)."""
    settings = settings_for(write_toml, n=2, iters=1, top_k=2, capacity="enabled = true\nmax_probes = 3")

    def run_on(size, previous=(), store=None):
        pool = InProcessPool(settings.config, size=size, evaluator_factory=lambda k: _FirstPickWorse(
            settings.config, actor=f"worker-{k}", devices=[]))
        try:
            driver = Driver(settings.config, pool, previous=previous, store=store, keep_results=True)
            return driver, driver.run()
        finally:
            pool.close()

    store = RunStore.create(tmp_path / "runs", settings.config)
    _, full = run_on(1, store=store)
    store.close()
    journal = RunStore.open(store.run_dir).load_journal()
    post = [i for i, r in enumerate(journal) if r.phase in ("refine", "capacity")]
    assert [journal[i].phase for i in post] == ["refine"] + ["capacity"] * 3 + ["refine"] + ["capacity"] * 3
    slots = {r.particle: r.values for r in full.results if r.phase == "capacity"}
    refined = {r.iteration: r.values for r in full.results if r.phase == "refine"}
    assert slots == refined and full.capacity[0]["values"] == refined[1]  # slot 1 ranked first
    key = lambda r: (r.eval_id, r.phase, r.particle, r.iteration, r.load, r.values, r.metrics)
    for cut in post:
        driver, resumed = run_on(1, previous=journal[:cut])
        assert driver.launched == len(journal) - cut
        assert sorted(map(key, resumed.results)) == sorted(map(key, full.results)), cut
        assert resumed.capacity == full.capacity
    _, other = run_on(2, previous=journal[:post[2]])  # two of the first pick's probes replayed
    assert all(r.values == slots[r.particle] for r in other.results if r.phase == "capacity")
    assert [(c["values"], c["sustainable_load"]) for c in other.capacity] == \
        [(c["values"], c["sustainable_load"]) for c in full.capacity]


def test_run_directory_holds_the_capacity(write_toml, tmp_path):
    settings = settings_for(write_toml, n=2, iters=1, top_k=2)
    store = RunStore.create(tmp_path / "runs", settings.config)
    run(settings, store=store)
    store.close()
    cap = json.loads((store.run_dir / "capacity.json").read_text())
    assert cap["load"] == "concurrency" and len(cap["configurations"]) == 2
    assert {"sustainable_load", "goodput", "edge_metrics", "probes"} <= set(cap["configurations"][0])
    best = json.loads((store.run_dir / "best.json").read_text())
    assert best["capacity"] == cap and best["phase"] == "capacity"
    assert best["metrics"]["generate_speed"] == max(c["goodput"] for c in cap["configurations"])
    with open(store.run_dir / "results.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    cap_rows = [r for r in rows if r["phase"] == "capacity"]
    assert len(cap_rows) == sum(len(c["probes"]) for c in cap["configurations"])
    assert all(json.loads(r["load"])["concurrency"] >= 1 for r in cap_rows)
    assert all(r["load"] == "" for r in rows if r["phase"] != "capacity")
    # probes and re-measurements name the workload they served ([simulator.workload] num_prompts)
    assert all(r["num_prompts"] == "48" for r in rows if r["phase"] in ("capacity", "refine"))


# -- which load, when on, validation -------------------------------------------------------------
LOAD_FIELD = """
[[vllm.target_field]]
name = "{name}"
config_position = "env"
min = {lo}
max = {hi}
dtype = "{dtype}"
value = {value}
"""


def test_default_on_with_a_varied_load_field(write_toml):
    rate = LOAD_FIELD.format(name="REQUESTRATE", lo=1, hi=8, dtype="float", value=2.0)
    s = settings_for(write_toml, capacity="", extra=rate)
    o = capacity_options(s.config)
    assert o.enabled and o.load == "request_rate" and o.field == "REQUESTRATE"
    assert o.start_for({"REQUESTRATE": 3.5}) == 3.5
    conc = LOAD_FIELD.format(name="CONCURRENCY", lo=1, hi=8, dtype="int", value=4)
    o = capacity_options(settings_for(write_toml, capacity="", extra=conc).config)
    assert o.enabled and o.load == "concurrency" and o.field == "CONCURRENCY"
    fixed = LOAD_FIELD.format(name="CONCURRENCY", lo=4, hi=4, dtype="int", value=4)
    assert not capacity_options(settings_for(write_toml, capacity="", extra=fixed).config).enabled
    assert not capacity_options(settings_for(write_toml, capacity="").config).enabled
    o = capacity_options(settings_for(write_toml, load="request_rate = 6.0\nconcurrency = 16").config)
    assert o.load == "request_rate" and o.start_load == 6.0 and o.field is None  # open loop
    o = capacity_options(settings_for(write_toml).config)
    assert o.load == "concurrency" and o.start_load == 4 and o.repeats == 1


def test_request_rate_field_drives_the_probes(write_toml):
    rate = LOAD_FIELD.format(name="REQUESTRATE", lo=1, hi=8, dtype="float", value=2.0)
    s = settings_for(write_toml, capacity="max_probes = 4", load="request_rate = 2.0\nconcurrency = 48",
                     extra=rate)
    _, out = run(s)
    (c,) = out.capacity
    probes = [r for r in out.results if r.phase == "capacity"]
    assert c["load"] == "request_rate" and len(probes) == len(c["probes"]) <= 4
    assert probes[0].load == {"request_rate": 2.0} and probes[1].load == {"request_rate": 4.0}


@pytest.mark.parametrize("line, key", [
    ("enabled = \"yes\"", "enabled"), ("percentile = 95", "percentile"), ("tolerance = 0", "tolerance"),
    ("tolerance = 1.5", "tolerance"), ("max_probes = 0", "max_probes"), ("repeats = 0", "repeats"),
    ("repeats = 20", "repeats"), ("load = \"qps\"", "load"), ("min_load = -1", "min_load"),
    ("max_load = \"x\"", "max_load"), ("start_load = 0", "start_load"), ("probes = 3", "unknown key"),
])
def test_invalid_keys_are_named(write_toml, line, key):
    s = settings_for(write_toml, capacity=line if key == "enabled" else "enabled = true\n" + line)
    with pytest.raises(ConfigError, match=key):
        capacity_options(s.config)


@pytest.mark.parametrize("line, fix", [
    ("enabled = \"yes\"", "enabled must be true or false, got 'yes'; e.g. enabled = true"),
    ("max_probes = 0", "max_probes must be an integer from 1 to 1000, got 0; e.g. max_probes = 12"),
    ("repeats = 0", "repeats must be an integer from 1 to 100, got 0; e.g. repeats = 2"),
    ("load = \"qps\"", 'load must be "auto", "request_rate" or "concurrency", got \'qps\'; e.g. load = "request_rate"'),
    ("min_load = -1", "min_load must be a positive number, got -1; e.g. min_load = 1"),
    ("tolerance = 0", "tolerance must be a number in (0, 1), got 0; e.g. tolerance = 0.05"),
])
def test_a_bad_key_names_the_file_the_key_and_a_fix(write_toml, line, fix):
    """Each [capacity] key is checked as msopt/config/keys.py declares it: the message names the file, the key,
    the rule and a valid value (enabled, max_probes, repeats, load and the loads gave no fix before)."""
    s = settings_for(write_toml, capacity=line if "enabled" in line else "enabled = true\n" + line)
    with pytest.raises(ConfigError) as info:
        capacity_options(s.config)
    assert str(info.value).startswith(f"{s.config.capacity.source}: ") and str(info.value).endswith(f"[capacity] {fix}")


@pytest.mark.slow  # whole runs in processes
def test_cli_refuses_a_bad_key_before_the_run_and_reports_capacity(write_toml, tmp_path):
    bad = write_toml(CFG.format(n=1, iters=1, top_k=1, ttft=0.5, noise=0.0, capacity="percentile = 42",
                                load="concurrency = 4", extra=""), "bad.toml")
    cmd = [sys.executable, "-m", "msopt.cli", "optimize", "--plain", "--no-ray", "-o", str(tmp_path / "o")]
    out = subprocess.run([*cmd, "-c", str(bad)], capture_output=True, text=True, check=False)
    assert out.returncode == 2 and "[capacity] percentile" in out.stderr and not (tmp_path / "o").exists()
    good = write_toml(CFG.format(n=1, iters=1, top_k=1, ttft=0.5, noise=0.0, capacity="enabled = true",
                                 load="concurrency = 4", extra=""), "good.toml")
    out = subprocess.run([*cmd, "-c", str(good)], capture_output=True, text=True, check=False)
    assert out.returncode == 0, out.stderr
    assert "phase capacity" in out.stdout and "capacity #0 (eval 2): concurrency=" in out.stdout and "best goodput" in out.stdout
    assert math.isfinite(float(out.stdout.split("best goodput ")[1].split()[0]))


def test_display_keeps_capacity_rows_apart_and_summarises():
    import io

    from rich.console import Console

    from msopt.cli.progress import LiveTable, PlainLog, ProgressEvent

    out = io.StringIO()
    log = PlainLog(out)
    log.start(total=3, n_particles=1, dimensions=["tp"], run_dir="r")
    log.update(ProgressEvent("done", eval_id=1, phase="search", particle=0, iteration=0, fitness=2.0))
    log.update(ProgressEvent("done", eval_id=5, phase="capacity", particle=0, iteration=3, fitness=0.5,
                             text="request_rate=4"))
    assert "eval 5 capacity #0 probe3 done" in out.getvalue() and "request_rate=4" in out.getvalue()
    assert log._t.best.eval_id == 1  # a probe's fitness at another load is not the search's best
    assert set(log._t.rows) == {"p0", "cap #0"}
    log.close({"capacity": ["capacity #0 (eval 3): request_rate=4 goodput=1.0 tok/s"]})
    assert out.getvalue().rstrip().endswith("capacity #0 (eval 3): request_rate=4 goodput=1.0 tok/s")
    console = Console(file=io.StringIO(), force_terminal=True, width=120)
    table = LiveTable(console)
    table.close({"capacity": ["capacity #1 (eval 4): concurrency=0 goodput=0.0 tok/s"]})
    assert "capacity #1 (eval 4)" in console.file.getvalue()


@pytest.mark.parametrize("reuse", [True, False])
def test_simulated_probes_reuse_their_configurations_server(write_toml, reuse):
    """Issue 26: simulated runs journal starts (simulated start-up seconds) and reuses as real ones do."""
    from msopt.evaluate.simulated import simulated_start_s
    from msopt.run.records import ServerStarts

    extra = "" if reuse else "[cluster]\nreuse_servers = false\n"
    settings = settings_for(write_toml, n=2, iters=1, top_k=2, extra=extra)
    driver, out = run(settings)
    launched = [r for r in out.results if not r.reused and r.server]
    counts = ServerStarts.of(out.results)
    assert counts.started + counts.reused == len(launched)
    start_s = simulated_start_s(8.19, "bf16")  # the catalog's qwen3-8b
    assert all(r.server["start_s"] == (start_s if r.server["start"] == "started" else 0.0) for r in launched)
    if reuse:  # two workers, two configurations at most: one start each, every probe on a kept server
        assert counts.started == len({r.server["key"] for r in launched}) <= 2
        assert all(r.server["start"] == "reused" for r in launched if r.phase == "capacity")
        assert f"{counts.started} server start" in counts.text() and "on a kept server" in counts.text()
    else:
        assert counts.started == len(launched) and counts.reused == 0


@pytest.mark.parametrize("table, load, start", [("", "concurrency", 8.0),
                                                 ("request_rate = 4\n", "request_rate", 4.0),
                                                 ("concurrency = 16\n", "concurrency", 16.0)])
def test_builtin_reports_its_own_load(write_toml, table, load, start):
    """[builtin] holds its load in its own table (no [builtin.command]): the capacity stage starts there."""
    text = (f"benchmark = \"builtin\"\n[capacity]\nenabled = true\n[builtin]\n{table}"
            "[[vllm.target_field]]\nname = \"max_num_seqs\"\nconfig_position = \"--max-num-seqs\"\n"
            "min = 16\nmax = 64\ndtype = \"int\"\nvalue = 32\n")
    opts = capacity_options(load_settings(str(write_toml(text)), environ={}).config)
    assert (opts.load, opts.start_load) == (load, start)


def test_a_percentile_the_benchmark_does_not_report_names_the_file(write_toml):
    """[capacity] percentile = 99 with ais_bench (means only) is refused naming the file that set it (the message
    named no file before)."""
    from msopt.run.validate import load

    text = (Path(__file__).resolve().parents[2] / "configs" / "quickstart.toml").read_text()
    text = text.replace("simulate = true", "simulate = false").replace(
        'benchmark = "vllm_benchmark"', 'benchmark = "ais_bench"')
    path = write_toml(text + "\n[capacity]\nenabled = true\npercentile = 99\nstart_load = 4\n")
    with pytest.raises(ConfigError) as info:
        load(str(path), environ={})
    assert str(info.value).startswith(f"{path}: [capacity] percentile = 99 needs ttft_p99, tpot_p99, which ais_bench")
