"""The built-in simulator personalities: vLLM, SGLang and MindIE (see :mod:`msopt.sim.personality`).

Each value below is the engine's own behaviour, with the source it was read from.
"""

from __future__ import annotations

from collections.abc import Sequence

from msopt.engines.launch import LaunchSpec
from msopt.sim.knobs import EngineKnobs, knobs_mindie, knobs_sglang, knobs_vllm, sglang_mem_fraction, vllm_launch_knobs
from msopt.sim.memory import MemoryPlan
from msopt.sim.personality import PERSONALITIES, Personality
from msopt.sim.spec_types import ModelSpec

#: MindIE's ``ModelDeployConfig.maxSeqLen`` when config.json leaves it out.
_MINDIE_DEFAULT_MAX_SEQ_LEN = 2560


class VllmPersonality(Personality):
    """vLLM V1: token budget 2048/8192 and 256/1024 sequences below/above 70 GiB devices, 0.9 of
    device memory; the knobs come from its command line (and the CPU build's environment)."""

    name = "vllm"
    default_batched_tokens = (2048, 8192)
    default_max_seqs = (256, 1024)
    moe_shares_dp = True
    # vllm 0.32.0 engine/arg_utils.py:3021-3022: enable_prefix_caching None -> the model config's
    # is_prefix_caching_supported (True for a generative decoder); block-level, hits capped at the
    # prompt less one token and block aligned (v1/core/kv_cache_manager.py:290-298)
    prefix_caching = True

    def knobs_from_argv(self, argv: Sequence[str]) -> EngineKnobs:
        return knobs_vllm(argv)

    def knobs_from_launch(self, spec: LaunchSpec) -> EngineKnobs:
        return vllm_launch_knobs(spec)

    def startup_problem(self, knobs: EngineKnobs, model: ModelSpec, max_model_len: int) -> str | None:
        if max_model_len > model.max_position:
            return (f"ValueError: User-specified max_model_len ({max_model_len}) is greater than the derived "
                    f"max_model_len (max_position_embeddings={model.max_position}). Decrease max_model_len.")
        if not knobs.chunked_prefill and knobs.max_num_batched_tokens < max_model_len:  # type: ignore[operator]  # resolved
            return (f"ValueError: max_num_batched_tokens ({knobs.max_num_batched_tokens}) is smaller than "
                    f"max_model_len ({max_model_len}). This effectively limits the maximum sequence length to "
                    "max_num_batched_tokens and makes vLLM reject longer sequences. Please increase "
                    "max_num_batched_tokens or decrease max_model_len.")
        return None


class SglangPersonality(Personality):
    """SGLang 0.5.23: chunk 4096/8192 below/above 70 GiB devices, 1024 running requests, a static
    memory fraction it computes from the device (:func:`msopt.sim.knobs.sglang_mem_fraction`)."""

    name = "sglang"
    default_batched_tokens = (4096, 8192)
    default_max_seqs = (1024, 1024)
    # SGLang's static fraction covers weights + KV only; what the runtime itself holds
    # (context, allocator, buffers: reserve_gib) is in neither
    activation_outside_fraction = True
    # SGLang starts anyway and serves requests up to the pool's size
    # (sglang 0.5.23 srt/managers/tp_worker.py: max_req_len = min(context_len - 1, kv - 1))
    caps_context_to_kv = True
    # fixed-length requests (ignore_eos) have their whole remaining output reserved at admission
    # (sglang 0.5.23 srt/managers/schedule_policy.py _get_running_request_total_token_offset / add_one_req)
    reserves_whole_output = True
    # the PrefillAdder stops adding requests once the batch's prompt tokens reach --max-prefill-tokens
    # (sglang 0.5.23 srt/managers/schedule_policy.py PrefillAdder.budget_state; default 16384 in
    # srt/arg_groups/fields/schedule.py)
    prefill_token_cap = 16384
    # RadixAttention's prefix cache is on unless --disable-radix-cache (sglang 0.5.23
    # srt/arg_groups/fields/memory.py:64-70, default False); a radix tree over token ids at the page
    # size, 1 unless --page-size (srt/arg_groups/overrides.py:1340-1363, _page_size_default), matched up
    # to the prompt less one token (srt/managers/schedule_batch.py:1766-1768, _compute_max_prefix_len)
    prefix_caching = True
    prefix_cache_partial = True

    def knobs_from_argv(self, argv: Sequence[str]) -> EngineKnobs:
        return knobs_sglang(argv)

    def default_memory_fraction(self, knobs: EngineKnobs, hbm_gib: float, batched_tokens: int) -> float:
        return sglang_mem_fraction(hbm_gib, knobs.tp, knobs.pp, batched_tokens if knobs.chunked_prefill else 16384,
                                   knobs.max_num_seqs)

    def no_kv_memory(self, knobs: EngineKnobs, mem: MemoryPlan) -> str:
        # sglang 0.5.23 srt/model_executor/pool_configurator.py
        return ("RuntimeError: Not enough memory. Please try to increase --mem-fraction-static. "
                f"Current value: mem_fraction_static={knobs.memory_fraction}")

    def kv_cap_warning(self, mem: MemoryPlan, max_model_len: int) -> str:
        return (f"WARNING KV pool holds {mem.kv_tokens} tokens, fewer than --context-length "
                f"{max_model_len}. One full-length request cannot fit, so long requests will be "
                "refused or truncated at serving time.")


class MindiePersonality(Personality):
    """MindIE: knobs from the rendered config.json, 8192 prefill tokens and 200 sequences
    (ScheduleConfig defaults), maxSeqLen 2560 when unset."""

    name = "mindie"
    default_batched_tokens = (8192, 8192)
    default_max_seqs = (200, 200)
    moe_tp_first = True
    holds_queue_delay = True  # ScheduleConfig maxQueueDelayMicroseconds
    # Prefix Cache is off unless config.json turns it on (ScheduleConfig.enablePrefixCache and
    # ModelConfig plugin_params {"plugin_type":"prefix_cache"}: MindIE 1.0.0 LLM developer guide,
    # "Prefix Cache", hiascend.com mindie/100/mindiellm/llmdev/mindie_llm0302.html); a common prefix is
    # reused from one Page Attention block (cacheBlockSize) up: block-level, as vLLM's
    prefix_caching = False

    def knobs_from_launch(self, spec: LaunchSpec) -> EngineKnobs:
        return knobs_mindie(spec.files)

    def default_max_model_len(self, model: ModelSpec) -> int:
        return _MINDIE_DEFAULT_MAX_SEQ_LEN

    def no_kv_memory(self, knobs: EngineKnobs, mem: MemoryPlan) -> str:
        return (f"RuntimeError: NPU out of memory: no memory left for the KV cache "
                f"({mem.kv_gib:.2f} GiB after {mem.weights_gib:.2f} GiB of weights); raise tp/pp or npuMemSize.")

    def short_kv(self, knobs: EngineKnobs, mem: MemoryPlan, max_model_len: int) -> str:
        return (f"RuntimeError: NPU out of memory: the KV cache holds {mem.kv_tokens} tokens, fewer than "
                f"maxSeqLen ({max_model_len}); lower maxSeqLen or raise tp/pp/npuMemSize.")


for _p in (VllmPersonality(), SglangPersonality(), MindiePersonality()):
    PERSONALITIES.register(_p.name, _p)
