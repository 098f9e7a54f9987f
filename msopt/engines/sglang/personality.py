"""SGLang's simulator personality (see :mod:`msopt.sim.personality`): how SGLang reads its launch
and behaves, each value with the source it was read from. The simulator finds it by name
(:data:`msopt.sim.personality.PERSONALITIES`), as it finds a plugin's."""

from __future__ import annotations

import math
import re
from collections.abc import Sequence

from msopt.engines.sglang.knobs import knobs_sglang, sglang_mem_fraction, sglang_npu_defaults
from msopt.sim.knobs import EngineKnobs
from msopt.sim.memory import MemoryPlan
from msopt.sim.personality import MeasuredLayout, Personality, resolved

#: a measured SGLang row whose launch's memory fraction SGLang's default formula puts below this had it set in the
#: source's launch command (not in the measured schema): ASSUMED_FRACTION is assumed
MIN_MEASURED_FRACTION = 0.5
ASSUMED_FRACTION = 0.8
#: speculative decoding methods of measured rows as SGLang's --speculative-algorithm
_SPECULATIVE = {"mtp": "NEXTN", "eagle": "EAGLE3"}


class SglangPersonality(Personality):
    """SGLang 0.5.23: chunk 4096/8192 below/above 70 GiB devices, 1024 running requests, a static
    memory fraction it computes from the device (:func:`msopt.engines.sglang.knobs.sglang_mem_fraction`)."""

    name = "sglang"
    context_key = "--context-length"
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
    # sglang 0.5.23 srt/entrypoints/openai/serving_base.py:271-293 reads X-Data-Parallel-Rank into routed_dp_rank;
    # srt/managers/data_parallel_controller.py:865-897 sends it to that rank, the others round robin (the default
    # load_balance_method "auto" is round_robin outside PD, srt/arg_groups/serving_hook.py:217-232)
    dp_rank_header = True
    prefix_cache_partial = True
    measured_names = ("sglang",)

    def knobs_from_argv(self, argv: Sequence[str]) -> EngineKnobs:
        return knobs_sglang(argv)

    def default_block_size(self, memory_kind: str) -> tuple[int, str]:
        if memory_kind == "NPU":
            return 128, ("sglang docs/platforms/ascend/ascend_npu_support_features.md (commit 041ddab): "
                         "--page-size default 128 on Atlas A2/A3")
        return 1, "sglang 0.5.23 srt/arg_groups/overrides.py _page_size_default: page_size 1 (64 on MUSA only)"

    def default_memory_fraction(self, knobs: EngineKnobs, hbm_gib: float, batched_tokens: int,
                                memory_kind: str = "CUDA") -> float:
        # with DP attention --tp-size is the whole world and the attention ranks live inside it
        attn_dp = knobs.dp if knobs.dp_attention else 1
        return sglang_mem_fraction(hbm_gib, knobs.tp * attn_dp, knobs.pp,
                                   batched_tokens if knobs.chunked_prefill else 16384, knobs.max_num_seqs,
                                   npu=memory_kind == "NPU", attn_dp=attn_dp)

    def default_batched_tokens_for(self, hbm_gib: float, memory_kind: str = "CUDA", tp: int = 1) -> int:
        # sglang 0.5.23 srt/hardware_backend/npu/utils.py (set_default_server_args): 4096 up to 32 GiB, 8192 up
        # to 64 GiB on NPUs
        npu = sglang_npu_defaults(hbm_gib, tp) if memory_kind == "NPU" else None
        return npu[0] if npu is not None else super().default_batched_tokens_for(hbm_gib, memory_kind, tp)

    def hybrid_state_slots(self, knobs: EngineKnobs, rest_gib: float, per_seq_gib: float) -> int:
        # sglang 0.5.23 srt/mem_cache/kv_cache_configurator.py:3323-3385 (_handle_max_mamba_cache): with the radix
        # cache off and --max-running-requests set, one slot per running request of an attention-DP rank; else
        # the pool takes mamba_full_memory_ratio / (1 + ratio) of what is left (fallback ratio 0.9,
        # srt/arg_groups/fields/schedule.py), less the pool's padding slot
        if per_seq_gib <= 0:
            return 0
        if not knobs.prefix_caching and knobs.max_num_seqs:
            ranks = knobs.dp if knobs.dp_attention else 1
            return max(1, int(knobs.max_num_seqs) // ranks)
        ratio = 0.9
        return max(0, int(rest_gib * ratio / (1 + ratio) // per_seq_gib) - 1)

    def no_state_memory(self, knobs: EngineKnobs, mem: MemoryPlan) -> str:
        # sglang 0.5.23 srt/mem_cache/kv_cache_configurator.py:3387-3400
        per_seq_mb = mem.state_gib / mem.state_slots * 1024 if mem.state_slots else 0.0
        return ("RuntimeError: Not enough GPU memory for hybrid (mamba/linear-attention) state cache. Computed "
                f"max_mamba_cache_size={mem.state_slots} (total_rest_memory={mem.kv_gib + mem.state_gib:.2f} GB, "
                f"mamba_cache_per_req={per_seq_mb:.2f} MB). Try: (1) reduce --max-running-requests, (2) increase "
                "--mem-fraction-static")

    def fraction_problem(self, knobs: EngineKnobs) -> str | None:
        # SGLang refuses no --mem-fraction-static at start-up: a fraction of 0 or less reaches its KV sizing
        # (no_kv_memory); one above 1 is refused here as by every engine
        if knobs.memory_fraction is not None and knobs.memory_fraction <= 0:
            return None
        return super().fraction_problem(knobs)

    def draft_problem(self, method: str, memory_kind: str) -> str | None:
        # sglang 0.5.23 srt/arg_groups/speculative_hook.py, _handle_ngram
        if method == "ngram" and memory_kind == "NPU":
            return "ValueError: Ngram speculative decoding only supports CUDA, CPU, or XPU devices."
        return None

    def no_kv_memory(self, knobs: EngineKnobs, mem: MemoryPlan) -> str:
        if mem.weights_gib + mem.reserve_gib >= mem.usable_gib:
            # sglang 0.5.23 srt/mem_cache/kv_cache_configurator.py:3043-3058 (_profile_available_bytes): the
            # static budget (device x fraction) does not even hold the weights; minimum = 1 - available/pre
            total = mem.usable_gib / knobs.memory_fraction if knobs.memory_fraction else 0.0
            least = (mem.weights_gib + mem.reserve_gib) / total if total > 0 else 1.0
            return ("ValueError: Loaded weights leave no GPU memory for the KV cache under "
                    f"--mem-fraction-static={knobs.memory_fraction}. Raise --mem-fraction-static above "
                    f"{math.ceil(least * 1000) / 1000:.3f} (minimum viable = 1 - available/pre = {least:.4f}). "
                    "If using speculative decoding, draft weights are now counted.")
        # sglang 0.5.23 srt/model_executor/pool_configurator.py
        return ("RuntimeError: Not enough memory. Please try to increase --mem-fraction-static. "
                f"Current value: mem_fraction_static={knobs.memory_fraction}")

    def kv_cap_warning(self, mem: MemoryPlan, max_model_len: int) -> str:
        return (f"WARNING KV pool holds {mem.kv_tokens} tokens, fewer than --context-length "
                f"{max_model_len}. One full-length request cannot fit, so long requests will be "
                "refused or truncated at serving time.")

    def measured_argv(self, layout: MeasuredLayout) -> tuple[list[str], list[str]]:
        lo, assumed = layout, []
        argv = ["--tp-size", str(lo.tp)]
        if lo.pp > 1:
            argv += ["--pp-size", str(lo.pp)]
        if lo.dp > 1:
            argv += ["--dp-size", str(lo.dp)]
            if lo.is_moe:
                # the sglang-Ascend recipes serve their MoE models with --enable-dp-attention when dp > 1
                argv += ["--enable-dp-attention"]
                assumed.append("dp > 1 of an MoE model read as DP attention (--enable-dp-attention)")
        if lo.ep > 1:
            argv += ["--ep-size", str(lo.ep)]
        if lo.tp * lo.pp > lo.devices_per_node:
            argv += ["--nnodes", str(math.ceil(lo.tp * lo.pp / lo.devices_per_node))]
        if lo.max_seqs:
            argv += ["--max-running-requests", str(lo.max_seqs)]
        if lo.batched_tokens:
            argv += ["--max-prefill-tokens", str(lo.batched_tokens)]
        if lo.chunk is not None:
            argv += ["--chunked-prefill-size", str(lo.chunk)]
        m = re.search(r"--mem-frac(?:tion-static)?[ =]([\d.]+)|mem_frac(?:tion_static)? ([\d.]+)", lo.notes)
        if m:
            argv += ["--mem-fraction-static", m.group(1) or m.group(2)]
        return argv, assumed

    def speculative_argv(self, method: str, steps: int, draft_tokens: int) -> list[str] | None:
        algo = _SPECULATIVE.get(method)
        if algo is None:
            return None
        return ["--speculative-algorithm", algo, "--speculative-num-steps", str(steps), "--speculative-eagle-topk",
                "1", "--speculative-num-draft-tokens", str(draft_tokens)]

    def measured_memory_fix(self, knobs: EngineKnobs, hbm_gib: float,
                            memory_kind: str = "CUDA") -> tuple[list[str], str] | None:
        if knobs.memory_fraction is not None or (resolved(knobs, hbm_gib, memory_kind).memory_fraction or 0.0) >= \
                MIN_MEASURED_FRACTION:
            return None
        # SGLang's default reserves 1.5 x the chunk size: with the recipes' huge chunks it leaves nothing, so their
        # launches set --mem-fraction-static, which the measured schema does not carry
        return (["--mem-fraction-static", str(ASSUMED_FRACTION)],
                f"--mem-fraction-static {ASSUMED_FRACTION} (not in the row; SGLang's default leaves no KV cache at "
                "this chunk size)")

    def aiconfigurator_argv(self, concurrency: int, input_len: int, output_len: int) -> list[str]:
        # --max-running-requests = batch size, --max-prefill-tokens = ISL + 1500 (aiconfigurator 0.5.0 to 0.12.0
        # generator/rule_plugin/sglang.rule)
        return ["--max-running-requests", str(concurrency), "--max-prefill-tokens", str(input_len + 1500)]


#: The instance the simulator's registry loads (``sglang``).
PERSONALITY = SglangPersonality()
