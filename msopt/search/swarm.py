"""Particle swarm optimization as ask/tell over numpy arrays.

The swarm knows nothing about fields, engines or Ray: it hands out positions (one float per
dimension, inside ``[low, high]``), is told a fitness per position (lower is better; ``inf``
means the evaluation failed) and, optionally, the repaired position that was really evaluated
(write-back). One ask/tell, over the particles ``rows`` told together (default: all):

* sync: ``ask()`` the whole swarm, evaluate, ``tell(fitness, positions)``; the whole swarm moves.
* async: ``ask([i])``, evaluate, ``tell([f], [x], rows=[i])`` (``ask_one`` / ``tell_one`` say so
  for one particle); only particle ``i`` moves, with the coefficients of its own evaluation count.

The velocity update is the global-best PSO of Kennedy & Eberhart with inertia (Shi & Eberhart)::

    v <- w v + c1 r1 (pbest - x) + c2 r2 (gbest - x),   r1, r2 ~ U(0, 1) per dimension
    v <- clip(v, -clamp (high - low), clamp (high - low))
    x <- reflect(x + v) into [low, high]     (boundary = "reflect", the default)
    x <- clip(x + v), v <- 0 where clipped    (boundary = "absorb")

An attractor whose fitness is still ``inf`` (nothing evaluated successfully) does not pull.

Step mutation (``mutation`` = p > 0): after its move, each moved particle, with probability p,
takes one step along one dimension drawn at random, up or down (down or up where the step would
leave the box). A step is one candidate of a dimension with few candidates, else a tenth of the
dimension's range (:meth:`Swarm.__init__`'s ``steps``). On discrete serving knobs the near-miss
of a short search is one candidate away in one dimension (the smallest batched-token budget, the
next pipeline depth), which the velocity update alone reaches slowly.

Stall restart (``restart_patience`` = k > 0): a particle told k evaluations in a row that did not
improve its personal best is re-drawn uniformly in the box after its move, with a fresh initial
velocity; its personal best (and the global best) are kept. On the discrete spaces msopt searches
a converged particle otherwise keeps landing on configurations already evaluated (which the driver
reuses without a launch), so the search stops finding anything new long before the budget is spent.
``w``, ``c1`` and ``c2`` follow coefficient schedules (:data:`SCHEDULES`) with pyswarms'
``OptionsHandler`` semantics.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from msopt.search.constraint import NO_CONSTRAINT, REFUSED_REDRAWS, Constraint
from msopt.search.options import BOUNDARIES, SwarmOptions, swarm_options
from msopt.search.schedules import COEFFICIENTS, SCHEDULES, CoefficientSchedule

# re-exported: the options and schedules have their own modules
__all__ = ["BOUNDARIES", "COEFFICIENTS", "REFUSED_REDRAWS", "SCHEDULES", "CoefficientSchedule", "Swarm",
           "SwarmOptions", "swarm_options"]

_INIT_VELOCITY = 0.1  # initial speed: up to a tenth of each dimension's range
_DEFAULT_STEP = 0.1  # a mutation step where none is given: a tenth of the dimension's range


def _encode_fitness(value: float) -> float | None:
    return float(value) if math.isfinite(value) else None


class Swarm:
    """A global-best particle swarm over the box ``[low, high]``, minimising.

    Args:
        low: lower bound per dimension.
        high: upper bound per dimension; a dimension with ``high == low`` stays fixed.
        options: the swarm's options (its seed seeds the swarm's own RNG).
        steps: the mutation step per dimension (``SearchSpace.steps``: one candidate, or a
            tenth of the range where there are many); default a tenth of each range.
        init_positions: where particles ``0..k-1`` start (k rows, k <= n_particles; the
            baseline and the prior's picks); the others start uniformly at random inside the
            bounds. The random draws are the same with or without it, so the other particles
            start where they would have.
        constraint: what a move must respect (:class:`~msopt.search.constraint.Constraint`): a
            move draws among candidate moves that are not known refusals, drawing up to
            :data:`REFUSED_REDRAWS` more when every one is (a stalled particle's restart too), and
            with the constraint's screen each move draws ``k`` candidates and takes the one of the
            best predicted fitness (unranked, the first not predicted to fail, with the screen's
            :meth:`~msopt.search.constraint.Screen.chance_unranked`: ``explore`` at full trust in
            the model, 1 at none).
    """

    def __init__(
        self,
        low: Any,
        high: Any,
        options: SwarmOptions,
        steps: Any = None,
        init_positions: Any = None,
        constraint: Constraint = NO_CONSTRAINT,
    ) -> None:
        self._setup(low, high, options, steps)
        n, d = options.n_particles, self._low.size
        self._rng = np.random.default_rng(options.seed)
        positions = self._low + self._rng.random((n, d)) * self._width
        if init_positions is not None:
            rows = np.asarray(init_positions, dtype=float).reshape(-1, d)
            if rows.shape[0] > n:
                raise ValueError(f"init_positions has {rows.shape[0]} rows for {n} particles")
            for k, row in enumerate(rows):
                positions[k] = self._sanitize(row, positions[k], "init_positions")
        velocities = (self._rng.random((n, d)) * 2.0 - 1.0) * _INIT_VELOCITY * self._width
        self._positions = positions
        self._velocities = np.clip(velocities, -self._vmax, self._vmax)
        self._pbest_pos = positions.copy()
        self._pbest_fit = np.full(n, np.inf)
        self._gbest_pos = positions[0].copy()
        self._gbest_fit = math.inf
        self._counts = np.zeros(n, dtype=np.int64)
        self._stalls = np.zeros(n, dtype=np.int64)
        self._constraint = constraint
        self._released = False  # the particles were released from the model's starts (_release)

    def _setup(self, low: Any, high: Any, options: SwarmOptions, steps: Any = None) -> None:
        low = np.array(low, dtype=float).reshape(-1)
        high = np.array(high, dtype=float).reshape(-1)
        if low.shape != high.shape:
            raise ValueError(f"low and high differ in length: {low.size} != {high.size}")
        if not (np.all(np.isfinite(low)) and np.all(np.isfinite(high))):
            raise ValueError("bounds must be finite")
        if np.any(high < low):
            raise ValueError(f"high < low in dimension(s) {np.flatnonzero(high < low).tolist()}")
        self._low, self._high = low, high
        self._width = high - low
        with np.errstate(over="ignore"):  # an enormous clamp means "unclamped": inf is fine
            self._vmax = options.velocity_clamp * self._width
        if steps is None:
            self._steps = _DEFAULT_STEP * self._width
        else:
            given = np.array(steps, dtype=float).reshape(-1)
            if given.shape != low.shape or not np.all(np.isfinite(given)) or np.any(given < 0):
                raise ValueError(f"steps must be {low.size} finite values >= 0, got {steps!r}")
            self._steps = np.minimum(given, self._width)
        self._options = options

    # ---- read-only state -------------------------------------------------------------------

    @property
    def options(self) -> SwarmOptions:
        """The swarm's options."""
        return self._options

    @property
    def n_particles(self) -> int:
        """Number of particles."""
        return self._options.n_particles

    @property
    def dimensions(self) -> int:
        """Number of dimensions (fixed ones included)."""
        return int(self._low.size)

    @property
    def low(self) -> np.ndarray:
        """Lower bounds (a copy)."""
        return self._low.copy()

    @property
    def high(self) -> np.ndarray:
        """Upper bounds (a copy)."""
        return self._high.copy()

    @property
    def positions(self) -> np.ndarray:
        """Current positions, n_particles × d (a copy)."""
        return self._positions.copy()

    @property
    def velocities(self) -> np.ndarray:
        """Current velocities, n_particles × d (a copy)."""
        return self._velocities.copy()

    @property
    def best_position(self) -> np.ndarray | None:
        """The best position told so far, or None while no evaluation has succeeded."""
        return self._gbest_pos.copy() if math.isfinite(self._gbest_fit) else None

    @property
    def best_fitness(self) -> float:
        """The best fitness told so far (``inf`` while no evaluation has succeeded)."""
        return float(self._gbest_fit)

    @property
    def personal_best_positions(self) -> np.ndarray:
        """Each particle's best position (its start where its fitness is still ``inf``)."""
        return self._pbest_pos.copy()

    @property
    def personal_best_fitness(self) -> np.ndarray:
        """Each particle's best fitness (``inf`` while none of its evaluations succeeded)."""
        return self._pbest_fit.copy()

    @property
    def evaluation_counts(self) -> np.ndarray:
        """How many evaluations each particle has been told (a copy)."""
        return self._counts.copy()

    @property
    def iteration(self) -> int:
        """Completed iterations: the evaluation count every particle has reached."""
        return int(self._counts.min())

    @property
    def evaluations(self) -> int:
        """Total evaluations told, all particles together."""
        return int(self._counts.sum())

    # ---- ask / tell ------------------------------------------------------------------------

    def ask(self, rows: Sequence[int] | None = None) -> np.ndarray:
        """Return the positions of particles ``rows`` (default: all) to evaluate now (a copy)."""
        if rows is None:
            return self._positions.copy()
        return self._positions[[self._index(i) for i in rows]].copy()

    def tell(self, fitness: Any, positions: Any = None, rows: Sequence[int] | None = None) -> None:
        """Tell the fitness of particles ``rows`` (default: all) at their current positions, then
        move those particles.

        The bests are updated first, with the written-back positions; then the particles move
        together, with the coefficients of their evaluation count before this tell (the swarm's
        iteration when all are told together, a particle's own count when told alone, so
        particles dispatched independently each follow their schedule).

        Args:
            fitness: one value per particle of ``rows``, lower is better; NaN and ±inf count as
                failed evaluations (``inf``).
            positions: the repaired positions that were really evaluated (write-back), one row
                per particle of ``rows``. They replace the current positions before the bests are
                updated; NaN entries keep the asked value, other entries are clipped into the bounds.
            rows: the particles told, each once; default all of them, in order.
        """
        idx = np.arange(self.n_particles) if rows is None else np.array([self._index(i) for i in rows], dtype=int)
        if idx.size != np.unique(idx).size:
            raise ValueError(f"rows must not repeat a particle, got {idx.tolist()}")
        n, d = idx.size, self.dimensions
        fit = self._clean_fitness(np.asarray(fitness, dtype=float).reshape(-1), n)
        if positions is not None:
            given = np.asarray(positions, dtype=float)
            if given.shape != (n, d):
                raise ValueError(f"positions must have shape {(n, d)}, got {given.shape}")
            self._positions[idx] = self._sanitize(given, self._positions[idx], "positions")
        improved = fit < self._pbest_fit[idx]
        better = idx[improved]
        self._pbest_fit[better] = fit[improved]
        self._pbest_pos[better] = self._positions[better]
        self._stalls[idx] = np.where(improved, 0, self._stalls[idx] + 1)
        self._update_global_best()
        t = int(self._counts[idx].min())
        self._counts[idx] += 1
        self._move(idx, t)
        self._restart_stalled(idx)
        self._release(idx)

    def ask_one(self, i: int) -> np.ndarray:
        """Return particle ``i``'s current position (a copy): ``ask([i])[0]``."""
        return self.ask([i])[0]

    def tell_one(self, i: int, fitness: float, position: Any = None) -> None:
        """Tell particle ``i``'s fitness and move particle ``i`` only: ``tell([fitness], [position], rows=[i])``."""
        self.tell([fitness], None if position is None else [np.asarray(position, dtype=float).reshape(-1)], rows=[i])

    # ---- checkpoint ------------------------------------------------------------------------

    def to_state(self) -> dict[str, Any]:
        """Return the whole swarm as a JSON-serialisable dict.

        Arrays become nested lists of floats; a fitness of ``inf`` is written as ``None``; the
        RNG's state is ``rng.bit_generator.state``. It is the checkpoint written to state.json:
        ``--resume`` rebuilds the swarm by replaying the journal, not from it.
        """
        return {
            "version": 1,
            "options": self._options.to_dict(),
            "low": self._low.tolist(),
            "high": self._high.tolist(),
            "positions": self._positions.tolist(),
            "velocities": self._velocities.tolist(),
            "personal_best_positions": self._pbest_pos.tolist(),
            "personal_best_fitness": [_encode_fitness(f) for f in self._pbest_fit.tolist()],
            "best_position": self._gbest_pos.tolist(),
            "best_fitness": _encode_fitness(self._gbest_fit),
            "evaluation_counts": self._counts.tolist(),
            "stalls": self._stalls.tolist(),
            "released": self._released,
            "steps": self._steps.tolist(),
            "rng": self._rng.bit_generator.state,
        }

    # ---- internals -------------------------------------------------------------------------

    def _index(self, i: int) -> int:
        if isinstance(i, bool) or not isinstance(i, (int, np.integer)):
            raise TypeError(f"particle index must be an integer, got {i!r}")
        if not 0 <= i < self.n_particles:
            raise IndexError(f"particle index {i} out of range 0..{self.n_particles - 1}")
        return int(i)

    @staticmethod
    def _clean_fitness(fitness: np.ndarray, n: int) -> np.ndarray:
        if fitness.shape != (n,):
            raise ValueError(f"fitness must have {n} values, got {fitness.size}")
        return np.where(np.isfinite(fitness), fitness, np.inf)

    def _sanitize(self, given: np.ndarray, fallback: np.ndarray, what: str) -> np.ndarray:
        """Return ``given`` with NaN replaced by ``fallback`` and everything clipped to bounds.

        Written-back positions are encodings of real values, so an out-of-range one is the
        bound itself (clipped), not a bounce (reflected) as in a move.
        """
        if given.shape != fallback.shape:
            raise ValueError(f"{what} must have shape {fallback.shape}, got {given.shape}")
        out = np.where(np.isnan(given), fallback, given)
        return np.clip(out, self._low, self._high)

    def _update_global_best(self) -> None:
        best = int(np.argmin(self._pbest_fit))
        if self._pbest_fit[best] < self._gbest_fit:
            self._gbest_fit = float(self._pbest_fit[best])
            self._gbest_pos = self._pbest_pos[best].copy()

    def _allowed(self, x: np.ndarray) -> bool:
        return not self._constraint.refused(x)

    def _move(self, rows: np.ndarray, t: int) -> None:
        """Move particles ``rows`` with the coefficients of move ``t``."""
        opts = self._options
        w = opts.coefficient("w", t, self._rng)
        c1 = opts.coefficient("c1", t, self._rng)
        c2 = opts.coefficient("c2", t, self._rng)
        x = self._positions[rows]
        v = self._velocities[rows]
        nx, nv = self._step(rows, x, v, w, c1, c2)
        screen = self._constraint.screen if self._constraint.screen is not None and self._constraint.screen.k > 1 \
            else None
        if screen is not None or self._constraint.checks:
            k, explore, score = (screen.k, screen.chance_unranked(), screen.score) if screen is not None \
                else (1, 1.0, None)
            cands = [(nx, nv)] + [self._step(rows, x, v, w, c1, c2) for _ in range(k - 1)]
            unranked = self._rng.random(rows.size) < explore if screen is not None else np.ones(rows.size, bool)
            for r in range(rows.size):
                mine = [(c[0][r], c[1][r]) for c in cands]
                ok = [j for j, (cx, _) in enumerate(mine) if self._allowed(cx)]
                redraws = 0
                while not ok and redraws < REFUSED_REDRAWS:
                    one = rows[r:r + 1]
                    cx, cv = self._step(one, x[r:r + 1], v[r:r + 1], w, c1, c2)
                    mine.append((cx[0], cv[0]))
                    redraws += 1
                    if self._allowed(cx[0]):
                        ok = [len(mine) - 1]
                if not ok:
                    continue  # every draw is a known refusal: the first stands (refused again, free)
                j = ok[0]
                if unranked[r] and screen is not None and len(ok) > 1:  # the model's word on failures only
                    j = ok[screen.first_feasible(np.array([mine[i][0] for i in ok]))]
                elif not unranked[r] and score is not None and len(ok) > 1:
                    s = np.asarray(score(np.array([mine[i][0] for i in ok])), dtype=float)
                    if np.any(np.isfinite(s)):
                        j = ok[int(np.argmin(np.where(np.isnan(s), np.inf, s)))]
                nx[r], nv[r] = mine[j]
        self._positions[rows] = nx
        self._velocities[rows] = nv

    def _step(self, rows: np.ndarray, x: np.ndarray, v: np.ndarray, w: float, c1: float,
              c2: float) -> tuple[np.ndarray, np.ndarray]:
        """One candidate move of ``rows`` from ``x``, ``v``: velocity update, boundary, mutation."""
        r1 = self._rng.random(x.shape)
        r2 = self._rng.random(x.shape)
        # A failed (inf) attractor says nothing about where good configurations are.
        cognitive = np.where(
            np.isfinite(self._pbest_fit[rows])[:, None], self._pbest_pos[rows] - x, 0.0
        )
        social = (self._gbest_pos - x) if math.isfinite(self._gbest_fit) else np.zeros_like(x)
        with np.errstate(over="ignore", invalid="ignore"):
            v = w * v + c1 * r1 * cognitive + c2 * r2 * social
        v = np.clip(np.nan_to_num(v, nan=0.0), -self._vmax, self._vmax)
        if self._options.boundary == "absorb":
            x, v = self._absorb(x + v, v)
        else:
            x, v = self._reflect(x + v, v)
        return self._mutated(x), v

    def _mutated(self, x: np.ndarray) -> np.ndarray:
        """``x`` with each row, with probability ``mutation``, moved one step along a random dimension."""
        p = self._options.mutation
        movable = np.flatnonzero(self._steps > 0)
        if p <= 0 or movable.size == 0:
            return x
        x = x.copy()
        hit = np.flatnonzero(self._rng.random(x.shape[0]) < p)
        if hit.size == 0:
            return x
        dims = movable[self._rng.integers(0, movable.size, size=hit.size)]
        signs = np.where(self._rng.random(hit.size) < 0.5, -1.0, 1.0)
        for i, j, sign in zip(hit, dims, signs):
            y = x[i, j] + sign * self._steps[j]
            if not self._low[j] <= y <= self._high[j]:
                y = x[i, j] - sign * self._steps[j]
            x[i, j] = min(max(y, self._low[j]), self._high[j])
        return x

    def _release(self, rows: np.ndarray) -> None:
        """Once the run has lost all trust in the model that screens the moves (the screen's
        ``trust`` at 0; the particles started at its picks, see :class:`Screen`), re-draw the
        particles of ``rows`` at random and let them forget their personal bests, once: the pull
        of starts the model chose stays out of the search; the global best, measured, stays."""
        screen = self._constraint.screen
        if self._released or screen is None or screen.trust is None or screen.chance_unranked() < 1.0:
            return
        self._released = True
        keep = int(np.argmin(self._pbest_fit))
        rows = rows[rows != keep]
        if rows.size == 0:
            return
        self._redraw(rows)
        self._pbest_fit[rows] = np.inf
        self._pbest_pos[rows] = self._positions[rows]

    def _restart_stalled(self, rows: np.ndarray) -> None:
        """Re-draw the particles of ``rows`` that stalled ``restart_patience`` times in a row."""
        k = self._options.restart_patience
        if k <= 0:
            return
        stalled = rows[self._stalls[rows] >= k]
        if stalled.size:
            self._redraw(stalled)

    def _redraw(self, stalled: np.ndarray) -> None:
        """Re-draw the particles ``stalled`` at random positions (not known refusals) and velocities."""
        shape = (stalled.size, self.dimensions)
        fresh = self._low + self._rng.random(shape) * self._width
        if self._constraint.checks:
            for r in range(stalled.size):
                for _ in range(REFUSED_REDRAWS):
                    if self._allowed(fresh[r]):
                        break
                    fresh[r] = self._low + self._rng.random(self.dimensions) * self._width
        self._positions[stalled] = fresh
        v = (self._rng.random(shape) * 2.0 - 1.0) * _INIT_VELOCITY * self._width
        self._velocities[stalled] = np.clip(v, -self._vmax, self._vmax)
        self._stalls[stalled] = 0

    def _absorb(self, x: np.ndarray, v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Stop ``x`` on the bound it crossed and zero that velocity component."""
        out = ~((x >= self._low) & (x <= self._high))  # NaN counts as out
        x = np.where(np.isnan(x), self._low, x)
        return np.clip(x, self._low, self._high), np.where(out, 0.0, v)

    def _reflect(self, x: np.ndarray, v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Fold ``x`` back into the bounds, as often as needed; flip ``v`` on an odd count."""
        low, width = self._low, self._width
        inside = (x >= low) & (x <= self._high)
        span = np.where(width > 0, width, 1.0)
        with np.errstate(over="ignore", invalid="ignore"):
            scaled = (x - low) / span
            bounces = np.floor(scaled)
            frac = scaled - bounces
            odd = np.mod(bounces, 2.0) == 1.0
            folded = low + np.where(odd, 1.0 - frac, frac) * width
        # x + v can overflow to ±inf with an enormous velocity_clamp; such a point sits on a bound
        folded = np.where(np.isfinite(folded), folded, np.clip(x, low, self._high))
        x = np.where(inside, x, folded)
        v = np.where(inside | ~odd, v, -v)
        return np.clip(x, low, self._high), v

