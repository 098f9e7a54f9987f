"""The verdict of a run: does the recommended configuration meet the SLOs, and what it gained.

One computation, shown at the end of ``msopt optimize`` and at the top of report.html: each SLO
with the measured value, the limit and met / broken; the throughput within the SLOs against the
baseline's; and a loud line when no evaluation met every SLO.

The gain over the baseline compares like with like: every measurement with the full workload of
the recommended configuration against every one of the baseline configuration (the refine stage
measures the baseline as often as the recommendation, :func:`msopt.run.stages.refine`), each as
its mean ± half its range (:class:`Spread`). A difference inside the two ranges together is
"within noise": one server repeats within a few percent from run to run, far more on a loaded
machine.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from msopt.config import Config
from msopt.engines.base import sim_personality_of
from msopt.engines.crash import EngineCrash
from msopt.errors import MsoptError
from msopt.evaluate import configured_num_prompts
from msopt.evaluate.results import EvaluationResult
from msopt.metrics import (
    CONTEXT_LIMIT,
    GENERATE_SPEED,
    OUTPUTS_CUT,
    SENT_REQUESTS,
    SUCCESS_RATE,
    failure_counts,
    fitness_text,
)
from msopt.run.leaderboard import is_measurement, measurement_weight, values_key
from msopt.sim.personality import get_personality
from msopt.slo import BROKEN, SloCheck
from msopt.slo import MET as MET  # re-exported: report.html shows it
from msopt.slo import slo_checks as _slo_checks
from msopt.space.fields import show_value
from msopt.workload.resolved import ResolvedWorkload


def slo_checks(config: Config, metrics: Mapping[str, Any]) -> list[SloCheck]:
    """The run's SLOs (mean TTFT, mean TPOT, success rate) against ``metrics`` (:func:`msopt.slo.slo_checks`)."""
    return _slo_checks(config.run.slos, metrics)


def predicted_line(config: Config, predicted: Mapping[str, Any]) -> str:
    """What the simulator prior predicted for the recommendation, in one line: the SLOs it predicted broken,
    since a fitness the SLO penalty dominates (twelve digits) says nothing by itself; else the fitness."""
    speed = f"generate_speed {predicted.get('generate_speed') or 0:.1f} tok/s; prior.json: its picks"
    broken = [c.text() for c in slo_checks(config, predicted) if c.value is not None and not c.met]
    if broken:
        return f"the simulator prior predicted {', '.join(broken)} for it ({speed})"
    return f"the simulator prior predicted fitness {float(predicted['fitness']):.4f} for it ({speed})"


def meets_slos(config: Config, result: EvaluationResult) -> bool:
    """True when ``result`` succeeded and met every SLO."""
    return not result.failed and all(c.met for c in slo_checks(config, result.metrics))


def tokens_per_s(v: float | None) -> str:
    """"6,910 tok/s"."""
    return "not measured" if v is None or not math.isfinite(v) else f"{v:,.0f} tok/s"


@dataclass(frozen=True)
class Spread:
    """Repeated measurements of one quantity (generate_speed, tok/s).

    Attributes:
        values: the measurements, in eval order.
    """

    values: tuple[float, ...]

    @property
    def mean(self) -> float:
        """Their mean."""
        return sum(self.values) / len(self.values)

    @property
    def half_range(self) -> float:
        """Half the distance between the largest and the smallest (0 for one measurement)."""
        return (max(self.values) - min(self.values)) / 2

    def text(self) -> str:
        """"8,660 ± 41 tok/s (2 measurements)", or "8,660 tok/s (1 measurement)"."""
        n = len(self.values)
        if n == 1:
            return f"{tokens_per_s(self.mean)} (1 measurement)"
        return f"{self.mean:,.0f} ± {self.half_range:,.0f} tok/s ({n} measurements)"


def within_noise(a: Spread, b: Spread) -> bool | None:
    """Whether the means of ``a`` and ``b`` differ by no more than their half-ranges together
    (their ranges overlap); None when neither was measured twice (no noise measured)."""
    if len(a.values) < 2 and len(b.values) < 2:
        return None
    return abs(a.mean - b.mean) <= a.half_range + b.half_range


@dataclass(frozen=True)
class Verdict:
    """The verdict of a run.

    Attributes:
        best: the recommended evaluation (None: no evaluation succeeded).
        checks: the SLOs against the recommended evaluation's metrics.
        baseline: the baseline evaluation (the configured values), if it ran.
        baseline_checks: the SLOs against the baseline's metrics.
        met_count: how many successful evaluations met every SLO.
        evaluations: how many evaluations the run made.
        values: the recommended values as displayed (each at its field's precision).
        mean_fitness: the recommended configuration's mean fitness over its measurements.
        measurements: how many measurements that mean covers.
        best_speeds: generate_speed of every measurement with the full workload of the recommended
            configuration (none for a capacity probe: its load is not the baseline's).
        baseline_speeds: the same of the baseline configuration.
        same_configuration: the recommendation is the baseline configuration.
        others_met: why the configurations other than the recommendation that met every SLO (outside
            the capacity stage, whose probes run at other loads) were not recommended, computed from the
            results (:meth:`VerdictTally.others_met`): "" when there are none.
        own_met_on_sample: the recommendation broke an SLO with the full workload, yet one of its
            measurements with the search's smaller sample met every SLO.
        failures: why the run's failed requests failed, by cause, computed from the results
            (:meth:`VerdictTally.failures`): "" when no measurement counted one.
        too_long: how many of them the server refused as longer than its context.
        trace: the run replays a ``[workload] trace`` (whose ``max_model_len`` and ``length_policy`` hold
            its requests to the context).
    """

    best: EvaluationResult | None
    checks: tuple[SloCheck, ...]
    baseline: EvaluationResult | None
    baseline_checks: tuple[SloCheck, ...]
    met_count: int
    evaluations: int
    values: tuple[tuple[str, str], ...]
    mean_fitness: float | None = None
    measurements: int = 1
    best_speeds: Spread | None = None
    baseline_speeds: Spread | None = None
    same_configuration: bool = False
    others_met: str = ""
    own_met_on_sample: bool = False
    failures: str = ""
    too_long: int = 0
    trace: bool = False

    @property
    def met(self) -> bool:
        """True when the recommended configuration meets every SLO."""
        return self.best is not None and not self.best.failed and all(c.met for c in self.checks)

    @property
    def baseline_met(self) -> bool:
        """True when the baseline meets every SLO."""
        return self.baseline is not None and not self.baseline.failed and all(c.met for c in self.baseline_checks)

    def headline(self) -> str:
        """One line: met, or the loud line when nothing met the SLOs."""
        if self.best is None:
            return (f"NO CONFIGURATION SUCCEEDED: all {self.evaluations} evaluations failed; "
                    "see the errors in the report")
        if self.met_count == 0:
            fix = ("set [workload] max_model_len with a length_policy" if self.trace else
                   "shorten the workload's requests")
            advice = ("relax the SLOs, widen the search space or give it more evaluations" if not self.too_long else
                      f"{self.too_long:,} request(s) were longer than the server's context (below): {fix}, or raise "
                      "the limit")
            return (f"NO CONFIGURATION MET THE SLOs in {self.evaluations} evaluations: the recommendation below is "
                    f"the least bad; {advice}")
        if not self.met:
            why = []
            if self.own_met_on_sample:
                why.append("it met every SLO only on the search's smaller sample")
            why.append(self.others_met or "no other configuration met every SLO")
            return f"the recommended configuration breaks an SLO ({'; '.join(why)})"
        return "the recommended configuration meets every SLO"

    def throughput_line(self) -> str:
        """Throughput of the recommendation against the baseline's, each with its SLO status."""
        if self.best is None:
            return ""
        speed = self.best.metrics.get(GENERATE_SPEED)
        within = "within the SLOs" if self.met else "NOT within the SLOs"
        line = f"throughput: {tokens_per_s(speed)} {within}"
        if self.best.phase == "capacity":
            at = ", ".join(f"{k} {v:g}" for k, v in self.best.load.items()) or "another load"
            line += f" at {at} (a capacity probe)"
        b = self.baseline
        if b is None:
            return line + "; no baseline measured"
        if b.failed:
            return line + f"; the baseline (configured values) failed: {(b.error or '').splitlines()[0][:120]}"
        bspeed = b.metrics.get(GENERATE_SPEED)
        if self.baseline_met:
            gain = ""  # with measurements to compare like with like, the comparison line gives the gain
            numbers = isinstance(speed, (int, float)) and isinstance(bspeed, (int, float)) and bspeed > 0
            if numbers and not self.comparison_line() and same_load(self.best, b):
                gain = f" ({(speed / bspeed - 1) * 100:+.1f} %)"  # type: ignore[operator]
            return line + f"; baseline {tokens_per_s(bspeed)}{self._baseline_load()} within the SLOs{gain}"
        broken = ", ".join(c.text().removesuffix(f" {BROKEN}") for c in self.baseline_checks if not c.met)
        return line + f"; baseline {tokens_per_s(bspeed)}{self._baseline_load()} breaks {broken}"

    def _baseline_load(self) -> str:
        """Where the baseline's own measurement differs in load from the recommendation's: " at the
        configured load" (the recommendation is a capacity probe), " on the search's sample of 640
        prompts" (the baseline's first measurement, capped by ``sample_size``)."""
        b, best = self.baseline, self.best
        if best is None or b is None or same_load(best, b):
            return ""
        if b.num_prompts is not None and b.num_prompts != best.num_prompts:
            return f" on the search's sample of {b.num_prompts:,} prompts"
        return " at the configured load" if best.phase == "capacity" else ""

    def gain_text(self) -> str:
        """The mean gain over the baseline with the full workload and whether it is noise:
        "+3.2 %, within noise", "+14.6 %", "−6.0 %, one measurement each: noise not measured"."""
        a, b = self.best_speeds, self.baseline_speeds
        if self.same_configuration:
            return "the baseline configuration itself"
        if a is None or b is None or b.mean <= 0:
            return ""
        text = f"{(a.mean / b.mean - 1) * 100:+.1f} %"
        noise = within_noise(a, b)
        if noise is None:
            return text + ", one measurement each: noise not measured"
        return text + (", within noise" if noise else "")

    def comparison_line(self) -> str:
        """The recommendation against the baseline, each over its measurements with the full
        workload: "vs baseline, full workload: 8,660 ± 41 tok/s (2 measurements) against 9,318 ±
        12 tok/s (2 measurements): −7.1 %"; "" when there is nothing to compare."""
        if self.same_configuration:
            return "vs baseline: the recommendation is the baseline configuration (nothing gained)"
        a, b = self.best_speeds, self.baseline_speeds
        if a is None or b is None:
            return ""
        return f"vs baseline, full workload: {a.text()} against {b.text()}: {self.gain_text()}"

    def fitness_line(self) -> str:
        """The recommendation's fitness, saying that lower is better."""
        b = self.best
        if b is None:
            return ""
        text = f"fitness {fitness_text(b.fitness)} (lower is better; eval {b.eval_id}, {b.phase}"
        if self.mean_fitness is not None and self.measurements > 1:
            text += f"; mean of {self.measurements} measurements {fitness_text(self.mean_fitness)}"
        return text + ")"

    def lines(self) -> list[str]:
        """The verdict as terminal lines."""
        out = [("verdict: " if self.met_count else "!!! ") + self.headline()]
        if self.best is None:
            return out + ([f"  {self.failures}"] if self.failures else [])
        out += [f"  {c.text()}" for c in self.checks]
        out.append(f"  {self.throughput_line()}")
        if self.comparison_line():
            out.append(f"  {self.comparison_line()}")
        if self.failures:
            out.append(f"  {self.failures}")
        return out

    def shown_values(self) -> str:
        """The recommended values, each at its field's precision: "tp=2, gpu_memory_utilization=0.79"."""
        return ", ".join(f"{k}={v}" for k, v in self.values)


def same_load(a: EvaluationResult, b: EvaluationResult) -> bool:
    """Whether ``a`` and ``b`` measured the same load: the same prompts (a search capped by
    ``sample_size`` sends fewer) at the same load (a capacity probe sends its own)."""
    return a.num_prompts == b.num_prompts and dict(a.load) == dict(b.load) and "capacity" not in (a.phase, b.phase)


def _context_key(config: Config) -> str:
    """How the run's engine spells its context limit ("--max-model-len"), or "max_model_len"."""
    name = sim_personality_of(config.engine.name)
    try:
        return get_personality(name).context_key if name else "max_model_len"
    except MsoptError:
        return "max_model_len"


class VerdictTally:
    """What the verdict needs of a run's results, counted as they are recorded (the run loop adds
    every result, replayed ones included), so the verdict needs no second read of the journal.

    It keeps the count, the SLO count, the baseline's result and, per configuration, the
    generate_speed of each measurement with the full workload (one number per such measurement).

    Args:
        config: the run's config (the SLOs, the full workload).
        workload: the run's ``[workload]``, resolved once (None: resolved here where the full workload needs it).
    """

    def __init__(self, config: Config, workload: ResolvedWorkload | None = None) -> None:
        self.config = config
        self.full = configured_num_prompts(config, workload)
        self.evaluations = 0
        self.met_count = 0
        self.baseline: EvaluationResult | None = None
        self.speeds: dict[str, list[float]] = {}  # values key -> full-workload speeds, in the order added
        # values key -> [sum of weight * fitness, sum of weights] of its measurements (the leaderboard's mean)
        self.fits: dict[str, list[float]] = {}
        # values key -> [evaluations that met every SLO, of them with the full workload] (no capacity probe)
        self.met_by: dict[str, list[int]] = {}
        self.failed_by: dict[str, int] = {}  # cause -> failed requests, over every measurement
        self.failed_evals = 0  # measurements that counted a failed request
        self.unexplained = 0  # failed requests of no recorded cause
        self.limits: set[int] = set()  # the context limits too-long requests were refused at
        self.cut = 0  # requests answered with their output cut to the context left, over every measurement
        self.cut_evals = 0
        self.crashes: dict[str, int] = {}  # the engine's death, as one line -> evaluations it ended

    def add(self, r: EvaluationResult) -> None:
        """Count one result."""
        self.evaluations += 1
        met = meets_slos(self.config, r)
        self.met_count += met
        key = values_key(r.values)
        if is_measurement(r):
            w = measurement_weight(r, self.full)
            f = self.fits.setdefault(key, [0.0, 0.0])
            f[0] += w * r.fitness
            f[1] += w
        if met and r.phase != "capacity":
            m = self.met_by.setdefault(key, [0, 0])
            m[0] += 1
            m[1] += r.num_prompts is None or r.num_prompts == self.full
        if self.baseline is None and r.phase == "baseline" and r.iteration == 0:
            self.baseline = r
        self._count_failures(r)
        if (is_measurement(r) and (r.num_prompts is None or r.num_prompts == self.full)
                and isinstance(s := r.metrics.get(GENERATE_SPEED), (int, float))):
            self.speeds.setdefault(values_key(r.values), []).append(float(s))

    def _count_failures(self, r: EvaluationResult) -> None:
        """Add ``r``'s failed requests by cause (its journaled ``failed_*`` counts; the rest of what its
        success rate says failed has no recorded cause) or the engine's death that ended it."""
        if r.crash:
            try:
                line = EngineCrash.from_json(r.crash).message()
            except TypeError:  # a journal line of another layout: its error holds the line
                line = (r.error or "the engine died").splitlines()[0]
            self.crashes[line] = self.crashes.get(line, 0) + 1
            return
        cut = r.metrics.get(OUTPUTS_CUT)
        if isinstance(cut, (int, float)) and math.isfinite(cut) and cut > 0:
            self.cut += int(cut)
            self.cut_evals += 1
        rate = r.metrics.get(SUCCESS_RATE)
        if not isinstance(rate, (int, float)) or not math.isfinite(rate) or rate >= 1:
            return
        self.failed_evals += 1
        causes = failure_counts(r.metrics)
        for cause, n in causes.items():
            self.failed_by[cause] = self.failed_by.get(cause, 0) + n
        sent = r.metrics.get(SENT_REQUESTS) or r.num_prompts or self.full
        if isinstance(sent, (int, float)) and sent > 0:
            self.unexplained += max(0, round((1 - rate) * sent) - sum(causes.values()))
        limit = r.metrics.get(CONTEXT_LIMIT)
        if causes.get("too_long") and isinstance(limit, (int, float)) and limit > 0:
            self.limits.add(int(limit))

    def failures(self) -> str:
        """Why the run's failed requests failed, every cause counted from the results added: "failed
        requests: 1,638 in 2 of 7 evaluations: 1,638 longer than --max-model-len 4096 were refused by the
        server"; the evaluations the engine's death ended; "" for none."""
        parts = []
        total = sum(self.failed_by.values()) + self.unexplained
        if total:
            key = _context_key(self.config)
            limit = (f"{key} {min(self.limits)}" if len(self.limits) == 1 else
                     f"{key} ({', '.join(map(str, sorted(self.limits)))})" if self.limits else
                     f"the server's context ({key})")
            phrases = {
                "too_long": f"longer than {limit} were refused by the server",
                "timeout": "timed out (no answer within the request's timeout)",
                "connection": "lost their connection (the server closed it or died)",
                "incomplete": "ended without their output (the stream stopped early or held no token)",
                "refused": "were refused by the engine's prefill token budget or KV cache",
                "other": "failed otherwise (the benchmark's request log names each)",
            }
            causes = sorted(self.failed_by.items(), key=lambda kv: (-kv[1], kv[0]))
            said = [f"{n:,} " + (phrases.get(c) or (f"got HTTP {c.removeprefix('http_')} from the server"
                                                    if c.startswith("http_") else f"failed ({c})"))
                    for c, n in causes]
            if self.unexplained:
                said.append(f"{self.unexplained:,} of no recorded cause (the benchmark reports only its success rate)")
            parts.append(f"{total:,} in {self.failed_evals} of {self.evaluations} evaluations: " + "; ".join(said))
        if self.crashes:
            n = sum(self.crashes.values())
            (first, _), *more = sorted(self.crashes.items(), key=lambda kv: -kv[1])
            parts.append(f"{n} evaluation(s) ended when the engine died: {first}"
                         + (f" (and {len(more)} other death(s); see the report)" if more else ""))
        text = "failed requests: " + "; ".join(parts) if parts else ""
        if self.cut:  # served, not failed: but measured on shorter outputs than the workload's
            text += ("; " if text else "") + (
                f"outputs cut: {self.cut:,} request(s) in {self.cut_evals} of {self.evaluations} evaluations were "
                "answered with their output cut to the context left, shorter than the workload asks (the server "
                "clamps max_tokens; set [workload] max_model_len with a length_policy to send them as they fit)")
        return text

    def spread(self, of: EvaluationResult) -> Spread | None:
        """generate_speed of every measurement (:func:`msopt.run.leaderboard.is_measurement`) of ``of``'s
        configuration with the full workload (:func:`msopt.evaluate.configured_num_prompts`; a result without
        a count of its own served it); None when there is none."""
        speeds = self.speeds.get(values_key(of.values))
        return Spread(tuple(speeds)) if speeds else None

    def mean_fitness(self, key: str) -> float | None:
        """The weighted mean fitness of configuration ``key``'s measurements (None: none)."""
        f = self.fits.get(key)
        return f[0] / f[1] if f and f[1] > 0 else None

    def others_met(self, best: EvaluationResult, pick_fitness: float) -> str:
        """Why each configuration other than ``best``'s that met every SLO was not recommended,
        by reason, from the results added: "2 other configuration(s) met every SLO in 3
        evaluation(s): 1 scored worse by mean fitness (13 against the recommendation's 4,192; lower
        is better), 1 only on the search's smaller sample (never measured with the full 640)"; ""
        for none."""
        mine = values_key(best.values)
        others = {k: m for k, m in self.met_by.items() if k != mine}
        if not others:
            return ""
        worse: list[float] = []
        sample = better = 0
        for key, (_, full) in others.items():
            mean = self.mean_fitness(key)
            if mean is not None and mean >= pick_fitness:
                worse.append(mean)
            elif not full:
                sample += 1
            else:
                better += 1
        n_evals = sum(m[0] for m in others.values())
        parts = []
        if worse:
            # a fitness in a sentence: "4,192", "12.97", "0.5"; past a million, what the SLO penalty made it
            lo, hi = fitness_text(min(worse), ",.4g"), fitness_text(max(worse), ",.4g")
            span = lo if lo == hi else f"{lo}-{hi}"
            parts.append(f"{len(worse)} scored worse by mean fitness ({span} against the recommendation's "
                         f"{fitness_text(pick_fitness, ',.4g')}; lower is better)")
        if sample:
            whole = f"the full {self.full}" if self.full else "the full workload"
            parts.append(f"{sample} only on the search's smaller sample (never measured with {whole})")
        if better:
            parts.append(f"{better} better by mean fitness but "
                         + ("not re-measured: the recommendation is the best re-measured configuration"
                            if best.phase == "refine" else "not the configuration the capacity stage found most "
                            "goodput for" if best.phase == "capacity" else "not picked"))
        return (f"{len(others)} other configuration(s) met every SLO in {n_evals} evaluation(s): "
                + ", ".join(parts))

    def verdict(self, best: EvaluationResult | None, *, mean_fitness: float | None = None,
                measurements: int = 1) -> Verdict:
        """Judge the run from what was added and its recommended evaluation."""
        config, baseline = self.config, self.baseline
        steps = {f.name: f.step for f in config.engine.fields}
        values = tuple((k, show_value(v, steps.get(k))) for k, v in best.values.items()) if best else ()
        ours = theirs = None
        same = False
        if best is not None and baseline is not None and not baseline.failed:
            # a capacity probe's own speed is at its own load; its configuration's measurements with the
            # full workload are at the baseline's
            same = values_key(best.values) == values_key(baseline.values)
            ours, theirs = self.spread(best), self.spread(baseline)
        others = ""
        own_sample = False
        if best is not None and not best.failed and not all(c.met for c in slo_checks(config, best.metrics)):
            key = values_key(best.values)
            pick = mean_fitness if mean_fitness is not None else self.mean_fitness(key)
            others = self.others_met(best, pick if pick is not None else best.fitness)
            m = self.met_by.get(key)
            own_sample = m is not None and m[0] > m[1]
        return Verdict(
            best=best,
            checks=tuple(slo_checks(config, best.metrics)) if best else (),
            baseline=baseline,
            baseline_checks=tuple(slo_checks(config, baseline.metrics)) if baseline else (),
            met_count=self.met_count,
            evaluations=self.evaluations,
            values=values,
            mean_fitness=mean_fitness,
            measurements=measurements,
            best_speeds=ours,
            baseline_speeds=theirs,
            same_configuration=same,
            others_met=others,
            own_met_on_sample=own_sample,
            failures=self.failures(),
            too_long=self.failed_by.get("too_long", 0),
            trace=bool(config.workload.get("trace")),
        )


def make_verdict(config: Config, results: Sequence[EvaluationResult], best: EvaluationResult | None, *,
                 mean_fitness: float | None = None, measurements: int = 1,
                 workload: ResolvedWorkload | None = None) -> Verdict:
    """Judge a run from its evaluations (e.g. its journal) and its recommended one (``workload``: the run's
    ``[workload]``, resolved once)."""
    tally = VerdictTally(config, workload)
    for r in results:
        tally.add(r)
    return tally.verdict(best, mean_fitness=mean_fitness, measurements=measurements)
