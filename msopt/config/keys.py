"""The checked keys, each declared once: its check, the rule a message states, and, for the
few that the packaged ``defaults.toml`` leaves unset, what unset means (:data:`UNSET_DEFAULTS`).

Loading checks the top-level scalars and :data:`TABLES`; the keys of :data:`SECTION_TABLES` are checked by
their component's parser, which builds the section's object once per run (``[capacity]``:
:func:`msopt.run.capacity.capacity_options`, ``[simulator]``: :class:`msopt.evaluate.simulated.SimulatorSetup`,
``[pso_options]``: :class:`msopt.search.options.SwarmOptions`), each key through :func:`checked`.
Every other default is in defaults.toml alone; :mod:`msopt.config.typed` reads both into the typed
:class:`~msopt.config.typed.Config`.
"""

from __future__ import annotations

import numbers
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from msopt.checks import is_finite, is_int, is_number, port_range
from msopt.config.optix import OPTIX_KEYS
from msopt.errors import ConfigError
from msopt.registry import close_matches

__all__ = ["DTYPES", "MSOPT_KEYS", "ORIGINAL_KEYS", "PERCENTILES", "SCALARS", "SECTION_TABLES", "STRICT_TABLES",
           "TABLES", "TOP_LEVEL_KEYS", "UNSET_DEFAULTS", "Key", "check_keys", "check_scalars", "checked", "percentile"]

#: Top-level keys of the original tool's config.toml, accepted unchanged.
ORIGINAL_KEYS = (
    "n_particles", "iters", "ttft_penalty", "tpot_penalty", "success_rate_penalty", "ttft_slo",
    "tpot_slo", "success_rate_slo", "generate_speed_target", "sample_size", "service",
    "pso_options", "pso_strategy", "data_storage", "health_check", "mindie", "vllm",
    "vllm_benchmark", "ais_bench", "kubectl", "wait_start_time",
)
#: Top-level keys msopt adds.
MSOPT_KEYS = (
    "engine", "benchmark", "simulate", "mode", "duplicate_policy", "objective", "seed",
    "particles_time_out", "output", "cluster", "simulator", "sglang", "builtin", "capacity",
    "max_launches", "search", "backup", "slo", "workload",
)
TOP_LEVEL_KEYS = ORIGINAL_KEYS + OPTIX_KEYS + MSOPT_KEYS


@dataclass(frozen=True)
class Key:
    """One checked key.

    Attributes:
        ok: whether a value is valid.
        rule: what a valid value is, for messages ("an integer from 0 to 4096").
        unset: what it means that defaults.toml leaves the key unset (docs/configuration.md says it too);
            empty: defaults.toml sets it, or the key is optional and its reader says.
        default: the value the typed configuration takes where no layer sets the key (with ``unset``).
        doc: what the key means, one line of docs/configuration.md's table (:mod:`msopt.config.reference`).
        example: a valid value as TOML, the fix a component's message gives (``e.g. tolerance = 0.05``).
    """

    ok: Callable[[Any], bool]
    rule: str
    unset: str = ""
    default: Any = None
    doc: str = ""
    example: str = ""


def _ints(low: int, high: int, rule: str = "", **unset: Any) -> Key:
    return Key(lambda v: is_int(v) and low <= v <= high, rule or f"an integer from {low} to {high}", **unset)


def _numbers(low: float, high: float, rule: str = "", **doc: Any) -> Key:
    return Key(lambda v: is_finite(v) and low <= v <= high, rule or f"a number from {low:g} to {high:g}", **doc)


def _positive(high: float, rule: str, **doc: Any) -> Key:
    return Key(lambda v: is_finite(v) and 0 < v <= high, rule, **doc)


def _one_of(*names: str, **doc: Any) -> Key:
    return Key(lambda v: v in names, " or ".join(f'"{n}"' for n in names).replace(" or ", ", ", len(names) - 2),
               **doc)


def _bool(**unset: Any) -> Key:
    return Key(lambda v: isinstance(v, bool), "true or false", **unset)


def _name(rule: str, **unset: Any) -> Key:
    return Key(lambda v: isinstance(v, str) and v != "", rule, **unset)


#: Top-level scalars, in docs/configuration.md's order.
SCALARS: Mapping[str, Key] = {
    "n_particles": _ints(1, 100_000, doc="particles in the swarm"),
    "iters": _ints(0, 1_000_000, doc="swarm iterations after the baseline"),
    "engine": _name("an engine name such as \"vllm\"", doc=(
        "section whose `target_field` list is searched (`-e` overrides); unset in your files, the only engine "
        "whose `[[X.target_field]]` they declare, or of several `mindie` (with `benchmark` `ais_bench`, the "
        "original tool's file, [migrating.md](migrating.md))")),
    "benchmark": _name("a benchmark name such as \"vllm_benchmark\"", doc="benchmark adapter (`-b` overrides)"),
    "objective": _name("an objective name such as \"default\"",
                       doc="`default` (the original tool's fitness) or `goodput`"),
    "mode": _one_of("sync", "async",
                    doc="`sync`: whole iterations; `async`: each particle moves as soon as its result arrives"),
    "duplicate_policy": _one_of("reuse", "rerun", doc=(
        "identical decoded values reuse the earlier result (`reuse`) or run again (`rerun`)")),
    "seed": Key(lambda v: is_int(v) and 0 <= v < 2**63, "a non-negative integer", doc=(
        "seeds the swarm and its searcher, and the simulator's workload and noise (added to `[simulator] seed`, "
        "so `--seed 1` and `--seed 2` measure differently and the same seed repeats a run exactly)")),
    "max_launches": _ints(0, 10_000_000, "an integer from 0 (no budget) to 10000000", unset="no launch budget",
                          default=0, doc=(
                              "the launch budget (`--max-launches`): the baseline, the search and the "
                              "re-measurements together launch at most this many evaluations; 0: no budget, "
                              "`iters` iterations ([below](#the-launch-budget-max_launches))")),
    "simulate": _bool(doc="the embedded simulator stands in for engine and benchmark"),
    "output": _name("a directory path", doc="parent directory of run directories"),
    "particles_time_out": _positive(1e7, "a positive number of seconds up to 1e7",
                                    doc="seconds one evaluation may take before it is failed"),
    "backup": _bool(unset="--backup off", default=False, doc=(
        "keep every evaluation's launch (command line, environment, the files it writes: MindIE's config.json "
        "as edited) and the originals of files edited in place in `RUN_DIR/backup/` (`--backup`; "
        "[migrating.md](migrating.md#--backup))")),
    "wait_start_time": _positive(1e6, "a positive number of seconds up to 1e6", doc=(
        "the original tool's spelling of `[<engine>] wait_start_time`: moved to the searched engine's table at "
        "load time (that table's own value wins)")),
    "sample_size": _ints(1, 100_000_000, doc=(
        "caps num_prompts during the search. The full workload is what the benchmark sends uncapped, read from "
        "its own section: `[builtin] num_prompts` (default 200), `[vllm_benchmark.command] num_prompts` (1000), "
        "`[ais_bench.command] num_prompts` (1000: the generated dataset's requests, or the first of your own "
        "`datasets`); simulated, `[simulator.workload] num_prompts`")),
    "service": Key(lambda v: isinstance(v, str), "a string", doc="kept from the original tool"),
    "generate_speed_target": _positive(1e12, "a positive number of tokens/s",
                                       doc="output tokens/s that score 0.4 in the default fitness"),
    "ttft_slo": _positive(1e6, "a positive number of seconds up to 1e6", doc=(
        "seconds: mean time to first token (or the statistic `[slo]` names)")),
    "tpot_slo": _positive(1e6, "a positive number of seconds up to 1e6", doc=(
        "seconds: mean time per output token (or the statistic `[slo]` names)")),
    "success_rate_slo": _positive(1, "a number in (0, 1]", doc="fraction of requests that must succeed"),
    "ttft_penalty": _numbers(0, 1000, doc="steepness of the TTFT SLO term (0 allowed)"),
    "tpot_penalty": _numbers(0, 1000, doc="steepness of the TPOT SLO term (0 allowed)"),
    "success_rate_penalty": _numbers(0, 1000, doc="steepness of the success-rate SLO term (0 allowed)"),
    "use_request_rate_calibration": _bool(doc=(
        "optix's key (true where unset): msopt holds the `REQUESTRATE` and `CONCURRENCY` fields at their max, "
        "and its `[capacity]` stage finds each top configuration's highest request rate (true) or concurrency "
        "(false) ([migrating.md](migrating.md))")),
}

#: Keys of the tables whose values are checked at load time; :data:`STRICT_TABLES` refuse keys not listed.
TABLES: Mapping[str, Mapping[str, Key]] = {
    "search": {
        "searcher": _name("a searcher name such as \"swarm\"",
                          unset="the portfolio with a prior, TPE without (search.resolve_searcher)", default="auto",
                          doc=("`\"auto\"` (the portfolio of the swarm and TPE where a prior can be built, "
                               "else TPE under a launch budget), `\"portfolio\"`, `\"swarm\"`, `\"tpe\"` or a "
                               "plugin's ([below](#choosing-the-searcher-searcher))")),
        "prior": _one_of("auto", "simulator", "none", doc=(
            "whether the run uses the simulator prior: `\"simulator\"` always, `\"none\"` never, `\"auto\"` where "
            "the simulator models the run ([below](#turning-the-prior-on-prior))")),
        "prior_evaluations": _ints(0, 1_000_000, doc=(
            "simulated evaluations of the prior's search before the first launch "
            "([below](#prior-search-budget-prior_evaluations))")),
        "prior_picks": _ints(0, 100_000, unset="all", doc=(
            "particles besides the baseline that start at the prior's picks; the rest start at random")),
        "screen": _ints(0, 64, "an integer from 0 (off) to 64", doc=(
            "moves a particle draws per evaluation; the prior ranks them and the best predicted is launched "
            "(0 or 1: no screening)")),
        "explore": _numbers(0, 1, doc=(
            "the chance a screened particle launches its first move unranked, so a wrong model cannot trap the "
            "search")),
        "refit": _bool(doc=(
            "after every iteration, refit the simulator's efficiency factors to this run's own measurements and "
            "predict with the refitted hardware ([below](#refitting-the-prior-refit))")),
        "correct": _bool(doc=(
            "after every iteration that measured new configurations on the real engine, correct the simulator's "
            "hardware entry to them where that predicts them better ([below](#correcting-the-simulator-correct))")),
    },
    "data_storage": {
        "pso_top_k": _ints(0, 100_000, doc=(
            "best distinct configurations measured again with the full `num_prompts` after the search; 0: none "
            "([below](#re-measuring-the-best-configurations-pso_top_k))")),
    },
    "cluster": {
        "accelerator": Key(lambda v: isinstance(v, str) and v.lower() in ("npu", "gpu", "cpu", "none"),
                           "\"NPU\", \"GPU\", \"cpu\" (vLLM's CPU build: devices_per_trial is cores) or \"none\"", doc=(
                               "`\"NPU\"` (Ray resource `NPU`, `ASCEND_RT_VISIBLE_DEVICES`), `\"GPU\"` "
                               "(`num_gpus`, `CUDA_VISIBLE_DEVICES`), `\"cpu\"` (vLLM's CPU build: "
                               "`devices_per_trial` is the cores one trial holds, reserved as Ray's `num_cpus`; "
                               "start-up rules `cpu.cores` and `vllm_cpu.numa_nodes`, and preflight's `devices` "
                               "and `numa` checks, see [engines.md](engines.md)) or `\"none\"` (nothing reserved, "
                               "nothing checked)")),
        "devices_per_trial": _ints(0, 4096, unset="the ternary_factories product, else 1", doc=(
            "devices one evaluation holds: one STRICT_PACK bundle when it fits a node, else split evenly over the "
            "fewest nodes (one bundle per node, STRICT_SPREAD)")),
        "devices_per_node": _ints(1, 4096, unset=(
            "the cluster's largest node (simulated: the `[simulator]` hardware's `devices_per_node`)"), doc=(
            "devices of one node; a trial above it spans nodes ([engines.md](engines.md#10-trials-that-span-nodes))")),
        "max_concurrent_trials": _ints(0, 100_000, doc=(
            "cap on concurrent evaluations (0: as many as the cluster's devices allow, at most `n_particles`)")),
        "ports": Key(lambda v: port_range(v) is not None,
                     "a port range \"LOW-HIGH\" within 1-65535, such as \"20000-20999\"",
                     unset="unset: the OS picks", doc=(
                         "the range every port msopt picks for a trial comes from ([below](#port-range-ports))")),
        "reuse_servers": _bool(doc=(
            "keep a server running after its benchmark for the next evaluation with the same *server key*; false: "
            "every measurement from a cold server ([below](#server-reuse-reuse_servers))")),
    },
}
STRICT_TABLES = ("cluster", "search")

#: Percentiles whose metrics (``ttft_pNN``, ``tpot_pNN``) the simulator and benchmarks report.
PERCENTILES = (50, 90, 99)
#: The weight and KV dtypes the simulator's catalog models (msopt.sim.catalog_types.DTYPE_BYTES; a test keeps
#: the two in step, as the config package sits below the simulator).
DTYPES = ("bf16", "fp16", "fp8", "int4", "int8")


def percentile(value: Any) -> int | None:
    """``[capacity] percentile`` as written: None for "mean", else 50, 90 or 99 (-1: none of them)."""
    if value == "mean" or value is None:
        return None
    if isinstance(value, str) and value.lower().lstrip("p").isdigit():
        value = int(value.lower().lstrip("p"))
    return value if is_int(value) and value in PERCENTILES else -1


def _number(ok: Callable[[float], bool], rule: str, test: Callable[[Any], bool] = is_finite, **doc: Any) -> Key:
    return Key(lambda v: test(v) and ok(v), rule, **doc)


def _whole(low: int, rule: str, **doc: Any) -> Key:
    return Key(lambda v: isinstance(v, numbers.Integral) and not isinstance(v, bool) and int(v) >= low, rule, **doc)


def _dirs(v: Any) -> bool:
    return isinstance(v, str) or (isinstance(v, (list, tuple)) and all(isinstance(d, str) for d in v))


_LOAD = "a positive number"
_SECONDS = "a number from 0 to 1e6"

#: Keys of the tables a component parses once per run (see the module docstring), in configuration.md's
#: order; each parser refuses keys not listed. ``[simulator] workload`` is a table of its own (documented
#: below the generated table), not a key here.
SECTION_TABLES: Mapping[str, Mapping[str, Key]] = {
    "pso_options": {
        "c1": _number(lambda v: v >= 0, "a number >= 0", example="1.5", doc=(
            "cognitive coefficient: the pull toward the particle's own best")),
        "c2": _number(lambda v: v >= 0, "a number >= 0", example="2.0", doc=(
            "social coefficient: the pull toward the swarm's best ([benchmarks](benchmarks.md))")),
        "w": _number(lambda v: v >= 0, "a number >= 0", example="0.7", doc="inertia weight"),
        "velocity_clamp": _number(lambda v: v > 0, "a number > 0", example="0.5", doc=(
            "largest velocity, as a fraction of each dimension's range")),
        "restart_patience": _whole(0, "an integer >= 0", example="3", doc=(
            "a particle told this many evaluations in a row that did not improve its own best is re-drawn "
            "uniformly in the box (its bests kept); 0 never restarts. See [benchmarks](benchmarks.md)")),
        "boundary": _one_of("absorb", "reflect", example='"absorb"', doc=(
            "a move that leaves the box stops on the bound and that velocity component becomes 0 (`\"reflect\"`: "
            "folded back inside, velocity flipped)")),
        "mutation": _number(lambda v: 0 <= v <= 1, "a number in [0, 1]", example="0.5", doc=(
            "probability that a particle, after its move, takes one step along one random dimension, up or down: "
            "one candidate of a dimension with at most 10 candidates, else a tenth of its range; 0 never. See "
            "[benchmarks](benchmarks.md)")),
    },
    "capacity": {
        "enabled": _bool(unset=("true when a `CONCURRENCY` or `REQUESTRATE` field (`config_position = \"env\"`) "
                                "is searched, else false"), example="true", doc="run the stage"),
        "percentile": Key(lambda v: percentile(v) != -1, '"mean" or one of 50, 90, 99', example="99", doc=(
            "TTFT/TPOT statistic held to the SLOs: `\"mean\"` (what the SLOs hold: the statistic `[slo]` names, "
            "else the means), `50`, `90` or `99` (metrics `ttft_pNN`, `tpot_pNN`; refused at start-up when the "
            "benchmark does not report them)")),
        "tolerance": _number(lambda v: 0 < v < 1, "a number in (0, 1)", example="0.05",
                             doc="relative precision of the load found"),
        "max_probes": _ints(1, 1000, example="12", doc="evaluations per configuration, repeats included"),
        "repeats": _ints(1, 100, unset="1 simulated, 2 on real engines", example="2", doc=(
            "probes of the load found, all of which must pass (at most `max_probes`)")),
        "load": _one_of("auto", "request_rate", "concurrency", example='"request_rate"', doc=(
            "the load varied. `auto`: the `REQUESTRATE` field, else the `CONCURRENCY` field, else `request_rate` "
            "when the workload is open-loop (`[simulator.workload] request_rate`, or the benchmark command's "
            "`request_rate`), else `concurrency`")),
        "start_load": _number(lambda v: v > 0, _LOAD, unset="the workload's", example="8", doc=(
            "load to start from when a configuration has no `REQUESTRATE`/`CONCURRENCY` value of its own; the "
            "workload's is what the benchmark configures (`[simulator.workload]` simulated; `[builtin] "
            "concurrency` / a finite `request_rate`; `[vllm_benchmark.command]` `max_concurrency` / "
            "`request_rate`, likewise `[ais_bench.command]`); required when nothing configures one")),
        "min_load": _number(lambda v: v > 0, _LOAD, unset="1 (concurrency), start / 64 (request rate)",
                            example="1", doc="lowest load probed"),
        "max_load": _number(lambda v: v > 0, _LOAD, unset="none", example="64", doc=(
            "highest load probed (without it, `max_probes` bounds the doubling)")),
        "target_rate": Key(lambda v: (is_finite(v) and v > 0) or isinstance(v, str),
                           "requests/s above 0 or a multiple of the trace's rate such as \"3x\"", unset="none",
                           example="20", doc=(
                               "the rate a deployment must serve: requests/s (`20`), or a multiple of the trace's "
                               "own rate (`\"3x\"`, needs `[workload] trace`). Turns the stage on (with "
                               "`enabled = false` it is refused) and needs `load = \"request_rate\"` (the default "
                               "on a trace)")),
    },
    "simulator": {
        "hardware": _name("a catalog name or a TOML file path", example='"h100-sxm"', doc=(
            "catalog name (`atlas-800i-a2`, `atlas-800i-a3`, `h100-sxm`, `h200-sxm`, `a100-sxm-40gb`, "
            "`a100-sxm-80gb`, ...), a device name as nvidia-smi / npu-smi print it (`\"NVIDIA A100-SXM4-40GB\"`, "
            "`\"910B3\"`, `\"Atlas 800I A3\"`) or a TOML file path")),
        "model": _name("a catalog name or a TOML file path", example='"qwen3-8b"', doc=(
            "catalog name (`llama-3.1-8b`, `llama-3.1-70b`, `qwen3-8b`, `qwen3-32b`, `deepseek-v3`, `kimi-k2`, "
            "...), the Hugging Face id of one (`\"deepseek-ai/DeepSeek-R1\"`) or a TOML file path")),
        "weight_dtype": Key(lambda v: v in DTYPES, f"one of {', '.join(DTYPES)}", example='"bf16"', doc=(
            "dtype of the weights (`int4`: Ascend W4A8)")),
        "kv_dtype": Key(lambda v: v in DTYPES, f"one of {', '.join(DTYPES)}", unset="the weight dtype",
                        example='"fp8"', doc="dtype of the KV cache"),
        "spec_accept_len": _number(
            lambda v: 1 <= v <= 64, "a number from 1 to 64 (tokens kept per speculative verify step, the target's "
            "own included)", is_number, unset="a default per draft method", example="2.5", doc=(
                "speculative decoding's acceptance length when the launch decodes speculatively (disaggregated: the "
                "decode instances); the default per draft method is reported as assumed. In a real run the "
                "length vLLM's or SGLang's counters measured (the `spec_accept_len` metric) replaces it in the "
                "prior once measured (docs/simulator.md, \"Speculative decoding\")")),
        "seed": Key(lambda v: is_int(v) and 0 <= v < 2**62, "a non-negative integer", example="0", doc=(
            "seeds the workload and the noise: the simulator uses this seed + the eval id + the top-level `seed` "
            "(`--seed`) × 2³², so runs with different `--seed` differ and `--seed 0` keeps this seed as it is")),
        "noise": _number(lambda v: 0 <= v <= 10, "a number from 0 to 10 (a relative standard deviation)", is_number,
                         example="0.02", doc="relative standard deviation of a per-run multiplicative noise"),
        "catalog_dirs": Key(_dirs, "a directory or a list of directories", example='["my_catalog"]', doc=(
            "more directories of hardware/model TOML files")),
        "emulate_wall_time": _bool(example="true", doc=(
            "an evaluation takes wall time as a real one: `eval_seconds`, else the simulated duration × "
            "`time_scale`")),
        "time_scale": _number(lambda v: 0 <= v <= 1e6, _SECONDS, is_number, example="1.0",
                              doc="see `emulate_wall_time`"),
        "eval_seconds": _number(lambda v: 0 <= v <= 1e6, _SECONDS, is_number, unset="unset", example="60",
                                doc="see `emulate_wall_time`"),
    },
}


def checked(where: str, table: str, name: str, value: Any, key: Key) -> Any:
    """``value`` of ``[table] name``, where ``key`` accepts it.

    Raises:
        ConfigError: naming ``where`` (the file that set it; "": the caller names it), the table, the key, the
            rule and the fix.
    """
    if not key.ok(value):
        fix = f"e.g. {name} = {key.example}" if key.example else f"fix '{name}'"
        raise ConfigError(f"{where + ': ' if where else ''}[{table}] {name} must be {key.rule}, got {value!r}; {fix}")
    return value


#: Keys defaults.toml leaves unset (dotted), and the value the typed configuration takes for each.
UNSET_DEFAULTS: Mapping[str, Any] = {
    **{name: key.default for name, key in SCALARS.items() if key.unset},
    **{f"{table}.{name}": key.default for table, keys in TABLES.items() for name, key in keys.items() if key.unset},
}


def check_keys(layer: Mapping[str, Any], source: str, sections: tuple[str, ...] = ()) -> None:
    """Refuse a top-level key that is neither msopt's, the original tool's, optix's nor one of ``sections``.

    Raises:
        ConfigError: naming ``source``, the key and close matches.
    """
    known = TOP_LEVEL_KEYS + tuple(s for s in sections if s not in TOP_LEVEL_KEYS)
    for key in layer:
        if key not in known:
            hint = close_matches(key, known)
            did = f"did you mean {', '.join(repr(h) for h in hint)}?" if hint else \
                "see docs/configuration.md for the valid keys"
            raise ConfigError(f"{source}: unknown top-level key '{key}'; {did}")


def check_scalars(data: Mapping[str, Any], origin: Mapping[str, str]) -> None:
    """Check the top-level scalars and the keys of :data:`TABLES` of merged data.

    Raises:
        ConfigError: naming the file that set the key (``origin``), the key, the rule and the fix.
    """
    for name, key in SCALARS.items():
        if name in data and not key.ok(data[name]):
            raise ConfigError(f"{origin.get(name, '<defaults>')}: '{name}' must be {key.rule}, got {data[name]!r}; "
                              f"fix '{name}'")
    for name in data:
        if name not in SCALARS and not isinstance(data[name], Mapping):
            raise ConfigError(f"{origin.get(name, '<defaults>')}: '{name}' must be a table, got {data[name]!r}; "
                              f"write [{name}]")
    for table, spec in TABLES.items():
        for name, value in data.get(table, {}).items():
            where = origin.get(f"{table}.{name}", origin.get(table, "<defaults>"))
            if name not in spec:
                if table in STRICT_TABLES:
                    hint = close_matches(str(name), tuple(spec))
                    did = f"did you mean '{hint[0]}'?" if hint else f"valid keys: {', '.join(spec)}"
                    raise ConfigError(f"{where}: unknown key '{name}' in [{table}]; {did}")
                continue
            if not spec[name].ok(value):
                raise ConfigError(f"{where}: [{table}] '{name}' must be {spec[name].rule}, got {value!r}; "
                                  f"fix '{name}'")
