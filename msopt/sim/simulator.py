"""simulate(): knobs + hardware + model + workload -> SimResult, failing as a real server would."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from msopt.checks import is_int, is_number
from msopt.errors import ConfigError, SimulationError
from msopt.sim.catalog_load import load_hardware, load_model
from msopt.sim.catalog_types import DTYPE_BYTES, Hardware, ModelSpec
from msopt.sim.engine import run_replica
from msopt.sim.knobs import EngineKnobs, Launch, benchmark_overrides, load_overrides
from msopt.sim.memory import MemoryPlan
from msopt.sim.moe import layout_of, layout_problem
from msopt.sim.pd import Pool, simulate_pd
from msopt.sim.perf import StepCost, plan_memory
from msopt.sim.personality import PERSONALITIES, Personality, get_personality, knobs_from_launch, known, resolved
from msopt.sim.result import SimResult, failed, summarize
from msopt.sim.speculative import SpecStepCost, draft_log, draft_refusal, speculation_of
from msopt.sim.workload import Workload, workload_from_mapping
from msopt.workload.replay import TraceWindow, session_rank

#: The keys of ``[simulator]`` that :func:`simulate_launch` reads.
SIM_KEYS = frozenset({"hardware", "model", "weight_dtype", "kv_dtype", "seed", "noise", "workload", "catalog_dirs",
                      "spec_accept_len"})


def catalog_dirs(sim_table: Mapping[str, Any]) -> tuple[str, ...]:
    """``catalog_dirs`` of a ``[simulator]`` table given to this module's functions (a directory or a list of
    them; a run's table has it parsed already, :attr:`msopt.config.Config.catalog_dirs`)."""
    dirs = sim_table.get("catalog_dirs", ())
    return (dirs,) if isinstance(dirs, str) else tuple(dirs)


def route(n: int, replicas: int, sessions: Sequence[str | None] | None = None) -> np.ndarray:
    """The data-parallel replica of each of ``n`` requests: in turn (vLLM's balancer while the replicas
    are alike, SGLang's round robin: the personalities' ``dp_rank_header`` cites both); with
    ``sessions`` (the client pins them, :attr:`~msopt.sim.personality.Personality.dp_rank_header`), a
    request of a session goes to its session's rank (:func:`msopt.workload.replay.session_rank`) and
    the others in turn."""
    if sessions is None:
        return np.arange(n) % max(1, replicas)
    out = np.empty(n, np.int64)
    turn = 0
    for i, key in enumerate(sessions):
        if key is None:
            out[i] = turn % replicas
            turn += 1
        else:
            out[i] = session_rank(key, replicas)
    return out


def _startup_problem(knobs: EngineKnobs, hw: Hardware, model: ModelSpec, max_model_len: int) -> str | None:
    """The error a real server prints for impossible parallel/scheduler settings, if any."""
    for name in ("tp", "pp", "dp", "max_num_seqs", "max_num_batched_tokens", "block_size"):
        value = getattr(knobs, name)
        if value is not None and value < 1:
            return f"ValueError: {name} must be >= 1, got {value}"
    refused = get_personality(knobs.engine).fraction_problem(knobs)
    if refused:
        return refused
    if model.heads % knobs.tp:
        return (f"ValueError: Total number of attention heads ({model.heads}) must be divisible by "
                f"tensor parallel size ({knobs.tp}).")
    if model.kv_heads % knobs.tp and knobs.tp % model.kv_heads:
        return (f"ValueError: tensor parallel size ({knobs.tp}) must divide or be a multiple of the "
                f"number of KV heads ({model.kv_heads}).")
    if knobs.pp > model.layers:
        return f"ValueError: pipeline parallel size ({knobs.pp}) exceeds the number of layers ({model.layers})."
    if knobs.tp > hw.devices_per_node and knobs.nnodes < 2:
        return (f"ValueError: tensor parallel size ({knobs.tp}) exceeds the {hw.devices_per_node} devices "
                f"of one {hw.name} node; span nodes (--nnodes, a multi-node trial) or use pp for that.")
    if model.is_moe:
        problem = layout_problem(model, layout_of(knobs, model))
        if problem:
            return problem
    return get_personality(knobs.engine).startup_problem(knobs, model, max_model_len)


def _memory_problem(knobs: EngineKnobs, hw: Hardware, mem: MemoryPlan, max_model_len: int,
                    model: ModelSpec) -> str | None:
    """The out-of-memory / KV-cache error a real server prints, if the plan does not fit."""
    kind = hw.memory_kind
    total = hw.hbm_gib
    if mem.weights_gib + mem.reserve_gib > total:
        free = max(0.0, total - mem.reserve_gib)
        if kind == "NPU":
            return (f"RuntimeError: NPU out of memory. Tried to allocate {mem.weights_gib:.2f} GiB for "
                    f"{model.name} weights (NPU 0; {total:.2f} GiB total capacity; {free:.2f} GiB free). "
                    "Use a larger tp/pp or a smaller weight dtype.")
        return (f"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate {mem.weights_gib:.2f} GiB. "
                f"GPU 0 has a total capacity of {total:.2f} GiB of which {free:.2f} GiB is free. "
                "Use a larger tensor/pipeline parallel size or a smaller weight dtype.")
    if mem.kv_gib <= 0 or mem.num_blocks == 0:
        if mem.weights_gib + mem.activation_gib + mem.reserve_gib > total:
            what = "NPU" if kind == "NPU" else "CUDA"
            prefix = "RuntimeError" if kind == "NPU" else "torch.OutOfMemoryError"
            return (f"{prefix}: {what} out of memory during the profile run. Tried to allocate "
                    f"{mem.activation_gib:.2f} GiB of activations with {mem.weights_gib:.2f} GiB of weights "
                    f"on a {total:.2f} GiB device. Lower max_num_batched_tokens or raise tp/pp.")
        return get_personality(knobs.engine).no_kv_memory(knobs, mem)
    if mem.kv_tokens < max_model_len and not get_personality(knobs.engine).caps_context_to_kv:
        return get_personality(knobs.engine).short_kv(knobs, mem, max_model_len)
    return None


def assumed_inputs(knobs: EngineKnobs, hw: Hardware) -> list[str]:
    """What a simulation of ``knobs`` on ``hw`` assumes rather than knows, one line each: the
    efficiencies of another hardware entry (a catalog entry without a fit of its own, or a roofline
    entry built for a detected part), a default acceptance length of speculative decoding."""
    out = []
    if hw.efficiency_from:
        out.append(f"efficiencies of {hw.efficiency_from} ({hw.name} has no fit of its own)")
    draft = speculation_of(knobs)
    if draft is not None and draft.assumed:
        out.append(f"acceptance length {draft.accept:.2f} of {draft.method} with {draft.steps} draft steps "
                   "(a default: set [simulator] spec_accept_len)")
    return out


def launch_assumptions(spec: Launch, sim_table: Mapping[str, Any], personality: str | None = None) -> list[str]:
    """:func:`assumed_inputs` of what :func:`simulate_launch` would simulate (``[simulator]`` and
    ``personality`` as there)."""
    hw = load_hardware(sim_table["hardware"], catalog_dirs(sim_table))
    knobs = knobs_from_launch(spec, personality)
    accept = sim_table.get("spec_accept_len")
    if is_number(accept):
        knobs = replace(knobs, spec_accept_len=float(accept))
    return assumed_inputs(knobs, hw)


def cache_block(spec: Launch, sim_table: Mapping[str, Any], personality: str | None = None) -> tuple[int, str]:
    """The KV block size (tokens) the simulated prefix cache of ``spec`` keeps on the ``[simulator]``
    hardware, and why: set in the launch, or the engine's default on those devices, cited
    (:meth:`msopt.sim.personality.Personality.default_block_size`)."""
    hw = load_hardware(sim_table["hardware"], catalog_dirs(sim_table))
    knobs = knobs_from_launch(spec, personality)
    if knobs.block_size is not None:
        return int(knobs.block_size), "set in the launch"
    size, source = get_personality(knobs.engine).default_block_size(hw.memory_kind)
    return size, f"{knobs.engine}'s default on {hw.name} ({hw.memory_kind} devices): {source}"


def context_limit(spec: Launch, sim_table: Mapping[str, Any] | None = None,
                  personality: str | None = None) -> tuple[int, str, bool] | None:
    """The server of ``spec``'s context (tokens), where that comes from, and whether the engine serves a
    request whose prompt fits but whose output does not, its output cut (``cuts_output_to_context``; else
    it refuses one longer than the context, input plus output). The limit is the launch's own (vLLM
    ``--max-model-len``, SGLang ``--context-length``, MindIE ``maxSeqLen``), else, with a ``[simulator]``
    table, the engine's default for its model; None when neither is known."""
    knobs = knobs_from_launch(spec, personality)
    p = get_personality(knobs.engine)
    if knobs.max_model_len:
        return int(knobs.max_model_len), f"the launch's {p.context_key}", p.cuts_output_to_context
    if sim_table is None:
        return None
    model = load_model(sim_table["model"], catalog_dirs(sim_table))
    return (p.default_max_model_len(model), f"{knobs.engine}'s default for {model.name} (no {p.context_key} set)",
            p.cuts_output_to_context)


def _cut_outputs(draws: _Draws, max_model_len: int, personality: Personality, log: list[str]) -> _Draws:
    """The requests as an engine that cuts outputs to the context serves them (``cuts_output_to_context``): a
    prompt shorter than the context gets at most the context left; a longer one stays as sent, to be refused."""
    if not personality.cuts_output_to_context:
        return draws
    in_len = draws.in_len.astype(np.int64)
    room = np.maximum(max_model_len - in_len, 0)
    cut = (in_len < max_model_len) & (draws.out_len.astype(np.int64) > room)
    if not cut.any():
        return draws
    log.append(f"WARNING {int(cut.sum())} requests' output cut to the context left (max_model_len {max_model_len} "
               "less the prompt): the engine serves them with max_tokens clamped")
    out = np.where(cut, room, draws.out_len).astype(draws.out_len.dtype)
    return replace(draws, out_len=out, outputs_cut=int(cut.sum()))


@dataclass(frozen=True)
class _Draws:
    """What the seed draws for one run: the requests' lengths and arrivals, the run's step-time factor,
    and each request's client jitter and think time (None: the hardware entry has none)."""

    in_len: np.ndarray
    out_len: np.ndarray
    arrival: np.ndarray
    scale: float
    jitter: np.ndarray | None
    think: np.ndarray | None
    outputs_cut: int = 0  # requests whose output the engine cut to the context left (_cut_outputs)

    @classmethod
    def sample(cls, wl: Workload, hw: Hardware, seed: int, noise: float) -> _Draws:
        seq = np.random.SeedSequence(seed)
        rng_len, rng_arr, rng_noise, rng_jit = (np.random.default_rng(s) for s in seq.spawn(4))
        in_len, out_len = wl.sample_lengths(rng_len)
        arrival = wl.sample_arrivals(rng_arr)
        scale = 1.0
        if noise > 0:
            scale = max(0.05, 1.0 + noise * float(rng_noise.standard_normal()))
        jitter = rng_jit.exponential(hw.api_jitter_ms * 1e-3, size=wl.num_prompts) if hw.api_jitter_ms > 0 else None
        think = (rng_jit.exponential(hw.client_think_ms * 1e-3, size=wl.num_prompts)
                 if hw.client_think_ms > 0 else None)
        return cls(in_len, out_len, arrival, scale, jitter, think)


@dataclass
class _Served:
    """Every request's times over all replicas, and what the replicas counted."""

    send: np.ndarray
    first: np.ndarray
    finish: np.ndarray
    ok: np.ndarray
    replica: np.ndarray
    preemptions: int = 0
    hit_tokens: int = 0
    query_tokens: int = 0

    @classmethod
    def empty(cls, n: int) -> _Served:
        return cls(np.full(n, np.nan), np.full(n, np.nan), np.full(n, np.nan), np.zeros(n, bool),
                   np.zeros(n, np.int64))


def _checked_dtypes(weight_dtype: str, kv_dtype: str | None, noise: float) -> str:
    """The KV dtype (None: fp16 with fp16 weights, else bf16), once both dtypes and the noise are valid.

    Raises:
        ConfigError: an unknown dtype or a negative noise.
    """
    kv_dtype = kv_dtype or ("fp16" if weight_dtype == "fp16" else "bf16")
    for what, dt in (("weight_dtype", weight_dtype), ("kv_dtype", kv_dtype)):
        if dt not in DTYPE_BYTES:
            raise ConfigError(f"simulator.{what} = {dt!r}: use one of {sorted(DTYPE_BYTES)}")
    if not noise >= 0:
        raise ConfigError(f"simulator.noise = {noise!r}: must be >= 0 (a relative standard deviation)")
    return kv_dtype


def _start_log(knobs: EngineKnobs, hw: Hardware, spec: ModelSpec, weight_dtype: str, kv_dtype: str) -> list[str]:
    """The server log's first lines: what serves what on which devices, the MoE layout, the knobs ignored."""
    log = [
        f"INFO [msopt.sim] {knobs.engine} serving {spec.name} ({weight_dtype} weights, {kv_dtype} KV) on "
        f"dp={knobs.dp} x tp={knobs.tp} x pp={knobs.pp} {hw.name} ({hw.memory_kind} devices)",
    ]
    if spec.is_moe:
        lay = layout_of(knobs, spec)
        log.append(f"INFO [msopt.sim] MoE: {spec.experts} experts (top-{spec.experts_per_token}) over "
                   f"{lay.world} devices per group: ep={lay.ep} x moe_tp={lay.moe_tp}, "
                   f"{lay.group} attention DP rank(s) of tp={lay.tp}"
                   + (f", {knobs.nnodes} nodes" if knobs.nnodes > 1 else ""))
    if knobs.ignored:
        log.append(f"INFO [msopt.sim] not modelled, ignored: {' '.join(knobs.ignored)}")
    return log


def _fit_memory(knobs: EngineKnobs, hw: Hardware, spec: ModelSpec, mem: MemoryPlan, max_model_len: int,
                log: list[str]) -> tuple[EngineKnobs, int]:
    """The knobs and context limit the memory plan leaves (a hybrid model's state slots cap the running
    requests; an engine that caps the context to the KV cache does so), with the log's KV cache lines."""
    personality = get_personality(knobs.engine)
    if spec.is_hybrid:
        # every running request holds one state slot: no more run at once than the pool has
        log.append(f"INFO [msopt.sim] hybrid attention: {spec.kv_layers} of {spec.layers} layers keep a KV cache; "
                   f"linear-attention state {mem.state_gib:.2f} GiB for {mem.state_slots} requests")
        knobs = replace(knobs, max_num_seqs=min(int(knobs.max_num_seqs or mem.state_slots), mem.state_slots))
    if personality.caps_context_to_kv and mem.kv_tokens < max_model_len:
        log.append(personality.kv_cap_warning(mem, max_model_len))
        max_model_len = max(1, mem.kv_tokens - 1)
    log.append(f"INFO Available KV cache memory: {mem.kv_gib:.2f} GiB")
    log.append(f"INFO {'NPU' if hw.memory_kind == 'NPU' else 'GPU'} KV cache size: {mem.kv_tokens:,} tokens")
    log.append(f"INFO Maximum concurrency for {max_model_len:,} tokens per request: "
               f"{mem.kv_tokens / max_model_len:.2f}x")
    return knobs, max_model_len


def _serve(knobs: EngineKnobs, cost: StepCost, num_blocks: int, hw: Hardware, wl: Workload, draws: _Draws,
           run_out: np.ndarray, max_model_len: int) -> tuple[_Served, bool]:
    """Every data-parallel replica serving its share of the requests; also whether prefixes were cached."""
    personality = get_personality(knobs.engine)
    caching = knobs.prefix_caching if knobs.prefix_caching is not None else personality.prefix_caching
    prefixes = wl.sample_prefixes() if caching else None
    n = wl.num_prompts
    out = _Served.empty(n)
    conc = wl.concurrency
    replicas = knobs.dp if conc is None else min(knobs.dp, conc)
    sessions = wl.sample_sessions() if wl.pin_sessions and personality.dp_rank_header and replicas > 1 else None
    routed = route(n, replicas, sessions)
    for r in range(replicas):
        idx = np.flatnonzero(routed == r)
        if not len(idx):
            continue
        c_r = None if conc is None else conc // replicas + (r < conc % replicas)
        trace = run_replica(knobs, cost, num_blocks, draws.in_len[idx], run_out[idx], draws.arrival[idx], c_r,
                            max_model_len, hw.api_overhead_ms * 1e-3, draws.scale,
                            hw.frontend_ms_per_req * 1e-3, hw.frontend_us_per_token * 1e-6,
                            None if draws.jitter is None else draws.jitter[idx],
                            None if draws.think is None else draws.think[idx],
                            stream_tok_s=hw.frontend_us_per_output_token * 1e-6,
                            prefixes=None if prefixes is None else [prefixes[0][j] for j in idx.tolist()],
                            prefix_block=0 if prefixes is None else prefixes[1],
                            prefix_partial=personality.prefix_cache_partial)
        out.hit_tokens += trace.prefix_hit_tokens
        out.query_tokens += trace.prefix_query_tokens
        out.send[idx], out.first[idx], out.finish[idx], out.ok[idx] = (trace.send, trace.first_token, trace.finish,
                                                                       trace.ok)
        out.replica[idx] = r
        out.preemptions += trace.preemptions
    return out, prefixes is not None


def _end_log(log: list[str], served: _Served, cached: bool, max_model_len: int) -> None:
    """The server log's last lines: the prefix cache's hit rate, preemptions, rejected requests."""
    hit, query = served.hit_tokens, served.query_tokens
    if cached:
        log.append(f"INFO [msopt.sim] prefix cache hit rate: {hit / max(query, 1):.1%} of "
                   f"{query:,} prompt tokens queried ({hit:,} hit)")
    if served.preemptions:
        log.append(f"WARNING {served.preemptions} preemptions (recompute): the KV cache ran out; fewer "
                   "concurrent sequences or more KV memory would avoid them")
    rejected = int((~served.ok).sum())
    if rejected:
        log.append(f"ERROR {rejected} requests rejected: prompt + output tokens exceed max_model_len "
                   f"({max_model_len}) or the prefill token budget")


def simulate(
    knobs: EngineKnobs,
    hardware: Hardware | str,
    model: ModelSpec | str,
    workload: Workload | Mapping[str, Any],
    *,
    weight_dtype: str = "bf16",
    kv_dtype: str | None = None,
    seed: int = 0,
    noise: float = 0.0,
) -> SimResult:
    """Simulate one server launch and one benchmark run against it.

    Args:
        knobs: engine knobs, e.g. from :func:`knobs_from_launch`.
        hardware: a :class:`Hardware` or a catalog name / TOML path.
        model: a :class:`ModelSpec` or a catalog name / TOML path.
        workload: a :class:`Workload` or a ``[simulator.workload]`` table.
        weight_dtype: "bf16", "fp16", "fp8" or "int8".
        kv_dtype: KV-cache dtype; None = bf16 (the engines' "auto" for these models).
        seed: seeds request lengths, arrivals and noise; same inputs and seed, same result.
        noise: relative standard deviation of one multiplicative per-run factor on step times.

    Returns:
        The metrics, or a failed result (``error`` set) when the server would not start.

    Raises:
        ConfigError: unknown catalog entries, dtypes or workload keys.
    """
    if not known(knobs.engine):
        raise SimulationError(f"EngineKnobs.engine = {knobs.engine!r}: the simulator models {PERSONALITIES.names()}")
    hw = hardware if isinstance(hardware, Hardware) else load_hardware(hardware)
    spec = model if isinstance(model, ModelSpec) else load_model(model)
    wl = workload if isinstance(workload, Workload) else workload_from_mapping(workload)
    kv_dtype = _checked_dtypes(weight_dtype, kv_dtype, noise)
    hw.peak_flops(weight_dtype)  # unsupported precision on this hardware -> SimulationError
    knobs = resolved(knobs, hw.hbm_gib, hw.memory_kind)
    hw = hw.for_engine(knobs.engine)
    ignored = knobs.ignored
    if knobs.max_model_len:
        max_model_len = int(knobs.max_model_len)
    else:
        max_model_len = get_personality(knobs.engine).default_max_model_len(spec)
    log = _start_log(knobs, hw, spec, weight_dtype, kv_dtype)
    problem = _startup_problem(knobs, hw, spec, max_model_len)
    if problem:
        log.append(f"ERROR {problem}")
        return failed(problem, log, ignored, wl.num_prompts)
    mem = plan_memory(hw, spec, knobs, weight_dtype, kv_dtype)
    log.append(f"INFO Model loading took {mem.weights_gib:.2f} GiB per device ({knobs.tp * knobs.pp} devices "
               "per replica)")
    problem = _memory_problem(knobs, hw, mem, max_model_len, spec)
    if not problem and spec.is_hybrid and mem.state_slots <= 0:
        problem = get_personality(knobs.engine).no_state_memory(knobs, mem)
    if problem:
        log.append(f"ERROR {problem}")
        return failed(problem, log, ignored, wl.num_prompts)
    knobs, max_model_len = _fit_memory(knobs, hw, spec, mem, max_model_len, log)

    draws = _cut_outputs(_Draws.sample(wl, hw, seed, noise), max_model_len, get_personality(knobs.engine), log)
    cost: StepCost = StepCost(hw, spec, knobs, weight_dtype, kv_dtype)
    assumed = assumed_inputs(knobs, hw)
    run_out = draws.out_len
    draft = speculation_of(knobs)
    if draft is not None:
        msg = draft_refusal(knobs, draft, hw.memory_kind)
        if msg:
            log.append(f"ERROR {msg}")
            return failed(msg, log, ignored, wl.num_prompts)
        cost = SpecStepCost(cost, spec, draft, hw.verify_kv_per_token)
        # a verify step keeps `accept` tokens per sequence: the scheduler runs the steps, the
        # client counts the tokens (summarize below gets the real lengths)
        run_out = np.array([draft.decode_steps(int(o)) for o in draws.out_len], dtype=draws.out_len.dtype)
        log.append(draft_log(draft))

    served, cached = _serve(knobs, cost, mem.num_blocks, hw, wl, draws, run_out, max_model_len)
    _end_log(log, served, cached, max_model_len)
    res = summarize(served.send, served.first, served.finish, served.ok, draws.in_len, draws.out_len, served.replica,
                    preemptions=served.preemptions, kv_cache_tokens=mem.kv_tokens, log_lines=log, ignored=ignored)
    if cached:
        res = replace(res, prefix_cache_hits=served.hit_tokens, prefix_cache_queries=served.query_tokens)
    if draws.outputs_cut:
        res = replace(res, outputs_cut=draws.outputs_cut)
    if not served.ok.all():  # why, by the scheduler's own rules (engine.py ReplicaScheduler): too long, else refused
        ok = served.ok
        too_long = ~ok & (draws.in_len.astype(np.int64) + run_out.astype(np.int64) > max_model_len)
        res = replace(res, failed_too_long=int(too_long.sum()), failed_refused=int((~ok & ~too_long).sum()),
                      context_limit=max_model_len)
    return replace(res, assumed=tuple(assumed)) if assumed else res


def simulate_launch(spec: Launch, sim_table: Mapping[str, Any],
                    bench_argv: Sequence[str] | None = None, load: Mapping[str, Any] | None = None,
                    personality: str | None = None, trace: TraceWindow | None = None) -> SimResult:
    """Simulate what an engine adapter rendered, with the ``[simulator]`` configuration table.

    Args:
        spec: the rendered launch (vLLM/SGLang argv, MindIE config.json in ``files``).
        sim_table: ``hardware``, ``model``, ``weight_dtype``, ``kv_dtype``, ``seed``, ``noise``,
            ``workload`` (table) and optional ``catalog_dirs`` (list of directories).
        bench_argv: a benchmark command line whose load flags override the workload.
        load: ``concurrency`` / ``request_rate`` overriding the workload (a benchmark's load).
        personality: the simulator personality that reads the launch (the engine adapter's
            ``sim_personality``; default: the one named as the launch's engine).
        trace: the trace window the workload replays (a run's ``[workload] trace``, read once), or None.

    Raises:
        ConfigError: a missing or invalid ``[simulator]`` key.
        SimulationError: the launch cannot be read (unknown engine, malformed knob).
    """
    unknown = set(sim_table) - SIM_KEYS
    if unknown:
        raise ConfigError(f"simulator: unknown key(s) {sorted(unknown)}; valid keys: {sorted(SIM_KEYS)}")
    for key in ("hardware", "model"):
        if key not in sim_table:
            raise ConfigError(f"simulator.{key} is missing; set it to a catalog name or a TOML file path")
    dirs = catalog_dirs(sim_table)
    hw = load_hardware(sim_table["hardware"], dirs)
    model = load_model(sim_table["model"], dirs)
    table = sim_table.get("workload", {})
    if not isinstance(table, Mapping):
        raise ConfigError("simulator.workload must be a table (input_len, output_len, num_prompts, ...)")
    wl = workload_from_mapping(table).replaying(trace)
    if bench_argv:
        wl = wl.with_overrides(benchmark_overrides(bench_argv))
    if load:
        wl = wl.with_overrides(load_overrides(load))
    seed = sim_table.get("seed", 0)
    noise = sim_table.get("noise", 0.0)
    if not is_int(seed):
        raise ConfigError(f"simulator.seed = {seed!r}: must be an integer")
    if not is_number(noise):
        raise ConfigError(f"simulator.noise = {noise!r}: must be a number >= 0")
    knobs = knobs_from_launch(spec, personality)
    accept = sim_table.get("spec_accept_len")
    if accept is not None:
        if not is_number(accept) or not accept >= 1:
            raise ConfigError(f"simulator.spec_accept_len = {accept!r}: must be a number >= 1 (tokens kept per "
                              "verify step, the target's own token included)")
        knobs = replace(knobs, spec_accept_len=float(accept))
    return simulate(knobs, hw, model, wl,
                    weight_dtype=str(sim_table.get("weight_dtype", "bf16")),
                    kv_dtype=sim_table.get("kv_dtype"), seed=seed, noise=float(noise))


def simulate_disaggregated(prefill: Launch, decode: Launch, counts: tuple[int, int],
                           sim_table: Mapping[str, Any], bench_argv: Sequence[str] | None = None,
                           load: Mapping[str, Any] | None = None, personality: str | None = None,
                           trace: TraceWindow | None = None) -> SimResult:
    """Simulate a prefill/decode-disaggregated deployment: ``counts[0]`` instances launched as
    ``prefill`` and ``counts[1]`` as ``decode`` (see :mod:`msopt.sim.pd`), with ``[simulator]``;
    ``bench_argv``, ``load``, ``personality`` and ``trace`` as for :func:`simulate_launch`.

    Raises:
        ConfigError: a missing or invalid ``[simulator]`` key.
        SimulationError: a launch cannot be read.
    """
    unknown = set(sim_table) - SIM_KEYS
    if unknown:
        raise ConfigError(f"simulator: unknown key(s) {sorted(unknown)}; valid keys: {sorted(SIM_KEYS)}")
    dirs = catalog_dirs(sim_table)
    hw = load_hardware(sim_table["hardware"], dirs)
    spec = load_model(sim_table["model"], dirs)
    wl = workload_from_mapping(sim_table.get("workload", {})).replaying(trace)
    if bench_argv:
        wl = wl.with_overrides(benchmark_overrides(bench_argv))
    if load:
        wl = wl.with_overrides(load_overrides(load))
    accept = sim_table.get("spec_accept_len")
    if accept is not None and (not is_number(accept) or not accept >= 1):
        raise ConfigError(f"simulator.spec_accept_len = {accept!r}: must be a number >= 1 (tokens kept per "
                          "verify step, the target's own token included)")
    return simulate_pools(prefill, decode, counts, hw, spec, wl,
                          weight_dtype=str(sim_table.get("weight_dtype", "bf16")), kv_dtype=sim_table.get("kv_dtype"),
                          seed=int(sim_table.get("seed", 0)), noise=float(sim_table.get("noise", 0.0)),
                          spec_accept_len=None if accept is None else float(accept), personality=personality)


def pool_knobs(spec: Launch, spec_accept_len: float | None = None, personality: str | None = None) -> EngineKnobs:
    """The knobs of one pool's launch, with ``spec_accept_len`` where it decodes speculatively."""
    knobs = knobs_from_launch(spec, personality)
    if spec_accept_len is not None and knobs.spec_method:
        knobs = replace(knobs, spec_accept_len=float(spec_accept_len))
    return knobs


def simulate_pools(prefill: Launch, decode: Launch, counts: tuple[int, int], hw: Hardware, spec: ModelSpec,
                   wl: Workload, *, weight_dtype: str = "bf16", kv_dtype: str | None = None, seed: int = 0,
                   noise: float = 0.0, spec_accept_len: float | None = None,
                   personality: str | None = None) -> SimResult:
    """:func:`simulate_disaggregated` on loaded inputs: the one simulation of a disaggregated trial that an
    evaluation and the simulator prior (with its refitted ``hw`` and measured acceptance length) both run.
    ``spec_accept_len``: the acceptance length of a speculative decode pool (None: the default, assumed)."""
    kv_dtype = kv_dtype or ("fp16" if weight_dtype == "fp16" else "bf16")
    hw.peak_flops(weight_dtype)
    hw = hw.for_engine(prefill.engine)
    kind = hw.memory_kind
    pools = [Pool("prefill", resolved(pool_knobs(prefill, spec_accept_len, personality), hw.hbm_gib, kind),
                  int(counts[0])),
             Pool("decode", resolved(pool_knobs(decode, spec_accept_len, personality), hw.hbm_gib, kind),
                  int(counts[1]))]
    log = [f"INFO [msopt.sim] disaggregated {pools[0].knobs.engine} serving {spec.name} ({weight_dtype} weights, "
           f"{kv_dtype} KV) on {hw.name}: {counts[0]} prefill + {counts[1]} decode instance(s)"]

    def problem_of(knobs: EngineKnobs) -> tuple[str | None, MemoryPlan | None]:
        max_len = int(knobs.max_model_len or spec.max_position)
        problem = _startup_problem(knobs, hw, spec, max_len)
        if problem:
            return problem, None
        mem = plan_memory(hw, spec, knobs, weight_dtype, kv_dtype)
        return _memory_problem(knobs, hw, mem, max_len, spec), mem

    seq = np.random.SeedSequence(int(seed))
    rng_len, rng_arr, rng_noise = (np.random.default_rng(s) for s in seq.spawn(3))
    in_len, out_len = wl.sample_lengths(rng_len)
    arrival = wl.sample_arrivals(rng_arr)
    scale = max(0.05, 1.0 + noise * float(rng_noise.standard_normal())) if noise > 0 else 1.0
    res = simulate_pd(pools[0], pools[1], hw, spec, wl, in_len, out_len, arrival, weight_dtype=weight_dtype,
                      kv_dtype=str(kv_dtype), scale=scale, log=log, problem_of=problem_of)
    assumed = assumed_inputs(pools[1].knobs, hw)  # the decode pool's: the one that drafts
    return replace(res, assumed=tuple(assumed)) if assumed else res
