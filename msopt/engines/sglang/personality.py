"""SGLang's simulator personality (see :mod:`msopt.sim.personality`): how SGLang reads its launch
and behaves, each value with the source it was read from. The simulator finds it by name
(:data:`msopt.sim.personality.PERSONALITIES`), as it finds a plugin's."""

from __future__ import annotations

from collections.abc import Sequence

from msopt.engines.sglang.knobs import knobs_sglang, sglang_mem_fraction
from msopt.sim.knobs import EngineKnobs
from msopt.sim.memory import MemoryPlan
from msopt.sim.personality import Personality


class SglangPersonality(Personality):
    """SGLang 0.5.23: chunk 4096/8192 below/above 70 GiB devices, 1024 running requests, a static
    memory fraction it computes from the device (:func:`msopt.engines.sglang.knobs.sglang_mem_fraction`)."""

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

    def draft_problem(self, method: str, memory_kind: str) -> str | None:
        # sglang 0.5.23 srt/arg_groups/speculative_hook.py, _handle_ngram
        if method == "ngram" and memory_kind == "NPU":
            return "ValueError: Ngram speculative decoding only supports CUDA, CPU, or XPU devices."
        return None

    def no_kv_memory(self, knobs: EngineKnobs, mem: MemoryPlan) -> str:
        # sglang 0.5.23 srt/model_executor/pool_configurator.py
        return ("RuntimeError: Not enough memory. Please try to increase --mem-fraction-static. "
                f"Current value: mem_fraction_static={knobs.memory_fraction}")

    def kv_cap_warning(self, mem: MemoryPlan, max_model_len: int) -> str:
        return (f"WARNING KV pool holds {mem.kv_tokens} tokens, fewer than --context-length "
                f"{max_model_len}. One full-length request cannot fit, so long requests will be "
                "refused or truncated at serving time.")


#: The instance the simulator's registry loads (``sglang``).
PERSONALITY = SglangPersonality()
