"""MindIE's simulator personality (see :mod:`msopt.sim.personality`): how MindIE reads its launch
(the rendered config.json) and behaves. The simulator finds it by name
(:data:`msopt.sim.personality.PERSONALITIES`), as it finds a plugin's."""

from __future__ import annotations

from msopt.engines.mindie.knobs import knobs_mindie
from msopt.sim.catalog_types import ModelSpec
from msopt.sim.knobs import EngineKnobs, Launch
from msopt.sim.memory import MemoryPlan
from msopt.sim.personality import Personality

#: MindIE's ``ModelDeployConfig.maxSeqLen`` when config.json leaves it out.
_MINDIE_DEFAULT_MAX_SEQ_LEN = 2560


class MindiePersonality(Personality):
    """MindIE: knobs from the rendered config.json, 8192 prefill tokens and 200 sequences
    (ScheduleConfig defaults), maxSeqLen 2560 when unset."""

    name = "mindie"
    context_key = "ModelDeployConfig.maxSeqLen"
    default_batched_tokens = (8192, 8192)
    default_max_seqs = (200, 200)
    moe_tp_first = True
    holds_queue_delay = True  # ScheduleConfig maxQueueDelayMicroseconds
    # Prefix Cache is off unless config.json turns it on (ScheduleConfig.enablePrefixCache and
    # ModelConfig plugin_params {"plugin_type":"prefix_cache"}: MindIE 1.0.0 LLM developer guide,
    # "Prefix Cache", hiascend.com mindie/100/mindiellm/llmdev/mindie_llm0302.html); a common prefix is
    # reused from one Page Attention block (cacheBlockSize) up: block-level, as vLLM's
    prefix_caching = False
    measured_names = ("mindie",)
    measured_skip = "MindIE rows carry no config.json to read the scheduler from"

    def knobs_from_launch(self, spec: Launch) -> EngineKnobs:
        return knobs_mindie(spec.files)

    def default_block_size(self, memory_kind: str) -> tuple[int, str]:
        # the adapter renders cacheBlockSize from its template, so this applies only to a config.json without it
        return 128, ("MindIE's shipped config.json: BackendConfig.ScheduleConfig.cacheBlockSize 128 (the most "
                     "MindIE-LLM 8b4871a src/config_manager/schedule_config.cpp accepts)")

    def default_max_model_len(self, model: ModelSpec) -> int:
        return _MINDIE_DEFAULT_MAX_SEQ_LEN

    def no_kv_memory(self, knobs: EngineKnobs, mem: MemoryPlan) -> str:
        return (f"RuntimeError: NPU out of memory: no memory left for the KV cache "
                f"({mem.kv_gib:.2f} GiB after {mem.weights_gib:.2f} GiB of weights); raise tp/pp or npuMemSize.")

    def short_kv(self, knobs: EngineKnobs, mem: MemoryPlan, max_model_len: int) -> str:
        return (f"RuntimeError: NPU out of memory: the KV cache holds {mem.kv_tokens} tokens, fewer than "
                f"maxSeqLen ({max_model_len}); lower maxSeqLen or raise tp/pp/npuMemSize.")


#: The instance the simulator's registry loads (``mindie``).
PERSONALITY = MindiePersonality()
