"""What a run writes and prints about its results: the best.json and capacity.json records and
the one-line texts of the plain log, the live table and the CLI."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from msopt.evaluate.results import EvaluationResult
from msopt.run.capacity import CapacityOptions, sizing_pick
from msopt.run.durations import format_duration
from msopt.slo import Slos


def finite(x: Any) -> Any:
    """``x``, or None for a float that is not finite (JSON has no inf/nan)."""
    return None if isinstance(x, float) and not math.isfinite(x) else x


class ServerStarts:
    """Server starts and reuses of a run (issue 26), from each evaluation's ``server`` record."""

    def __init__(self) -> None:
        self.started = 0
        self.reused = 0
        self.start_s = 0.0

    def add(self, server: Mapping[str, Any] | None) -> None:
        """Count one evaluation's ``EvaluationResult.server`` (None: nothing was launched)."""
        if not server:
            return
        if server.get("start") == "reused":
            self.reused += 1
        elif server.get("start") == "started":
            self.started += 1
            s = server.get("start_s")
            self.start_s += float(s) if isinstance(s, (int, float)) and math.isfinite(s) else 0.0

    @classmethod
    def of(cls, results: Sequence[EvaluationResult]) -> ServerStarts:
        """The counts over ``results`` (a duplicate's reuse launched nothing: not counted)."""
        out = cls()
        for r in results:
            if not r.reused:
                out.add(r.server)
        return out

    def text(self) -> str:
        """``N server starts (T starting), M on a kept server (~S saved)``; S is M times the mean
        start; empty when nothing was started."""
        if not self.started and not self.reused:
            return ""
        text = f"{self.started} server start{'s' if self.started != 1 else ''} ({_secs(self.start_s)} starting)"
        if self.reused:
            saved = self.reused * self.start_s / self.started if self.started else 0.0
            text += f", {self.reused} on a kept server (~{_secs(saved)} saved)"
        return text


def _secs(seconds: float) -> str:
    """``12.3 s`` below a minute, else ``MM:SS`` / ``H:MM:SS``."""
    return f"{seconds:.1f} s" if seconds < 60 else format_duration(seconds)


def best_record(best: EvaluationResult, engine: str,
                mean: tuple[float, int] | None = None) -> dict[str, Any]:
    """The content of best.json (``engine``: the searched engine's name); ``mean``: (mean fitness,
    measurements) of a re-measured pick."""
    record = {"eval_id": best.eval_id, "phase": best.phase, "fitness": finite(best.fitness),
              "engine": engine, "values": best.values,
              "metrics": {k: finite(v) for k, v in best.metrics.items()}, "position": best.position,
              "num_prompts": best.num_prompts, "load": dict(best.load)}
    if mean is not None:
        record["mean_fitness"] = finite(mean[0])
        record["measurements"] = mean[1]
    return record


def capacity_record(capacity: Sequence[Mapping[str, Any]], options: CapacityOptions,
                    slos: Slos, devices_per_replica: int) -> dict[str, Any]:
    """capacity.json (and best.json's "capacity" section): the SLOs and every configuration's result, and with
    ``[capacity] target_rate`` the sizing (replicas of ``devices_per_replica`` devices each)."""
    ttft, tpot = options.judged(slos)
    configs = []
    for c in capacity:
        c = dict(c)
        c["edge_metrics"] = {k: finite(v) for k, v in c.get("edge_metrics", {}).items()}
        configs.append(c)
    record: dict[str, Any] = {
        "load": options.load, "percentile": options.percentile, "tolerance": options.tolerance,
        "repeats": options.repeats, "max_probes": options.max_probes,
        "slo": {ttft: slos.ttft, tpot: slos.tpot, "success_rate": slos.success_rate},
        "configurations": configs}
    if options.trace_rate is not None:
        record["trace_rate"] = options.trace_rate
    if options.target_rate is not None:
        pick = sizing_pick(configs)
        record["sizing"] = {"target_rate": options.target_rate, "target_multiple": options.target_multiple,
                            "devices_per_replica": devices_per_replica,
                            "pick": None if pick is None else pick["rank"], "line": sizing_line(configs)}
    return record


def sizing_line(capacity: Sequence[Mapping[str, Any]]) -> str | None:
    """The configuration that serves ``[capacity] target_rate`` with the fewest devices, in one line
    (None without a target)."""
    sized = [c for c in capacity if c.get("target_rate") is not None]
    if not sized:
        return None
    rate, multiple = sized[0]["target_rate"], sized[0].get("target_multiple")
    target = f"{rate:.3g} req/s" + (f" ({multiple:g}x the trace's rate)" if multiple is not None else "")
    pick = sizing_pick(capacity)
    if pick is None:
        return f"sizing for {target}: no configuration sustains any rate within the SLOs"
    return (f"sizing for {target}: #{pick['rank']} (eval {pick['eval_id']}) with {pick['replicas']} replica(s), "
            f"{pick['devices']} device(s), at {pick['sustainable_load']:.3g} req/s each")


def capacity_line(c: Mapping[str, Any]) -> str:
    """One line for a configuration's capacity (plain log, live table, CLI)."""
    load = c["sustainable_load"]
    shown = f"{load:g}" if load else "0"
    text = (f"capacity #{c['rank']} (eval {c['eval_id']}): {c['load']}={shown} "
            f"goodput={c['goodput']:.1f} tok/s")
    if c.get("limited_by"):
        text += f" (limited by {c['limited_by']}"
        if c.get("failed_load") is not None and c.get("failed_reason"):
            text += f"; at {c['failed_load']:g}: {c['failed_reason']}"
        text += ")"
    if c.get("sustainable_load") and not c.get("verified"):
        text += " [not all repeats ran]"
    if c.get("trace_multiple") is not None:
        text += f" = {c['trace_multiple']:.3g}x the trace's rate"
    if "replicas" in c:
        text += (f"; target: {c['replicas']} replica(s), {c['devices']} device(s)" if c["replicas"] is not None
                 else "; target: not reachable")
    return text


def load_text(load: Mapping[str, Any]) -> str | None:
    """A request's load for the progress display (``request_rate=2.5``), or None without one."""
    return ", ".join(f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}" for k, v in load.items()) or None
