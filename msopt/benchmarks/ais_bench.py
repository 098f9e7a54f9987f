"""AISBench (``ais_bench --mode perf``) against the server under test.

AISBench takes the server's address and the client concurrency from its model configuration
file (a Python file: ``host_ip``, ``host_port``, ``batch_size``, ``request_rate``), not from its
command line. msopt therefore exports them for that file to read::

    MSOPT_SERVER_HOST, MSOPT_SERVER_PORT, MSOPT_SERVER_URL, MSOPT_MODEL,
    MSOPT_SERVED_MODEL_NAME, MSOPT_CONCURRENCY, MSOPT_REQUEST_RATE

e.g. ``host_port=int(os.environ["MSOPT_SERVER_PORT"])`` (see docs/engines.md).

Assumed result layout (AISBench 3.x): ``<work-dir>/<timestamp>/performances/<abbr>/<dataset>.csv``
(per-request statistics: columns ``Performance Parameters, Stage, Average, ...``, rows ``TTFT``,
``TPOT`` with values such as ``2006.0 ms``) and ``<dataset>.json`` (common metrics: ``Total
Requests``, ``Success Requests``, ``Request Throughput``, ``Output Token Throughput``, each a
number, a string with a unit, or ``{"total": value}``). The newest pair is read.
"""

from __future__ import annotations

import csv
import json
import math
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from msopt.benchmarks.base import (
    BENCHMARKS,
    BenchmarkAdapter,
    check_metrics,
    resolve_load,
    server_values,
)
from msopt.checks import is_int
from msopt.engines.base import (
    LaunchSpec,
    check_repeated_flags,
    command_table,
    env_fields,
    executable,
    format_value,
    split_others,
    substitute,
)
from msopt.engines.process import exit_report, tail
from msopt.errors import ConfigError, EvaluationError
from msopt.space.fields import FieldDecl

_NUMBER = re.compile(r"^\s*([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)\s*([A-Za-z/%]*)")
_SCALE_TO_SECONDS = {"ms": 1e-3, "s": 1.0, "us": 1e-6, "": 1e-3}  # AISBench latencies are ms


def _names(cmd: Mapping[str, Any], key: str, default: str, where: str,
           values: Mapping[str, Any]) -> list[str]:
    value = cmd.get(key, default)
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, (list, tuple)) or not value or not all(isinstance(v, str) and v for v in value):
        raise ConfigError(f"{where}: '{key}' must be a task name or a list of them, got {value!r}")
    return [substitute(v, values) for v in value]


def parse_quantity(value: Any) -> tuple[float, str] | None:
    """``12.5``, ``"2006.0 ms"``, ``{"total": "3 req/s"}`` -> (number, unit)."""
    if isinstance(value, Mapping):
        value = value.get("total", next(iter(value.values()), None) if value else None)
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value), ""
    if isinstance(value, str):
        m = _NUMBER.match(value)
        if m:
            return float(m.group(1)), m.group(2)
    return None


class AisBench(BenchmarkAdapter):
    """AISBench performance mode: ``ais_bench --models M --datasets D --mode perf --work-dir W``."""

    name = "ais_bench"

    def check(self, fields: Sequence[FieldDecl], section: Mapping[str, Any]) -> None:
        """``others`` must not repeat a flag msopt renders."""
        cmd = command_table(section, self.name)
        where = f"[{self.name}.command]"
        owned = {"--models": f"{where} models", "--datasets": f"{where} datasets", "--mode": f"{where} mode",
                 "--work-dir": "msopt (the evaluation's result directory, which it reads)",
                 "--num-prompts": f"{where} num_prompts (sample_size during the search)"}
        check_repeated_flags(owned, cmd.get("others", ""), f"{where} 'others'")

    def render(
        self,
        values: Mapping[str, Any],
        fields: Sequence[FieldDecl],
        section: Mapping[str, Any],
        *,
        server: LaunchSpec,
        num_prompts: int | None,
        load: Mapping[str, float],
        result_dir: Path,
    ) -> tuple[tuple[str, ...], dict[str, str]]:
        """The ``ais_bench`` command line; the server address and load go into the environment."""
        where = f"[{self.name}.command]"
        cmd = command_table(section, self.name)
        sv = server_values(server)
        subst = {**sv, **values}
        conc, rate = resolve_load(values, fields, cmd, load, where)
        argv = executable(cmd, ("ais_bench",), self.name, subst)
        argv += ["--models", *_names(cmd, "models", "vllm_api_stream_chat", where, subst)]
        argv += ["--datasets", *_names(cmd, "datasets", "synthetic_gen", where, subst)]
        argv += ["--mode", str(cmd.get("mode", "perf")), "--work-dir", str(result_dir)]
        n = num_prompts if num_prompts is not None else cmd.get("num_prompts")
        if n is not None:
            if not is_int(n) or n < 1:
                raise ConfigError(f"{where}: 'num_prompts' must be a positive integer, got {n!r}")
            argv += ["--num-prompts", str(n)]
        argv += split_others(cmd.get("others", ""), subst, where)
        env = {**sv, **env_fields(values, fields, section, self.name)}
        if conc is not None:
            env["MSOPT_CONCURRENCY"] = str(conc)
        if rate is not None:
            env["MSOPT_REQUEST_RATE"] = format_value(rate) if math.isfinite(rate) else "0"
        return tuple(argv), env

    def parse(self, result_dir: Path, log_path: Path) -> dict[str, float | None]:
        """Read the newest ``performances/<abbr>/<dataset>.json`` and its ``.csv``."""
        found = sorted(Path(result_dir).glob("**/performances/*/*.json"), key=lambda p: p.stat().st_mtime)
        if not found:
            raise EvaluationError(exit_report(f"ais_bench wrote no performances/*/*.json under {result_dir}",
                                              log_path, tail(log_path, 20)))
        jpath = found[-1]
        try:
            common = json.loads(jpath.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as exc:
            raise EvaluationError(f"cannot read the ais_bench result {jpath}: {exc}") from None
        per_request: dict[str, Any] = {}
        cpath = jpath.with_suffix(".csv")
        if cpath.exists():
            with cpath.open(newline="", encoding="utf-8") as f:
                for row in csv.DictReader(f):
                    key = (row.get("Performance Parameters") or "").strip()
                    if key:
                        per_request[key] = row.get("Average")
        return parse_results(common, per_request)


def parse_results(common: Mapping[str, Any], per_request: Mapping[str, Any]) -> dict[str, float | None]:
    """Metrics from AISBench's common-metric object and per-request averages (ms -> s)."""
    def q(src: Mapping[str, Any], *keys: str) -> tuple[float, str] | None:
        for k in keys:
            if k in src:
                return parse_quantity(src[k])
        return None

    def seconds(src: Mapping[str, Any], *keys: str) -> float | None:
        got = q(src, *keys)
        if got is None:
            return None
        number, unit = got
        return number * _SCALE_TO_SECONDS.get(unit.lower(), 1e-3)

    total = q(common, "Total Requests")
    success = q(common, "Success Requests")
    failed = q(common, "Failed Requests")
    rate = None
    if success is not None and total is not None and total[0] > 0:
        rate = success[0] / total[0]
    elif success is not None and failed is not None and success[0] + failed[0] > 0:
        rate = success[0] / (success[0] + failed[0])
    speed = q(common, "Output Token Throughput")
    reqs = q(common, "Request Throughput")
    ok = success is None or success[0] > 0
    return check_metrics("ais_bench", {
        "generate_speed": speed[0] if speed else None,
        "time_to_first_token": seconds(per_request, "TTFT") if ok else None,
        "time_per_output_token": seconds(per_request, "TPOT") if ok else None,
        "success_rate": rate,
        "throughput": reqs[0] if reqs else None,
    })


BENCHMARKS.register("ais_bench", AisBench)
