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
    """

    ok: Callable[[Any], bool]
    rule: str
    unset: str = ""
    default: Any = None


def _ints(low: int, high: int, rule: str = "", **unset: Any) -> Key:
    return Key(lambda v: is_int(v) and low <= v <= high, rule or f"an integer from {low} to {high}", **unset)


def _numbers(low: float, high: float, rule: str = "") -> Key:
    return Key(lambda v: is_finite(v) and low <= v <= high, rule or f"a number from {low:g} to {high:g}")


def _positive(high: float, rule: str) -> Key:
    return Key(lambda v: is_finite(v) and 0 < v <= high, rule)


def _one_of(*names: str) -> Key:
    return Key(lambda v: v in names, " or ".join(f'"{n}"' for n in names).replace(" or ", ", ", len(names) - 2))


def _bool(**unset: Any) -> Key:
    return Key(lambda v: isinstance(v, bool), "true or false", **unset)


def _name(example: str, **unset: Any) -> Key:
    return Key(lambda v: isinstance(v, str) and v != "", example, **unset)


#: Top-level scalars.
SCALARS: Mapping[str, Key] = {
    "n_particles": _ints(1, 100_000),
    "iters": _ints(0, 1_000_000),
    "ttft_penalty": _numbers(0, 1000),
    "tpot_penalty": _numbers(0, 1000),
    "success_rate_penalty": _numbers(0, 1000),
    "ttft_slo": _positive(1e6, "a positive number of seconds"),
    "tpot_slo": _positive(1e6, "a positive number of seconds"),
    "success_rate_slo": _positive(1, "a number in (0, 1]"),
    "generate_speed_target": _positive(1e12, "a positive number of tokens/s"),
    "sample_size": _ints(1, 100_000_000, "a positive integer"),
    "service": Key(lambda v: isinstance(v, str), "a string"),
    "engine": _name("an engine name such as \"vllm\""),
    "benchmark": _name("a benchmark name such as \"vllm_benchmark\""),
    "simulate": _bool(),
    "mode": _one_of("sync", "async"),
    "duplicate_policy": _one_of("reuse", "rerun"),
    "objective": _name("an objective name such as \"default\""),
    "seed": Key(lambda v: is_int(v) and 0 <= v < 2**63, "a non-negative integer"),
    "max_launches": _ints(0, 10_000_000, "an integer from 0 (no budget) to 10000000", unset="no launch budget",
                          default=0),
    "particles_time_out": _positive(1e7, "a positive number of seconds"),
    "output": _name("a directory path"),
    "backup": _bool(unset="--backup off", default=False),
    "wait_start_time": _positive(1e6, "a positive number of seconds"),
    "use_request_rate_calibration": _bool(),
}

#: Keys of the tables whose values are checked at load time; :data:`STRICT_TABLES` refuse keys not listed.
TABLES: Mapping[str, Mapping[str, Key]] = {
    "cluster": {
        "accelerator": Key(lambda v: isinstance(v, str) and v.lower() in ("npu", "gpu", "cpu", "none"),
                           "\"NPU\", \"GPU\", \"cpu\" (vLLM's CPU build: devices_per_trial is cores) or \"none\""),
        "devices_per_trial": _ints(0, 4096, unset="the ternary_factories product, else 1 (typed.TrialShape)"),
        "devices_per_node": _ints(1, 4096, unset="the cluster's largest node; simulated: the hardware's"),
        "max_concurrent_trials": _ints(0, 100_000),
        "ports": Key(lambda v: port_range(v) is not None,
                     "a port range \"LOW-HIGH\" within 1-65535, such as \"20000-20999\"",
                     unset="the OS picks any free port"),
        "reuse_servers": _bool(),
    },
    "search": {
        "searcher": _name("a searcher name such as \"swarm\"",
                          unset="the portfolio with a prior, TPE without (search.resolve_searcher)", default="auto"),
        "prior": _one_of("auto", "simulator", "none"),
        "prior_evaluations": _ints(0, 1_000_000),
        "prior_picks": _ints(0, 100_000, unset="every particle besides the baseline"),
        "screen": _ints(0, 64, "an integer from 0 (off) to 64"),
        "explore": _numbers(0, 1),
        "refit": _bool(),
        "correct": _bool(),
    },
    "data_storage": {
        "pso_top_k": _ints(0, 100_000),
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
