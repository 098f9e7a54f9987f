"""DecodeContext and priority resolution for ternary repair."""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple


class DecodeContext(NamedTuple):
    """Which particle of which iteration a position belongs to.

    Attributes:
        particle_index: 0-based index of the particle in the swarm.
        n_particles: swarm size.
        iteration: 0-based iteration (in async mode, the particle's own evaluation count).
    """

    particle_index: int
    n_particles: int
    iteration: int = 0


def resolve_priority(
    target_names: Sequence[str],
    policy: str = "balanced",
    priority: Sequence[str] | None = None,
    context: DecodeContext | None = None,
) -> tuple[str, str]:
    """Return the two source names, the one to keep first.

    ``fixed``: the explicit ``priority`` when it names exactly the two targets, else
    ``target_names`` order. ``balanced``: particles in the first half keep ``target_names[0]``,
    the second half keep ``target_names[1]``, and odd iterations swap; without a context,
    ``target_names`` order.
    """
    a, b = target_names[0], target_names[1]
    if policy == "fixed":
        if priority is not None and len(priority) == 2 and set(priority) == {a, b} and a != b:
            return (priority[0], priority[1])
        return (a, b)
    if context is None:
        return (a, b)
    swap = context.particle_index >= context.n_particles / 2
    if context.iteration % 2 == 1:
        swap = not swap
    return (b, a) if swap else (a, b)
