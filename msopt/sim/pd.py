"""Prefill/decode disaggregation: a prefill pool, a decode pool and the KV transfer between them.

Each request is prefilled on one of ``P`` prefill instances (round robin, one token sampled), its
KV cache is sent to one of ``D`` decode instances, which admits it without prompt compute and
decodes the remaining tokens (speculatively where its launch drafts, :mod:`msopt.sim.speculative`); the
client's first token arrives from the decode instance (as
through SGLang's router or vLLM's proxy). The transfer of ``kv_bytes_per_token x prompt`` bytes
runs over the scale-out network, one link per device of the sending prefill instance.

A closed loop (``concurrency`` users) couples the two pools: a user sends its next request when
its last one finished. The pools are simulated one after the other, so the send times are found by
a fixed-point iteration (three rounds): send times -> prefill -> transfer -> decode -> finish times
-> the send times the finishes allow. An open loop (``request_rate``) needs no iteration.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from msopt.sim.catalog_types import Hardware, ModelSpec
from msopt.sim.engine import run_replica
from msopt.sim.knobs import EngineKnobs
from msopt.sim.memory import MemoryPlan
from msopt.sim.perf import StepCost, plan_memory
from msopt.sim.result import SimResult, failed, summarize
from msopt.sim.speculative import SpecStepCost, draft_log, draft_refusal, speculation_of
from msopt.sim.workload import Workload

#: Fixed-point rounds of a closed loop.
ROUNDS = 3


@dataclass(frozen=True)
class Pool:
    """One kind of instance of a disaggregated deployment."""

    role: str
    knobs: EngineKnobs
    count: int


def closed_loop_sends(finish: np.ndarray, arrival: np.ndarray, concurrency: int) -> np.ndarray:
    """Send times a closed loop of ``concurrency`` users allows, given the earlier finish times:
    request ``j >= C`` leaves when the ``(j - C + 1)``-th request finished."""
    send = arrival.copy()
    if concurrency >= len(send):
        return send
    order = np.sort(np.where(np.isfinite(finish), finish, np.nanmax(finish[np.isfinite(finish)], initial=0.0)))
    send[concurrency:] = np.maximum(send[concurrency:], order[: len(send) - concurrency])
    return send


def simulate_pd(
    prefill: Pool,
    decode: Pool,
    hw: Hardware,
    model: ModelSpec,
    wl: Workload,
    in_len: np.ndarray,
    out_len: np.ndarray,
    arrival: np.ndarray,
    *,
    weight_dtype: str,
    kv_dtype: str,
    scale: float,
    log: list[str],
    problem_of: object,
) -> SimResult:
    """Simulate both pools for one benchmark run (lengths and arrivals already drawn).

    ``problem_of(knobs) -> (error or None, MemoryPlan or None)`` is the simulator's start-up and
    memory check of one instance (the same a one-kind deployment gets).
    """
    n = len(in_len)
    plans: dict[str, MemoryPlan] = {}
    costs: dict[str, StepCost] = {}
    for pool in (prefill, decode):
        if pool.count < 1:
            problem = f"ValueError: {pool.role} instances must be >= 1, got {pool.count}"
            log.append(f"ERROR {problem}")
            return failed(problem, log, (), n)
        error, mem = problem_of(pool.knobs)  # type: ignore[operator]  # a callable, see the docstring
        if error:
            text = f"{pool.role} instance: {error}"
            log.append(f"ERROR {text}")
            return failed(text, log, (), n)
        draft = speculation_of(pool.knobs)
        error = draft_refusal(pool.knobs, draft, hw.memory_kind) if draft is not None else None
        if error:
            text = f"{pool.role} instance: {error}"
            log.append(f"ERROR {text}")
            return failed(text, log, (), n)
        plans[pool.role] = mem if mem is not None else plan_memory(hw, model, pool.knobs, weight_dtype, kv_dtype)
        costs[pool.role] = StepCost(hw, model, pool.knobs, weight_dtype, kv_dtype)
        log.append(f"INFO [msopt.sim] {pool.count} {pool.role} instance(s) of tp={pool.knobs.tp} x pp={pool.knobs.pp} "
                   f"x dp={pool.knobs.dp}: KV cache {plans[pool.role].kv_tokens:,} tokens per replica")
    # the decode instances decode speculatively (the prefill's one token needs no draft): a verify step
    # keeps `accept` tokens per sequence, the scheduler runs the steps, the client counts the tokens
    draft = speculation_of(decode.knobs)
    decode_out = out_len
    if draft is not None:
        costs["decode"] = SpecStepCost(costs["decode"], model, draft, hw.verify_kv_per_token)
        decode_out = np.array([draft.decode_steps(int(o)) for o in out_len], dtype=out_len.dtype)
        log.append(draft_log(draft) + " on the decode instances")
    p_devices = prefill.knobs.tp * prefill.knobs.pp
    link = hw.inter_node_gb_s * 1e9 * hw.comm_eff * p_devices
    transfer = in_len * model.kv_bytes_per_token(kv_dtype) / link + hw.allreduce_latency_us * 1e-6
    log.append(f"INFO [msopt.sim] KV transfer: {model.kv_bytes_per_token(kv_dtype) / 1024:.1f} KiB per prompt token "
               f"over {p_devices} x {hw.inter_node_gb_s:g} GB/s ({float(np.mean(transfer)) * 1e3:.2f} ms per request "
               "on average)")
    max_len = int(prefill.knobs.max_model_len or model.max_position)
    conc = wl.concurrency
    send = arrival.copy()
    first = np.full(n, np.nan)
    finish = np.full(n, np.nan)
    ok = np.ones(n, bool)
    replica = np.zeros(n, np.int64)
    preemptions = 0
    rounds = ROUNDS if conc is not None and conc < n else 1
    for round_ in range(rounds):
        if round_:  # the sends the last round's finishes allow; never after the last round, whose times they are
            send = closed_loop_sends(np.where(ok, finish, np.nan), arrival, int(conc))  # type: ignore[arg-type]
        p_done = np.full(n, np.nan)
        ok[:] = True
        preemptions = 0
        for pool, role in ((prefill, "prefill"), (decode, "decode")):
            replicas = pool.count * pool.knobs.dp
            for r in range(replicas):
                idx = np.arange(r, n, replicas)
                if not len(idx):
                    continue
                # a replica serves its requests in the order they reach it
                key = send[idx] if role == "prefill" else np.nan_to_num(p_done[idx], nan=np.inf) + transfer[idx]
                idx = idx[np.argsort(key, kind="stable")]
                if role == "prefill":
                    trace = run_replica(pool.knobs, costs[role], plans[role].num_blocks, in_len[idx],
                                        np.ones(len(idx), np.int64), send[idx], None, max_len,
                                        hw.api_overhead_ms * 1e-3, scale)
                    p_done[idx] = trace.finish
                else:
                    start = np.where(np.isfinite(p_done[idx]), p_done[idx] + transfer[idx], np.inf)
                    trace = run_replica(pool.knobs, costs[role], plans[role].num_blocks, in_len[idx], decode_out[idx],
                                        np.where(np.isfinite(start), start, 0.0), None, max_len, 0.0, scale,
                                        prefilled=True)
                    first[idx], finish[idx] = trace.first_token, trace.finish
                    replica[idx] = r
                ok[idx] &= trace.ok
                preemptions += trace.preemptions
    rejected = int((~ok).sum())
    if rejected:
        log.append(f"ERROR {rejected} requests rejected by the prefill or decode instances")
    return summarize(send, first, finish, ok, in_len, out_len, replica, preemptions=preemptions,
                     kv_cache_tokens=plans["decode"].kv_tokens, log_lines=log, ignored=())
