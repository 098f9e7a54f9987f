"""The knobs the simulator reads of a launch (:class:`EngineKnobs`), and the readers every engine's
shares: command-line pairs and typed values. Each engine's own reader lives in its folder
(``msopt/engines/<name>/knobs.py``) and reaches the simulator through its personality."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any, Protocol

from msopt.errors import SimulationError


class Launch(Protocol):
    """What the simulator reads of a rendered launch (:class:`msopt.launch.render.LaunchSpec` is one;
    the simulator sits below the engines and does not import them)."""

    @property
    def engine(self) -> str: ...
    @property
    def argv(self) -> Sequence[str]: ...
    @property
    def env(self) -> Mapping[str, str]: ...
    @property
    def files(self) -> Mapping[str, Any]: ...


@dataclass(frozen=True)
class EngineKnobs:
    """The scheduler and memory knobs the simulator models, in engine-neutral form.

    ``None`` means "the engine's default", resolved against the hardware by
    :meth:`resolved` (vLLM's token budget depends on device memory).

    Attributes:
        engine: the simulator personality's name (:mod:`msopt.sim.personality`; "vllm", "sglang",
            "mindie" or a plugin's), whose engine behaviour the simulator models.
        tp, pp, dp: tensor, pipeline and data parallel sizes.
        max_num_seqs: most sequences running at once per replica.
        max_num_batched_tokens: token budget of one step (vLLM/SGLang) or of one prefill batch.
        max_prefill_seqs: most requests in one prefill batch (MindIE maxPrefillBatchSize).
        chunked_prefill: prompts may be split across steps.
        mixed_batch: a step may carry prefill chunks and decodes together (vLLM V1).
        memory_fraction: share of device memory the engine may use (weights, KV, activations);
            None: the engine's default (vLLM 0.9; SGLang computes it from the device, tp and
            chunk size, as its ``--mem-fraction-static`` default does).
        kv_cache_gib: fixed KV-cache size per device (MindIE npuMemSize), overrides the fraction.
        block_size: KV-cache block (page) size in tokens; None: the engine's default on the device
            (:meth:`msopt.sim.personality.Personality.default_block_size`, set by ``resolved``).
        max_model_len: longest sequence the server accepts (None: the model's maximum).
        select_batch: MindIE supportSelectBatch.
        prefill_time_ms_per_req, decode_time_ms_per_req: MindIE select-batch cost estimates.
        max_queue_delay_s: MindIE maxQueueDelayMicroseconds, in seconds.
        max_preempt_count: preemptions allowed per step (None: unlimited; 0: reserve whole sequence).
        long_prefill_token_threshold: vLLM: most prompt tokens one request prefills per step
            while other requests are running or waiting (0: no limit, vLLM's default).
        max_prefill_tokens: SGLang ``--max-prefill-tokens``: a prefill batch stops taking new
            requests once its prompt tokens reach this (the request that crosses it still runs
            whole); None: SGLang's default 16384. Not used by the other engines.
        expert_parallel: vLLM ``--enable-expert-parallel`` (experts spread over the MoE world).
        ep: expert-parallel size set explicitly (SGLang ``--ep-size``, MindIE ``moe_ep``); None: the
            engine's rule (:func:`msopt.sim.moe.layout_of`).
        moe_tp: MoE tensor-parallel size set explicitly (MindIE ``moe_tp``); None: the engine's rule.
        dp_attention: the dp ranks share one set of MoE layers (SGLang ``--enable-dp-attention``;
            vLLM and MindIE always do so for an MoE model). ``tp`` is then each rank's attention TP.
        nnodes: nodes one instance spans (vLLM ``--nnodes`` or DP ranks over nodes, SGLang
            ``--nnodes``, MindIE ``multiNodesInferEnabled`` with a rank table).
        spec_method: speculative decoding's draft, "mtp", "eagle" or "ngram" ("": off; see
            :mod:`msopt.sim.speculative`).
        spec_tokens: draft tokens proposed per step (vLLM ``num_speculative_tokens``, SGLang
            ``--speculative-num-steps``).
        spec_verify_tokens: tokens verified per sequence and step (SGLang
            ``--speculative-num-draft-tokens``); 0: ``spec_tokens + 1``.
        spec_accept_len: tokens kept per step (the acceptance length); None: an assumed default.
        prefix_caching: KV blocks of earlier prompts are reused by prompts with the same prefix
            (vLLM ``--enable-prefix-caching`` / ``--no-enable-prefix-caching``); None: the
            personality's default (:attr:`msopt.sim.personality.Personality.prefix_caching`).
        ignored: flags/keys read from the launch that the simulator does not model.
    """

    engine: str = "vllm"
    tp: int = 1
    pp: int = 1
    dp: int = 1
    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None
    max_prefill_seqs: int | None = None
    chunked_prefill: bool = True
    mixed_batch: bool = True
    memory_fraction: float | None = None
    kv_cache_gib: float | None = None
    block_size: int | None = None
    max_model_len: int | None = None
    select_batch: bool = False
    prefill_time_ms_per_req: float = 150.0
    decode_time_ms_per_req: float = 50.0
    max_queue_delay_s: float = 0.005
    max_preempt_count: int | None = None
    long_prefill_token_threshold: int = 0
    max_prefill_tokens: int | None = None
    expert_parallel: bool = False
    ep: int | None = None
    moe_tp: int | None = None
    dp_attention: bool = False
    nnodes: int = 1
    spec_method: str = ""
    spec_tokens: int = 0
    spec_verify_tokens: int = 0
    spec_accept_len: float | None = None
    prefix_caching: bool | None = None
    ignored: tuple[str, ...] = field(default=())


def split_argv(argv: Sequence[str]) -> list[tuple[str, str | None]]:
    """Pairs (flag, value or None); handles ``--flag value`` and ``--flag=value``."""
    out: list[tuple[str, str | None]] = []
    i = 0
    items = list(argv)
    if len(items) >= 3 and Path(items[0]).name.startswith("python") and items[1] == "-m":
        items = items[3:]  # "python -m sglang.launch_server ...": the interpreter's own flags
    while i < len(items):
        item = items[i]
        if item.startswith("-") and not is_number(item):
            if "=" in item:
                flag, value = item.split("=", 1)
                out.append((flag, value))
            elif i + 1 < len(items) and (not items[i + 1].startswith("-") or is_number(items[i + 1])):
                out.append((item, items[i + 1]))
                i += 1
            else:
                out.append((item, None))
        i += 1
    return out


def is_number(text: str) -> bool:
    """Whether ``text`` reads as a number (a negative value is not a flag)."""
    try:
        float(text)
    except ValueError:
        return False
    return True


def as_int(flag: str, value: Any) -> int:
    """``value`` of ``flag`` as an integer; a :class:`SimulationError` naming the flag where it is not one."""
    try:
        number = float(value)
        if number != int(number):
            raise ValueError
        return int(number)
    except (TypeError, ValueError):
        raise SimulationError(f"{flag} = {value!r}: expected an integer; render an integer value") from None


def as_float(flag: str, value: Any) -> float:
    """``value`` of ``flag`` as a number; a :class:`SimulationError` naming the flag where it is not one."""
    try:
        return float(value)
    except (TypeError, ValueError):
        raise SimulationError(f"{flag} = {value!r}: expected a number; render a numeric value") from None


def as_bool(flag: str, value: Any) -> bool:
    """``value`` of ``flag`` as true or false (a bare flag is true); a :class:`SimulationError` otherwise."""
    if isinstance(value, bool):
        return value
    if value is None:
        return True
    text = str(value).strip().lower()
    if text in ("1", "true", "yes", "on"):
        return True
    if text in ("0", "false", "no", "off"):
        return False
    raise SimulationError(f"{flag} = {value!r}: expected true or false")


_BENCH = MappingProxyType({
    "--max-concurrency": ("concurrency", int),
    "--request-rate": ("request_rate", float),
    "--num-prompts": ("num_prompts", int),
    "--random-input-len": ("input_len", int),
    "--random-output-len": ("output_len", int),
    # vllm 0.32.0 vllm/benchmarks/serve.py add_cli_args: --num-warmups (default 0); benchmark()
    # sends them at --max-concurrency and gathers them all before the measured requests
    "--num-warmups": ("warmup", int),
})


def load_overrides(load: Mapping[str, Any]) -> dict[str, Any]:
    """Workload keys of a benchmark's load (``concurrency``, ``request_rate``:
    :meth:`msopt.benchmarks.base.BenchmarkAdapter.field_load`), cast as :func:`benchmark_overrides`
    casts the same load given as ``--max-concurrency`` / ``--request-rate``."""
    out: dict[str, Any] = {}
    for flag, (key, cast) in _BENCH.items():
        if key in load and key in ("concurrency", "request_rate"):
            text = str(load[key])
            out[key] = as_int(flag, text) if cast is int else as_float(flag, text)
    return out


def benchmark_overrides(argv: Sequence[str]) -> dict[str, Any]:
    """Workload keys set by a benchmark command line (vLLM ``bench serve`` flags).

    ``--request-rate inf`` means all at once and is returned as ``float('inf')``.
    """
    out: dict[str, Any] = {}
    for flag, value in split_argv(argv):
        if flag in _BENCH:
            key, cast = _BENCH[flag]
            out[key] = as_int(flag, value) if cast is int else as_float(flag, value)
    return out
