"""TGI as msopt's simulator models it: a :class:`~msopt.sim.personality.Personality` registered as
``tgi`` through the ``msopt.sim_personalities`` entry point.

The knobs and defaults are the launcher's (text-generation-inference ``launcher/src/main.rs`` at
commit 009c4e0b945b2c111368afdc2c9813c32db0a9b7); the scheduling is the simulator's continuous
batching with TGI's rule that a prefill pauses the running batch (``--max-waiting-tokens``' help).
The start-up and memory error texts are msopt's wording, not checked against TGI.
"""

from __future__ import annotations

from collections.abc import Sequence
from types import MappingProxyType
from typing import Any

from msopt.errors import SimulationError
from msopt.sim.catalog_types import ModelSpec
from msopt.sim.knobs import EngineKnobs
from msopt.sim.memory import MemoryPlan
from msopt.sim.personality import Personality
from msopt_tgi import MAX_DEFAULT

#: Launcher flags the simulator models, and the knob each sets.
_INT = MappingProxyType({
    "--num-shard": "tp",
    "--max-batch-size": "max_num_seqs",
    "--max-batch-prefill-tokens": "max_num_batched_tokens",
    "--max-total-tokens": "max_model_len",
})


def _number(flag: str, value: str | None, cast: Any) -> Any:
    try:
        return cast(float(value)) if cast is int else float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise SimulationError(f"{flag} = {value!r}: expected a number") from None


class TgiPersonality(Personality):
    """TGI: ``--num-shard`` is the tensor parallelism, a prefill batch holds up to
    ``--max-batch-prefill-tokens`` (default ``max_input_tokens + 50`` = 4145 for a 4096-token default),
    ``--cuda-memory-fraction`` defaults to 1.0, and the longest sequence (``--max-total-tokens``)
    to min(max_position_embeddings, 4096). TGI sets no batch-size limit by default; 1024 stands for it."""

    name = "tgi"
    default_batched_tokens = (MAX_DEFAULT - 1 + 50, MAX_DEFAULT - 1 + 50)
    default_max_seqs = (1024, 1024)

    def knobs_from_argv(self, argv: Sequence[str]) -> EngineKnobs:
        kw: dict[str, Any] = {"engine": self.name, "chunked_prefill": False, "mixed_batch": False,
                              "memory_fraction": 1.0}
        ignored: list[str] = []
        items = list(argv)
        for i, item in enumerate(items):
            if not item.startswith("--"):
                continue
            flag, _, inline = item.partition("=")
            value = inline or (items[i + 1] if i + 1 < len(items) else None)
            if flag in _INT:
                kw[_INT[flag]] = _number(flag, value, int)
            elif flag == "--cuda-memory-fraction":
                kw["memory_fraction"] = _number(flag, value, float)
            elif flag not in ignored:
                ignored.append(flag)
        return EngineKnobs(ignored=tuple(ignored), **kw)

    def default_max_model_len(self, model: ModelSpec) -> int:
        return min(model.max_position, MAX_DEFAULT)

    def no_kv_memory(self, knobs: EngineKnobs, mem: MemoryPlan) -> str:
        return (f"RuntimeError: no memory left for the KV cache after {mem.weights_gib:.2f} GiB of weights "
                "(simulated TGI warm-up); raise --num-shard or --cuda-memory-fraction")

    def short_kv(self, knobs: EngineKnobs, mem: MemoryPlan, max_model_len: int) -> str:
        return (f"RuntimeError: the KV cache holds {mem.kv_tokens} tokens, fewer than --max-total-tokens "
                f"({max_model_len}) (simulated TGI warm-up); lower --max-total-tokens or raise --num-shard")


#: The instance the entry point registers.
PERSONALITY = TgiPersonality()
