"""The simulator corrected by what the run measured: a Gaussian process over the configuration
whose mean is the prior's prediction, scaled and shifted by a Bayesian linear fit (issue 49 part 2
item 2; "a cheap model as the mean function" of Bayesian optimisation, after πBO and BOPrO's idea
that a prior belief should fade as measurements disagree with it).

Both the prediction and the measurement are read on a log scale (:func:`log_scale`): relative
errors, the same whatever the throughput. The model is ``y(x) = a + b · p(x) + c · x + g(x)``: ``p``
the prior's prediction on that scale, ``a``, ``b`` and ``c`` with Gaussian priors (``a`` around 0,
the prior unbiased; ``b`` around 1, the prior right, :data:`SLOPE_SD`; ``c`` a linear trend of the
error along each coordinate around 0, :data:`TREND_SD`), and ``g`` a Matérn-5/2 process over the
position coordinates (the configuration's layout, limits and flags) plus a term shared by each
parallel layout (:data:`LAYOUT_SD`), its length scale and variance those of the highest marginal
likelihood on a small grid. Where the prior ranks rightly ``b`` stays near 1 and ``c`` and ``g``
small; where it ranks wrongly ``b`` falls and ``c`` and ``g`` carry what was measured, so proposals
come from the measurements, as a plain Bayesian optimisation would make them.

Proposals maximise expected improvement over every configuration of the space (all of the grid
where it has at most :data:`GRID_MAX` points, else a seeded sample of that many), not measured yet,
not refused and not predicted to fail (memory that cannot fit: the prior's certain word); a batch
is chosen one at a time, each chosen point told back at its predicted mean (the kriging believer).
Pure numpy; deterministic for the measurements it was told and its seed.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Container, Sequence
from itertools import product

import numpy as np

from msopt.search.constraint import Constraint, SearchDimension

__all__ = ["GRID_MAX", "INFEASIBLE_STEP", "SLOPE_SD", "ResidualSurrogate"]

#: The most configurations a proposal scores: the whole grid up to this size, else a sample.
GRID_MAX = 4096
#: A fitness of 0 or more (infeasible) reads this far above the worst feasible one on the log scale.
INFEASIBLE_STEP = 0.5
#: The prior's slope ``b`` is believed ``1 ± SLOPE_SD`` before any measurement; the intercept ``0 ± 1``.
SLOPE_SD = 0.5
INTERCEPT_SD = 1.0
#: The measurement noise on the log scale (3 % relative noise) and the grid of the process's length
#: scale (position units, the box is 0..1) and standard deviation (log units) fitted by likelihood.
NOISE_SD = 0.03
LENGTHS = (0.15, 0.3, 0.6, 1.2)
SIGNALS = (0.05, 0.15, 0.4)
#: The standard deviation of the prior's error shared by one parallel layout (log units): structure
#: the simulator gets wrong for a whole layout (its scheduling, host time, communication), so a
#: layout not measured yet keeps that much doubt however near its neighbours were measured.
LAYOUT_SD = 0.1
#: The prior standard deviation of a linear trend of the error along each position coordinate (log units
#: over the box, 0..1): what the simulator gets wrong about a limit (fewer batched tokens better, where it
#: predicts more), learnt from one generation that varied it and carried to values not measured yet.
TREND_SD = 0.2


def log_scale(fitness: Sequence[float] | np.ndarray) -> np.ndarray:
    """Fitness on a log scale, lower still better: ``log f`` where every finite fitness is positive
    (the original's weighted fitness, 1.0 at the target); else ``-log(-f)`` for the negative ones
    (``-generate_speed``) and, for one of 0 or more (a missed SLO, ``1 + V``), the worst of those plus
    :data:`INFEASIBLE_STEP` plus ``log1p(f)``. NaN for a failure or no prediction (``inf``, NaN)."""
    f = np.asarray(fitness, dtype=float)
    out = np.full(len(f), np.nan)
    fin = np.isfinite(f)
    neg = fin & (f < 0)
    if not neg.any():
        out[fin] = np.log(np.maximum(f[fin], 1e-12))
        return out
    out[neg] = -np.log(-f[neg])
    rest = fin & ~neg
    out[rest] = np.max(out[neg]) + INFEASIBLE_STEP + np.log1p(f[rest])
    return out


def _matern(a: np.ndarray, b: np.ndarray, length: float) -> np.ndarray:
    d = np.sqrt(np.maximum(((a[:, None, :] - b[None, :, :]) ** 2).sum(-1), 0.0)) * math.sqrt(5.0) / length
    return (1.0 + d + d * d / 3.0) * np.exp(-d)


def _norm_cdf(z: np.ndarray) -> np.ndarray:
    return 0.5 * (1.0 + np.vectorize(math.erf)(z / math.sqrt(2.0)))


class _Posterior:
    """The fitted process on ``(x, p, y)``: predicted mean and standard deviation anywhere."""

    def __init__(self, x: np.ndarray, p: np.ndarray, y: np.ndarray, lay: np.ndarray) -> None:
        self.x, self.p, self.y, self.lay = x, p, y, lay
        d = x.shape[1]
        self.prior_mean = np.array([0.0, 1.0] + [0.0] * d)
        self.prior_cov = np.diag([INTERCEPT_SD ** 2, SLOPE_SD ** 2] + [TREND_SD ** 2] * d)
        best = None
        for length in LENGTHS:
            for signal in SIGNALS:
                fit = self._fit(length, signal)
                if fit is not None and (best is None or fit[0] > best[0]):
                    best = fit
        if best is None:
            raise np.linalg.LinAlgError("no length scale gives a positive definite covariance")
        _, self.length, self.signal, self.chol, self.alpha = best

    def _h(self, p: np.ndarray, x: np.ndarray) -> np.ndarray:
        return np.column_stack([np.ones(len(p)), p, x - 0.5])

    def _cov(self, xa: np.ndarray, pa: np.ndarray, la: np.ndarray, xb: np.ndarray, pb: np.ndarray,
             lb: np.ndarray, length: float, signal: float) -> np.ndarray:
        same = (la[:, None] == lb[None, :]).astype(float)
        return (signal ** 2 * _matern(xa, xb, length) + LAYOUT_SD ** 2 * same
                + self._h(pa, xa) @ self.prior_cov @ self._h(pb, xb).T)

    def _fit(self, length: float, signal: float) -> tuple[float, float, float, np.ndarray, np.ndarray] | None:
        k = (self._cov(self.x, self.p, self.lay, self.x, self.p, self.lay, length, signal)
             + NOISE_SD ** 2 * np.eye(len(self.y)))
        try:
            chol = np.linalg.cholesky(k)
        except np.linalg.LinAlgError:
            return None
        r = self.y - self._h(self.p, self.x) @ self.prior_mean
        alpha = np.linalg.solve(chol.T, np.linalg.solve(chol, r))
        loglik = -0.5 * float(r @ alpha) - float(np.log(np.diag(chol)).sum())
        return loglik, length, signal, chol, alpha

    def predict(self, x: np.ndarray, p: np.ndarray, lay: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The mean and standard deviation of ``y`` at rows ``x`` with prior predictions ``p`` and layouts ``lay``."""
        ks = self._cov(x, p, lay, self.x, self.p, self.lay, self.length, self.signal)
        hp = self._h(p, x)
        mean = hp @ self.prior_mean + ks @ self.alpha
        v = np.linalg.solve(self.chol, ks.T)
        var = self.signal ** 2 + LAYOUT_SD ** 2 + np.einsum("ij,jk,ik->i", hp, self.prior_cov, hp) - (v * v).sum(0)
        return mean, np.sqrt(np.maximum(var, 1e-12))

    def slope(self) -> float:
        """The posterior mean of the prior's slope ``b``."""
        hk = self._h(self.p, self.x).T @ self.alpha
        return float(self.prior_mean[1] + (self.prior_cov @ hk)[1])


class ResidualSurrogate:
    """The prior corrected by the run's measurements (see the module), proposing by expected improvement.

    Args:
        dimensions: the searched dimensions (their candidate coordinates make the grid).
        constraint: the run's constraint: its decode and key dedupe configurations, ``refused``
            and measured ones are never proposed, and its screen's ``score`` is the prior.
        seed: seeds the sample of a grid larger than :data:`GRID_MAX`.
        layout: the parallel layout's fields (:func:`msopt.search.searcher.layout_names`).
    """

    def __init__(self, dimensions: Sequence[SearchDimension], constraint: Constraint, seed: int | None,
                 layout: Sequence[str] = ()) -> None:
        self.dimensions = tuple(dimensions)
        self.constraint = constraint
        self.layout = tuple(layout)
        self._rng = np.random.default_rng(np.random.SeedSequence([int(seed or 0), 0x5A6]))
        self._x: list[np.ndarray] = []
        self._f: list[float] = []
        self._p: list[float] = []  # the prior's prediction of each measured configuration
        self._lay: list[int] = []
        self._keys: set[str] = set()
        self._layouts: dict[tuple[object, ...], int] = {}
        self._grid: tuple[np.ndarray, list[str], np.ndarray, np.ndarray] | None = None
        #: the posterior slope of the prior after each proposal round (how far the run follows it)
        self.slopes: list[float] = []

    @property
    def usable(self) -> bool:
        """Whether the surrogate can propose: a screen to read the prior from and a decoder to key by."""
        c = self.constraint
        return c.screen is not None and c.decode is not None and c.key is not None

    def _describe(self, x: np.ndarray) -> tuple[str | None, int]:
        """A position's configuration key (None where it does not decode) and its layout's id."""
        decode, key = self.constraint.decode, self.constraint.key
        values = decode(np.asarray(x, dtype=float)) if decode is not None else None
        if values is None or key is None:
            return None, -1
        lay = tuple(values.get(n) for n in self.layout)
        return key(values), self._layouts.setdefault(lay, len(self._layouts))

    def observe(self, position: np.ndarray, fitness: float) -> None:
        """Add a measured configuration (its evaluated position; ``inf`` for a failure)."""
        x = self._snap(np.asarray(position, dtype=float))
        key, lay = self._describe(x)
        self._x.append(x)
        self._f.append(float(fitness))
        screen = self.constraint.screen
        self._p.append(float(screen.score(x[None, :])[0]) if screen is not None else math.nan)
        self._lay.append(lay)
        if key is not None:
            self._keys.add(key)

    def _snap(self, x: np.ndarray) -> np.ndarray:
        out = x.copy()
        for i, d in enumerate(self.dimensions):
            if d.coordinates is not None:
                out[i] = d.coordinates[d.nearest(x[i])]
        return out

    def _candidates(self) -> tuple[np.ndarray, list[str], np.ndarray, np.ndarray]:
        """Every distinct configuration of the grid (or a sample) not predicted to fail: positions,
        keys, the prior's predictions and layout ids. Built once: the screen's prior is fixed."""
        if self._grid is not None:
            return self._grid
        axes = [d.coordinates if d.coordinates is not None else tuple(np.linspace(d.low, d.high, 9))
                for d in self.dimensions]
        size = math.prod(len(a) for a in axes)
        if size <= GRID_MAX:
            rows = np.array(list(product(*axes)), dtype=float)
        else:
            rows = np.array([[a[self._rng.integers(len(a))] for a in axes] for _ in range(GRID_MAX)], dtype=float)
        keep, keys, lays = [], [], []
        seen: set[str] = set()
        for j, x in enumerate(rows):
            key, lay = self._describe(x)
            if key is None or key in seen:
                continue
            seen.add(key)
            keep.append(j)
            keys.append(key)
            lays.append(lay)
        pos = rows[keep]
        assert self.constraint.screen is not None
        pred = np.asarray(self.constraint.screen.score(pos), dtype=float)
        ok = ~np.isposinf(pred)
        self._grid = (pos[ok], [k for k, o in zip(keys, ok) if o], pred[ok], np.array(lays)[ok])
        return self._grid

    def _open(self, taken: Container[str | None]) -> np.ndarray:
        """Which candidates (:meth:`_candidates`) may still be proposed: not in ``taken`` (keys measured,
        in flight or known) and not refused."""
        pos, keys, _, _ = self._candidates()
        return np.array([k not in taken and not self.constraint.refused(pos[j]) for j, k in enumerate(keys)],
                        dtype=bool)

    def explore(self, n: int, known: Sequence[np.ndarray]) -> list[np.ndarray]:
        """``n`` configurations drawn at random from the prior's runner-up parallel layout: of the layouts
        other than that of the prior's best prediction, the one whose best prediction is nearest it (under
        the layout doubt this model gives every layout, :data:`LAYOUT_SD`, the likeliest to hold something
        better than the prior's choice). A pick there tests only the prior's limits in it; these draws
        test the layout. The next nearest once it has none left; none of ``known`` (positions measured or
        in flight), none refused or predicted to fail; fewer where the space has none (or no layout is
        declared)."""
        if n <= 0 or not self.usable or not self.layout:
            return []
        pos, _, pred, lays = self._candidates()
        taken = {self._describe(self._snap(np.asarray(q, dtype=float)))[0] for q in known}
        lp = log_scale(pred)
        nearest: dict[int, float] = {}  # layout -> its best prediction on the log scale
        for j in np.flatnonzero(~np.isnan(lp)):
            la = int(lays[j])
            nearest[la] = min(nearest.get(la, math.inf), float(lp[j]))
        open_ = self._open(taken)
        out: list[np.ndarray] = []
        for lay in sorted(nearest, key=lambda la: (nearest[la], la))[1:]:
            inside = list(np.flatnonzero(open_ & (lays == lay)))
            while inside and len(out) < n:
                out.append(pos[inside.pop(int(self._rng.integers(len(inside))))].copy())
            if len(out) >= n:
                break
        return out

    def propose(self, n: int, pending: Sequence[np.ndarray] = ()) -> list[np.ndarray]:
        """``n`` positions to measure next (fewer where the space runs out), by expected improvement
        with the kriging believer; ``pending``: positions in flight, believed at their mean too."""
        if n <= 0 or not self.usable:
            return []
        pos, _, pred, lays = self._candidates()
        score: Callable[[np.ndarray], np.ndarray] = self.constraint.screen.score  # type: ignore[union-attr]
        pm = log_scale(np.concatenate([pred, np.asarray(self._p, dtype=float)]))
        fill = float(np.nanmax(pm)) + INFEASIBLE_STEP if np.isfinite(pm).any() else 0.0
        pm = np.where(np.isnan(pm), fill, pm)
        p_grid, p_obs = pm[:len(pred)], pm[len(pred):]
        y = log_scale(self._f)
        ok = ~np.isnan(y)  # failures are refused or measured: never proposed again, not fitted
        xo = np.array(self._x)[ok] if self._x else np.zeros((0, len(self.dimensions)))
        po, yo, lo = p_obs[ok], y[ok], np.array(self._lay, dtype=int)[ok] if self._x else np.zeros(0, int)
        taken = set(self._keys)
        bx, bl = [], []
        for q in pending:
            xq = self._snap(np.asarray(q, dtype=float))
            key, lay = self._describe(xq)
            if key is not None:
                taken.add(key)
            bx.append(xq)
            bl.append(lay)
        free = self._open(taken)
        if len(yo) == 0:  # nothing measured: the prior's order
            order = [j for j in np.argsort(p_grid, kind="stable") if free[j]]
            return [pos[j].copy() for j in order[:n]]
        real = _Posterior(xo, po, yo, lo)
        self.slopes.append(real.slope())
        bp = [float(v) for v in log_scale(score(np.array(bx)))] if bx else []
        bp = [fill if math.isnan(v) else v for v in bp]
        best = float(np.min(yo))
        out: list[np.ndarray] = []
        for _ in range(n):
            if not free.any():
                break
            post = real
            if bx:  # in flight and chosen: believed at the mean the measurements give them
                xb, pb, lb = np.array(bx), np.array(bp), np.array(bl, dtype=int)
                post = _Posterior(np.vstack([xo, xb]), np.concatenate([po, pb]),
                                  np.concatenate([yo, real.predict(xb, pb, lb)[0]]), np.concatenate([lo, lb]))
            idx = np.flatnonzero(free)
            mean, sd = post.predict(pos[idx], p_grid[idx], lays[idx])
            z = (best - mean) / sd
            ei = (best - mean) * _norm_cdf(z) + sd * np.exp(-0.5 * z * z) / math.sqrt(2.0 * math.pi)
            j = int(idx[int(np.argmax(ei))])
            out.append(pos[j].copy())
            free[j] = False
            bx.append(pos[j])
            bp.append(float(p_grid[j]))
            bl.append(int(lays[j]))
        return out
