"""What one replica's device memory holds (:class:`MemoryPlan`): computed by
:func:`msopt.sim.perf.plan_memory`, read by a personality's out-of-memory messages
(:mod:`msopt.sim.personality`)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class MemoryPlan:
    """Per-device memory of one replica, GiB, and the KV cache it leaves.

    Attributes:
        weights_gib: this device's share of the weights.
        activation_gib: peak activations of a full-budget step plus sampler logits.
        reserve_gib: runtime memory the framework never gets.
        usable_gib: the engine's share of device memory (hbm x memory fraction).
        kv_gib: what is left for the KV cache (may be <= 0: the server fails).
        kv_tokens: tokens the KV cache of the replica holds (whole blocks).
        num_blocks: KV blocks of the replica.
        state_gib: hybrid attention: the linear layers' state pool (0 for other models).
        state_slots: requests the state pool holds (0: no pool); no more run at once.
    """

    weights_gib: float
    activation_gib: float
    reserve_gib: float
    usable_gib: float
    kv_gib: float
    kv_tokens: int
    num_blocks: int
    state_gib: float = 0.0
    state_slots: int = 0
