"""AISBench (``ais_bench --mode perf``) against the server under test.

AISBench takes the server's address, the client concurrency and the request rate from its model
configuration file (a Python file under ``configs/models``), not from its command line, and its
stock files cannot serve msopt (AISBench 29c363e): ``configs/models/vllm_api/vllm_api_stream_chat.py``
hard-codes ``host_port=8080`` and ``batch_size=1``; the default dataset ``synthetic_gen`` is the
token-id kind, which needs ``path`` in the model config ("[path] in model config is required for
synthetic(tokenid) and sharegpt dataset", cli/utils.py:53-63), and then generates
``RequestCount`` 10 requests of ``RequestSize`` 10 tokens (datasets/synthetic/synthetic_config.py),
which ``--num-prompts`` only slices (cli/utils.py:66-75). So msopt writes, for every evaluation, a
model config and a synthetic dataset config of its own under ``<result dir>/ais_bench_configs``
and points AISBench at them with ``--config-dir`` (searched before AISBench's own configs,
cli/config_manager.py:_load_models_config / _load_datasets_config):

- ``models/msopt_model.py``: the stock template's keys (``model_template``, default
  ``vllm_api_stream_chat``) with ``host_ip``/``host_port`` of the trial's server, ``batch_size`` =
  the concurrency, ``request_rate`` (0: no pacing, AISBench's tasks/utils.py), ``path`` = the model
  directory (its tokenizer), ``model`` = the served model name, ``max_out_len`` = ``output_len``;
- ``datasets/msopt_synthetic.py``: ``SyntheticDataset`` with ``RequestCount`` = the prompts of this
  evaluation and ``TokenIdConfig.RequestSize`` = ``input_len`` (``dataset_type = "tokenid"``) or
  ``StringConfig`` uniform lengths ``input_len`` / ``output_len`` (``"string"``).

The original tool (ms_serviceparam_optimizer optimizer/plugins/benchmark.py) found the installed
model config with ``ais_bench --models M --search`` and rewrote its ``request_rate = ...,`` and
``batch_size = ...,`` in place by regular expression before each run (host and port stayed as the
user had edited them); one shared file cannot serve trials that run side by side, hence one
generated config per evaluation.

A user's own ``models`` / ``datasets`` (configs that read ``MSOPT_SERVER_PORT`` etc. from the
environment, which msopt still exports) replace the generated ones; AISBench's stock names are
refused, since they would measure the wrong server or ten 10-token requests; a ``models`` naming a
stock template msopt mirrors is read as that ``model_template`` (the original tool's spelling,
:func:`mapped_section`).

Result layout (AISBench 3.x): ``<work-dir>/<timestamp>/performances/<abbr>/<dataset>.csv``
(per-request statistics: columns ``Performance Parameters, Stage, Average, ...``, rows ``TTFT``,
``TPOT`` with values such as ``2006.0 ms``) and ``<dataset>.json`` (common metrics: ``Total
Requests``, ``Success Requests``, ``Request Throughput``, ``Output Token Throughput``, each a
number, a string with a unit, or ``{"total": value}``). The pair is read by the dataset's abbr
(:meth:`AisBench.parse`).
"""

from __future__ import annotations

import csv
import json
import math
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import MappingProxyType
from typing import Any

from msopt.benchmarks.ais_bench_configs import (
    CONFIG_DIR,
    DATASET_ABBR,
    DATASET_NAME,
    MODEL_NAME,
    MODEL_TEMPLATES,
    STOCK_MODELS,
    STOCK_SYNTHETIC,
    config_names,
    dataset_config,
    file_measures,
    file_value,
    model_config,
    model_file,
    render_model_file,
    synthetic_config,
    template_streams,
)
from msopt.benchmarks.base import (
    BENCHMARKS,
    BenchmarkAdapter,
    check_metrics,
    no_result_report,
    resolve_load,
    server_values,
)
from msopt.checks import is_int
from msopt.errors import ConfigError, EvaluationError
from msopt.launch.files import write_atomic
from msopt.launch.render import (
    Candidate,
    LaunchSpec,
    check_repeated_flags,
    command_table,
    env_fields,
    executable,
    format_value,
    split_others,
)
from msopt.registry import close_matches
from msopt.space.fields import FieldDecl
from msopt.workload.resolved import ResolvedWorkload

_NUMBER = re.compile(r"^\s*([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)\s*([A-Za-z/%]*)")
_SCALE_TO_SECONDS = {"ms": 1e-3, "s": 1.0, "us": 1e-6, "": 1e-3}  # AISBench latencies are ms

#: The ``[ais_bench.command]`` keys that may not name AISBench's stock configs: (key, those names, why not).
_STOCK_CONFIGS: tuple[tuple[str, frozenset[str], str], ...] = (
    ("models", STOCK_MODELS, "is AISBench's stock config, which hard-codes host_port 8080 and batch_size 1 "
     "(configs/models at 29c363e), so it would not reach the trial's server; remove 'models' (msopt then writes "
     "the trial's own model config, see model_template) or name a copy that reads $MSOPT_SERVER_PORT"),
    ("datasets", STOCK_SYNTHETIC, "is AISBench's stock synthetic config: RequestCount 10 of RequestSize 10 tokens, "
     "which --num-prompts only slices (datasets/synthetic/synthetic_config.py, cli/utils.py at 29c363e); remove "
     "'datasets' (msopt then generates num_prompts requests of input_len/output_len)"),
)


_COMMAND_KEYS = ("executable", "models", "datasets", "mode", "num_prompts", "others", "max_concurrency",
                 "concurrency", "request_rate", "model_template", "dataset_type", "input_len", "output_len",
                 "prefix_len", "ignore_eos", "tokenizer", "trust_remote_code", "model_file")


#: The original tool's ``[ais_bench]`` keys (msserviceprofiler@9582f434 ms_serviceparam_optimizer/config/config.py
#: ``AisBenchConfig``, lines 898-911) that name what msopt sets per trial, refused with what to do instead.
#: (``max_out_len`` and ``path`` are moved to ``output_len`` / ``tokenizer`` when the layer is loaded,
#: msopt.config.original.map_ais_bench.)
ORIGINAL_REFUSED = MappingProxyType({
    "host_ip": "msopt points AISBench at each trial's own server; the address it listens on is "
               "[<engine>.command] host",
    "host_port": "msopt gives every trial its own port and points AISBench at it",
    "process_name": "write [ais_bench.command] executable = [\"ais_bench\"] (or the path of yours)",
    "output_path": "msopt writes each evaluation's results into its own directory under the run directory",
    "work_path": "msopt writes each evaluation's results into its own directory under the run directory",
})
#: ``[ais_bench.command]`` keys of the original msopt sets itself.
ORIGINAL_COMMAND_REFUSED = MappingProxyType({
    "work_dir": "msopt passes --work-dir, each evaluation's own result directory, and reads it",
})
#: The original's shipped config.toml names its model and dataset configs by these placeholders
#: (``models = "models"``, ``datasets = "datasets"``: the user was to put the AISBench config names there).
PLACEHOLDERS = MappingProxyType({"models": "models", "datasets": "datasets"})


def mapped_section(section: Mapping[str, Any]) -> dict[str, Any]:
    """``[ais_bench]`` with the original tool's spellings read as what they meant.

    ``max_out_len`` and ``path`` were moved when the layer was loaded
    (:func:`msopt.config.original.map_ais_bench`). ``model = "<name>"`` (a string: the model name
    the original's AISBench config sent) is refused with where msopt takes it from; ``models``
    naming one of AISBench's stock service-API templates becomes ``model_template`` (msopt's
    generated config of that template, pointed at the trial's server); the shipped file's
    placeholders ``models = "models"`` / ``datasets = "datasets"`` mean "not chosen" (msopt
    generates both).

    Raises:
        ConfigError: an original key msopt sets itself.
    """
    out = dict(section)
    cmd = dict(command_table(section, "ais_bench"))
    for key, why in ORIGINAL_REFUSED.items():
        if key in section and section[key] not in ("", 0, None):
            raise ConfigError(f"[ais_bench] '{key}' is a key of the original tool that msopt sets itself ({why}); "
                              "drop it (docs/migrating.md)")
        out.pop(key, None)
    for key, why in ORIGINAL_COMMAND_REFUSED.items():
        if key in cmd and cmd[key] not in ("", None):
            raise ConfigError(f"[ais_bench.command] '{key}' is a key of the original tool that msopt sets itself "
                              f"({why}); drop it (docs/migrating.md)")
        cmd.pop(key, None)
    if section.get("target_field"):
        raise ConfigError("[[ais_bench.target_field]] are the original tool's benchmark fields, which msopt does not "
                          "read there; move them into [[<engine>.target_field]] (a CONCURRENCY or REQUESTRATE field at "
                          "config_position = \"env\" is read as the load, docs/migrating.md)")
    out.pop("target_field", None)
    model = section.get("model")
    if isinstance(model, str):
        if model:
            raise ConfigError(f"[ais_bench] model = {model!r} is the original tool's model name for AISBench's "
                              "requests; msopt sends the engine's served model name, so write served_model_name = "
                              f"{model!r} in [<engine>.command] and drop it ([ais_bench.model] is a table of "
                              "AISBench model-config keys)")
        out.pop("model")
    for key, placeholder in PLACEHOLDERS.items():
        if cmd.get(key) == placeholder:
            cmd.pop(key)
    models = cmd.get("models")
    if isinstance(models, str) and models in MODEL_TEMPLATES:  # the user's (installed) file of that name
        cmd.pop("models")
        cmd["model_file"] = models
    out["command"] = cmd
    return out


# -- a model config file of the user's: AISBench's installed stock file, or a path ------------------------
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
    """AISBench performance mode: ``ais_bench --models M --datasets D --mode perf --work-dir W
    --config-dir C`` with msopt's generated model and dataset configs in C (see the module docstring)."""

    name = "ais_bench"

    def num_prompts(self, section: Mapping[str, Any]) -> int | None:
        """``[ais_bench.command] num_prompts``, default 1000: the requests of the dataset msopt generates,
        or the first ones of the user's own ``datasets`` (``--num-prompts``)."""
        n = command_table(mapped_section(section), self.name).get("num_prompts", 1000)
        if not is_int(n) or n < 1:
            raise ConfigError(f"[{self.name}.command]: 'num_prompts' must be a positive integer, got {n!r}")
        return int(n)

    def produced(self, section: Mapping[str, Any]) -> frozenset[str]:
        """Without TTFT and TPOT for a non-streaming template: AISBench sets both to 0 and drops them
        (summarizers/default_perf.py:170-173, calculators/base_perf_metric_calculator.py:382-387 at 29c363e),
        and its PyPI build 3.1.20260630 reports the whole request's latency as TTFT."""
        if template_streams(mapped_section(section)) is False:
            return self.produces - {"time_to_first_token", "time_per_output_token"}
        return self.produces

    def produced_note(self, section: Mapping[str, Any]) -> str:
        """Why :meth:`produced` lacks metrics: the non-streaming template and what to use instead."""
        sec = mapped_section(section)
        if template_streams(sec) is not False:
            return ""
        template = command_table(sec, self.name).get("model_template")
        return (f"its model_template {template} does not stream, so AISBench measures no TTFT or TPOT; use "
                "model_template vllm_api_stream_chat or vllm_api_general_stream")

    def check(self, fields: Sequence[FieldDecl], section: Mapping[str, Any],
              workload: ResolvedWorkload | None = None) -> None:
        """Known keys only; no stock model or synthetic config by name; ``others`` must not repeat
        a flag msopt renders; the generated configs must render. The original tool's keys are read as
        :func:`mapped_section` says."""
        section = mapped_section(section)
        cmd = command_table(section, self.name)
        where = f"[{self.name}.command]"
        for key in cmd:
            if key not in _COMMAND_KEYS:
                hint = close_matches(str(key), _COMMAND_KEYS)
                raise ConfigError(f"{where}: '{key}' is not an ais_bench key; " + (
                    f"did you mean '{hint[0]}'?" if hint else f"valid keys: {', '.join(_COMMAND_KEYS)}"))
        for key, stock, why in _STOCK_CONFIGS:
            for name in config_names(cmd, key, where, {}) or []:
                if name in stock:
                    raise ConfigError(f"{where}: {key} = {name!r} {why}")
        owned = {"--models": f"{where} models (or msopt's generated {MODEL_NAME})",
                 "--datasets": f"{where} datasets (or msopt's generated {DATASET_NAME})",
                 "--mode": f"{where} mode",
                 "--work-dir": "msopt (the evaluation's result directory, which it reads)",
                 "--config-dir": "msopt (the directory of the generated model and dataset configs)",
                 "--num-prompts": f"{where} num_prompts (sample_size during the search)"}
        check_repeated_flags(owned, cmd.get("others", ""), f"{where} 'others'")
        probe = LaunchSpec(engine="probe", argv=("probe",), port=8000, model="/model", served_model_name="m")
        if "model_file" in cmd:
            for key in ("models", "model_template", "ignore_eos"):
                if key in cmd:
                    raise ConfigError(f"{where}: '{key}' and model_file both say what the model config is; the file "
                                      "is used as it is (but for host_ip, host_port, batch_size and request_rate): "
                                      f"edit it, or drop '{key}'")
            if section.get("model"):
                raise ConfigError("[ais_bench.model] and [ais_bench.command] model_file both say what the model "
                                  "config is; edit the file, or drop [ais_bench.model]")
            if not self._remote(cmd):
                text, source = model_file(cmd) or ("", "")
                render_model_file(text, source, cmd, probe, concurrency=1, request_rate=None)
        else:
            model_config(section, probe, concurrency=1, request_rate=None)
        synthetic_config(section, 1)

    @staticmethod
    def _remote(cmd: Mapping[str, Any]) -> bool:
        """A ``model_file`` path that is not on this machine (the trials' nodes read it)."""
        ref = cmd.get("model_file")
        return (isinstance(ref, str) and ref not in MODEL_TEMPLATES and "/" in ref
                and not Path(ref).expanduser().exists())

    def notes(self, section: Mapping[str, Any]) -> list[str]:
        """What the measurement will be: the model config and the keys that shape it (``msopt validate``)."""
        section = mapped_section(section)
        cmd = command_table(section, self.name)
        if cmd.get("models") is not None:
            return [f"model config: {', '.join(config_names(cmd, 'models', '', {}) or [])} (yours, used as it is)"]
        set_here = "msopt sets host_ip, host_port, batch_size (the concurrency) and request_rate per evaluation"
        if "model_file" in cmd:
            if self._remote(cmd):
                return [f"model config: {cmd['model_file']} (not on this machine; the trials' nodes read it); "
                        f"{set_here}"]
            text, source = model_file(cmd) or ("", "")
            measures = file_measures(text)
            if "output_len" in cmd:
                measures["max_out_len"] = f"{cmd['output_len']} (output_len)"
            shown = ", ".join(f"{k} {v}" for k, v in measures.items())
            return [f"model config: {source}: {shown}; {set_here}, the rest as the file has it"]
        template = cmd.get("model_template", "vllm_api_stream_chat")
        return [f"model config: msopt's generated {template} (AISBench 29c363e's keys): max_out_len "
                f"{cmd.get('output_len', 256)}, ignore_eos {cmd.get('ignore_eos', True)}, temperature 0.01; "
                f"{set_here}; to measure your own template file, set model_file"]

    def render(self, candidate: Candidate, *, server: LaunchSpec, num_prompts: int | None, load: Mapping[str, float],
               result_dir: Path, workload: ResolvedWorkload | None = None) -> tuple[tuple[str, ...], dict[str, str]]:
        """The ``ais_bench`` command line (it replays no trace: ``workload`` is not read); writes the
        evaluation's model and dataset configs under
        ``result_dir/ais_bench_configs``; the server address and load also go into the environment."""
        values, fields = candidate.values, candidate.fields
        section = mapped_section(candidate.section)
        where = f"[{self.name}.command]"
        cmd = command_table(section, self.name)
        sv = server_values(server)
        subst = {**sv, **values}
        conc, rate = resolve_load(values, fields, cmd, load, where)
        n = num_prompts if num_prompts is not None else self.num_prompts(section)
        if not is_int(n) or n < 1:
            raise ConfigError(f"{where}: 'num_prompts' must be a positive integer, got {n!r}")
        models = config_names(cmd, "models", where, subst)
        datasets = config_names(cmd, "datasets", where, subst)
        config_dir = Path(result_dir) / CONFIG_DIR
        read = model_file(cmd) if models is None else None
        if read is not None:  # the user's model config, only what the search changes set
            write_atomic(config_dir / "models" / f"{MODEL_NAME}.py",
                         render_model_file(read[0], read[1], cmd, server, concurrency=conc,
                                           request_rate=rate).encode("utf-8"))
        elif models is None:
            write_atomic(config_dir / "models" / f"{MODEL_NAME}.py",
                         model_config(section, server, concurrency=conc, request_rate=rate).encode("utf-8"))
        if datasets is None:
            out_len = file_value(read[0], "max_out_len") if read is not None and "output_len" not in cmd else None
            ds = {**section, "command": {**cmd, "output_len": int(out_len)}} if out_len and out_len.isdigit() \
                else section  # a string dataset's output lengths: the file's max_out_len
            write_atomic(config_dir / "datasets" / f"{DATASET_NAME}.py",
                         dataset_config(ds, int(n)).encode("utf-8"))
        argv = executable(cmd, ("ais_bench",), self.name, subst)
        argv += ["--models", *(models or [MODEL_NAME])]
        argv += ["--datasets", *(datasets or [DATASET_NAME])]
        argv += ["--mode", str(cmd.get("mode", "perf")), "--work-dir", str(result_dir)]
        if models is None or datasets is None:
            argv += ["--config-dir", str(config_dir)]
        if datasets is not None:  # a real dataset: keep its first n prompts (the generated one holds exactly n)
            argv += ["--num-prompts", str(n)]
        argv += split_others(cmd.get("others", ""), subst, where)
        env = {**sv, **env_fields(Candidate(values, fields, section), self.name)}
        if conc is not None:
            env["MSOPT_CONCURRENCY"] = str(conc)
        if rate is not None:
            env["MSOPT_REQUEST_RATE"] = format_value(rate) if math.isfinite(rate) else "0"
        return tuple(argv), env

    def parse(self, result_dir: Path, log_path: Path) -> dict[str, float | None]:
        """Read ``performances/<abbr>/<dataset_abbr>.json`` and its ``.csv`` by name.

        AISBench writes ``<dataset_abbr>.csv`` and ``<dataset_abbr>.json`` there
        (summarizers/default_perf.py:327, 350-353 at 29c363e) and, with ``request_rate > 0``, other
        files beside them (tasks/utils.py:593-612, the RPS distribution plot), so "the newest JSON"
        can be the wrong file. The dataset's abbr is ``synthetic`` for the generated dataset; for a
        user's own ``datasets`` each per-request ``.csv`` names its ``.json``, as the original tool read
        them (optimizer/plugins/benchmark.py:148-151).
        """
        result_dir = Path(result_dir)
        generated = (result_dir / CONFIG_DIR / "datasets" / f"{DATASET_NAME}.py").exists()
        csvs = sorted(result_dir.glob("**/performances/*/*.csv"), key=lambda p: p.stat().st_mtime)
        if generated:
            named = list(result_dir.glob(f"**/performances/*/{DATASET_ABBR}.json"))
        else:
            named = [c.with_suffix(".json") for c in csvs if c.with_suffix(".json").exists()]
        found = sorted(set(named), key=lambda p: p.stat().st_mtime)
        if not found:
            want = f"{DATASET_ABBR}.json" if generated else "<dataset_abbr>.json beside its .csv"
            raise EvaluationError(no_result_report("ais_bench", f"performances/<model>/{want}", result_dir, log_path))
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
