"""The configuration files AISBench runs with: the model config (a stock template mirrored, or the user's own
model file with only the searched fields rendered) and the synthetic dataset config (AISBench 29c363e)."""

from __future__ import annotations

import importlib.util
import math
import re
from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any

from msopt.checks import is_int
from msopt.errors import ConfigError
from msopt.launch.render import (
    LaunchSpec,
    command_table,
    plain,
    substitute,
)

#: AISBench 29c363e, ais_bench/benchmark/configs/models/*/<name>.py: the stock service-API model
#: configs msopt's generated one can mirror: (class, abbr, stream, extra keys of that file).
MODEL_TEMPLATES: Mapping[str, tuple[str, str, bool | None, tuple[str, ...]]] = MappingProxyType({
    "vllm_api_stream_chat": ("VLLMCustomAPIChat", "vllm-api-stream-chat", True, ("model", "api_key", "postprocess")),
    "vllm_api_general_chat": ("VLLMCustomAPIChat", "vllm-api-general-chat", False,
                              ("model", "api_key", "postprocess")),
    "vllm_api_general": ("VLLMCustomAPI", "vllm-api-general", False, ("model", "api_key")),
    "vllm_api_general_stream": ("VLLMCustomAPI", "vllm-api-general-stream", True, ("model", "api_key")),
    "mindie_stream_api_general": ("MindieStreamApi", "mindie-stream-api", None, ()),
})
#: Stock configs that hard-code ``host_port=8080`` / ``batch_size=1`` (AISBench 29c363e,
#: configs/models/{vllm,mindie,tgi,triton}_api/*.py): refused as ``models``.
STOCK_MODELS = frozenset({*MODEL_TEMPLATES, "vllm_api_stream_chat_multiturn", "vllm_api_function_call_chat",
                          "tgi_api_general", "tgi_stream_api_general", "triton_api_general",
                          "triton_stream_api_general"})
#: Stock synthetic dataset configs (RequestCount 10, RequestSize 10; AISBench 29c363e
#: configs/datasets/synthetic/): refused as ``datasets``.
STOCK_SYNTHETIC = frozenset({"synthetic_gen", "synthetic_gen_tokenid", "synthetic_gen_string"})
#: Model-config keys msopt sets for every evaluation (``[ais_bench.model]`` may not set them).
OWNED_MODEL_KEYS = ("attr", "type", "abbr", "path", "model", "stream", "request_rate", "host_ip", "host_port",
                    "url", "max_out_len", "batch_size")
#: ``batch_size`` when no CONCURRENCY field, ``max_concurrency`` or stage sets one: the original tool's
#: default (ms_serviceparam_optimizer optimizer/plugins/benchmark.py, ``AisBench.before_run``).
DEFAULT_BATCH_SIZE = 1000
#: Names of the generated files under ``--config-dir`` (unique, so AISBench's search matches one file).
MODEL_NAME, DATASET_NAME = "msopt_model", "msopt_synthetic"
#: The generated dataset's ``abbr``, which names its result files.
DATASET_ABBR = "synthetic"
CONFIG_DIR = "ais_bench_configs"
DATASET_TYPES = ("tokenid", "string")
#: AISBench's bounds on synthetic lengths and counts, [1, 2**20] (datasets/synthetic.py, check_range).
_MAX_SYNTHETIC = 2 ** 20


#: What the search changes per evaluation, the only keys msopt renders into a user's model config (the original
#: rewrote request_rate and batch_size in place: ms_serviceparam_optimizer optimizer/plugins/benchmark.py).
MODEL_FILE_KEYS = ("host_ip", "host_port", "batch_size", "request_rate")
#: The keys of AISBench 29c363e's stock service-API configs besides those MODEL_TEMPLATES gives
#: (configs/models/{vllm,mindie}_api/*.py): what a stock name measures where AISBench is not installed.
STOCK_KEYS: Mapping[str, Any] = MappingProxyType({
    "request_rate": 0, "use_timestamp": False, "retry": 2, "host_ip": "localhost", "host_port": 8080, "url": "",
    "max_out_len": 512, "batch_size": 1, "trust_remote_code": False,
    "generation_kwargs": {"temperature": 0.01, "ignore_eos": False}})


def installed_model_file(name: str) -> Path | None:
    """AISBench's installed ``benchmark/configs/models/*/<name>.py`` (found without importing AISBench), else None."""
    try:
        spec = importlib.util.find_spec("ais_bench")
    except (ImportError, ValueError):
        return None
    for root in (spec.submodule_search_locations or []) if spec is not None else []:
        hits = sorted(Path(root).glob(f"benchmark/configs/models/*/{name}.py"))
        if hits:
            return hits[0]
    return None


def stock_model_text(name: str) -> str:
    """AISBench 29c363e's stock ``<name>.py`` (configs/models/{vllm,mindie}_api/), as it ships."""
    cls, abbr, stream, extra = MODEL_TEMPLATES[name]
    keys: dict[str, Any] = {"attr": "service", "abbr": abbr, "path": ""}
    if "model" in extra:
        keys["model"] = ""
    if stream is not None:
        keys["stream"] = stream
    keys |= {k: v for k, v in STOCK_KEYS.items() if k in ("request_rate", "use_timestamp", "retry")}
    if "api_key" in extra:
        keys["api_key"] = ""
    keys |= {k: v for k, v in STOCK_KEYS.items() if k not in keys}
    lines = [f"from ais_bench.benchmark.models import {cls}"]
    if "postprocess" in extra:
        lines.append("from ais_bench.benchmark.utils.postprocess.model_postprocessors import "
                     "extract_non_reasoning_content")
    lines += ["", "models = [", "    dict(", '        attr="service",', f"        type={cls},"]
    lines += [f"        {k}={_py(v, name)}," for k, v in keys.items() if k != "attr"]
    if "postprocess" in extra:
        lines.append("        pred_postprocessor=dict(type=extract_non_reasoning_content),")
    return "\n".join([*lines, "    )", "]", ""])


def model_file(cmd: Mapping[str, Any]) -> tuple[str, str] | None:
    """The text of ``[ais_bench.command] model_file`` and where it was read: a stock name is AISBench's installed
    file (else the file as AISBench 29c363e ships it, said so), a path the user's own; None without the key.

    Raises:
        ConfigError: not a stock service-API name or a readable file.
    """
    ref = cmd.get("model_file")
    if ref is None:
        return None
    where = "[ais_bench.command] model_file"
    if not isinstance(ref, str) or not ref:
        raise ConfigError(f"{where} must be a stock model config name or a path, got {ref!r}")
    if ref in MODEL_TEMPLATES:
        path = installed_model_file(ref)
        if path is not None:
            try:
                return path.read_text(encoding="utf-8"), f"AISBench's installed {path}"
            except OSError as exc:
                raise ConfigError(f"{where} {ref!r}: cannot read {path} ({exc.strerror or exc})") from None
        return stock_model_text(ref), (f"AISBench 29c363e's stock {ref}.py (AISBench is not installed here; a trial "
                                       "reads its node's)")
    if ref in STOCK_MODELS or "/" not in ref and not ref.endswith(".py"):
        raise ConfigError(f"{where} {ref!r}: name one of {', '.join(sorted(MODEL_TEMPLATES))} (AISBench's installed "
                          "file is read) or the path of your own model config")
    path = Path(ref).expanduser()
    try:
        return path.read_text(encoding="utf-8"), str(path)
    except OSError as exc:
        raise ConfigError(f"{where} {str(path)!r}: cannot read it ({exc.strerror or exc}); name an AISBench model "
                          "config file") from None


def file_value(text: str, key: str) -> str | None:
    """The source text of ``key=...`` (first occurrence) in a model config, None when absent."""
    m = re.search(rf"(?<![\w.]){key}\s*=\s*([^,\n)#]+)", text)
    return m.group(1).strip() if m else None


def file_measures(text: str) -> dict[str, str]:
    """What a model config sets that shapes the measurement (output length, EOS, sampling, streaming, model)."""
    out = {k: v for k in ("abbr", "stream", "max_out_len", "temperature", "ignore_eos", "path", "model")
           if (v := file_value(text, k)) is not None}
    for key, fill in (("path", "the model's tokenizer"), ("model", "the served model name")):
        if out.get(key) in ('""', "''"):
            out[key] = f"empty, so {fill}"
    return out


def render_model_file(text: str, source: str, cmd: Mapping[str, Any], server: LaunchSpec, *, concurrency: int | None,
                      request_rate: float | None) -> str:
    """The user's model config with only what the search changes set (:data:`MODEL_FILE_KEYS`: the trial's
    server and this evaluation's load), plus ``max_out_len`` / ``path`` where ``output_len`` / ``tokenizer`` are
    given, and ``path`` / ``model`` where the file leaves them empty (the tokenizer and the served model name a
    request needs); everything else as the file has it.

    Raises:
        ConfigError: the file holds no ``type=`` line to put a missing key after.
    """
    where = "[ais_bench.command]"
    host = server.base_url.split("//", 1)[1].rsplit(":", 1)[0].strip("[]")
    rate = 0.0 if request_rate is None or not math.isfinite(request_rate) else float(request_rate)
    sets: dict[str, str] = {"host_ip": repr(host), "host_port": str(int(server.port)),
                            "batch_size": str(int(concurrency or DEFAULT_BATCH_SIZE)), "request_rate": repr(rate)}
    if "output_len" in cmd:
        sets["max_out_len"] = str(_length(cmd, "output_len", 256, where))
    if "tokenizer" in cmd or file_value(text, "path") in ('""', "''"):
        sets["path"] = repr(str(cmd.get("tokenizer", server.model)))
    if file_value(text, "model") in ('""', "''"):
        sets["model"] = repr(server.served_model_name)
    for key, value in sets.items():
        pattern = re.compile(rf"(?m)^(\s*{key}\s*=\s*)([^,\n]+?)(\s*,?\s*(#.*)?)$")
        found = pattern.search(text)
        if found is not None:
            text = text[:found.start()] + found.group(1) + value + found.group(3) + text[found.end():]
            continue
        anchor = re.search(r"(?m)^(\s*)type\s*=.*$", text)
        if anchor is None:
            raise ConfigError(f"{where} model_file {source}: no 'type=' line, so it is not an AISBench model config "
                              f"msopt can point at the trial's server ({key} is missing)")
        text = text[:anchor.end()] + f"\n{anchor.group(1)}{key}={value}," + text[anchor.end():]
    head = f"# Rendered by msopt for one evaluation from {source}: {', '.join(sets)} set, the rest as the file has it"
    return head + "\n" + text


def config_names(cmd: Mapping[str, Any], key: str, where: str, values: Mapping[str, Any]) -> list[str] | None:
    value = cmd.get(key)
    if value is None:
        return None
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, (list, tuple)) or not value or not all(isinstance(v, str) and v for v in value):
        raise ConfigError(f"{where}: '{key}' must be a task name or a list of them, got {value!r}")
    return [substitute(v, values) for v in value]


def _py(value: Any, where: str) -> str:
    """``value`` as a Python literal for a generated config file (TOML's plain types only)."""
    value = plain(value)
    if value is None or isinstance(value, (bool, int, str)):
        return repr(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ConfigError(f"{where}: {value!r} is not a finite number")
        return repr(value)
    if isinstance(value, Mapping):
        for k in value:
            if not isinstance(k, str) or not k.isidentifier():
                raise ConfigError(f"{where}: key {k!r} is not a Python identifier AISBench's dict() accepts")
        return "dict(" + ", ".join(f"{k}={_py(v, f'{where}.{k}')}" for k, v in value.items()) + ")"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_py(v, where) for v in value) + "]"
    raise ConfigError(f"{where}: {value!r} is not a string, number, boolean, array or table")


def _length(cmd: Mapping[str, Any], key: str, default: int, where: str, low: int = 1) -> int:
    value = cmd.get(key, default)
    if not is_int(value) or not low <= value <= _MAX_SYNTHETIC:
        raise ConfigError(f"{where}: '{key}' must be an integer from {low} to {_MAX_SYNTHETIC} (AISBench's "
                          f"synthetic bounds), got {value!r}")
    return int(value)


def _bool(cmd: Mapping[str, Any], key: str, default: bool, where: str) -> bool:
    value = cmd.get(key, default)
    if not isinstance(value, bool):
        raise ConfigError(f"{where}: '{key}' must be true or false, got {value!r}")
    return value


def model_config(section: Mapping[str, Any], server: LaunchSpec, *, concurrency: int | None,
                 request_rate: float | None) -> str:
    """The text of the generated ``models/msopt_model.py`` for one evaluation.

    Raises:
        ConfigError: a bad ``[ais_bench.command]`` key or ``[ais_bench.model]`` table.
    """
    where = "[ais_bench.command]"
    cmd = command_table(section, "ais_bench")
    template = cmd.get("model_template", "vllm_api_stream_chat")
    if template not in MODEL_TEMPLATES:
        raise ConfigError(f"{where}: 'model_template' {template!r} is not one msopt knows; valid: "
                          f"{', '.join(sorted(MODEL_TEMPLATES))}")
    cls, abbr, stream, extra = MODEL_TEMPLATES[str(template)]
    output_len = _length(cmd, "output_len", 256, where)
    host = server.base_url.split("//", 1)[1].rsplit(":", 1)[0].strip("[]")
    rate = 0.0 if request_rate is None or not math.isfinite(request_rate) else float(request_rate)
    tokenizer = str(cmd.get("tokenizer", server.model))
    keys: dict[str, Any] = {"abbr": abbr, "path": tokenizer}
    if "model" in extra:
        keys["model"] = server.served_model_name
    if stream is not None:
        keys["stream"] = stream
    keys |= {"request_rate": rate, "use_timestamp": False, "retry": 2}
    if "api_key" in extra:
        keys["api_key"] = ""
    keys |= {"host_ip": host, "host_port": int(server.port), "url": "", "max_out_len": output_len,
             "batch_size": int(concurrency or DEFAULT_BATCH_SIZE),
             "trust_remote_code": _bool(cmd, "trust_remote_code", False, where),
             "generation_kwargs": {"temperature": 0.01, "ignore_eos": _bool(cmd, "ignore_eos", True, where)}}
    own = section.get("model", {})
    if not isinstance(own, Mapping):
        raise ConfigError("[ais_bench] 'model' must be a table of AISBench model-config keys; write [ais_bench.model]")
    for k, v in own.items():
        if k in OWNED_MODEL_KEYS:
            raise ConfigError(f"[ais_bench.model] '{k}' is set by msopt for every evaluation (the trial's server, "
                              f"load and lengths); remove it (output length: [ais_bench.command] output_len)")
        keys[str(k)] = {**keys[k], **v} if isinstance(v, Mapping) and isinstance(keys.get(k), Mapping) else v
    lines = [f"# Generated by msopt for one evaluation, after AISBench 29c363e configs/models/*/{template}.py",
             f"from ais_bench.benchmark.models import {cls}"]
    if "postprocess" in extra:
        lines.append("from ais_bench.benchmark.utils.postprocess.model_postprocessors import "
                     "extract_non_reasoning_content")
    lines += ["", "models = [", "    dict(", '        attr="service",', f"        type={cls},"]
    lines += [f"        {k}={_py(v, f'[ais_bench.model] {k}')}," for k, v in keys.items()]
    if "postprocess" in extra:
        lines.append("        pred_postprocessor=dict(type=extract_non_reasoning_content),")
    lines += ["    )", "]", ""]
    return "\n".join(lines)


def template_streams(section: Mapping[str, Any]) -> bool | None:
    """Whether msopt's generated model config streams (None: a user's own ``models``, unknown)."""
    cmd = command_table(section, "ais_bench")
    if cmd.get("models") is not None:
        return None
    try:
        read = model_file(cmd)
    except ConfigError:
        return None  # check() says why
    if read is not None:
        stream = file_value(read[0], "stream")
        return None if stream is None else stream.strip() != "False"
    template = cmd.get("model_template", "vllm_api_stream_chat")
    spec = MODEL_TEMPLATES.get(str(template))
    return None if spec is None else spec[2] is not False


def synthetic_config(section: Mapping[str, Any], count: int) -> dict[str, Any]:
    """The ``synthetic_config`` of the generated dataset: ``count`` requests of the configured lengths
    (AISBench 29c363e datasets/synthetic.py: ``_check_synthetic_config`` and the type's check)."""
    where = "[ais_bench.command]"
    cmd = command_table(section, "ais_bench")
    kind = cmd.get("dataset_type", "tokenid")
    if kind not in DATASET_TYPES:
        raise ConfigError(f"{where}: 'dataset_type' must be one of {', '.join(DATASET_TYPES)}, got {kind!r}")
    input_len = _length(cmd, "input_len", 1024, where)
    if not 1 <= count <= _MAX_SYNTHETIC:
        raise ConfigError(f"{where}: {count} prompts is outside AISBench's synthetic RequestCount "
                          f"[1, {_MAX_SYNTHETIC}]")
    out: dict[str, Any] = {"Type": kind, "RequestCount": int(count),
                           "TrustRemoteCode": _bool(cmd, "trust_remote_code", False, where)}
    if kind == "tokenid":
        prefix = _length(cmd, "prefix_len", 0, where, low=0)
        if prefix > input_len:
            raise ConfigError(f"{where}: 'prefix_len' {prefix} exceeds input_len {input_len} (PrefixLen must be "
                              "within [0, RequestSize])")
        out["TokenIdConfig"] = {"RequestSize": input_len, "PrefixLen": prefix}
    else:
        output_len = _length(cmd, "output_len", 256, where)
        out["StringConfig"] = {
            "Input": {"Method": "uniform", "Params": {"MinValue": input_len, "MaxValue": input_len}},
            "Output": {"Method": "uniform", "Params": {"MinValue": output_len, "MaxValue": output_len}}}
    return out


def dataset_config(section: Mapping[str, Any], count: int) -> str:
    """The text of the generated ``datasets/msopt_synthetic.py`` (after AISBench 29c363e
    configs/datasets/synthetic/synthetic_gen_tokenid.py and synthetic_gen_string.py)."""
    cfg = synthetic_config(section, count)
    columns = ["question"] if cfg["Type"] == "tokenid" else ["question", "max_out_len"]
    return "\n".join([
        "# Generated by msopt for one evaluation, after AISBench 29c363e configs/datasets/synthetic/",
        "from ais_bench.benchmark.openicl.icl_prompt_template import PromptTemplate",
        "from ais_bench.benchmark.openicl.icl_retriever import ZeroRetriever",
        "from ais_bench.benchmark.openicl.icl_inferencer import GenInferencer",
        "from ais_bench.benchmark.datasets import SyntheticDataset, MATHEvaluator, math_postprocess_v2",
        "",
        f"synthetic_config = {_py(cfg, '[ais_bench.command]')}",
        f"synthetic_reader_cfg = dict(input_columns={columns!r}, output_column='answer')",
        "synthetic_infer_cfg = dict(prompt_template=dict(type=PromptTemplate, template='{question}'),",
        "                           retriever=dict(type=ZeroRetriever), inferencer=dict(type=GenInferencer))",
        "synthetic_eval_cfg = dict(evaluator=dict(type=MATHEvaluator, version='v2'),",
        "                          pred_postprocessor=dict(type=math_postprocess_v2))",
        f"synthetic_datasets = [dict(abbr={DATASET_ABBR!r}, type=SyntheticDataset, config=synthetic_config,",
        "                           reader_cfg=synthetic_reader_cfg, infer_cfg=synthetic_infer_cfg,",
        "                           eval_cfg=synthetic_eval_cfg)]",
        ""])


