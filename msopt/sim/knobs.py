"""Engine knobs read from what an engine adapter rendered (a launch), as the engine would."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import MappingProxyType
from typing import Any, Protocol

from msopt.errors import SimulationError


class Launch(Protocol):
    """What the simulator reads of a rendered launch (:class:`msopt.engines.launch.LaunchSpec` is one;
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
        block_size: KV-cache block (page) size in tokens.
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
            :mod:`msopt.sim.spec`).
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
    block_size: int = 16
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


def sglang_mem_fraction(hbm_gib: float, tp: int, pp: int, chunk: int, max_running: int | None) -> float:
    """SGLang's default ``--mem-fraction-static``: (memory - reserved) / memory.

    sglang 0.5.23 ``srt/arg_groups/memory_hook.py`` (handle_gpu_memory_settings,
    reserve_for_graph_mb): reserved MB = 512 + 1.5 x max(chunked_prefill_size, 2048)
    + tp x pp / 8 x 1024 + 2 x decode CUDA-graph max batch (256 below tp 4, else 512, on
    60-160 GB devices; capped by --max-running-requests), at least 10 GB on devices over 60 GB.
    The prefill-graph term (8 MB per captured size) is left out.
    """
    gpu_mb = hbm_gib * 1024.0
    if gpu_mb < 20 * 1024:
        max_bs = 8
    elif gpu_mb < 60 * 1024:
        max_bs = 48 if gpu_mb < 35 * 1024 and tp < 4 else (32 if tp < 4 else 160)
    elif gpu_mb < 160 * 1024:
        max_bs = 256 if tp < 4 else 512
    else:
        max_bs = 512
    if max_running is not None:
        max_bs = min(max_bs, max_running)
    reserved = 512.0 + 1.5 * max(chunk, 2048) + tp * pp / 8 * 1024 + 2.0 * max_bs
    if gpu_mb > 60 * 1024:
        reserved = max(reserved, 10 * 1024.0)
    return round((gpu_mb - reserved) / gpu_mb, 3)


#: SGLang's step token budget with chunked prefill off (``--chunked-prefill-size -1``): none
UNBOUNDED_TOKENS = 1 << 40


def _split_argv(argv: Sequence[str]) -> list[tuple[str, str | None]]:
    """Pairs (flag, value or None); handles ``--flag value`` and ``--flag=value``."""
    out: list[tuple[str, str | None]] = []
    i = 0
    items = list(argv)
    if len(items) >= 3 and Path(items[0]).name.startswith("python") and items[1] == "-m":
        items = items[3:]  # "python -m sglang.launch_server ...": the interpreter's own flags
    while i < len(items):
        item = items[i]
        if item.startswith("-") and not _is_number(item):
            if "=" in item:
                flag, value = item.split("=", 1)
                out.append((flag, value))
            elif i + 1 < len(items) and (not items[i + 1].startswith("-") or _is_number(items[i + 1])):
                out.append((item, items[i + 1]))
                i += 1
            else:
                out.append((item, None))
        i += 1
    return out


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _as_int(flag: str, value: Any) -> int:
    try:
        number = float(value)
        if number != int(number):
            raise ValueError
        return int(number)
    except (TypeError, ValueError):
        raise SimulationError(f"{flag} = {value!r}: expected an integer; render an integer value") from None


def _as_float(flag: str, value: Any) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        raise SimulationError(f"{flag} = {value!r}: expected a number; render a numeric value") from None


def _as_bool(flag: str, value: Any) -> bool:
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


_VLLM_INT = MappingProxyType({
    "--tensor-parallel-size": "tp", "-tp": "tp",
    "--pipeline-parallel-size": "pp", "-pp": "pp",
    "--data-parallel-size": "dp", "-dp": "dp",
    "--max-num-seqs": "max_num_seqs",
    "--max-num-batched-tokens": "max_num_batched_tokens",
    "--block-size": "block_size",
    "--max-model-len": "max_model_len",
    "--long-prefill-token-threshold": "long_prefill_token_threshold",
    "--nnodes": "nnodes", "-n": "nnodes",
})

_SGLANG_INT = MappingProxyType({
    "--tp-size": "tp", "--tp": "tp", "--tensor-parallel-size": "tp",
    "--dp-size": "dp", "--dp": "dp", "--data-parallel-size": "dp",
    "--pp-size": "pp", "--pipeline-parallel-size": "pp",
    "--max-running-requests": "max_num_seqs",
    "--chunked-prefill-size": "max_num_batched_tokens",
    "--max-prefill-tokens": "max_prefill_tokens",
    "--context-length": "max_model_len",
    "--page-size": "block_size",
    "--ep-size": "ep", "--ep": "ep", "--expert-parallel-size": "ep",
    "--nnodes": "nnodes",
})


def knobs_vllm(argv: Sequence[str]) -> EngineKnobs:
    """vLLM's knobs from its command line."""
    kw: dict[str, Any] = {"engine": "vllm", "block_size": 16, "memory_fraction": 0.9}
    ignored: list[str] = []
    spec_conf: dict[str, Any] = {}
    for flag, value in _split_argv(argv):
        if flag in _VLLM_INT:
            kw[_VLLM_INT[flag]] = _as_int(flag, value)
        elif flag == "--gpu-memory-utilization":
            kw["memory_fraction"] = _as_float(flag, value)
        elif flag == "--enable-chunked-prefill":
            # a bare boolean flag may be followed by a positional argument; only a bool-like
            # value is read as the flag's value
            text = str(value).strip().lower()
            kw["chunked_prefill"] = text not in ("0", "false", "no", "off")
        elif flag == "--no-enable-chunked-prefill":
            kw["chunked_prefill"] = False
        elif flag == "--enable-prefix-caching":  # vllm 0.32.0 engine/arg_utils.py: a BooleanOptionalAction
            text = str(value).strip().lower()
            kw["prefix_caching"] = text not in ("0", "false", "no", "off")
        elif flag == "--no-enable-prefix-caching":
            kw["prefix_caching"] = False
        elif flag in ("--enable-expert-parallel", "-ep"):
            text = str(value).strip().lower()
            kw["expert_parallel"] = text not in ("0", "false", "no", "off")
        elif flag == "--no-enable-expert-parallel":
            kw["expert_parallel"] = False
        elif flag in ("--speculative-config", "--speculative_config", "-sc"):
            spec_conf.update(_vllm_speculative_json(flag, value))
        elif flag in _VLLM_SPEC_SHORTCUTS:  # vllm 0.32.0 engine/arg_utils.py: join --speculative-config's keys
            key = _VLLM_SPEC_SHORTCUTS[flag]
            spec_conf[key] = _as_int(flag, value) if key == "num_speculative_tokens" else value
        elif flag in ("--data-parallel-size-local", "-dpl", "--data-parallel-start-rank", "-dpr",
                      "--data-parallel-address", "-dpa", "--data-parallel-rpc-port", "-dpp", "--headless",
                      "--node-rank", "-r", "--master-addr", "--master-port", "--data-parallel-backend", "-dpb"):
            pass  # where this process sits in a multi-node instance: the instance is simulated whole
        elif flag not in ignored:
            ignored.append(flag)
    if spec_conf:
        kw.update(_vllm_speculative("--speculative-config", spec_conf))
    kw["mixed_batch"] = kw.get("chunked_prefill", True)
    return EngineKnobs(ignored=tuple(ignored), **kw)


#: vLLM's shortcuts for one key of ``--speculative-config`` (vllm 0.32.0 vllm/engine/arg_utils.py)
_VLLM_SPEC_SHORTCUTS = MappingProxyType({"--spec-method": "method", "--spec-model": "model",
                                         "--spec-tokens": "num_speculative_tokens"})
#: vLLM ``--speculative-config`` methods (vllm 0.32.0 ``vllm/config/speculative.py``: ``SpeculativeMethod``;
#: every ``*_mtp`` of ``MTPModelTypes`` is replaced with "mtp", "eagle3" is an EAGLE draft)
_VLLM_SPEC_METHODS = {"mtp": "mtp", "deepseek_mtp": "mtp", "qwen3_next_mtp": "mtp", "eagle": "eagle",
                      "eagle3": "eagle", "ngram": "ngram", "[ngram]": "ngram", "ngram_gpu": "ngram"}


def _vllm_speculative_json(flag: str, value: str | None) -> dict[str, Any]:
    """vLLM's ``--speculative-config`` JSON object."""
    try:
        conf = json.loads(value or "")
    except ValueError:
        raise SimulationError(f"{flag} {value!r} is not JSON; vLLM takes e.g. "
                              "'{\"method\": \"eagle3\", \"num_speculative_tokens\": 3}'") from None
    if not isinstance(conf, dict):
        raise SimulationError(f"{flag} {value!r}: a JSON object is expected")
    return conf


def _vllm_speculative(flag: str, conf: dict[str, Any]) -> dict[str, Any]:
    """The spec fields of vLLM's speculative config (``method``, ``num_speculative_tokens``)."""
    method = str(conf.get("method") or conf.get("model") or "").lower()
    if method.endswith("_mtp"):
        method = "mtp"
    if method not in _VLLM_SPEC_METHODS:
        raise SimulationError(f"{flag}: method {method!r} is not simulated; use one of {sorted(_VLLM_SPEC_METHODS)}")
    tokens = conf.get("num_speculative_tokens")
    if not isinstance(tokens, int) or isinstance(tokens, bool):
        raise SimulationError(f"{flag}: num_speculative_tokens = {tokens!r} must be an integer")
    return {"spec_method": _VLLM_SPEC_METHODS[method], "spec_tokens": tokens}


#: SGLang's speculative flags (sglang 0.5.23 ``srt/server_args.py``)
_SGLANG_SPEC = MappingProxyType({"--speculative-num-steps": "spec_tokens",
                                 "--speculative-num-draft-tokens": "spec_verify_tokens",
                                 "--speculative-eagle-topk": "spec_topk"})
#: ``--speculative-algorithm`` -> draft method; NEXTN is SGLang's alias of EAGLE for a model's own MTP
#: layers (sglang 0.5.23 ``srt/arg_groups/speculative_hook.py``, ``_resolve_speculative_algorithm_alias``)
_SGLANG_SPEC_METHODS = {"EAGLE": "eagle", "EAGLE3": "eagle", "NEXTN": "mtp", "NGRAM": "ngram"}


def _sglang_speculative(kw: dict[str, Any]) -> None:
    """SGLang's start-up resolution of its speculative flags (sglang 0.5.23
    ``srt/arg_groups/speculative_hook.py``): EAGLE/EAGLE3/NEXTN without ``--speculative-num-steps``
    take (steps, topk, draft tokens) = (3, 1, 4) (``_auto_choose_speculative_params``; LlamaForCausalLM's
    (5, 4, 8) tree is not modelled), topk 1 sets draft tokens to steps + 1 (``_handle_eagle_family``);
    NGRAM verifies 12 draft tokens by default (``_handle_ngram``); either resets an unset
    ``--max-running-requests`` to 48 and turns ``--enable-mixed-chunk`` off."""
    algo = kw.pop("spec_algorithm", "")
    topk = kw.pop("spec_topk", None)
    if not algo:
        for key in ("spec_tokens", "spec_verify_tokens"):
            kw.pop(key, None)
        return
    if algo not in _SGLANG_SPEC_METHODS:
        raise SimulationError(f"--speculative-algorithm {algo} is not simulated; use one of "
                              f"{sorted(_SGLANG_SPEC_METHODS)}")
    method = _SGLANG_SPEC_METHODS[algo]
    kw["spec_method"] = method
    if method == "ngram":
        kw.setdefault("spec_verify_tokens", 12)
        kw.setdefault("spec_tokens", 0)
    else:
        kw.setdefault("spec_tokens", 3)
        if (topk or 1) == 1:
            kw["spec_verify_tokens"] = kw["spec_tokens"] + 1
        else:
            raise SimulationError(f"--speculative-eagle-topk {topk}: tree drafts (topk > 1) are not simulated")
    kw.setdefault("max_num_seqs", 48)
    kw["mixed_batch"] = False


def knobs_sglang(argv: Sequence[str]) -> EngineKnobs:
    """SGLang's knobs from its command line."""
    kw: dict[str, Any] = {"engine": "sglang", "block_size": 1, "mixed_batch": False}
    ignored: list[str] = []
    for flag, value in _split_argv(argv):
        if flag in _SGLANG_INT:
            kw[_SGLANG_INT[flag]] = _as_int(flag, value)
        elif flag == "--mem-fraction-static":
            kw["memory_fraction"] = _as_float(flag, value)
        elif flag == "--enable-mixed-chunk":
            kw["mixed_batch"] = _as_bool(flag, value)
        elif flag == "--enable-dp-attention":
            kw["dp_attention"] = _as_bool(flag, value)
        elif flag in ("--attn-dp-size", "--attention-data-parallel-size"):
            kw["attn_dp"] = _as_int(flag, value)  # sglang 0.5.23's spelling of --dp-size N --enable-dp-attention
        elif flag in ("--node-rank", "--dist-init-addr"):
            pass  # where this process sits in a multi-node instance: the instance is simulated whole
        elif flag == "--speculative-algorithm":
            kw["spec_algorithm"] = str(value or "").upper()
        elif flag == "--disable-radix-cache":  # sglang 0.5.23 srt/arg_groups/fields/memory.py:64-70
            kw["prefix_caching"] = not _as_bool(flag, value)
        elif flag in _SGLANG_SPEC:
            kw[_SGLANG_SPEC[flag]] = _as_int(flag, value)
        elif flag not in ignored:
            ignored.append(flag)
    _sglang_speculative(kw)
    attn_dp = kw.pop("attn_dp", 1)
    if attn_dp > 1:
        if kw.get("dp", 1) > 1:
            raise SimulationError(f"--attn-dp-size {attn_dp} beside --dp-size {kw['dp']} replicas is not modelled; "
                                  "simulate one replica")
        kw["dp"], kw["dp_attention"] = attn_dp, True
    if kw.get("dp_attention") and kw.get("dp", 1) > 1:
        # sglang/srt/server_args.py: with DP attention --tp-size is the world and each of the
        # --dp-size attention ranks holds tp/dp devices
        world, dp = kw.get("tp", 1), kw["dp"]
        if world % dp:
            raise SimulationError(f"--tp-size {world} is not divisible by --dp-size {dp}: with "
                                  "--enable-dp-attention each attention rank holds tp/dp devices")
        kw["tp"] = world // dp
    if kw.get("max_num_batched_tokens", 0) == -1:  # SGLang: -1 disables chunking
        # no chunk bound: --max-prefill-tokens bounds a prefill batch, and a prompt longer than it
        # runs alone (PrefillAdder admits a batch's first request whole: sglang 0.5.23
        # srt/managers/schedule_policy.py, add_one_req without a chunk); no step budget rejects it
        kw["max_num_batched_tokens"] = UNBOUNDED_TOKENS
        kw["chunked_prefill"] = False
    return EngineKnobs(ignored=tuple(ignored), **kw)


_MINDIE_SCHEDULE = MappingProxyType({
    "maxBatchSize": ("max_num_seqs", _as_int),
    "maxPrefillBatchSize": ("max_prefill_seqs", _as_int),
    "maxPrefillTokens": ("max_num_batched_tokens", _as_int),
    "supportSelectBatch": ("select_batch", _as_bool),
    "prefillTimeMsPerReq": ("prefill_time_ms_per_req", _as_float),
    "decodeTimeMsPerReq": ("decode_time_ms_per_req", _as_float),
    "maxQueueDelayMicroseconds": ("max_queue_delay_s", _as_float),
    "maxPreemptCount": ("max_preempt_count", _as_int),
    "cacheBlockSize": ("block_size", _as_int),
})


def _find_mindie_config(files: Mapping[str, Any]) -> Mapping[str, Any]:
    for content in files.values():
        if isinstance(content, Mapping) and "BackendConfig" in content:
            return content
    raise SimulationError(
        f"mindie launch has no config with a 'BackendConfig' among its files {sorted(files)}; "
        "the adapter must render MindIE's config.json into LaunchSpec.files"
    )


def knobs_mindie(files: Mapping[str, Any]) -> EngineKnobs:
    """MindIE's knobs from the config.json among a launch's files."""
    cfg = _find_mindie_config(files)
    backend = cfg["BackendConfig"]
    kw: dict[str, Any] = {
        "engine": "mindie", "block_size": 128, "chunked_prefill": False, "mixed_batch": False,
        "max_preempt_count": 0,
    }
    ignored: list[str] = []
    schedule = backend.get("ScheduleConfig", {}) or {}
    for key, value in schedule.items():
        if key in _MINDIE_SCHEDULE:
            name, cast = _MINDIE_SCHEDULE[key]
            kw[name] = cast(f"BackendConfig.ScheduleConfig.{key}", value)
        elif key == "maxIterTimes":
            pass  # output cap: the workload's output_len decides lengths here
        elif key == "enablePrefixCache":
            pass  # read below, with ModelConfig's plugin_params
        else:
            ignored.append(f"BackendConfig.ScheduleConfig.{key}")
    if "max_queue_delay_s" in kw:
        kw["max_queue_delay_s"] = kw["max_queue_delay_s"] * 1e-6
    deploy = backend.get("ModelDeployConfig", {}) or {}
    models = deploy.get("ModelConfig") or [{}]
    model0 = models[0] if isinstance(models, Sequence) and models else {}
    for key, name in (("tp", "tp"), ("dp", "dp"), ("pp", "pp"), ("moe_ep", "ep"), ("moe_tp", "moe_tp")):
        if key in model0:
            kw[name] = _as_int(f"BackendConfig.ModelDeployConfig.ModelConfig[0].{key}", model0[key])
    if kw.get("dp", 1) > 1:
        kw["dp_attention"] = True  # MindIE's dp ranks live in one instance and share its MoE layers
    if backend.get("multiNodesInferEnabled") is True:
        world = kw.get("tp", 1) * kw.get("dp", 1) * kw.get("pp", 1)
        ids = backend.get("npuDeviceIds") or [[]]
        local = len(ids[0]) if isinstance(ids, Sequence) and ids and isinstance(ids[0], Sequence) else 0
        if local:
            kw["nnodes"] = max(1, -(-world // local))
    # Prefix Cache: ScheduleConfig.enablePrefixCache true with ModelConfig plugin_params naming
    # prefix_cache (MindIE 1.0.0, mindie_llm0302.html: "若enablePrefixCache开启,则此处必须开启为prefix_cache")
    plugins = str(model0.get("plugin_params", "") if isinstance(model0, Mapping) else "")
    if "enablePrefixCache" in schedule:
        enabled = _as_bool("BackendConfig.ScheduleConfig.enablePrefixCache", schedule["enablePrefixCache"])
        kw["prefix_caching"] = enabled and "prefix_cache" in plugins
    if "maxSeqLen" in deploy:
        kw["max_model_len"] = _as_int("BackendConfig.ModelDeployConfig.maxSeqLen", deploy["maxSeqLen"])
    # MindIE reads npuMemSize from ModelConfig (model_deploy_config.cpp, g_modelParamsConstraint);
    # -1 lets it size the KV cache itself, a positive value is GiB per device.
    npu_mem = model0.get("npuMemSize", -1) if isinstance(model0, Mapping) else -1
    if isinstance(npu_mem, (int, float)) and not isinstance(npu_mem, bool) and npu_mem > 0:
        kw["kv_cache_gib"] = float(npu_mem)
    return EngineKnobs(ignored=tuple(ignored), **kw)


def vllm_launch_knobs(spec: Launch) -> EngineKnobs:
    """vLLM's knobs from a rendered launch: its command line, and the CPU build's KV-cache size."""
    knobs = knobs_vllm(spec.argv)
    # the CPU build sizes its KV cache from this variable, in GiB (vllm 0.32.0
    # vllm/platforms/cpu.py check_and_update_config: kv_cache_memory_bytes = value x GiB)
    space = str((spec.env or {}).get("VLLM_CPU_KVCACHE_SPACE", "")).strip()
    if space:
        knobs = replace(knobs, kv_cache_gib=float(_as_int("VLLM_CPU_KVCACHE_SPACE", space)))
    return knobs


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
            out[key] = _as_int(flag, text) if cast is int else _as_float(flag, text)
    return out


def benchmark_overrides(argv: Sequence[str]) -> dict[str, Any]:
    """Workload keys set by a benchmark command line (vLLM ``bench serve`` flags).

    ``--request-rate inf`` means all at once and is returned as ``float('inf')``.
    """
    out: dict[str, Any] = {}
    for flag, value in _split_argv(argv):
        if flag in _BENCH:
            key, cast = _BENCH[flag]
            out[key] = _as_int(flag, value) if cast is int else _as_float(flag, value)
    return out
