"""The keys loading checks, each declared once: its check, the rule a message states, and, for the
few that the packaged ``defaults.toml`` leaves unset, what unset means (:data:`UNSET_DEFAULTS`).

Every other default is in defaults.toml alone; :mod:`msopt.config.typed` reads both into the typed
:class:`~msopt.config.typed.Config`. What each component makes of its own section is its own
parser's to check (:func:`msopt.run.validate.validate`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from msopt.checks import is_finite, is_int, port_range
from msopt.config.optix import OPTIX_KEYS
from msopt.errors import ConfigError
from msopt.registry import close_matches

__all__ = ["MSOPT_KEYS", "ORIGINAL_KEYS", "SCALARS", "STRICT_TABLES", "TABLES", "TOP_LEVEL_KEYS", "UNSET_DEFAULTS",
           "Key", "check_keys", "check_scalars"]

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
    """

    ok: Callable[[Any], bool]
    rule: str
    unset: str = ""
    default: Any = None
    doc: str = ""


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


def _name(example: str, **unset: Any) -> Key:
    return Key(lambda v: isinstance(v, str) and v != "", example, **unset)


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
