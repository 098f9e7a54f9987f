"""The reference scheduler: msopt/sim/engine.py as of a31e6ad, per request and per step.

The state of every request lives in numpy arrays indexed by request, and every step touches
every running decode. msopt.sim.engine keeps the decodes relative to one shared counter instead
(O(1) a step); tests/sim/test_engine_equivalence.py checks that both give the same traces, bit
for bit. Keep this file as it is: it is the specification the fast scheduler is held to.
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
    client = _Client(arrival=arrival, concurrency=concurrency, api_overhead_s=api_overhead_s,
                     frontend_s=frontend_s, frontend_tok_s=frontend_tok_s, jitter=jitter, think=think)
    return ReplicaScheduler(knobs, cost, num_blocks, in_len, out_len, max_model_len, client,
                            time_scale=time_scale, prefilled=prefilled).run()


@dataclass(frozen=True)
class _Client:
    """How the benchmark client sends (see :func:`run_replica` for each argument)."""

    arrival: np.ndarray
    concurrency: int | None
    api_overhead_s: float
    frontend_s: float
    frontend_tok_s: float
    jitter: np.ndarray | None
    think: np.ndarray | None


class _Limits:
    """The scheduler's limits of one replica, read once from the knobs."""

    def __init__(self, knobs: EngineKnobs) -> None:
        self.bs = knobs.block_size
        self.mns = int(knobs.max_num_seqs)  # type: ignore[arg-type]  # set by personality.resolved()
        self.budget0 = int(knobs.max_num_batched_tokens)  # type: ignore[arg-type]  # set by personality.resolved()
        self.chunked, self.mixed = knobs.chunked_prefill, knobs.mixed_batch
        self.max_pf = knobs.max_prefill_seqs or self.mns
        # MindIE maxPreemptCount 0 reserves prompt + output at admission; so does SGLang for
        # fixed-length requests (ignore_eos: the whole remaining output is reserved, sglang 0.5.23
        # srt/managers/schedule_policy.py _get_running_request_total_token_offset / add_one_req)
        self.reserve_full = knobs.max_preempt_count == 0 or knobs.engine == "sglang"
        self.preempt_cap = knobs.max_preempt_count if knobs.max_preempt_count else None
        self.select = knobs.select_batch and not self.mixed
        self.select_steps = max(1, math.ceil(knobs.prefill_time_ms_per_req
                                             / max(knobs.decode_time_ms_per_req, 1e-9)))
        self.queue_delay = knobs.max_queue_delay_s if knobs.engine == "mindie" else 0.0
        # vLLM caps one request's prefill chunk at long_prefill_token_threshold when anyone else is
        # running or waiting (vllm 0.33.0 vllm/v1/core/sched/scheduler.py, schedule())
        self.long_cap = int(knobs.long_prefill_token_threshold or 0)
        # SGLang's PrefillAdder stops adding requests once the batch's prompt tokens reach
        # --max-prefill-tokens (less the decodes mixed in); with chunking on, the request that
        # crosses the bound is not cut for it (sglang 0.5.23 srt/managers/schedule_policy.py,
        # PrefillAdder.budget_state and _update_prefill_budget; default 16384 in
        # srt/arg_groups/fields/schedule.py)
        self.input_cap = int(knobs.max_prefill_tokens or 16384) if knobs.engine == "sglang" else 0


class _Step:
    """What one scheduler step carries: decodes, prefill chunks, and why admission stopped."""

    def __init__(self, running: list[int], prompt_left: np.ndarray, budget: int) -> None:
        run_arr = np.fromiter(running, np.int64, len(running))
        decoding = prompt_left[run_arr] == 0
        self.partial = run_arr[~decoding]
        self.dec = run_arr[decoding]
        self.pf: list[tuple[int, int, int]] = []  # (request, chunk tokens, tokens already in KV)
        self.budget = budget
        self.blocked = False  # admission stopped by the KV cache or max_num_seqs
        self.stalled = False  # some decodes wait a step (no block, or over the token budget)
        self.victims = 0  # requests preempted in this step


class ReplicaScheduler:
    """Continuous batching of one replica: the per-request state and one method per scheduler part.

    Build it with the replica's requests and call :meth:`run` once (see :func:`run_replica`).
    """

    def __init__(self, knobs: EngineKnobs, cost: StepCost, num_blocks: int, in_len: np.ndarray,
                 out_len: np.ndarray, max_model_len: int, client: _Client, *,
                 time_scale: float = 1.0, prefilled: bool = False) -> None:
        self.lim = lim = _Limits(knobs)
        self.cost = cost
        self.client = client
        self.time_scale = time_scale
        n = self.n = len(in_len)
        self.in_len = in_len = in_len.astype(np.int64)
        self.out_len = out_len = out_len.astype(np.int64)
        self.ctx = in_len.copy() if prefilled else np.zeros(n, np.int64)  # tokens whose K/V are in the cache
        self.prompt_left = np.zeros(n, np.int64) if prefilled else in_len.copy()  # tokens still to prefill
        self.out_left = out_len.copy()  # tokens still to sample
        self.blocks = np.zeros(n, np.int64)
        self.first = np.full(n, np.nan)
        self.finish = np.full(n, np.nan)
        self.send = np.full(n, np.nan)
        self.srv = np.full(n, np.inf)
        self.ok = np.ones(n, bool)
        rejected = in_len + out_len > max_model_len
        if not lim.chunked and not prefilled:
            rejected |= in_len > lim.budget0
        if lim.reserve_full:
            rejected |= -(-(in_len + out_len) // lim.bs) > num_blocks
        self.rejected = rejected
        self.conc = n if client.concurrency is None else int(client.concurrency)

        self.free = int(num_blocks)
        self.running: list[int] = []
        self.waiting: deque[int] = deque()
        self.sent = 0
        self.last_srv = -np.inf
        self.pending: list[tuple[float, int]] = []  # (server arrival, request): sent, not yet at the engine
        self.done = 0
        self.t = 0.0
        self.preemptions = 0
        self.steps = 0
        self.max_running = 0
        self.decode_streak = 0

    # -- the client ------------------------------------------------------------------------
    def release(self, now: float) -> None:
        """Send the next request (if any is left) at ``now`` or its arrival, whichever is later."""
        # the API server handles requests one at a time (parse, tokenize): a burst of sends
        # reaches the engine spread out, not all in the same step
        c, sent = self.client, self.sent
        if sent < self.n:
            s = max(float(c.arrival[sent]), now) + (float(c.think[sent]) if c.think is not None else 0.0)
            self.send[sent] = s
            fe = c.frontend_s + c.frontend_tok_s * float(self.in_len[sent])
            self.last_srv = max(s, self.last_srv) + fe if fe > 0 else s
            # network/client jitter after the API server: it does not hold up the requests behind
            self.srv[sent] = self.last_srv + c.api_overhead_s + (float(c.jitter[sent]) if c.jitter is not None else 0.0)
            heapq.heappush(self.pending, (float(self.srv[sent]), sent))
            self.sent = sent + 1

    def _arrive(self) -> None:
        """Requests that reached the engine by now: rejected ones finish failed, others wait."""
        pending = self.pending
        while pending and pending[0][0] <= self.t:
            i = heapq.heappop(pending)[1]
            if self.rejected[i]:
                self.ok[i] = False
                self.finish[i] = self.srv[i]
                self.done += 1
                self.release(float(self.srv[i]))
            else:
                self.waiting.append(i)

    def _idle(self) -> bool | None:
        """Before a step: True to look again (time moved on), False to stop, None to step."""
        pending, waiting = self.pending, self.waiting
        if not self.running and not waiting:
            if pending:
                self.t = max(self.t, pending[0][0])
                return True
            return False
        # MindIE waits up to maxQueueDelay to fill an idle prefill batch
        if self.lim.queue_delay > 0 and not self.running and len(waiting) < self.lim.max_pf and pending:
            oldest = float(self.srv[waiting[0]])
            nxt = pending[0][0]
            if nxt <= oldest + self.lim.queue_delay and nxt > self.t:
                self.t = nxt
                return True
        return None

    # -- admission ---------------------------------------------------------------------------
    def _chunk_cap(self, chunk: int) -> int:
        if self.lim.long_cap and len(self.running) + len(self.waiting) > 1:
            return min(chunk, self.lim.long_cap)
        return chunk

    def admit(self, partial: np.ndarray, pf: list[tuple[int, int, int]], budget: int) -> tuple[int, bool]:
        """Schedule running prefill chunks, then admit waiting requests; returns (budget, blocked).

        ``blocked``: admission stopped by the KV cache or max_num_seqs (stays so while decoding).
        """
        lim = self.lim
        input_left = lim.input_cap - (lim.budget0 - budget) if lim.input_cap else 0
        budget, input_left = self._continue_prefills(partial, pf, budget, input_left)
        return self._admit_waiting(pf, budget, input_left)

    def _continue_prefills(self, partial: np.ndarray, pf: list[tuple[int, int, int]], budget: int,
                           input_left: int) -> tuple[int, int]:
        """The next chunk of each running prompt, as the budget and free blocks allow."""
        bs = self.lim.bs
        for i in partial:
            if budget <= 0:
                break  # nothing is admitted either: that needs budget
            i = int(i)
            chunk = self._chunk_cap(int(min(self.prompt_left[i], budget)))
            have = int(self.blocks[i]) * bs - int(self.ctx[i])
            need = max(0, -(-(chunk - have) // bs))
            if need > self.free:
                chunk = have + self.free * bs
                need = self.free
            if chunk <= 0:
                continue
            self.blocks[i] += need
            self.free -= need
            pf.append((i, chunk, int(self.ctx[i])))
            budget -= chunk
            input_left -= chunk
        return budget, input_left

    def _admit_waiting(self, pf: list[tuple[int, int, int]], budget: int, input_left: int) -> tuple[int, bool]:
        """Admit waiting requests in order while budget, batch size and KV blocks allow."""
        lim, waiting = self.lim, self.waiting
        while waiting and budget > 0 and len(pf) < lim.max_pf:
            if lim.input_cap and input_left <= 0:
                return budget, False
            if len(self.running) >= lim.mns:
                return budget, True
            i = waiting[0]
            left = int(self.prompt_left[i])
            if not lim.chunked and left > budget:
                if pf:
                    return budget, False
                chunk = left  # a recomputed prompt may outgrow the budget; run it alone
            else:
                chunk = self._chunk_cap(min(left, budget))
            target = int(self.in_len[i] + self.out_len[i]) if lim.reserve_full else int(self.ctx[i]) + chunk
            need = -(-target // lim.bs) - int(self.blocks[i])
            if need > self.free:
                return budget, True
            waiting.popleft()
            self.running.append(i)
            self.blocks[i] += need
            self.free -= need
            pf.append((i, chunk, int(self.ctx[i])))
            budget -= chunk
            input_left -= chunk
        return budget, False

    def _prefill_first(self, st: _Step) -> None:
        """Without mixed batches: a step is prefill (admission) or decode, never both."""
        want_prefill = bool(self.waiting) or len(st.partial) > 0
        if (want_prefill and self.lim.select and len(st.dec) and self.decode_streak < self.lim.select_steps
                and not len(st.partial)):
            want_prefill = False
        if want_prefill:
            st.budget, st.blocked = self.admit(st.partial, st.pf, st.budget)
        if st.pf:
            st.dec = st.dec[:0]
            self.decode_streak = 0
        else:
            self.decode_streak += 1

    # -- decodes -----------------------------------------------------------------------------
    def _schedule_decodes(self, st: _Step) -> None:
        """Give each decode its next KV slot: preempt from the back, or let some wait a step."""
        dec, ctx, blocks, bs = st.dec, self.ctx, self.blocks, self.lim.bs
        need_mask = ctx[dec] + 1 > blocks[dec] * bs
        need = int(need_mask.sum())
        cap = self.lim.preempt_cap
        while need > self.free and (cap is None or st.victims < cap) and self.running:
            v = self.running.pop()
            st.victims += 1
            self.preemptions += 1
            self.free += int(blocks[v])
            blocks[v] = 0
            self.prompt_left[v] = self.in_len[v] + (self.out_len[v] - self.out_left[v])
            ctx[v] = 0
            self.waiting.appendleft(v)
            keep = dec != v
            dec = dec[keep]
            need_mask = need_mask[keep]
            need = int(need_mask.sum())
        if need > self.free:  # preemption cap reached: sequences without a block wait a step
            needy = np.flatnonzero(need_mask)
            drop = needy[self.free:]
            keepm = np.ones(len(dec), bool)
            keepm[drop] = False
            dec = dec[keepm]
            st.stalled = True
        if st.victims:
            st.blocked = True
            st.partial = st.partial[np.isin(st.partial, self.running)]
        if len(dec) > st.budget:
            dec = dec[:st.budget]
            st.stalled = True
        st.budget -= len(dec)
        st.dec = dec

    def _plan(self) -> _Step:
        """Schedule one step: decodes, prefill chunks and admissions, in the engine's order."""
        st = _Step(self.running, self.prompt_left, self.lim.budget0)
        if not self.lim.mixed:
            self._prefill_first(st)
        if len(st.dec):
            self._schedule_decodes(st)
        if self.lim.mixed and not st.victims:  # vLLM admits nothing in a step that preempted
            st.budget, adm_blocked = self.admit(st.partial, st.pf, st.budget)
            st.blocked = st.blocked or adm_blocked
        return st

    def _jump(self, st: _Step, a: float, b: float, s0: float) -> int:
        """How many identical decode-only steps to take at once (1: just this one)."""
        dec, n_dec, bs, blocks = st.dec, len(st.dec), self.lim.bs, self.blocks
        ctx_dec = self.ctx[dec]
        k = int(self.out_left[dec].min())
        if k > 1:
            # KV blocks for k more tokens each must be free
            extra = int(np.maximum(-(-(ctx_dec + k) // bs) - blocks[dec], 0).sum())
            if extra > self.free:
                lo, hi = 1, k
                while lo < hi:
                    mid = (lo + hi + 1) // 2
                    e = int(np.maximum(-(-(ctx_dec + mid) // bs) - blocks[dec], 0).sum())
                    if e <= self.free:
                        lo = mid
                    else:
                        hi = mid - 1
                k = lo
        if k > 1 and self.pending:
            s = np.arange(1, k + 1, dtype=np.float64)
            cum = (s * a + b * (s * s0 + n_dec * s * (s - 1) / 2)) * self.time_scale
            k = min(k, int(np.searchsorted(cum, self.pending[0][0] - self.t)) + 1)
        return k

    def _decode_only(self, st: _Step) -> tuple[float, int]:
        """Run ``k`` decode-only steps (jumped over in closed form); returns (time, k)."""
        dec, n_dec, bs, blocks = st.dec, len(st.dec), self.lim.bs, self.blocks
        a, b = self.cost.decode_coeffs(n_dec)
        ctx_dec = self.ctx[dec]
        s0 = float(ctx_dec.sum() + n_dec)
        k = 1
        steady = not self.waiting or st.blocked or len(self.running) >= self.lim.mns
        if not st.stalled and not st.victims and steady and not (self.lim.select and self.waiting):
            k = self._jump(st, a, b, s0)
        dt = (k * a + b * (k * s0 + n_dec * k * (k - 1) / 2)) * self.time_scale
        new_ctx = ctx_dec + k
        nb = -(-new_ctx // bs)
        grow = np.maximum(nb - blocks[dec], 0)
        self.free -= int(grow.sum())
        blocks[dec] = np.maximum(nb, blocks[dec])
        self.ctx[dec] = new_ctx
        self.out_left[dec] -= k
        return dt, k

    def _mixed_step(self, st: _Step) -> float:
        """Price and run one step of prefill chunks and (possibly) decodes; returns its time."""
        dec, n_dec, ctx, blocks = st.dec, len(st.dec), self.ctx, self.blocks
        n_tok = float(n_dec)
        pairs = float(ctx[dec].sum() + n_dec) if n_dec else 0.0
        kv_read = pairs
        n_logits = float(n_dec)
        for i, chunk, prior in st.pf:
            n_tok += chunk
            pairs += chunk * prior + chunk * (chunk + 1) / 2
            kv_read += prior + chunk
            if chunk == self.prompt_left[i]:
                n_logits += 1
        dt = self.cost.step(n_dec + len(st.pf), n_tok, n_logits, pairs, kv_read) * self.time_scale
        if n_dec:
            ctx[dec] += 1
            nb = -(-ctx[dec] // self.lim.bs)
            self.free -= int(np.maximum(nb - blocks[dec], 0).sum())
            blocks[dec] = np.maximum(nb, blocks[dec])
            self.out_left[dec] -= 1
        return dt

    # -- completion --------------------------------------------------------------------------
    def _complete(self, st: _Step) -> None:
        """Advance prefilled requests, then retire finished ones (each frees a client slot)."""
        t = self.t
        finished: list[int] = []
        for i, chunk, _ in st.pf:
            self.ctx[i] += chunk
            self.prompt_left[i] -= chunk
            if self.prompt_left[i] == 0:
                if math.isnan(self.first[i]):
                    self.first[i] = t
                self.out_left[i] -= 1
                if self.out_left[i] == 0:
                    finished.append(i)
        if len(st.dec):
            finished.extend(st.dec[self.out_left[st.dec] == 0].tolist())
        if finished:
            gone = set(finished)
            self.running = [i for i in self.running if i not in gone]
            for i in finished:
                self.finish[i] = t
                self.free += int(self.blocks[i])
                self.blocks[i] = 0
                self.done += 1
                self.release(t)

    def _stuck(self, st: _Step) -> bool:
        """Nothing can run this step: True to look again (an arrival or a preemption), else raise."""
        if st.victims:
            return True
        if self.pending and self.pending[0][0] > self.t:
            self.t = self.pending[0][0]
            return True
        raise SimulationError(
            f"simulated scheduler stalled at t={self.t:.3f}s with {len(self.running)} running and "
            f"{len(self.waiting)} waiting requests, {self.free} free KV blocks; please report this configuration"
        )

    def run(self) -> ReplicaTrace:
        """Serve every request; the per-request times and the step counts."""
        for _ in range(min(self.conc, self.n)):
            self.release(0.0)
        while self.done < self.n:
            self._arrive()
            idle = self._idle()
            if idle is False:
                break
            if idle:
                continue
            st = self._plan()
            if not len(st.dec) and not st.pf:
                # nothing can run (a bug or an impossible configuration): wait for an arrival or stop
                self._stuck(st)
                continue
            if len(st.dec) and not st.pf:
                dt, k = self._decode_only(st)
            else:
                dt, k = self._mixed_step(st), 1
            self.t += dt
            self.steps += k
            self.max_running = max(self.max_running, len(self.running))
            self._complete(st)
        return ReplicaTrace(send=self.send, first_token=self.first, finish=self.finish, ok=self.ok,
                            preemptions=self.preemptions, steps=self.steps, max_running=self.max_running)
