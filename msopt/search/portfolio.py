"""The prior-led swarm and the simulator corrected by the measurements, over the same lanes, split by
the trust in the prior (``[search] searcher = "auto"`` with a prior, or ``"portfolio"``; issue 49 part 2).

The swarm is led by the prior (it starts at its picks and its moves are screened by its
predictions). The surrogate (:class:`~msopt.search.surrogate.ResidualSurrogate`) is the prior
corrected by every measurement of the run: a Gaussian process whose mean is the prior scaled by a
fitted slope, with a doubt shared by each parallel layout, proposing by expected improvement. Each
generation's lanes are split by the prior's trust (the screen's ``trust``,
:meth:`~msopt.prior.PriorGuide.trust`), the lowest the run has judged so far: the surrogate takes
``lanes × MODEL_SHARE × (1 - trust / TRUST_FULL)`` of them (none at :data:`TRUST_FULL` or above,
:data:`MODEL_SHARE` of them at trust 0), the fraction rounded up with that probability by the
searcher's own seeded RNG, and takes the particles of the worst personal bests, so the best
particles keep following the prior. The swarm gets each lane's evaluated position (write-back: a
lane the surrogate proposed moves that particle there).

Where the launch budget pays fewer than :data:`EXPLORE_BELOW` generations, lanes 3, 6 and 9 of the
first generation explore (:func:`explore_lanes`): they draw at random from the prior's runner-up
parallel layout, configurations the launched picks leave out
(:meth:`~msopt.search.surrogate.ResidualSurrogate.explore`), so the one generation left has measurements
off the prior to correct it with. The first generation is otherwise the baseline and the prior's picks,
the swarm's starts.

Optuna's TPE (:class:`~msopt.search.tpe.TPESearcher`), which knows only the measurements, is told
every result too. It draws an explore lane where no layout is declared (its first
:data:`~msopt.search.tpe.STARTUP_TRIALS` proposals are random), and it takes the surrogate's lanes
where the constraint gives the surrogate nothing to model (no screen or no decoder: a searcher
built outside the driver). TPE lies about its trials in flight (Optuna's
``constant_liar``), since a generation's are asked together. Without a screen (``[search] screen``
<= 1) there is no trust to read: the swarm takes every lane.

Async: the lanes free at an ask are split the same way (one free lane: the surrogate's with that
probability).

Deterministic for a seed and a sequence of asks, tells and constraint answers (the trust is
a function of the results told), so ``--resume`` rebuilds it by replay.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from msopt.errors import ConfigError
from msopt.search.options import SwarmOptions
from msopt.search.searcher import SEARCHERS, SearcherSetup, Trial
from msopt.search.surrogate import ResidualSurrogate
from msopt.search.swarm import Swarm
from msopt.search.tpe import STARTUP_TRIALS, OptunaFactory, TPESearcher

__all__ = ["EXPLORE_BELOW", "EXPLORE_EVERY", "MODEL_SHARE", "TRUST_FULL", "PortfolioSearcher", "explore_lanes"]

#: At this trust or above the swarm takes every lane; below, the surrogate's share grows linearly to
#: :data:`MODEL_SHARE` at trust 0.
TRUST_FULL = 0.5
#: The share of the lanes the surrogate (or TPE, :func:`PortfolioSearcher._taken_lanes`) takes once the prior
#: has no trust left; the released swarm (``Swarm._release``) keeps the rest.
MODEL_SHARE = 0.5
#: Where a launch budget pays less than :data:`EXPLORE_BELOW` generations, every ``EXPLORE_EVERY``-th lane
#: of the first generation's part it pays (3, 6, ...) explores instead of a prior pick (:func:`explore_lanes`).
EXPLORE_EVERY = 3
#: The generations a budget must pay for the first one to be the prior's picks alone: below it, one
#: generation at most follows the first, and it can only correct the prior with what the first measured.
EXPLORE_BELOW = 2


def explore_lanes(lanes: int, launches: int | None) -> tuple[int, ...]:
    """The lanes of the first generation that explore instead of taking a prior pick: every
    :data:`EXPLORE_EVERY`-th of the lanes the budget pays (lane 0 is the baseline) where the budget
    pays fewer than :data:`EXPLORE_BELOW` generations (``launches < EXPLORE_BELOW × lanes``); none
    with more, or without a budget. The prior's agreement cannot be judged before these launches, and at
    most one generation follows them: it can leave the prior only for what the first one measured off it."""
    if launches is None or launches >= EXPLORE_BELOW * lanes:
        return ()
    return tuple(range(EXPLORE_EVERY, min(launches, lanes), EXPLORE_EVERY))


@dataclass
class _Asked:
    lane: int
    count: int
    tpe: int | None  # TPE's trial number where TPE proposed it
    position: np.ndarray


class PortfolioSearcher:
    """The prior-led swarm and TPE over the same lanes, split by the trust (see the module)."""

    name = "portfolio"

    def __init__(self, setup: SearcherSetup) -> None:
        if setup.mode not in ("sync", "async"):
            raise ConfigError(f"mode must be 'sync' or 'async', got {setup.mode!r}")
        options = setup.options if setup.options is not None else SwarmOptions(setup.concurrency, 1, seed=setup.seed)
        if options.n_particles != setup.concurrency:
            raise ValueError(f"swarm options have {options.n_particles} particles for a concurrency of "
                             f"{setup.concurrency}")
        self.mode = setup.mode
        self._setup = setup
        self.explore = explore_lanes(setup.concurrency, setup.launches)
        self.swarm = Swarm(setup.low, setup.high, options, steps=setup.steps,
                           init_positions=_around(setup.init_positions, self.explore, setup.concurrency),
                           constraint=setup.constraint)
        # the starts are the swarm's first lanes (told to TPE, not enqueued); TPE's lanes of a generation
        # are asked together, so it lies about those in flight; its own first STARTUP_TRIALS are drawn at
        # random beside the first generation, whose measurements sit where the prior pointed
        self.tpe = TPESearcher(replace(setup, init_positions=None), constant_liar=True,
                               startup=STARTUP_TRIALS + setup.concurrency)
        self._rng = np.random.default_rng(np.random.SeedSequence([int(setup.seed or 0), 0x9F0]))
        self._counts = [0] * setup.concurrency
        self._pending: dict[int, _Asked] = {}
        self._told: dict[int, tuple[float, _Asked]] = {}  # sync: lane -> told, this generation
        self._lowest = 1.0
        self.model = ResidualSurrogate(setup.dimensions, setup.constraint, setup.seed, setup.layout)
        self.split: list[tuple[float, tuple[int, ...]]] = []  # per ask round: (trust, the lanes TPE took)

    @property
    def lanes(self) -> int:  # noqa: D102
        return self._setup.concurrency

    def lane_count(self, lane: int) -> int:  # noqa: D102
        return self._counts[lane]

    def trust(self) -> float:
        """The lowest trust the run has judged the prior at so far, 0..1 (1 without a screen to read
        it from): once the prior has ranked the measurements wrongly, its agreement over the poorer
        configurations the search goes on to measure, which it ranks rightly, does not win it back."""
        screen = self._setup.constraint.screen
        if screen is None or screen.trust is None:
            return 1.0
        self._lowest = min(self._lowest, max(0.0, float(screen.trust())))
        return self._lowest

    def _taken_lanes(self, lanes: list[int]) -> set[int]:
        """Which of ``lanes`` the trust takes from the swarm now (the surrogate's, or TPE's where it cannot
        model): ``len(lanes) × MODEL_SHARE × (1 - trust / TRUST_FULL)``, rounded with the RNG, the
        particles of the worst personal bests first (a lane's first evaluation: the swarm's)."""
        trust = self.trust()
        free = [i for i in lanes if self._counts[i] > 0]
        share = len(free) * MODEL_SHARE * max(0.0, 1.0 - trust / TRUST_FULL)
        k = min(len(free), math.floor(share) + int(self._rng.random() < share - math.floor(share)))
        pbest = self.swarm.personal_best_fitness
        worst_first = sorted(free, key=lambda i: (-pbest[i], i))
        self.split.append((trust, tuple(sorted(worst_first[:k]))))
        return set(worst_first[:k])

    def _ask(self, lane: int, by_tpe: bool, at: np.ndarray | None = None) -> Trial:
        count = self._counts[lane]
        tid = count * self.lanes + lane
        if at is not None:
            asked = _Asked(lane, count, None, at)
        elif by_tpe:
            t = self.tpe.ask_one(lane)
            asked = _Asked(lane, count, t.id, t.position)
        else:
            asked = _Asked(lane, count, None, self.swarm.ask_one(lane))
        self._pending[tid] = asked
        return Trial(tid, asked.position.copy(), self._setup.context(lane, count), lane, count)

    def ask(self) -> list[Trial]:  # noqa: D102
        if self.mode == "sync":
            if self._pending or self._told:
                return []
            lanes = list(range(self.lanes))
        else:
            busy = {a.lane for a in self._pending.values()}
            lanes = [i for i in range(self.lanes) if i not in busy]
        if not lanes:
            return []
        by_tpe = self._taken_lanes(lanes)  # none of a lane's first evaluation
        explore: list[int] = []
        if all(self._counts[i] == 0 for i in lanes):
            explore = sorted(set(self.explore).intersection(lanes))
        # the lanes the trust takes from the swarm are the surrogate's where it can model the prior
        # (a screen and a decoder), else TPE's
        by_model = {i for i in by_tpe if self._counts[i] > 0} if self.model.usable else set()
        by_tpe -= by_model
        trials = [self._ask(i, i in by_tpe) for i in lanes if i not in by_model and i not in explore]
        if explore:  # draws from the prior's runner-up layout, off the launched picks, else TPE's
            paid = self._setup.launches if self._setup.launches is not None else self.lanes
            rows = self.model.explore(len(explore), [t.position for t in trials if t.lane < paid])
            trials += [self._ask(i, k >= len(rows), rows[k] if k < len(rows) else None) for k, i in enumerate(explore)]
        if by_model:
            pending = [a.position for a in self._pending.values()]
            rows = self.model.propose(len(by_model), pending)
            trials += [self._ask(i, False, rows[k] if k < len(rows) else None) for k, i in enumerate(sorted(by_model))]
        return sorted(trials, key=lambda t: t.lane)

    def tell(self, trial_id: int, fitness: float, position: Sequence[float] | None = None) -> None:  # noqa: D102
        if trial_id not in self._pending:
            raise KeyError(f"trial {trial_id} was not asked or was already told")
        asked = self._pending.pop(trial_id)
        if position is not None:
            asked.position = np.asarray(position, dtype=float)
        self._counts[asked.lane] += 1
        if self.mode == "async":
            self._learn([(float(fitness), asked)])
            return
        self._told[asked.lane] = (float(fitness), asked)
        if len(self._told) < self.lanes:
            return
        told = [self._told[i] for i in range(self.lanes)]
        self._told = {}
        self._learn(told)

    def _learn(self, told: list[tuple[float, _Asked]]) -> None:
        """Tell both searchers every result: the swarm moves its particles of these lanes, TPE
        gets its own trials' values and the swarm's results as finished trials."""
        rows = [a.lane for _, a in told]
        self.swarm.tell([f for f, _ in told], np.array([a.position for _, a in told], dtype=float),
                        rows=None if self.mode == "sync" else rows)
        for f, a in told:
            self.model.observe(a.position, f)
            if a.tpe is not None:
                self.tpe.tell(a.tpe, f)
            else:
                self.tpe.observe(a.position, f)

    @property
    def best_fitness(self) -> float:
        """The best fitness told so far (``inf`` while none)."""
        return self.swarm.best_fitness

    def to_state(self) -> dict[str, Any]:  # noqa: D102
        return {"searcher": self.name, "mode": self.mode, "explore": list(self.explore),
                "split": [[t, list(lanes)] for t, lanes in self.split],
                "swarm": self.swarm.to_state(), "tpe": self.tpe.to_state(),
                "model": {"slopes": [round(b, 4) for b in self.model.slopes]}}


def _around(rows: np.ndarray | None, explore: Sequence[int], lanes: int) -> np.ndarray | None:
    """The starts with the prior's picks moved past the ``explore`` lanes, in order (lane 0, the
    baseline, stays): the picks the explore lanes displace go to the later lanes, where the budget
    does not reach, or are left out past the last of the ``lanes``."""
    if rows is None or not explore:
        return rows
    rows = np.asarray(rows, dtype=float)
    free = [k for k in range(1, len(rows) + len(explore)) if k not in explore]
    out: dict[int, np.ndarray] = {0: rows[0]}
    for k, row in zip(free, rows[1:]):
        if k < lanes:
            out[k] = row
    for k in explore:  # the swarm's particle of an explore lane starts where TPE's draw is written back
        out.setdefault(k, rows[0])
    # rows for lanes 0..k-1 only: an explore lane past the last pick starts at random, as any lane without a row
    starts: list[np.ndarray] = []
    while len(starts) in out:
        starts.append(out[len(starts)])
    return np.array(starts)


SEARCHERS.register("portfolio", OptunaFactory(PortfolioSearcher))  # the swarm and TPE split by the trust
