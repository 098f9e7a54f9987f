"""What a run writes and prints about its results: the best.json and capacity.json records and
the one-line texts of the plain log, the live table and the CLI."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from msopt.config import Settings
from msopt.evaluate.results import EvaluationResult
from msopt.run.capacity import CapacityOptions


def finite(x: Any) -> Any:
    """``x``, or None for a float that is not finite (JSON has no inf/nan)."""
    return None if isinstance(x, float) and not math.isfinite(x) else x


def best_record(best: EvaluationResult, settings: Settings,
                mean: tuple[float, int] | None = None) -> dict[str, Any]:
    """The content of best.json; ``mean``: (mean fitness, measurements) of a re-measured pick."""
    record = {"eval_id": best.eval_id, "phase": best.phase, "fitness": finite(best.fitness),
              "engine": settings.engine, "values": best.values,
              "metrics": {k: finite(v) for k, v in best.metrics.items()}, "position": best.position,
              "num_prompts": best.num_prompts, "load": dict(best.load)}
    if mean is not None:
        record["mean_fitness"] = finite(mean[0])
        record["measurements"] = mean[1]
    return record


def capacity_record(capacity: Sequence[Mapping[str, Any]], options: CapacityOptions,
                    settings: Settings) -> dict[str, Any]:
    """capacity.json (and best.json's "capacity" section): the SLOs and every configuration's result."""
    ttft, tpot = options.metric_names()
    configs = []
    for c in capacity:
        c = dict(c)
        c["edge_metrics"] = {k: finite(v) for k, v in c.get("edge_metrics", {}).items()}
        configs.append(c)
    return {"load": options.load, "percentile": options.percentile, "tolerance": options.tolerance,
            "repeats": options.repeats, "max_probes": options.max_probes,
            "slo": {ttft: settings.ttft_slo, tpot: settings.tpot_slo, "success_rate": settings.success_rate_slo},
            "configurations": configs}


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
    return text


def load_text(load: Mapping[str, Any]) -> str | None:
    """A request's load for the progress display (``request_rate=2.5``), or None without one."""
    return ", ".join(f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}" for k, v in load.items()) or None
