"""Continuous batching of one data-parallel replica, simulated step by step.

A step schedules the running decodes, running prefill chunks and admissions from the waiting
queue, and is priced by :class:`~msopt.sim.perf.StepCost`. Runs of identical decode-only steps
(nothing arrives, nothing finishes, no KV block shortage) are jumped over in closed form, since
such a step's time is affine in the total context length.

A step costs O(1) in the number of running decodes, not O(n): every decode advances by one token
together, so a decode's context and tokens left are kept relative to one shared counter
(:class:`~msopt.sim.decodes.Decodes`), with the sum of their contexts, a heap of when each finishes and the decodes
grouped by the counter value at which each next fills its last KV block. Only events (a prompt
done, a finish, a preemption, a decode that has to wait a step) touch single requests. The
traces equal those of the plain per-request loop (tests/sim/reference_engine.py) bit for bit.
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from msopt.errors import SimulationError
from msopt.sim.decodes import Decodes
from msopt.sim.knobs import EngineKnobs
from msopt.sim.perf import StepCost
from msopt.sim.personality import get_personality
from msopt.sim.prefix_cache import PrefixCache


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
    prefix_hit_tokens: int = 0
    prefix_query_tokens: int = 0


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
    stream_tok_s: float = 0.0,
    prefixes: Sequence[tuple[int, ...]] | None = None,
    prefix_block: int = 0,
    prefix_partial: bool = False,
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
        stream_tok_s: API-server time per streamed output token, on one serial resource that
            every stream shares: the client sees a token when the frontend has sent it.
        prefixes: with prefix caching on, each request's prompt block ids (equal ids: equal
            tokens), ``prefix_block`` tokens each (:class:`~msopt.sim.prefix_cache.PrefixCache`); None: no cache.
        prefix_partial: the cache keeps prompts to the token, not to the trace block (SGLang's radix tree).
    """
    client = _Client(arrival=arrival, concurrency=concurrency, api_overhead_s=api_overhead_s,
                     frontend_s=frontend_s, frontend_tok_s=frontend_tok_s, jitter=jitter, think=think,
                     stream_tok_s=stream_tok_s)
    return ReplicaScheduler(knobs, cost, num_blocks, in_len, out_len, max_model_len, client,
                            time_scale=time_scale, prefilled=prefilled, prefixes=prefixes,
                            prefix_block=prefix_block, prefix_partial=prefix_partial).run()


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
    stream_tok_s: float = 0.0


class _Limits:
    """The scheduler's limits of one replica, read once from the knobs."""

    def __init__(self, knobs: EngineKnobs) -> None:
        self.bs = int(knobs.block_size)  # type: ignore[arg-type]  # set by personality.resolved()
        self.mns = int(knobs.max_num_seqs)  # type: ignore[arg-type]  # set by personality.resolved()
        self.budget0 = int(knobs.max_num_batched_tokens)  # type: ignore[arg-type]  # set by personality.resolved()
        self.chunked, self.mixed = knobs.chunked_prefill, knobs.mixed_batch
        self.max_pf = knobs.max_prefill_seqs or self.mns
        personality = get_personality(knobs.engine)
        # maxPreemptCount 0 reserves prompt + output at admission (MindIE); some engines always do
        self.reserve_full = knobs.max_preempt_count == 0 or personality.reserves_whole_output
        self.preempt_cap = knobs.max_preempt_count if knobs.max_preempt_count else None
        self.select = knobs.select_batch and not self.mixed
        self.select_steps = max(1, math.ceil(knobs.prefill_time_ms_per_req
                                             / max(knobs.decode_time_ms_per_req, 1e-9)))
        self.queue_delay = knobs.max_queue_delay_s if personality.holds_queue_delay else 0.0
        # vLLM caps one request's prefill chunk at long_prefill_token_threshold when anyone else is
        # running or waiting (vllm 0.33.0 vllm/v1/core/sched/scheduler.py, schedule())
        self.long_cap = int(knobs.long_prefill_token_threshold or 0)
        # a prefill batch stops adding requests once its prompt tokens reach the cap (less the decodes
        # mixed in); with chunking on, the request that crosses the bound is not cut for it (SGLang's
        # PrefillAdder: sglang 0.5.23 srt/managers/schedule_policy.py, budget_state and _update_prefill_budget)
        cap = personality.prefill_token_cap
        self.input_cap = int(knobs.max_prefill_tokens or cap) if cap else 0


class _Step:
    """What one scheduler step carries: decodes, prefill chunks, and why admission stopped."""

    __slots__ = ("n_dec", "held", "pf", "budget", "blocked", "stalled", "victims")

    def __init__(self, n_dec: int, budget: int) -> None:
        self.n_dec = n_dec  # decodes that sample a token in this step
        self.held: list[int] = []  # decodes that wait this step (no block, or over the token budget)
        self.pf: list[tuple[int, int, int]] = []  # (request, chunk tokens, tokens already in KV)
        self.budget = budget
        self.blocked = False  # admission stopped by the KV cache or max_num_seqs
        self.stalled = False  # some decodes wait a step (no block, or over the token budget)
        self.victims = 0  # requests preempted in this step


class ReplicaScheduler:
    """Continuous batching of one replica: the per-request state and one method per scheduler part.

    Build it with the replica's requests and call :meth:`run` once (see :func:`run_replica`).
    Requests waiting or prefilling keep their state in plain lists; decoding ones in
    :class:`Decodes`.
    """

    def __init__(self, knobs: EngineKnobs, cost: StepCost, num_blocks: int, in_len: np.ndarray,
                 out_len: np.ndarray, max_model_len: int, client: _Client, *,
                 time_scale: float = 1.0, prefilled: bool = False,
                 prefixes: Sequence[tuple[int, ...]] | None = None, prefix_block: int = 0,
                 prefix_partial: bool = False) -> None:
        self.lim = lim = _Limits(knobs)
        self.cache = (PrefixCache(prefixes, prefix_block, lim.bs, prefix_partial)
                      if prefixes is not None and prefix_block > 0 and not prefilled else None)
        self.cost = cost
        self.coeffs: dict[int, tuple[float, float]] = {}  # cost.decode_coeffs by batch size
        self.client = client
        self.arrival = np.asarray(client.arrival, np.float64).tolist()
        self.think = None if client.think is None else np.asarray(client.think, np.float64).tolist()
        self.jitter = None if client.jitter is None else np.asarray(client.jitter, np.float64).tolist()
        self.time_scale = time_scale
        n = self.n = len(in_len)
        in_arr, out_arr = in_len.astype(np.int64), out_len.astype(np.int64)
        rejected = in_arr + out_arr > max_model_len
        if not lim.chunked and not prefilled:
            rejected |= in_arr > lim.budget0
        if lim.reserve_full:
            rejected |= -(-(in_arr + out_arr) // lim.bs) > num_blocks
        self.rejected: list[bool] = rejected.tolist()
        self.in_len: list[int] = in_arr.tolist()
        self.out_len: list[int] = out_arr.tolist()
        # waiting and prefilling requests (a decoding one's live values are in self.dec)
        self.ctx = list(self.in_len) if prefilled else [0] * n  # tokens whose K/V are in the cache
        self.prompt_left = [0] * n if prefilled else list(self.in_len)  # tokens still to prefill
        self.out_left = list(self.out_len)  # tokens still to sample
        self.blocks = [0] * n
        self.first = [math.nan] * n
        self.finish = [math.nan] * n
        self.send = [math.nan] * n
        self.srv = [math.inf] * n
        self.ok = [True] * n
        self.conc = n if client.concurrency is None else int(client.concurrency)

        self.free = int(num_blocks)
        self.running: list[int] = []
        self.partial: list[int] = []  # the running requests still prefilling, in running order
        self.dec = Decodes(n, lim.bs)  # the running requests past their prompt
        self.waiting: deque[int] = deque()
        self.sent = 0
        self.last_srv = -math.inf
        self.stream_free = 0.0  # when the frontend has sent every token streamed so far
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
            s = max(self.arrival[sent], now) + (self.think[sent] if self.think is not None else 0.0)
            self.send[sent] = s
            fe = c.frontend_s + c.frontend_tok_s * float(self.in_len[sent])
            self.last_srv = max(s, self.last_srv) + fe if fe > 0 else s
            # network/client jitter after the API server: it does not hold up the requests behind
            self.srv[sent] = srv = self.last_srv + c.api_overhead_s + (
                self.jitter[sent] if self.jitter is not None else 0.0)
            heapq.heappush(self.pending, (srv, sent))
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
                self.release(self.srv[i])
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
            oldest = self.srv[waiting[0]]
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

    def admit(self, pf: list[tuple[int, int, int]], budget: int) -> tuple[int, bool]:
        """Schedule running prefill chunks, then admit waiting requests; returns (budget, blocked).

        ``blocked``: admission stopped by the KV cache or max_num_seqs (stays so while decoding).
        """
        if not self.partial and not self.waiting:
            return budget, False
        lim = self.lim
        input_left = lim.input_cap - (lim.budget0 - budget) if lim.input_cap else 0
        budget, input_left = self._continue_prefills(pf, budget, input_left)
        return self._admit_waiting(pf, budget, input_left)

    def _continue_prefills(self, pf: list[tuple[int, int, int]], budget: int,
                           input_left: int) -> tuple[int, int]:
        """The next chunk of each running prompt, as the budget and free blocks allow."""
        bs, blocks, ctx = self.lim.bs, self.blocks, self.ctx
        for i in self.partial:
            if budget <= 0:
                break  # nothing is admitted either: that needs budget
            chunk = self._chunk_cap(min(self.prompt_left[i], budget))
            have = blocks[i] * bs - ctx[i]
            need = max(0, -(-(chunk - have) // bs))
            if need > self.free:
                chunk = have + self.free * bs
                need = self.free
            if chunk <= 0:
                continue
            blocks[i] += need
            self.free -= need
            pf.append((i, chunk, ctx[i]))
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
            left = self.prompt_left[i]
            ctx0 = self.ctx[i]
            cache = self.cache
            if cache is not None:
                cached, matched = cache.hit(i, self.in_len[i], self.free)
                ctx0 += cached
                left -= cached
            if not lim.chunked and left > budget:
                if pf:
                    return budget, False
                chunk = left  # a recomputed prompt may outgrow the budget; run it alone
            else:
                chunk = self._chunk_cap(min(left, budget))
            target = self.in_len[i] + self.out_len[i] if lim.reserve_full else ctx0 + chunk
            need = -(-target // lim.bs) - self.blocks[i]
            if need > self.free:
                return budget, True
            if cache is not None:
                cache.admit(i, self.in_len[i], ctx0 - self.ctx[i], matched)
                self.ctx[i], self.prompt_left[i] = ctx0, left
            waiting.popleft()
            self.running.append(i)
            self.partial.append(i)
            self.blocks[i] += need
            self.free -= need
            pf.append((i, chunk, self.ctx[i]))
            budget -= chunk
            input_left -= chunk
        return budget, False

    def _prefill_first(self, st: _Step) -> None:
        """Without mixed batches: a step is prefill (admission) or decode, never both."""
        want_prefill = bool(self.waiting) or bool(self.partial)
        if (want_prefill and self.lim.select and st.n_dec and self.decode_streak < self.lim.select_steps
                and not self.partial):
            want_prefill = False
        if want_prefill:
            st.budget, st.blocked = self.admit(st.pf, st.budget)
        if st.pf:
            st.n_dec = 0
            self.decode_streak = 0
        else:
            self.decode_streak += 1

    # -- decodes -----------------------------------------------------------------------------
    def _preempt(self, st: _Step) -> None:
        """Preempt the last running request (recompute): its blocks are freed, it waits first."""
        v = self.running.pop()
        st.victims += 1
        self.preemptions += 1
        if v in self.dec:
            _, self.out_left[v], self.blocks[v] = self.dec.remove(v)
        else:
            self.partial.remove(v)
        self.free += self.blocks[v]
        self.blocks[v] = 0
        if self.cache is not None:
            self.cache.release(v)
        self.prompt_left[v] = self.in_len[v] + (self.out_len[v] - self.out_left[v])
        self.ctx[v] = 0
        self.waiting.appendleft(v)

    def _schedule_decodes(self, st: _Step) -> None:
        """Give each decode its next KV slot: preempt from the back, or let some wait a step."""
        dec, cap = self.dec, self.lim.preempt_cap
        needy = dec.needy()
        while len(needy) > self.free and (cap is None or st.victims < cap) and self.running:
            self._preempt(st)
            needy = dec.needy()
        if len(needy) > self.free:  # preemption cap reached: sequences without a block wait a step
            st.held = [i for i in self.running if i in needy][self.free:]
            st.stalled = True
        if st.victims:
            st.blocked = True
        n_dec = len(dec.members) - len(st.held)
        if n_dec > st.budget:
            held = set(st.held)
            st.held += [i for i in self.running if i in dec and i not in held][st.budget:]
            n_dec = st.budget
            st.stalled = True
        st.budget -= n_dec
        st.n_dec = n_dec

    def _plan(self) -> _Step:
        """Schedule one step: decodes, prefill chunks and admissions, in the engine's order."""
        st = _Step(len(self.dec.members), self.lim.budget0)
        if not self.lim.mixed:
            self._prefill_first(st)
        if st.n_dec:
            self._schedule_decodes(st)
        if self.lim.mixed and not st.victims:  # vLLM admits nothing in a step that preempted
            st.budget, adm_blocked = self.admit(st.pf, st.budget)
            st.blocked = st.blocked or adm_blocked
        return st

    def _dec_ctx(self, st: _Step) -> int:
        """Tokens in the KV cache of the decodes of this step."""
        dec = self.dec
        if not st.held:
            return dec.ctx_sum()
        return dec.ctx_sum() - sum(dec.ctx(i) for i in st.held)

    def _jump(self, a: float, b: float, s0: float, n_dec: int) -> int:
        """How many identical decode-only steps to take at once (1: just this one)."""
        dec = self.dec
        k = dec.min_left()
        if k > 1 and dec.extra(k) > self.free:  # KV blocks for k more tokens each must be free
            lo, hi = 1, k
            while lo < hi:
                mid = (lo + hi + 1) // 2
                if dec.extra(mid) <= self.free:
                    lo = mid
                else:
                    hi = mid - 1
            k = lo
        if k > 1 and self.pending:
            # stop at the first step that ends at or after the next arrival: the smallest s with
            # cum(s) >= gap (cum rises with s; the same float operations as a numpy cumulation)
            gap, ts = self.pending[0][0] - self.t, self.time_scale

            def cum(s: float) -> float:
                return (s * a + b * (s * s0 + n_dec * s * (s - 1) / 2)) * ts

            if cum(float(k)) >= gap:
                lo, hi = 1, k
                while lo < hi:
                    mid = (lo + hi) // 2
                    if cum(float(mid)) >= gap:
                        hi = mid
                    else:
                        lo = mid + 1
                k = lo
        return k

    def _decode_only(self, st: _Step) -> tuple[float, int]:
        """Run ``k`` decode-only steps (jumped over in closed form); returns (time, k)."""
        n_dec = st.n_dec
        ab = self.coeffs.get(n_dec)
        if ab is None:
            ab = self.coeffs[n_dec] = self.cost.decode_coeffs(n_dec)
        a, b = ab
        s0 = float(self._dec_ctx(st) + n_dec)
        k = 1
        steady = not self.waiting or st.blocked or len(self.running) >= self.lim.mns
        if not st.stalled and not st.victims and steady and not (self.lim.select and self.waiting):
            k = self._jump(a, b, s0, n_dec)
        dt = (k * a + b * (k * s0 + n_dec * k * (k - 1) / 2)) * self.time_scale
        self.free -= self.dec.advance(k, st.held)
        return dt, k

    def _mixed_step(self, st: _Step) -> float:
        """Price and run one step of prefill chunks and (possibly) decodes; returns its time."""
        n_dec = st.n_dec
        n_tok = float(n_dec)
        pairs = float(self._dec_ctx(st) + n_dec) if n_dec else 0.0
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
            self.free -= self.dec.advance(1, st.held)
        return dt

    # -- completion --------------------------------------------------------------------------
    def _complete(self, st: _Step, dt: float = 0.0, k: int = 1) -> None:
        """Advance prefilled requests, then retire finished ones (each frees a client slot).

        ``dt``, ``k``: the time and number of the steps just run (``k`` > 1: jumped decodes).
        """
        t = self.t
        finished: list[int] = []
        firsts: list[int] = []
        sampled = 0  # prompts done in this step: each samples a token
        for i, chunk, _ in st.pf:
            self.ctx[i] += chunk
            self.prompt_left[i] -= chunk
            if self.prompt_left[i] == 0:
                if self.cache is not None:
                    self.cache.prompt_done(i)
                sampled += 1
                if math.isnan(self.first[i]):
                    firsts.append(i)
                self.out_left[i] -= 1
                self.partial.remove(i)
                if self.out_left[i] == 0:
                    finished.append(i)
                else:
                    self.dec.add(i, self.ctx[i], self.out_left[i], self.blocks[i])
        # the client sees this step's tokens when the API server has streamed them
        seen = self._stream(t, dt, k, st.n_dec, sampled) if self.client.stream_tok_s > 0 else t
        for i in firsts:
            self.first[i] = seen
        ends = self.dec.ends
        if st.n_dec and ends and ends[0][0] <= self.dec.g:
            for i, blocks in self.dec.pop_finished():
                self.blocks[i] = blocks
                finished.append(i)
        if finished:
            if len(finished) < 8:
                for i in finished:
                    self.running.remove(i)
            else:
                gone = set(finished)
                self.running = [i for i in self.running if i not in gone]
            for i in finished:
                if self.cache is not None:
                    self.cache.release(i)
                self.finish[i] = seen
                self.free += self.blocks[i]
                self.blocks[i] = 0
                self.done += 1
                self.release(seen)

    def _stream(self, t: float, dt: float, k: int, n_dec: int, n_first: int) -> float:
        """Queue the tokens of the steps just run on the serial frontend; when the client sees the last.

        Each of the ``k`` steps (the last ends at ``t``) emits ``n_dec`` tokens, the last also
        ``n_first`` first tokens; the frontend sends them in order at ``stream_tok_s`` each (a
        FIFO queue: with equal steps its last departure is the latest of "start after the
        first step, or when free, and send them all" and "send the last step's tokens after it").
        """
        w = self.client.stream_tok_s
        last = n_dec + n_first
        start = max(self.stream_free, t - dt + dt / k)
        self.stream_free = max(start + (k * n_dec + n_first) * w, t + last * w)
        return self.stream_free

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
            if not st.n_dec and not st.pf:
                # nothing can run (a bug or an impossible configuration): wait for an arrival or stop
                self._stuck(st)
                continue
            if st.n_dec and not st.pf:
                dt, k = self._decode_only(st)
            else:
                dt, k = self._mixed_step(st), 1
            self.t += dt
            self.steps += k
            if len(self.running) > self.max_running:
                self.max_running = len(self.running)
            self._complete(st, dt, k)
        return ReplicaTrace(send=np.array(self.send), first_token=np.array(self.first),
                            finish=np.array(self.finish), ok=np.array(self.ok, bool),
                            preemptions=self.preemptions, steps=self.steps, max_running=self.max_running,
                            prefix_hit_tokens=self.cache.hit_tokens if self.cache is not None else 0,
                            prefix_query_tokens=self.cache.query_tokens if self.cache is not None else 0)
