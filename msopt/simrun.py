"""The simulated evaluation path: the engine's rendered launch, run by the embedded simulator.

``[simulator]`` keys read here besides the simulator's own (hardware, model, weight_dtype,
kv_dtype, seed, noise, workload, catalog_dirs):

- ``emulate_wall_time`` (bool, default false): an evaluation takes wall time as a real one would:
  ``eval_seconds`` when set, else the simulated benchmark duration × ``time_scale`` (default 1).
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from msopt.config import Settings, thaw
from msopt.engines.base import LaunchSpec
from msopt.errors import ConfigError
from msopt.space.fields import FieldDecl

_WALL_KEYS = ("emulate_wall_time", "time_scale", "eval_seconds")


def _finite(x: Any) -> float | None:
    return float(x) if isinstance(x, (int, float)) and math.isfinite(x) else None


def metrics_of(res: Any) -> dict[str, float | None]:
    """The benchmark metrics of a SimResult (NaN becomes None), percentiles included."""
    keys = ("generate_speed", "time_to_first_token", "time_per_output_token", "success_rate", "throughput",
            "ttft_p50", "ttft_p90", "ttft_p99", "tpot_p50", "tpot_p90", "tpot_p99", "duration")
    return {k: _finite(getattr(res, k)) for k in keys}


@dataclass(frozen=True)
class SimulatorSetup:
    """The ``[simulator]`` table, validated once per evaluator."""

    table: Mapping[str, Any]
    emulate: bool
    time_scale: float
    eval_seconds: float | None
    where: str

    @classmethod
    def from_settings(cls, settings: Settings) -> SimulatorSetup:
        """Read and check ``[simulator]`` (catalog names resolved now, not per evaluation)."""
        table = thaw(settings.section("simulator"))
        where = settings.where("simulator")
        emulate = table.pop("emulate_wall_time", False)
        scale = table.pop("time_scale", 1.0)
        secs = table.pop("eval_seconds", None)
        if not isinstance(emulate, bool):
            raise ConfigError(f"{where}: [simulator] emulate_wall_time must be true or false, got {emulate!r}")
        for key, v in (("time_scale", scale), ("eval_seconds", secs)):
            if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 <= v <= 1e6):
                raise ConfigError(f"{where}: [simulator] {key} must be a number from 0 to 1e6, got {v!r}")
        from msopt.sim import load_hardware, load_model

        dirs = table.get("catalog_dirs", ())
        dirs = (dirs,) if isinstance(dirs, str) else tuple(dirs)
        for key, loader in (("hardware", load_hardware), ("model", load_model)):
            if key not in table:
                raise ConfigError(f"{where}: [simulator] {key} is missing; name a catalog entry or a TOML file")
            try:
                loader(table[key], dirs)
            except ConfigError as exc:
                raise ConfigError(f"{where}: [simulator] {key}: {exc}") from None
        return cls(table, emulate, float(scale), float(secs) if secs is not None else None, where)

    def run(self, spec: LaunchSpec, *, values: Mapping[str, Any], fields: Sequence[FieldDecl],
            num_prompts: int | None = None, load: Mapping[str, float] | None = None,
            seed_offset: int = 0, bench_argv: Sequence[str] | None = None) -> Any:
        """Simulate one evaluation; ``bench_argv`` is the benchmark's rendered command line."""
        from msopt.sim import simulate_launch

        table = thaw(self.table)
        workload = dict(table.get("workload", {}))
        if num_prompts is not None:
            workload["num_prompts"] = int(num_prompts)
        for key, v in (load or {}).items():
            workload[key] = v
        table["workload"] = workload
        table["seed"] = int(table.get("seed", 0)) + int(seed_offset)
        return simulate_launch(spec, table, bench_argv)

    def emulate_wall_time(self, result: Any, elapsed: float) -> None:
        """Sleep so the evaluation takes the wall time a real one would (when enabled)."""
        if not self.emulate:
            return
        target = self.eval_seconds if self.eval_seconds is not None else result.duration * self.time_scale
        if target > elapsed:
            time.sleep(target - elapsed)
