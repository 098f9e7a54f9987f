"""Optuna's TPE as a :class:`~msopt.search.searcher.Searcher` (``[search] searcher = "tpe"``).

Needs ``optuna>=3.6``, a dependency of msopt (``[search] searcher = "auto"`` takes TPE without a prior).

Each dimension becomes one Optuna parameter: a dimension with candidates the candidate's index
(``IntDistribution`` where the candidates are numbers, so TPE may use their order; a categorical
one for names and booleans), any other its coordinate in the position box (``FloatDistribution``).
A trial's position puts each candidate at its coordinate (:class:`SearchDimension`), so the
driver's decode gives exactly the proposed values, repaired where the space repairs them; the
fitness is told for the proposal (Optuna keeps no write-back). A failed or refused evaluation is
told ``inf``.

The starting positions (the default configuration, then the prior's picks) are enqueued first
(``Study.enqueue_trial``). The driver's constraint is applied inside Optuna's sampler seam
(``BaseSampler.sample_relative``, which receives the whole search space): every proposal is drawn
by multivariate TPE (at random for its first :data:`STARTUP_TRIALS`), drawn again while it is a known
refusal or a configuration the space would repair (at most
:data:`~msopt.search.constraint.REFUSED_REDRAWS` times, then as often at random), and with the prior's
screen picked among ``k`` draws by predicted fitness. Concurrency stays with the driver: the
searcher keeps ``concurrency`` lanes, a trial per lane in flight.

Deterministic for a seed and a sequence of asks and tells, so ``--resume`` rebuilds it by replay.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any

import numpy as np

from msopt.errors import ConfigError
from msopt.search.constraint import REFUSED_REDRAWS, Constraint, SearchDimension
from msopt.search.searcher import SEARCHERS, Searcher, SearcherSetup, Trial

__all__ = ["STARTUP_TRIALS", "OptunaFactory", "TPESearcher", "require_optuna"]

STARTUP_TRIALS = 10
"""Trials TPE draws at random before it models (Optuna's default ``n_startup_trials``); the
enqueued starting positions count among them."""


def require_optuna() -> Any:
    """The ``optuna`` module.

    Raises:
        ConfigError: Optuna is not installed (one line naming the extra to install).
    """
    try:
        import optuna
    except ImportError:
        raise ConfigError("[search] searcher = \"tpe\" needs Optuna: pip install -e '.[tpe]'") from None
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    return optuna


def _distribution(optuna: Any, d: SearchDimension) -> Any:
    if d.candidates is None:
        return optuna.distributions.FloatDistribution(d.low, d.high)
    if d.ordered:
        return optuna.distributions.IntDistribution(0, len(d.candidates) - 1)
    return optuna.distributions.CategoricalDistribution(tuple(range(len(d.candidates))))


@dataclass(frozen=True)
class _Exact(Constraint):
    """The driver's constraint, and also refusing a proposal the space would repair (a tp·pp that
    does not divide the world size, say): TPE is told the fitness of what it proposed, so a
    repaired configuration's result would teach its model about values never measured, and the
    launch would go to a configuration it did not choose. Such a proposal is drawn again, like a
    known refusal (the bench's peer TPE has always been held to this)."""

    exact: Callable[[np.ndarray], bool] | None = None

    def refused(self, position: np.ndarray) -> bool:  # noqa: D102
        return super().refused(position) or (self.exact is not None and not self.exact(position))

    @property
    def checks(self) -> bool:  # noqa: D102
        return super().checks or self.exact is not None


def _exact(constraint: Constraint, dims: Sequence[SearchDimension]) -> Constraint:
    """``constraint`` that also refuses a proposal whose decoded values differ from it (:class:`_Exact`)."""
    decode = constraint.decode
    if decode is None:
        return constraint

    def exact(position: np.ndarray) -> bool:
        values = decode(position)
        if values is None:
            return False
        return all(d.candidates is None or d.name not in values or values[d.name] == d.candidates[d.nearest(x)]
                   for d, x in zip(dims, position))

    return _Exact(**{f.name: getattr(constraint, f.name) for f in fields(constraint)}, exact=exact)


def _sampler(optuna: Any, inner: Any, random: Any, space: Mapping[str, Any], constraint: Constraint,
             position: Callable[[Mapping[str, Any]], np.ndarray], rng: np.random.Generator) -> Any:
    """A sampler that draws whole proposals with ``inner`` (``random`` while ``inner`` draws
    independently, its start-up trials) and holds them to ``constraint``."""

    class ConstrainedSampler(optuna.samplers.BaseSampler):  # type: ignore[misc, name-defined]
        def infer_relative_search_space(self, study: Any, trial: Any) -> dict[str, Any]:
            return dict(space)

        def _draw(self, study: Any, trial: Any, search_space: dict[str, Any]) -> dict[str, Any]:
            params = dict(inner.sample_relative(study, trial, search_space))
            for name, dist in search_space.items():
                if name not in params:
                    params[name] = random.sample_independent(study, trial, name, dist)
            return params

        def _draw_at_random(self, study: Any, trial: Any, search_space: dict[str, Any]) -> dict[str, Any]:
            return {name: random.sample_independent(study, trial, name, dist) for name, dist in search_space.items()}

        def sample_relative(self, study: Any, trial: Any, search_space: dict[str, Any]) -> dict[str, Any]:
            if not search_space or "fixed_params" in trial.system_attrs:  # enqueued: its params are given
                return {}
            screen = constraint.screen if constraint.screen is not None and constraint.screen.k > 1 else None
            unranked = screen is None or bool(rng.random() < screen.chance_unranked())
            draws = [self._draw(study, trial, search_space) for _ in range(screen.k if screen else 1)]
            if screen is None and not constraint.checks:
                return draws[0]
            positions = [position(p) for p in draws]
            j = constraint.choose(positions, unranked)
            # TPE's model can settle where every draw is refused (Optuna 3.6 does so here, where newer ones
            # did not): after its redraws come draws at random, which reach the whole space, before the first
            # draw stands
            for redraw in (self._draw, self._draw_at_random):
                for _ in range(REFUSED_REDRAWS if j is None else 0):
                    draws.append(redraw(study, trial, search_space))
                    if not constraint.refused(position(draws[-1])):
                        j = len(draws) - 1
                        break
            return draws[0 if j is None else j]  # every draw refused: the first stands (refused again, free)

        def sample_independent(self, study: Any, trial: Any, name: str, dist: Any) -> Any:
            return random.sample_independent(study, trial, name, dist)

        def before_trial(self, study: Any, trial: Any) -> None:
            inner.before_trial(study, trial)

        def after_trial(self, study: Any, trial: Any, state: Any, values: Sequence[float] | None) -> None:
            inner.after_trial(study, trial, state, values)

    return ConstrainedSampler()


class TPESearcher:
    """Multivariate TPE (Optuna) over the typed dimensions, ``concurrency`` lanes.

    Sync: :meth:`ask` gives a trial for every lane once the whole previous generation was told.
    Async: a trial for every lane not in flight. Trial ids are Optuna's trial numbers.
    """

    name = "tpe"

    def __init__(self, setup: SearcherSetup, constant_liar: bool = False, startup: int = STARTUP_TRIALS) -> None:
        if setup.mode not in ("sync", "async"):
            raise ConfigError(f"mode must be 'sync' or 'async', got {setup.mode!r}")
        optuna = require_optuna()
        self._setup = setup
        self.mode = setup.mode
        self._dims = setup.dimensions
        self._space = {d.name: _distribution(optuna, d) for d in self._dims}
        seeds = np.random.SeedSequence([int(setup.seed or 0), 0x79E]).generate_state(3)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            inner = optuna.samplers.TPESampler(seed=int(seeds[0]), multivariate=True, constant_liar=constant_liar,
                                               n_startup_trials=startup)
        random = optuna.samplers.RandomSampler(seed=int(seeds[1]))
        sampler = _sampler(optuna, inner, random, self._space, _exact(setup.constraint, self._dims), self.position,
                           np.random.default_rng(int(seeds[2])))
        self._study = optuna.create_study(direction="minimize", sampler=sampler)
        for row in (setup.init_positions if setup.init_positions is not None else ()):
            self._study.enqueue_trial(self.params(np.asarray(row, dtype=float)), skip_if_exists=False)
        self._counts = [0] * setup.concurrency
        self._pending: dict[int, tuple[int, Any]] = {}  # trial number -> (lane, optuna trial)

    @property
    def lanes(self) -> int:  # noqa: D102
        return self._setup.concurrency

    @property
    def study(self) -> Any:
        """The Optuna study (in memory)."""
        return self._study

    def position(self, params: Mapping[str, Any]) -> np.ndarray:
        """The position of an Optuna trial's parameters."""
        out = []
        for d in self._dims:
            v = params[d.name]
            out.append(float(v) if d.coordinates is None else d.coordinates[int(v)])
        return np.array(out, dtype=float)

    def params(self, position: np.ndarray) -> dict[str, Any]:
        """The Optuna parameters nearest ``position`` (each candidate's index, else the coordinate)."""
        out: dict[str, Any] = {}
        for d, x in zip(self._dims, position):
            out[d.name] = float(min(max(float(x), d.low), d.high)) if d.coordinates is None else d.nearest(x)
        return out

    def lane_count(self, lane: int) -> int:  # noqa: D102
        return self._counts[lane]

    def _trial(self, lane: int) -> Trial:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # Optuna's experimental / independent-sampling notes
            t = self._study.ask(self._space)
        self._pending[t.number] = (lane, t)
        count = self._counts[lane]
        return Trial(int(t.number), self.position(t.params), self._setup.context(lane, count), lane, count)

    def ask_one(self, lane: int) -> Trial:
        """A trial for ``lane`` now, whatever else is in flight (a portfolio's lane)."""
        return self._trial(lane)

    def ask(self) -> list[Trial]:  # noqa: D102
        busy = {lane for lane, _ in self._pending.values()}
        if self.mode == "sync":
            if busy:
                return []
            return [self._trial(i) for i in range(self.lanes)]
        return [self._trial(i) for i in range(self.lanes) if i not in busy]

    def tell(self, trial_id: int, fitness: float, position: Sequence[float] | None = None) -> None:  # noqa: D102
        if trial_id not in self._pending:
            raise KeyError(f"trial {trial_id} was not asked or was already told")
        lane, t = self._pending.pop(trial_id)
        value = float(fitness)
        self._study.tell(t, value if math.isfinite(value) else math.inf)
        self._counts[lane] += 1

    def observe(self, position: Sequence[float] | np.ndarray, fitness: float) -> None:
        """Add a result another searcher proposed (``Study.add_trial``): the evaluated ``position``
        (its nearest parameters) and its fitness, ``inf`` for a failure. The lanes' counts stay."""
        optuna = require_optuna()
        value = float(fitness)
        self._study.add_trial(optuna.trial.create_trial(
            params=self.params(np.asarray(position, dtype=float)), distributions=self._space,
            value=value if math.isfinite(value) else math.inf))

    @property
    def best_fitness(self) -> float:
        """The best fitness told so far (``inf`` while none)."""
        done = [t.value for t in self._study.trials if t.value is not None]
        return float(min(done)) if done else math.inf

    def to_state(self) -> dict[str, Any]:  # noqa: D102
        return {"searcher": self.name, "mode": self.mode, "lane_counts": list(self._counts),
                "trials": [{"number": t.number, "params": dict(t.params),
                            "value": None if t.value is None or not math.isfinite(t.value) else float(t.value)}
                           for t in self._study.trials if t.state.is_finished()]}


@dataclass(frozen=True)
class OptunaFactory:
    """A searcher factory whose searcher needs Optuna (a dependency of msopt): Optuna's TPE
    (:class:`TPESearcher`), the portfolio of the swarm and TPE."""

    make: Callable[[SearcherSetup], Searcher]

    def __call__(self, setup: SearcherSetup) -> Searcher:
        return self.make(setup)

    @staticmethod
    def available() -> None:
        """Raise ConfigError when Optuna is missing."""
        require_optuna()


SEARCHERS.register("tpe", OptunaFactory(TPESearcher))
