"""vLLM's simulator personality (see :mod:`msopt.sim.personality`): how vLLM reads its launch and
behaves, each value with the source it was read from. The simulator finds it by name
(:data:`msopt.sim.personality.PERSONALITIES`), as it finds a plugin's."""

from __future__ import annotations

from collections.abc import Sequence

from msopt.engines.vllm.knobs import knobs_vllm, vllm_launch_knobs
from msopt.sim.knobs import EngineKnobs, Launch
from msopt.sim.personality import Personality
from msopt.sim.spec_types import ModelSpec


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


#: The instance the simulator's registry loads (``vllm``).
PERSONALITY = VllmPersonality()
