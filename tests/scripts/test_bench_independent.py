"""The search bench on the independent reality (NVIDIA AIConfigurator) and the hours-to-tuned
bench, each run small (two seeds, one problem) so that they keep working (issue 38).

They need aiconfigurator 0.12.0 and pyswarms (both in the ``test`` extra); without them they skip
saying why."""

from __future__ import annotations

import dataclasses
import importlib
import importlib.util
import math
import shlex
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from tests.e2e import readme

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def pkg():
    scripts = str(ROOT / "scripts" / "benchmarks")
    sys.path.insert(0, scripts)
    try:
        independent = importlib.import_module("bench_search.independent")
        why = independent.available()
        if why is not None:
            pytest.skip(why)
        if importlib.util.find_spec("pyswarms") is None:  # not imported here: it writes report.log into the cwd
            pytest.skip("pyswarms (the original tool's PSO in bench_hours) is not installed")
        yield SimpleNamespace(independent=independent, problems=importlib.import_module("bench_search.problems"),
                              cli=importlib.import_module("bench_search.cli"),
                              hours=importlib.import_module("bench_search.hours"),
                              hours_cli=importlib.import_module("bench_hours"))
    finally:
        sys.path.remove(scripts)


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    """One table cache for the module's runs: the problem's table is built once."""
    return tmp_path_factory.mktemp("bench_cache")


def _smallest(pkg) -> int:
    """The independent problem with the fewest configurations (the SGLang one: 600), not held out; one where
    the prior is wrong (it ranks tp 2 first, AIConfigurator tp 4: rank correlation 0.39 after the first
    generation, docs/benchmarks.md), so the small run goes through a search that must overrule its prior."""
    aic = [i for i, p in enumerate(pkg.problems.PROBLEMS) if p.reality == "aic" and not p.held_out]
    assert {pkg.problems.PROBLEMS[i].engine for i in aic} == {"vllm", "sglang"}
    return next(i for i in aic if pkg.problems.PROBLEMS[i].engine == "sglang")


@pytest.mark.slow
def test_the_mapping_onto_aiconfigurator_caps_the_batch_and_fails_out_of_memory(pkg):
    p = next(p for p in pkg.problems.PROBLEMS if p.reality == "aic" and p.model == "qwen3-32b")
    est = pkg.independent.Estimator(p)
    base = {"tp": 2, "pp": 1, "dp": 4, "max_num_seqs": 512, "max_num_batched_tokens": 8192,
            "gpu_memory_utilization": 0.9, "enable_chunked_prefill": True, "max_model_len": 4096}
    # 128 clients over 4 replicas: 32 each, whatever max_num_seqs allows
    assert est.worker(base)[3] == 32
    assert est.worker({**base, "max_num_seqs": 16})[3] == 16
    metrics, error = est.metrics({**base, "max_num_seqs": 16})
    assert error is None and metrics["generate_speed"] > 0 and metrics["time_to_first_token"] > 0
    # fewer slots than clients: the rest queue, so TTFT grows beyond the worker's own
    worker = est._memo[(2, 1, 1, 16, 8192, 0.9)][0]
    assert metrics["time_to_first_token"] > worker["ttft"] / 1e3
    # Qwen3-32B in bf16 does not fit one 80 GB H100
    metrics, error = est.metrics({**base, "tp": 1, "dp": 8})
    assert metrics is None and "out of memory" in error
    # vLLM's start-up rule without chunked prefill
    metrics, error = est.metrics({**base, "enable_chunked_prefill": False, "max_num_batched_tokens": 2048})
    assert metrics is None and "max_model_len" in error


@pytest.mark.slow
@pytest.mark.parametrize("pp", [1, 2, 4])
def test_the_mapping_credits_a_replica_with_the_closed_loops_users_at_every_pp(pkg, pp):
    """AIConfigurator's batch_size is one pipeline micro-batch: its own result credits the worker with
    ``concurrency = batch_size · pp`` (base_backend.py:1372-1374) and that many users' throughput. The bench
    passes n // pp, so AIConfigurator's concurrency is the requests the replica runs in the closed loop."""
    from aiconfigurator.cli.api import cli_estimate

    p = next(p for p in pkg.problems.PROBLEMS if p.reality == "aic" and p.model == "llama-3.1-8b")
    est = pkg.independent.Estimator(p)
    dp = p.world // pp
    values = {"tp": 1, "pp": pp, "dp": dp, "max_num_seqs": 512, "max_num_batched_tokens": 8192,
              "gpu_memory_utilization": 0.9, "enable_chunked_prefill": True, "max_model_len": 4096}
    n = math.ceil(p.concurrency / dp)  # 512 slots: the replica runs its whole share of the closed loop
    tp, pp_, dp_, batch, ctx, fraction, _ = est.worker(values)
    r = cli_estimate(p.aic_model, p.aic_system, mode="agg", backend_name=p.engine, backend_version=p.aic_version,
                     isl=p.input_len, osl=p.output_len, batch_size=batch, ctx_tokens=ctx, tp_size=tp, pp_size=pp_,
                     free_gpu_memory_fraction=fraction)
    assert r.concurrency == n  # AIConfigurator's concurrency = batch_size · pp_size (attention dp 1)
    metrics, error = est.metrics(values)
    assert error is None
    # all of the closed loop is in flight: no wait beyond the worker's own TTFT, the throughput of dp workers
    assert metrics["generate_speed"] == pytest.approx(dp * float(r.raw["tokens/s"]))
    assert metrics["time_to_first_token"] == pytest.approx(float(r.ttft) / 1e3)
    assert est.in_flight(values) == n


@pytest.mark.slow
def test_the_mapping_keeps_a_pipeline_to_the_requests_it_has(pkg):
    """Fewer requests than stages: AIConfigurator's smallest worker runs one per micro-batch (pp in all), so the
    bench scales its throughput by n / pp; a remainder of fewer than pp requests waits for a slot."""
    base = next(p for p in pkg.problems.PROBLEMS if p.reality == "aic" and p.model == "llama-3.1-8b")
    values = {"tp": 1, "pp": 4, "dp": 2, "max_num_seqs": 512, "max_num_batched_tokens": 8192,
              "gpu_memory_utilization": 0.9, "enable_chunked_prefill": True, "max_model_len": 4096}
    few = pkg.independent.Estimator(dataclasses.replace(base, concurrency=4))  # 2 requests per replica
    assert few.in_flight(values) == 2 and few.worker(values)[3] == 1
    metrics, error = few.metrics(values)
    worker = few._memo[(1, 4, 1, 1, few.worker(values)[4], 0.9)][0]
    assert error is None
    assert metrics["generate_speed"] == pytest.approx(2 * worker["tokens/s"] * 2 / 4)
    assert metrics["time_to_first_token"] == pytest.approx(worker["ttft"] / 1e3)
    odd = pkg.independent.Estimator(dataclasses.replace(base, concurrency=12))  # 6 per replica: 4 run, 2 wait
    assert odd.in_flight(values) == 6 and odd.worker(values)[3] == 1
    metrics, error = odd.metrics(values)
    worker = odd._memo[(1, 4, 1, 1, odd.worker(values)[4], 0.9)][0]
    assert error is None and metrics["generate_speed"] == pytest.approx(2 * worker["tokens/s"])
    assert metrics["time_to_first_token"] == pytest.approx(worker["ttft"] / 1e3 + 2 / worker["seq/s"])


@pytest.mark.slow
def test_vllm_runs_the_dp_ranks_of_an_moe_model_as_one_worker(pkg):
    """An MoE model on vLLM: the dp ranks share the expert layers (attention dp in AIConfigurator, the experts
    sliced over tp x dp), so AIConfigurator's one worker is the whole world and credits it with the whole closed
    loop (concurrency = batch_size x pp x attention_dp)."""
    from aiconfigurator.cli.api import cli_estimate

    p = next(p for p in pkg.problems.PROBLEMS if p.reality == "aic" and p.engine == "vllm" and "-a3b" in p.model
             and not p.held_out)
    est = pkg.independent.Estimator(p)
    assert est.moe and est.lockstep
    values = {"tp": 1, "pp": 2, "dp": 4, "max_num_seqs": 512, "max_num_batched_tokens": 8192,
              "gpu_memory_utilization": 0.9, "enable_chunked_prefill": True, "max_model_len": p.max_model_len}
    metrics, error = est.metrics(values)
    assert error is None
    tp, pp, dp, batch, ctx, fraction, _ = est.worker(values)
    assert batch * pp * dp == p.concurrency  # 64 requests a rank, two micro-batches of 32
    r = cli_estimate(p.aic_model, p.aic_system, mode="agg", backend_name=p.engine, backend_version=p.aic_version,
                     isl=p.input_len, osl=p.output_len, batch_size=batch, ctx_tokens=ctx, tp_size=tp, pp_size=pp,
                     attention_dp_size=dp, moe_tp_size=tp * dp, moe_ep_size=1, free_gpu_memory_fraction=fraction)
    assert r.concurrency == p.concurrency
    assert metrics["generate_speed"] == pytest.approx(float(r.raw["tokens/s"]))  # one worker, not dp of them
    assert metrics["time_to_first_token"] == pytest.approx(float(r.ttft) / 1e3)


@pytest.mark.slow
def test_the_held_out_problems_reach_aiconfigurator(pkg):
    """Each held-out problem's default configuration gets an estimate or a launch failure, never an error, so
    they can be run at the end (only that is asserted: nothing of their results is looked at)."""
    for p in (p for p in pkg.problems.PROBLEMS if p.held_out):
        est = pkg.independent.Estimator(p)
        dp = p.world // p.tp_default
        if p.engine == "sglang":
            values = {"tp": p.tp_default, "dp": dp, "max_running_requests": 256, "chunked_prefill_size": 8192,
                      "mem_fraction_static": 0.85}
        else:
            values = {"tp": p.tp_default, "pp": 1, "dp": dp, "max_num_seqs": 256, "max_num_batched_tokens": 8192,
                      "gpu_memory_utilization": 0.9, "enable_chunked_prefill": True, "max_model_len": p.max_model_len}
        metrics, error = est.metrics(values)
        assert (metrics is None) != (error is None), p.name


@pytest.mark.slow
def test_bench_search_runs_on_the_independent_reality(pkg, cache, tmp_path):
    index = _smallest(pkg)
    out = tmp_path / "benchmarks.md"
    out.write_text("# kept\n\n<!-- independent: begin -->\nold\n<!-- independent: end -->\n\n## also kept\n")
    rc = pkg.cli.main(["--problems", str(index), "--seeds", "2", "--budgets", "6,10",
                       "--methods", "msopt,msopt (fixed prior),msopt (no prior),Optuna TPE", "--ablation-seeds", "none",
                       "--cache", str(cache), "--out", str(out), "--section", "independent"])
    assert rc == 0
    text = out.read_text()
    assert text.startswith("# kept\n") and text.rstrip().endswith("## also kept") and "\nold\n" not in text
    assert "\n### Reality: NVIDIA AIConfigurator 0.12.0 (independent)\n" in text  # headings one level down
    assert "Issue 38's goals" in text and "- msopt (fixed prior) @10:" in text
    assert "| msopt (no prior) |" in text  # issue 38 item 2: TPE without a prior, through msopt's driver
    assert "| msopt |" in text and "- msopt @10:" in text  # issue 49: msopt as shipped, where its prior is wrong
    assert pkg.problems.PROBLEMS[index].name in text and "$" not in text


@pytest.mark.slow
def test_bench_hours_lays_every_method_out_on_the_cluster(pkg, cache, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # pyswarms' Reporter writes report.log into the working directory
    index = _smallest(pkg)
    out = tmp_path / "benchmarks.md"
    line = readme.command("python scripts/benchmarks/bench_hours.py",
                          append=["--problems", str(index), "--seeds", "2", "--cache", str(cache), "--out", str(out)])
    argv = shlex.split(line)
    assert argv[:2] == ["python", "scripts/benchmarks/bench_hours.py"]
    rc = pkg.hours_cli.main(argv[2:])  # the README's line, in this process (its cache is the module's)
    assert rc == 0
    text = out.read_text()
    for name in pkg.hours_cli.ORDER:
        assert f"| {name} |" in text
    assert "<!-- bench_hours: begin -->" in text and "<!-- bench_hours: end -->" in text


def test_wall_clock_keeps_servers_and_honours_barriers(pkg):
    import numpy as np

    costs = pkg.hours.Costs(start=np.array([100.0, 100.0]), bench=np.array([10.0, 10.0]), slots=2)
    # one slot, the same configuration twice: one start when the server is kept, two when not
    assert pkg.hours.wall_clock(costs, [0, 0], 1, keep=True) == (120.0, 1)
    assert pkg.hours.wall_clock(costs, [0, 0], 1, keep=False) == (220.0, 2)
    # two slots: two launches at once; a barrier between them puts the second after the first
    assert pkg.hours.wall_clock(costs, [0, 1], 2) == (110.0, 2)
    assert pkg.hours.wall_clock(costs, [0, 1], 2, groups=["a", "b"]) == (220.0, 2)
    # a start: each rank's share of the bf16 weights, then compile and capture
    one = pkg.hours.start_seconds(8.0, 1, 1)
    assert math.isclose(pkg.hours.start_seconds(8.0, 2, 1) - pkg.hours.COMPILE_S - pkg.hours.CAPTURE_S,
                        (one - pkg.hours.COMPILE_S - pkg.hours.CAPTURE_S) / 2)


def test_the_hours_bench_lays_msopt_out_by_what_its_driver_dispatched_together(pkg, cache):
    """msopt's launches are laid out by dispatch batch (the requests submitted between two waits): each
    search iteration is one batch, and a round of re-measurements is one batch, not one per launch."""
    methods = importlib.import_module("bench_search.methods")
    oracle_mod = importlib.import_module("bench_search.oracle")
    runs = importlib.import_module("bench_search.runs")

    class _Pool:
        size = 1

        def __init__(self):
            self.sent = []

        def submit(self, req):
            self.sent.append(req)

        def wait(self, timeout=None):
            return []

    table = runs.table(_smallest(pkg), str(cache))
    oracle = oracle_mod.Oracle(table, 0, 0.03)
    pool = methods._Batches(_Pool(), oracle)
    for eval_id in (0, 1, 2):
        if eval_id == 1:
            pool.wait()
        pool.submit(SimpleNamespace(eval_id=eval_id))
    pool.wait()
    pool.wait()
    pool.submit(SimpleNamespace(eval_id=3))
    assert oracle.batch_of == {0: 0, 1: 1, 2: 1, 3: 2} and pool.size == 1 and len(pool.sent) == 4

    oracle = oracle_mod.Oracle(table, 0, 0.03)
    launches, _ = methods.run_msopt(table, oracle, 20, 0, variant=methods.FIXED_PRIOR)
    batches = oracle_mod.batches(oracle)
    assert len(batches) == len(launches) and batches == sorted(batches) and batches[:2] == [0, 1]
    by_stage: dict = {}
    for stage, batch in zip(oracle.stages, batches):
        by_stage.setdefault(stage, set()).add(batch)
    assert all(len(b) == 1 for stage, b in by_stage.items() if stage[0] == "search")
    iterations = {stage for stage in by_stage if stage[0] == "search"}
    assert len(set(batches)) < len(batches) and len(iterations) >= 2
