"""Continuous batching of one data-parallel replica, simulated step by step.

The state of every request lives in numpy arrays indexed by request; a step schedules the
running decodes (vectorised), running prefill chunks and admissions from the waiting queue, and
is priced by :class:`~msopt.sim.perf.StepCost`. Runs of identical decode-only steps (nothing
arrives, nothing finishes, no KV block shortage) are jumped over in closed form, since such a
step's time is affine in the total context length.
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from dataclasses import dataclass

import numpy as np

from msopt.errors import SimulationError
from msopt.sim.knobs import EngineKnobs
from msopt.sim.perf import StepCost


@dataclass
class ReplicaTrace:
    """Per-request times of one replica (seconds from the start of the benchmark)."""

    send: np.ndarray
    first_token: np.ndarray
    finish: np.ndarray
    ok: np.ndarray
    preemptions: int
    steps: int
    max_running: int


def run_replica(
    knobs: EngineKnobs,
    cost: StepCost,
    num_blocks: int,
    in_len: np.ndarray,
    out_len: np.ndarray,
    arrival: np.ndarray,
    concurrency: int | None,
    max_model_len: int,
    api_overhead_s: float = 0.0,
    time_scale: float = 1.0,
    frontend_s: float = 0.0,
    frontend_tok_s: float = 0.0,
    jitter: np.ndarray | None = None,
    think: np.ndarray | None = None,
    prefilled: bool = False,
) -> ReplicaTrace:
    """Simulate one replica serving the given requests (in send order).

    Args:
        knobs: resolved engine knobs (``max_num_seqs`` and ``max_num_batched_tokens`` set).
        cost: step pricing for this replica.
        num_blocks: KV-cache blocks of the replica.
        in_len, out_len: prompt and output tokens per request.
        arrival: earliest send time per request (zeros in a closed loop).
        concurrency: most requests in flight from the client (None: unlimited).
        max_model_len: longest prompt + output accepted; longer requests are rejected.
        api_overhead_s: client -> engine latency of a request (network, HTTP).
        frontend_s: API-server time per request (served one at a time).
        frontend_tok_s: API-server time per prompt token (tokenization).
        jitter: per-request random client/network delay added between send and the server.
        time_scale: multiplies every step time (per-run noise).
        prefilled: the prompts' KV arrives from a prefill instance (a decode instance of a
            disaggregated deployment): admission allocates the whole prompt's blocks and the
            admission step samples the first token here, with no prompt compute.
    """
    n = len(in_len)
    bs = knobs.block_size
    mns = int(knobs.max_num_seqs)  # type: ignore[arg-type]  # set by EngineKnobs.resolved()
    budget0 = int(knobs.max_num_batched_tokens)  # type: ignore[arg-type]  # set by EngineKnobs.resolved()
    chunked, mixed = knobs.chunked_prefill, knobs.mixed_batch
    max_pf = knobs.max_prefill_seqs or mns
    # MindIE maxPreemptCount 0 reserves prompt + output at admission; so does SGLang for
    # fixed-length requests (ignore_eos: the whole remaining output is reserved, sglang 0.5.23
    # srt/managers/schedule_policy.py _get_running_request_total_token_offset / add_one_req)
    reserve_full = knobs.max_preempt_count == 0 or knobs.engine == "sglang"
    preempt_cap = knobs.max_preempt_count if knobs.max_preempt_count else None
    select = knobs.select_batch and not mixed
    select_steps = max(1, math.ceil(knobs.prefill_time_ms_per_req / max(knobs.decode_time_ms_per_req, 1e-9)))
    queue_delay = knobs.max_queue_delay_s if knobs.engine == "mindie" else 0.0

    # vLLM caps one request's prefill chunk at long_prefill_token_threshold when anyone else is
    # running or waiting (vllm 0.33.0 vllm/v1/core/sched/scheduler.py, schedule())
    long_cap = int(knobs.long_prefill_token_threshold or 0)
    # SGLang's PrefillAdder stops adding requests once the batch's prompt tokens reach
    # --max-prefill-tokens (less the decodes mixed in); with chunking on, the request that
    # crosses the bound is not cut for it (sglang 0.5.23 srt/managers/schedule_policy.py,
    # PrefillAdder.budget_state and _update_prefill_budget; default 16384 in
    # srt/arg_groups/fields/schedule.py)
    input_cap = int(knobs.max_prefill_tokens or 16384) if knobs.engine == "sglang" else 0
    in_len = in_len.astype(np.int64)
    out_len = out_len.astype(np.int64)
    ctx = in_len.copy() if prefilled else np.zeros(n, np.int64)  # tokens whose K/V are in the cache
    prompt_left = np.zeros(n, np.int64) if prefilled else in_len.copy()  # tokens still to prefill
    out_left = out_len.copy()  # tokens still to sample
    blocks = np.zeros(n, np.int64)
    first = np.full(n, np.nan)
    finish = np.full(n, np.nan)
    send = np.full(n, np.nan)
    srv = np.full(n, np.inf)
    ok = np.ones(n, bool)
    rejected = in_len + out_len > max_model_len
    if not chunked and not prefilled:
        rejected |= in_len > budget0
    if reserve_full:
        rejected |= -(-(in_len + out_len) // bs) > num_blocks
    conc = n if concurrency is None else int(concurrency)

    free = int(num_blocks)
    running: list[int] = []
    waiting: deque[int] = deque()
    sent = 0
    last_srv = -np.inf
    pending: list[tuple[float, int]] = []  # (server arrival, request): sent, not yet at the engine
    done = 0
    t = 0.0
    preemptions = 0
    steps = 0
    max_running = 0
    decode_streak = 0

    def release(now: float) -> None:
        # the API server handles requests one at a time (parse, tokenize): a burst of sends
        # reaches the engine spread out, not all in the same step
        nonlocal sent, last_srv
        if sent < n:
            s = max(float(arrival[sent]), now) + (float(think[sent]) if think is not None else 0.0)
            send[sent] = s
            fe = frontend_s + frontend_tok_s * float(in_len[sent])
            last_srv = max(s, last_srv) + fe if fe > 0 else s
            # network/client jitter after the API server: it does not hold up the requests behind
            srv[sent] = last_srv + api_overhead_s + (float(jitter[sent]) if jitter is not None else 0.0)
            heapq.heappush(pending, (float(srv[sent]), sent))
            sent += 1

    for _ in range(min(conc, n)):
        release(0.0)

    def admit(partial: np.ndarray, pf: list[tuple[int, int, int]], budget: int) -> tuple[int, bool]:
        """Schedule running prefill chunks, then admit waiting requests; returns (budget, blocked).

        ``blocked``: admission stopped by the KV cache or max_num_seqs (stays so while decoding).
        """
        nonlocal free
        input_left = input_cap - (budget0 - budget) if input_cap else 0
        for i in partial:
            if budget <= 0:
                return budget, False
            i = int(i)
            chunk = int(min(prompt_left[i], budget))
            if long_cap and len(running) + len(waiting) > 1:
                chunk = min(chunk, long_cap)
            have = int(blocks[i]) * bs - int(ctx[i])
            need = max(0, -(-(chunk - have) // bs))
            if need > free:
                chunk = have + free * bs
                need = free
            if chunk <= 0:
                continue
            blocks[i] += need
            free -= need
            pf.append((i, chunk, int(ctx[i])))
            budget -= chunk
            input_left -= chunk
        while waiting and budget > 0 and len(pf) < max_pf:
            if input_cap and input_left <= 0:
                return budget, False
            if len(running) >= mns:
                return budget, True
            i = waiting[0]
            left = int(prompt_left[i])
            if not chunked and left > budget:
                if pf:
                    return budget, False
                chunk = left  # a recomputed prompt may outgrow the budget; run it alone
            else:
                chunk = min(left, budget)
                if long_cap and len(running) + len(waiting) > 1:
                    chunk = min(chunk, long_cap)
            target = int(in_len[i] + out_len[i]) if reserve_full else int(ctx[i]) + chunk
            need = -(-target // bs) - int(blocks[i])
            if need > free:
                return budget, True
            waiting.popleft()
            running.append(i)
            blocks[i] += need
            free -= need
            pf.append((i, chunk, int(ctx[i])))
            budget -= chunk
            input_left -= chunk
        return budget, False

    while done < n:
        while pending and pending[0][0] <= t:
            i = heapq.heappop(pending)[1]
            if rejected[i]:
                ok[i] = False
                finish[i] = srv[i]
                done += 1
                release(float(srv[i]))
            else:
                waiting.append(i)
        if not running and not waiting:
            if pending:
                t = max(t, pending[0][0])
                continue
            break
        # MindIE waits up to maxQueueDelay to fill an idle prefill batch
        if queue_delay > 0 and not running and len(waiting) < max_pf and pending:
            oldest = float(srv[waiting[0]])
            nxt = pending[0][0]
            if nxt <= oldest + queue_delay and nxt > t:
                t = nxt
                continue

        run_arr = np.fromiter(running, np.int64, len(running))
        decoding = prompt_left[run_arr] == 0
        partial = run_arr[~decoding]
        pf: list[tuple[int, int, int]] = []  # (request, chunk tokens, tokens already in KV)
        budget = budget0
        blocked = False

        dec = run_arr[decoding]
        stalled = False
        victims = 0
        if not mixed:
            want_prefill = bool(waiting) or len(partial) > 0
            if want_prefill and select and len(dec) and decode_streak < select_steps and not len(partial):
                want_prefill = False
            if want_prefill:
                budget, blocked = admit(partial, pf, budget)
            if pf:
                dec = dec[:0]
                decode_streak = 0
            else:
                decode_streak += 1
        if len(dec):
            need_mask = ctx[dec] + 1 > blocks[dec] * bs
            need = int(need_mask.sum())
            while need > free and (preempt_cap is None or victims < preempt_cap) and running:
                v = running.pop()
                victims += 1
                preemptions += 1
                free += int(blocks[v])
                blocks[v] = 0
                prompt_left[v] = in_len[v] + (out_len[v] - out_left[v])
                ctx[v] = 0
                waiting.appendleft(v)
                keep = dec != v
                dec = dec[keep]
                need_mask = need_mask[keep]
                need = int(need_mask.sum())
            if need > free:  # preemption cap reached: sequences without a block wait a step
                needy = np.flatnonzero(need_mask)
                drop = needy[free:]
                keepm = np.ones(len(dec), bool)
                keepm[drop] = False
                dec = dec[keepm]
                stalled = True
            if victims:
                blocked = True
                partial = partial[np.isin(partial, running)]
            if len(dec) > budget:
                dec = dec[:budget]
                stalled = True
            budget -= len(dec)
        if mixed and not victims:  # vLLM admits nothing in a step that preempted
            budget, adm_blocked = admit(partial, pf, budget)
            blocked = blocked or adm_blocked

        n_dec = len(dec)
        if not n_dec and not pf:
            # nothing can run (a bug or an impossible configuration): wait for an arrival or stop
            if victims:
                continue
            if pending and pending[0][0] > t:
                t = pending[0][0]
                continue
            raise SimulationError(
                f"simulated scheduler stalled at t={t:.3f}s with {len(running)} running and {len(waiting)} "
                f"waiting requests, {free} free KV blocks; please report this configuration"
            )
        k = 1
        if n_dec and not pf:
            a, b = cost.decode_coeffs(n_dec)
            ctx_dec = ctx[dec]
            s0 = float(ctx_dec.sum() + n_dec)
            steady = not waiting or blocked or len(running) >= mns
            if not stalled and not victims and steady and not (select and waiting):
                k = int(out_left[dec].min())
                if k > 1:
                    # KV blocks for k more tokens each must be free
                    extra = int(np.maximum(-(-(ctx_dec + k) // bs) - blocks[dec], 0).sum())
                    if extra > free:
                        lo, hi = 1, k
                        while lo < hi:
                            mid = (lo + hi + 1) // 2
                            e = int(np.maximum(-(-(ctx_dec + mid) // bs) - blocks[dec], 0).sum())
                            if e <= free:
                                lo = mid
                            else:
                                hi = mid - 1
                        k = lo
                if k > 1 and pending:
                    s = np.arange(1, k + 1, dtype=np.float64)
                    cum = (s * a + b * (s * s0 + n_dec * s * (s - 1) / 2)) * time_scale
                    k = min(k, int(np.searchsorted(cum, pending[0][0] - t)) + 1)
            dt = (k * a + b * (k * s0 + n_dec * k * (k - 1) / 2)) * time_scale
            new_ctx = ctx_dec + k
            nb = -(-new_ctx // bs)
            grow = np.maximum(nb - blocks[dec], 0)
            free -= int(grow.sum())
            blocks[dec] = np.maximum(nb, blocks[dec])
            ctx[dec] = new_ctx
            out_left[dec] -= k
        else:
            n_tok = float(n_dec)
            pairs = float(ctx[dec].sum() + n_dec) if n_dec else 0.0
            kv_read = pairs
            n_logits = float(n_dec)
            for i, chunk, prior in pf:
                n_tok += chunk
                pairs += chunk * prior + chunk * (chunk + 1) / 2
                kv_read += prior + chunk
                if chunk == prompt_left[i]:
                    n_logits += 1
            dt = cost.step(n_dec + len(pf), n_tok, n_logits, pairs, kv_read) * time_scale
            if n_dec:
                ctx[dec] += 1
                nb = -(-ctx[dec] // bs)
                free -= int(np.maximum(nb - blocks[dec], 0).sum())
                blocks[dec] = np.maximum(nb, blocks[dec])
                out_left[dec] -= 1
        t += dt
        steps += k
        max_running = max(max_running, len(running))
        finished: list[int] = []
        for i, chunk, _ in pf:
            ctx[i] += chunk
            prompt_left[i] -= chunk
            if prompt_left[i] == 0:
                if math.isnan(first[i]):
                    first[i] = t
                out_left[i] -= 1
                if out_left[i] == 0:
                    finished.append(i)
        if n_dec:
            finished.extend(dec[out_left[dec] == 0].tolist())
        if finished:
            gone = set(finished)
            running = [i for i in running if i not in gone]
            for i in finished:
                finish[i] = t
                free += int(blocks[i])
                blocks[i] = 0
                done += 1
                release(t)
    return ReplicaTrace(send=send, first_token=first, finish=finish, ok=ok,
                        preemptions=preemptions, steps=steps, max_running=max_running)
