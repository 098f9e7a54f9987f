"""SGLang's knobs read from its command line as SGLang 0.5.23 resolves them (``srt/server_args.py`` and
``srt/arg_groups/``), and its default static memory fraction."""

from __future__ import annotations

from collections.abc import Sequence
from types import MappingProxyType
from typing import Any

from msopt.errors import SimulationError
from msopt.sim.knobs import EngineKnobs, as_bool, as_float, as_int, split_argv

__all__ = ["UNBOUNDED_TOKENS", "knobs_sglang", "sglang_mem_fraction", "sglang_npu_defaults"]

def sglang_npu_defaults(hbm_gib: float, tp: int) -> tuple[int, int] | None:
    """SGLang's NPU defaults ``(chunked_prefill_size, decode graph max_bs)`` by device memory, None above
    64 GiB (the CUDA table then applies): sglang 0.5.23 ``srt/hardware_backend/npu/utils.py``
    (set_default_server_args, run by handle_npu_backends before handle_gpu_memory_settings): up to 32 GiB
    (910B4) 4096 and 16 below tp 4 else 64; up to 64 GiB (910B1-3, the A3 910_93xx dies) 8192 and 64 below
    tp 4 else 256."""
    mb = hbm_gib * 1024.0
    if mb <= 32 * 1024:
        return 4096, (16 if tp < 4 else 64)
    if mb <= 64 * 1024:
        return 8192, (64 if tp < 4 else 256)
    return None


def sglang_mem_fraction(hbm_gib: float, tp: int, pp: int, chunk: int, max_running: int | None, *,
                        npu: bool = False, attn_dp: int = 1) -> float:
    """SGLang's default ``--mem-fraction-static``: (memory - reserved) / memory, unclamped (SGLang does not
    clamp it either: a negative value reaches its KV sizing, see the personality's ``no_kv_memory``).

    sglang 0.5.23 ``srt/arg_groups/memory_hook.py`` (handle_gpu_memory_settings, reserve_for_graph_mb):
    reserved MB = 512 + 1.5 x max(chunked_prefill_size, 2048) + tp x pp / 8 x 1024 (``tp`` the whole
    tensor-parallel world, attention DP inside it) + 2 x decode graph max batch + with DP attention
    3 x max batch x attn_dp_size (and 1.5 x more past a max batch of 300), at least 10 GB on devices over
    60 GB. The decode max batch is 256 below tp 4 else 512 on 60-160 GB CUDA devices, capped by
    --max-running-requests when left at its default; on NPUs up to 64 GiB it is set first by
    :func:`sglang_npu_defaults` (so the cap does not apply: ``decode_max_bs_is_default`` is false). The
    device memory is ``torch.npu.mem_get_info()[1]`` on NPUs (srt/utils/common.py,
    get_npu_memory_capacity). The prefill-graph term (8 MB per captured size) is left out.
    """
    gpu_mb = hbm_gib * 1024.0
    npu_set = sglang_npu_defaults(hbm_gib, tp) if npu else None
    if npu_set is not None:
        max_bs = npu_set[1]
    else:
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
    if attn_dp > 1:
        reserved += max_bs * attn_dp * 3 + (max_bs * attn_dp * 1.5 if max_bs > 300 else 0.0)
    if gpu_mb > 60 * 1024:
        reserved = max(reserved, 10 * 1024.0)
    return round((gpu_mb - reserved) / gpu_mb, 3)


#: SGLang's step token budget with chunked prefill off (``--chunked-prefill-size -1``): none
UNBOUNDED_TOKENS = 1 << 40


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


def _read_flag(kw: dict[str, Any], flag: str, value: Any) -> bool:
    """Put what ``flag`` says into ``kw``; False for a flag the simulator does not model."""
    if flag in _SGLANG_INT:
        kw[_SGLANG_INT[flag]] = as_int(flag, value)
    elif flag == "--mem-fraction-static":
        kw["memory_fraction"] = as_float(flag, value)
    elif flag == "--enable-mixed-chunk":
        kw["mixed_batch"] = as_bool(flag, value)
    elif flag == "--enable-dp-attention":
        kw["dp_attention"] = as_bool(flag, value)
    elif flag in ("--attn-dp-size", "--attention-data-parallel-size"):
        kw["attn_dp"] = as_int(flag, value)  # sglang 0.5.23's spelling of --dp-size N --enable-dp-attention
    elif flag in ("--node-rank", "--dist-init-addr"):
        pass  # where this process sits in a multi-node instance: the instance is simulated whole
    elif flag == "--speculative-algorithm":
        kw["spec_algorithm"] = str(value or "").upper()
    elif flag == "--disable-radix-cache":  # sglang 0.5.23 srt/arg_groups/fields/memory.py:64-70
        kw["prefix_caching"] = not as_bool(flag, value)
    elif flag in _SGLANG_SPEC:
        kw[_SGLANG_SPEC[flag]] = as_int(flag, value)
    else:
        return False
    return True


def _sglang_attention_dp(kw: dict[str, Any]) -> None:
    """DP attention: ``--attn-dp-size N`` as ``--dp-size N --enable-dp-attention``, and with it each
    attention rank's share of ``--tp-size``."""
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


def knobs_sglang(argv: Sequence[str]) -> EngineKnobs:
    """SGLang's knobs from its command line."""
    kw: dict[str, Any] = {"engine": "sglang", "mixed_batch": False}  # page size: the platform's (personality)
    ignored: list[str] = []
    for flag, value in split_argv(argv):
        if not _read_flag(kw, flag, value) and flag not in ignored:
            ignored.append(flag)
    _sglang_speculative(kw)
    _sglang_attention_dp(kw)
    if kw.get("max_num_batched_tokens", 0) == -1:  # SGLang: -1 disables chunking
        # no chunk bound: --max-prefill-tokens bounds a prefill batch, and a prompt longer than it
        # runs alone (PrefillAdder admits a batch's first request whole: sglang 0.5.23
        # srt/managers/schedule_policy.py, add_one_req without a chunk); no step budget rejects it
        kw["max_num_batched_tokens"] = UNBOUNDED_TOKENS
        kw["chunked_prefill"] = False
    return EngineKnobs(ignored=tuple(ignored), **kw)
