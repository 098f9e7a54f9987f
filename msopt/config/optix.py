"""The keys msmodeling optix (Ascend/msmodeling ``optix/``, the original tool's successor) adds to the
original's config.toml, read as msopt's (docs/migrating.md, "From msmodeling optix").

- ``use_request_rate_calibration`` (optix/config/config.py, default true; optix/optimizer/optimizer.py
  ``adapter_target_field``): during the search optix holds REQUESTRATE at its max in both modes, and with
  true also CONCURRENCY (and MAXCONCURRENCY) at its max while each candidate's rate is calibrated to 1.05 x
  its measured throughput (scheduler.py ``_apply_request_rate_second_run``). msopt holds the same fields at
  their max during the search; with true its ``[capacity]`` stage then finds the highest request rate each
  top configuration sustains within the SLOs (``load = "request_rate"``), with false the highest concurrency.
- ``MAXCONCURRENCY`` (optix/config/constant.py ``CONCURRENCYS``, as the original's config/base_config.py):
  the benchmark's concurrency, read as msopt's ``CONCURRENCY`` field.
- ``[deploy] path_prefix`` and ``[benchmark_early_exit]`` (optix/config.toml): the first has msopt's
  ``[<engine>.command] executable``; the second, switched off as shipped, is accepted, switched on refused.
"""

from __future__ import annotations

from collections.abc import Mapping, MutableMapping
from typing import Any

from msopt.errors import ConfigError

#: Top-level keys optix adds to the original's config.toml.
OPTIX_KEYS = ("use_request_rate_calibration", "deploy", "benchmark_early_exit")
#: optix's concurrency field names (optix/config/constant.py CONCURRENCYS) and request-rate field name.
CONCURRENCY_NAMES = ("CONCURRENCY", "MAXCONCURRENCY")
REQUEST_RATE_NAME = "REQUESTRATE"
#: The environment prefix optix's pydantic-settings reads every key from (optix/config/config.py).
ENV_PREFIX = "model_eval_state_"
#: The variable of that prefix msopt reads (the configuration layer), in any case as optix's settings do.
ENV_READ = ("model_eval_state_config_path",)


def _searched(field: Mapping[str, Any]) -> bool:
    return field.get("constant") is None and field.get("min") != field.get("max")


def map_optix(data: MutableMapping[str, Any], origin: Mapping[str, str], engine: str, defaults: str) -> list[str]:
    """Read optix's keys in the merged configuration ``data`` as msopt's (see the module docstring), in place;
    ``origin`` says which file set each dotted key (``defaults``: the packaged defaults, which a user's key beats).

    Returns:
        one note per key read, for ``msopt validate``.

    Raises:
        ConfigError: a key msopt has another way for (``[deploy] path_prefix``, ``[benchmark_early_exit]
            enabled = true``), or a MAXCONCURRENCY beside a CONCURRENCY field.
    """
    notes: list[str] = []
    deploy = data.get("deploy")
    if deploy is not None:
        where = origin.get("deploy", "config")
        if not isinstance(deploy, Mapping) or set(deploy) - {"path_prefix"}:
            raise ConfigError(f"{where}: [deploy] takes only optix's path_prefix; drop the other keys")
        if deploy.get("path_prefix"):
            raise ConfigError(f"{where}: [deploy] path_prefix (optix's deploy root) has no msopt equivalent: give "
                              f"the program's absolute path in [{engine}.command] executable (and the benchmark's "
                              "in its [<benchmark>.command] executable); drop [deploy]")
    early = data.get("benchmark_early_exit")
    if early is not None:
        where = origin.get("benchmark_early_exit", "config")
        if not isinstance(early, Mapping) or early.get("enabled", False) is not False:
            raise ConfigError(f"{where}: [benchmark_early_exit] enabled = true (optix's early stop of a benchmark "
                              "from /metrics) has no msopt equivalent: bound the search with sample_size or "
                              "max_launches; set enabled = false or drop the table")
        notes.append(f"{where}: [benchmark_early_exit] (optix's, switched off) ignored")
    section = data.get(engine)
    fields = section.get("target_field") if isinstance(section, MutableMapping) else None
    if isinstance(fields, list):
        names = [f.get("name") for f in fields if isinstance(f, Mapping)]
        for f in fields:
            if not (isinstance(f, MutableMapping) and f.get("name") == "MAXCONCURRENCY"
                    and f.get("config_position") == "env"):
                continue
            if "CONCURRENCY" in names:
                raise ConfigError(f"{origin.get(f'{engine}.target_field', 'config')}: [[{engine}.target_field]] "
                                  "declares both CONCURRENCY and MAXCONCURRENCY, which optix and the original read "
                                  "as the same concurrency; keep one")
            f["name"] = "CONCURRENCY"
            notes.append(f"[[{engine}.target_field]] 'MAXCONCURRENCY' (optix's and the original's other name of the "
                         "concurrency) read as CONCURRENCY")
    calibrate = data.get("use_request_rate_calibration")
    if calibrate is None or not isinstance(fields, list):
        return notes
    held = []
    for f in fields:
        if not isinstance(f, MutableMapping) or f.get("config_position") != "env" or not _searched(f):
            continue
        if f.get("name") == REQUEST_RATE_NAME or (calibrate and f.get("name") in CONCURRENCY_NAMES):
            f["constant"] = f["max"]
            held.append(str(f["name"]))
    capacity = data.setdefault("capacity", {})
    if isinstance(capacity, MutableMapping):
        for key, value in (("load", "request_rate" if calibrate else "concurrency"), ("enabled", True)):
            if origin.get(f"capacity.{key}", defaults) == defaults:
                capacity[key] = value
    notes.append(f"use_request_rate_calibration = {str(calibrate).lower()} (optix's): "
                 + (f"{' and '.join(held)} held at {'its' if len(held) == 1 else 'their'} max during the search" if held
                    else "no load field searched")
                 + f"; [capacity] then finds each top configuration's highest {capacity.get('load')} within the SLOs")
    return notes


def unread_environment(environ: Mapping[str, str]) -> list[str]:
    """Notes for the ``model_eval_state_*`` variables optix would read as keys and msopt does not."""
    return [f"${name}: optix reads it as the key '{name[len(ENV_PREFIX):].lower()}', msopt does not; write the key "
            "in the -c file" for name in sorted(environ)
            if name.lower().startswith(ENV_PREFIX) and name.lower() not in ENV_READ]
