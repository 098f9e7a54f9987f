"""The scheduler (msopt.sim.engine, decodes kept relative to one shared counter) gives the same
traces as the plain per-request loop it replaced (tests/sim/reference_engine.py), bit for bit,
on fuzzed replicas: every engine's scheduling rules, tight and ample KV caches (preemption,
decodes that wait for a block), closed and open loops, rejected requests and disaggregated
decode instances."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from msopt.errors import SimulationError
from msopt.sim import EngineKnobs, load_hardware, load_model
from msopt.sim import engine as fast
from msopt.sim.perf import StepCost
from tests.sim import reference_engine as ref

TRACE_ARRAYS = ("send", "first_token", "finish", "ok")


def random_case(seed: int, n_max: int = 40) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """The arguments of one ``run_replica`` call, drawn from ``seed``."""
    rng = np.random.default_rng(seed)
    engine = str(rng.choice(["vllm", "vllm", "sglang", "mindie"]))
    pick = rng.integers
    mixed = engine == "vllm" and bool(rng.random() < 0.8)
    preempt = [None, None, 0, 1, 1, 2][int(pick(6))]
    if engine == "mindie" and rng.random() < 0.5:
        preempt = 0  # MindIE's default: reserve prompt + output at admission
    knobs = EngineKnobs(
        engine=engine, tp=int(rng.choice([1, 2])), pp=int(rng.choice([1, 1, 2])),
        max_num_seqs=int(pick(1, 48)), max_num_batched_tokens=int(rng.choice([8, 16, 64, 128, 256, 2048])),
        max_prefill_seqs=int(pick(1, 8)) if rng.random() < 0.3 else None,
        chunked_prefill=bool(rng.random() < 0.7), mixed_batch=mixed,
        block_size=int(rng.choice([1, 4, 16, 16, 128])), select_batch=bool(rng.random() < 0.3),
        prefill_time_ms_per_req=float(rng.choice([50.0, 150.0])), decode_time_ms_per_req=50.0,
        max_queue_delay_s=float(rng.choice([0.0, 0.005, 0.05])), max_preempt_count=preempt,
        long_prefill_token_threshold=int(rng.choice([0, 0, 32])),
        max_prefill_tokens=int(rng.choice([64, 512])) if rng.random() < 0.5 else None,
    )
    hw = load_hardware(str(rng.choice(["h100-sxm", "atlas-800i-a2"])))
    cost = StepCost(hw, load_model("qwen3-8b"), knobs, "bf16", "bf16")
    n = int(pick(1, n_max))
    fixed = rng.random() < 0.3  # identical lengths: long runs of identical decode steps
    in_len = np.full(n, int(pick(1, 300))) if fixed else pick(1, 400, n)
    out_len = np.full(n, int(pick(1, 150))) if fixed else pick(1, 150, n)
    closed = rng.random() < 0.6
    arrival = np.zeros(n) if closed else np.cumsum(rng.exponential(float(rng.choice([0.002, 0.05])), n))
    concurrency = int(pick(1, 40)) if closed or rng.random() < 0.5 else None
    # from a few blocks (preemption, decodes that wait) to plenty
    need = int(((in_len + out_len) // knobs.block_size + 1).max())
    num_blocks = int(rng.choice([max(1, need // 2), need, need + int(pick(0, 50)), need * n]))
    max_model_len = int(rng.choice([4096, 4096, 400]))
    args = (knobs, cost, num_blocks, in_len, out_len, arrival, concurrency, max_model_len)
    kw: dict[str, Any] = {
        "api_overhead_s": float(rng.choice([0.0, 0.003])), "time_scale": float(rng.uniform(0.9, 1.1)),
        "frontend_s": float(rng.choice([0.0, 0.001])), "frontend_tok_s": float(rng.choice([0.0, 2e-6])),
        "jitter": rng.exponential(0.002, n) if rng.random() < 0.3 else None,
        "think": rng.exponential(0.01, n) if rng.random() < 0.3 else None,
        "prefilled": bool(rng.random() < 0.15),
    }
    return args, kw


def outcome(module: Any, args: tuple[Any, ...], kw: dict[str, Any]) -> Any:
    """A replica's trace, or the error it raised."""
    try:
        return module.run_replica(*args, **kw)
    except SimulationError as exc:
        return str(exc)


def assert_same(seed: int) -> None:
    args, kw = random_case(seed)
    want, got = outcome(ref, args, kw), outcome(fast, args, kw)
    if isinstance(want, str) or isinstance(got, str):
        assert got == want, f"seed {seed}"
        return
    for name in TRACE_ARRAYS:
        np.testing.assert_array_equal(getattr(got, name), getattr(want, name), err_msg=f"seed {seed}: {name}")
    assert (got.preemptions, got.steps, got.max_running) == (want.preemptions, want.steps, want.max_running), \
        f"seed {seed}"


@pytest.mark.parametrize("block", range(4))
def test_the_scheduler_equals_the_per_request_loop_on_fuzzed_replicas(block: int) -> None:
    for seed in range(block * 50, block * 50 + 50):
        assert_same(seed)


@pytest.mark.slow
def test_the_scheduler_equals_the_per_request_loop_on_many_fuzzed_replicas() -> None:
    for seed in range(1000, 4000):
        assert_same(seed)


class _Spy(ref.ReplicaScheduler):
    """The reference scheduler, noting whether decodes waited a step and whether steps were jumped."""

    stalled = jumped = False

    def _plan(self) -> Any:
        st = super()._plan()
        self.stalled = self.stalled or st.stalled
        return st

    def _decode_only(self, st: Any) -> tuple[float, int]:
        dt, k = super()._decode_only(st)
        self.jumped = self.jumped or k > 1
        return dt, k


def test_the_fuzz_reaches_preemption_waiting_decodes_rejections_and_jumps() -> None:
    """The fuzzed cases cover what the shared counter has to get right (else the test above says little)."""
    seen = {"preempted": 0, "stalled": 0, "rejected": 0, "jumped": 0, "raised": 0}
    for seed in range(200):
        (knobs, cost, blocks, in_len, out_len, arrival, conc, max_len), kw = random_case(seed)
        client = ref._Client(arrival=arrival, concurrency=conc, api_overhead_s=kw["api_overhead_s"],
                             frontend_s=kw["frontend_s"], frontend_tok_s=kw["frontend_tok_s"],
                             jitter=kw["jitter"], think=kw["think"])
        sched = _Spy(knobs, cost, blocks, in_len, out_len, max_len, client, time_scale=kw["time_scale"],
                     prefilled=kw["prefilled"])
        try:
            tr = sched.run()
        except SimulationError:
            seen["raised"] += 1
            continue
        seen["preempted"] += tr.preemptions > 0
        seen["stalled"] += sched.stalled
        seen["rejected"] += bool((~tr.ok).any())
        seen["jumped"] += sched.jumped
    assert min(seen["preempted"], seen["stalled"], seen["rejected"], seen["jumped"]) >= 5, seen
