"""The original tool's spellings, mapped onto msopt's when a configuration layer is loaded.

The original is ms_serviceparam_optimizer of the public msserviceprofiler repository, read at
commit 9582f434cdd4daf150e2c8210fadebe8b5a39fe2 (github.com/Cztk5380/msserviceprofiler, a copy of
Ascend/msserviceprofiler), files under ms_serviceparam_optimizer/ms_serviceparam_optimizer/:
config/config.py (Settings and its tables), config/custom_command.py (the command lines).
docs/migrating.md takes every key and flag of it to msopt; this module does what can be done
unchanged:

- ``[health_check.service_errors.fatal_patterns]`` and its siblings (``HealthCheckConfig`` /
  ``ErrorPatternConfig``) become ``[health_check.service.fatal]`` and so on;
- ``MAX_NUM_BATCHED_TOKENS`` / ``MAX_NUM_SEQS`` fields at ``config_position = "env"`` of the
  ``[vllm]`` section, which the original's vLLM command always rendered as
  ``--max-num-batched-tokens $MAX_NUM_BATCHED_TOKENS --max-num-seqs $MAX_NUM_SEQS``
  (``VllmCommand.command``), become those flags unless the user's own command refers to them;
- the top-level ``wait_start_time`` goes to the searched engine's section;
- every other key of the original's Settings that msopt has no equivalent for, and which would
  otherwise be read by nobody, is refused in one line that says what to use instead
  (:data:`NO_EQUIVALENT`, :data:`NO_EQUIVALENT_IN`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from msopt.errors import ConfigError

#: Where the original's keys were read (for messages and docs/migrating.md).
SOURCE = ("msserviceprofiler@9582f434 ms_serviceparam_optimizer/ms_serviceparam_optimizer/config/config.py")

#: ``HealthCheckConfig`` tables -> msopt's log kinds.
HEALTH_KINDS = {"service_errors": "service", "benchmark_errors": "benchmark"}
#: ``ErrorPatternConfig`` tables -> msopt's severities.
HEALTH_SEVERITIES = {"fatal_patterns": "fatal", "retryable_patterns": "retryable"}

#: The env fields the original's ``VllmCommand.command`` always passed to ``vllm serve`` as flags.
VLLM_IMPLICIT_FLAGS = {"MAX_NUM_BATCHED_TOKENS": "--max-num-batched-tokens", "MAX_NUM_SEQS": "--max-num-seqs"}

#: Top-level keys of the original's ``Settings`` with no msopt equivalent: key -> what to do instead.
NO_EQUIVALENT: dict[str, str] = {
    "ftol": "pyswarms' early stop on a small fitness change; bound the run with iters or max_launches",
    "ftol_iter": "pyswarms' early stop on a small fitness change; bound the run with iters or max_launches",
    "slo_coefficient": "the CONCURRENCY/REQUESTRATE fine-tuning after the search; msopt's [capacity] stage "
                       "finds the highest load within the SLOs (tolerance, max_probes)",
    "step_size": "the CONCURRENCY/REQUESTRATE fine-tuning after the search; msopt's [capacity] stage finds "
                 "the highest load within the SLOs (tolerance, max_probes)",
    "max_fine_tune": "the CONCURRENCY/REQUESTRATE fine-tuning after the search; msopt's [capacity] stage "
                     "finds the highest load within the SLOs (max_probes)",
    "theory_guided_enable": "the original's MindIE max_batch_size bounds derived from the baseline; set the "
                            "field's min/max, or let [search] prior = \"simulator\" pick the start",
    "mem_coefficient": "the original's MindIE max_batch_size bounds derived from the baseline; set the field's "
                       "min/max, or let [search] prior = \"simulator\" pick the start",
    "scaling_coefficient": "the original's MindIE max_batch_size bounds derived from the baseline; set the "
                           "field's min/max, or let [search] prior = \"simulator\" pick the start",
    "simulator_output": "the original's XGBoost simulation mode; msopt's simulator needs no training "
                        "(simulate = true, [simulator])",
    "latency_model": "the original's XGBoost simulation mode; msopt's simulator needs no training "
                     "(simulate = true, [simulator])",
    "communication": "the original's file-based multi-node command channel; msopt runs trials on a Ray "
                     "cluster (--address)",
}

_CONCURRENCY = ("the original's AISBench concurrency automation (after the baseline, CONCURRENCY's max = the "
                "measured Concurrency x best_concurrency_coefficient, at least best_concurrency_threshold, at most "
                "Max Concurrency; optimizer/plugins/benchmark.py get_best_concurrency); give CONCURRENCY the bounds "
                "to search, and [capacity] finds the highest load within the SLOs")
_PERFORMANCE = ("the original's choice of the AISBench statistic for TTFT/TPOT; msopt's fitness holds the mean to "
                "ttft_slo/tpot_slo, and [capacity] percentile = 90 (or 50, 99) holds the capacity stage to a "
                "percentile")

#: Keys of the original's tables with no msopt equivalent: (table, key) -> what to do instead.
NO_EQUIVALENT_IN: dict[tuple[str, str], str] = {
    ("ais_bench", "best_concurrency_coefficient"): _CONCURRENCY,
    ("ais_bench", "best_concurrency_threshold"): _CONCURRENCY,
    ("ais_bench", "performance_config"): _PERFORMANCE,
    ("vllm_benchmark", "performance_config"): _PERFORMANCE,
}
#: ``performance_config`` as msopt measures anyway (the original's default): accepted.
_MEAN = {"time_to_first_token": {"metric": "TTFT", "algorithm": "average"},
         "time_per_output_token": {"metric": "TPOT", "algorithm": "average"}}

_VAR = re.compile(r"\$\{([^}]*)\}|\$([A-Za-z_][A-Za-z0-9_]*)")


def refuse_no_equivalent(layer: Mapping[str, Any], source: str) -> None:
    """Refuse a top-level key of the original tool that msopt has no equivalent for.

    Raises:
        ConfigError: naming the file, the key and what to use instead.
    """
    for key in layer:
        if key in NO_EQUIVALENT:
            raise ConfigError(f"{source}: '{key}' is a key of the original tool with no msopt equivalent "
                              f"({NO_EQUIVALENT[key]}); drop it (docs/migrating.md)")
    for (table, key), why in NO_EQUIVALENT_IN.items():
        section = layer.get(table)
        if not isinstance(section, Mapping) or key not in section:
            continue
        if key == "performance_config" and _is_mean(section[key]):
            continue
        raise ConfigError(f"{source}: [{table}] '{key}' is a key of the original tool with no msopt equivalent "
                          f"({why}); drop it (docs/migrating.md)")


def _is_mean(value: Any) -> bool:
    """A ``performance_config`` that asks for what msopt measures: the mean TTFT and TPOT."""
    if not isinstance(value, Mapping) or not set(value) <= set(_MEAN):
        return False
    return all(isinstance(v, Mapping) and {**_MEAN[k], **v} == _MEAN[k] for k, v in value.items())


#: The original's ``[ais_bench]`` keys that mirror the AISBench model config the user edited by hand
#: (msserviceprofiler@9582f434 config/config.py ``AisBenchConfig``, lines 898-911), and the
#: ``[ais_bench.command]`` key each is in msopt: ``max_out_len`` is the output length, ``path`` the tokenizer.
AIS_BENCH_MAPPED = {"max_out_len": "output_len", "path": "tokenizer"}


def map_ais_bench(layer: Mapping[str, Any], source: str) -> tuple[dict[str, Any], list[str]]:
    """The layer with the original's ``[ais_bench] max_out_len`` / ``path`` moved to
    ``[ais_bench.command] output_len`` / ``tokenizer`` (:data:`AIS_BENCH_MAPPED`; the original's
    defaults 0 and "" mean unset), and a note for each key moved.

    Raises:
        ConfigError: the same layer sets both spellings to different values.
    """
    table = layer.get("ais_bench")
    if not isinstance(table, Mapping) or not any(k in table for k in AIS_BENCH_MAPPED):
        return dict(layer), []
    section = dict(table)
    cmd = section.get("command", {})
    if not isinstance(cmd, Mapping):
        return dict(layer), []  # the benchmark's own check names a malformed [ais_bench.command]
    cmd = dict(cmd)
    notes = []
    for key, target in AIS_BENCH_MAPPED.items():
        if key not in section:
            continue
        value = section.pop(key)
        if value in (0, ""):
            continue
        if target in cmd and cmd[target] != value:
            raise ConfigError(f"{source}: [ais_bench] {key} = {value!r} (the original tool's spelling of "
                              f"[ais_bench.command] {target}) disagrees with {target} = {cmd[target]!r}; keep one")
        cmd[target] = value
        notes.append(f"{source}: [ais_bench] {key} (the original tool's) read as [ais_bench.command] {target} = "
                     f"{value!r}")
    section["command"] = cmd
    return {**layer, "ais_bench": section}, notes


def map_health_check(layer: Mapping[str, Any], source: str) -> dict[str, Any]:
    """The layer with the original's ``[health_check.<kind>_errors.<severity>_patterns]`` tables
    moved to msopt's ``[health_check.<kind>.<severity>]`` (same error types, same patterns).

    Raises:
        ConfigError: a table of the original's spelling that is no table, an unknown severity, or
            an error type given in both spellings.
    """
    out = dict(layer)
    table = layer.get("health_check")
    if not isinstance(table, Mapping) or not any(k in table for k in HEALTH_KINDS):
        return out
    health = {k: v for k, v in table.items() if k not in HEALTH_KINDS}
    for old, kind in HEALTH_KINDS.items():
        if old not in table:
            continue
        sub = table[old]
        if not isinstance(sub, Mapping):
            raise ConfigError(f"{source}: 'health_check.{old}' must be a table; write "
                              f"[health_check.{old}.fatal_patterns] (or msopt's [health_check.{kind}.fatal])")
        have = health.get(kind, {})
        if not isinstance(have, Mapping):
            raise ConfigError(f"{source}: 'health_check.{kind}' must be a table; write [health_check.{kind}.fatal]")
        target = {k: dict(v) if isinstance(v, Mapping) else v for k, v in have.items()}
        for key, types in sub.items():
            sev = HEALTH_SEVERITIES.get(str(key))
            if sev is None:
                raise ConfigError(f"{source}: 'health_check.{old}.{key}' is not a table of the original's health "
                                  f"check; use {' or '.join(HEALTH_SEVERITIES)} (msopt: "
                                  f"[health_check.{kind}.fatal] / .retryable)")
            if not isinstance(types, Mapping):
                raise ConfigError(f"{source}: 'health_check.{old}.{key}' must be a table of error_type = [patterns]; "
                                  f"write [health_check.{old}.{key}] then e.g. out_of_memory = [\"out of memory\"]")
            merged = target.get(sev, {})
            if not isinstance(merged, dict):
                raise ConfigError(f"{source}: 'health_check.{kind}.{sev}' must be a table of error_type = [patterns]; "
                                  f"write [health_check.{kind}.{sev}]")
            for etype, patterns in types.items():
                if etype in merged:
                    raise ConfigError(f"{source}: error type '{etype}' is in both [health_check.{old}.{key}] and "
                                      f"[health_check.{kind}.{sev}]; keep one of them")
                merged[etype] = patterns
            target[sev] = merged
        health[kind] = target
    out["health_check"] = health
    return out


def _strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, Mapping):
        return [s for v in value.values() for s in _strings(v)]
    if isinstance(value, (list, tuple)):
        return [s for v in value for s in _strings(v)]
    return []


def map_vllm_env_flags(data: dict[str, Any]) -> list[str]:
    """Render the original's implicit vLLM flags: a ``[[vllm.target_field]]`` named
    ``MAX_NUM_BATCHED_TOKENS`` or ``MAX_NUM_SEQS`` at ``config_position = "env"`` becomes
    ``--max-num-batched-tokens`` / ``--max-num-seqs``, as the original's command line had it,
    unless ``[vllm.command]`` or ``[vllm.env]`` refers to it as ``$NAME`` (then it stays an env
    field and the user's reference places it). Edits ``data`` (merged, thawed) in place.

    Returns:
        the names of the fields moved.
    """
    section = data.get("vllm")
    if not isinstance(section, dict) or not isinstance(section.get("target_field"), list):
        return []
    texts = _strings(section.get("command", {})) + _strings(section.get("env", {}))
    referenced = {m.group(1) if m.group(1) is not None else m.group(2) for t in texts for m in _VAR.finditer(t)}
    moved = []
    for raw in section["target_field"]:
        if not isinstance(raw, dict):
            continue
        name = raw.get("name")
        if name in VLLM_IMPLICIT_FLAGS and raw.get("config_position") == "env" and name not in referenced:
            raw["config_position"] = VLLM_IMPLICIT_FLAGS[name]
            moved.append(str(name))
    return moved
