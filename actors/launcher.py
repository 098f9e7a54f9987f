"""The Ray side of a run session: :class:`RayLauncher` starts Ray and the actor pool for
:class:`msopt.run.session.RunSession` and stops them after the run."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from actors.pool import RayPool, init_ray, shutdown_ray
from actors.preflight import cluster_hardware
from msopt.config import Config
from msopt.evaluate import Parsed
from msopt.run.pool import EvaluatorPool
from msopt.run.session import Probes

__all__ = ["RayLauncher"]


class RayLauncher:
    """Ray actors for a session (``msopt optimize`` without ``--no-ray``).

    Args:
        address: the Ray cluster to join (``auto``: the running one / RAY_ADDRESS); None: start a
            local instance (or join RAY_ADDRESS when set).
        max_concurrent: cap on concurrent evaluations (``--max-concurrent``); 0 or None:
            ``[cluster] max_concurrent_trials``, else the swarm size.
    """

    slow = True  # ray.init and the actors take seconds: the session searches the prior meanwhile

    def __init__(self, address: str | None = None, max_concurrent: int | None = None) -> None:
        self.address = address
        self.max_concurrent = max_concurrent or 0
        self._started: object = False

    def announce(self, say: Callable[[str], None]) -> None:
        """ray.init takes seconds: say what the silence is."""
        where = self.address or os.environ.get("RAY_ADDRESS")
        say(f"joining the Ray cluster at {where} ..." if where else "starting Ray ...")

    def start(self, config: Config, parsed: Parsed, run_dir: Path, say: Callable[[str], None]) -> EvaluatorPool:
        """Start (or join) Ray and the actor pool, whose actors take ``parsed`` (pickled, not parsed again)."""
        simulate = config.run.simulate
        cap = self.max_concurrent or config.cluster.max_concurrent_trials
        n = config.run.n_particles
        slots = min(n, cap) if cap else n
        self._started = init_ray(config, self.address, simulate=simulate, slots=slots)
        return RayPool(config, simulate=simulate, run_dir=str(run_dir), max_concurrent=self.max_concurrent,
                       parsed=parsed)

    def hardware(self, say: Callable[[str], None]) -> Probes | None:
        """Each node's hardware, by a Ray task per node (None, said in a line, where it fails)."""
        try:
            return cluster_hardware()
        except Exception as exc:  # noqa: BLE001  a node that cannot be probed costs the prior, not the run
            text = str(exc).strip()
            say(f"prior: the nodes could not be probed for their hardware "
                f"({type(exc).__name__}: {text.splitlines()[0] if text else 'no message'})")
            return None

    def stop(self) -> None:
        """Stop what :meth:`start` started (nothing when it joined a running Ray)."""
        started, self._started = self._started, False
        shutdown_ray(started)
