"""Hardware and model catalogs: TOML data files shipped in ``msopt/sim/catalog/``.

An entry is found by name in the packaged catalog or in ``extra_dirs`` (a file
``<name>.toml`` directly in the directory or in its ``hardware/`` / ``models/`` folder), or
given directly as the path of a TOML file.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from msopt.errors import ConfigError
from msopt.registry import close_matches
from msopt.sim.catalog_parts import catalog_part
from msopt.sim.catalog_types import ENGINE_KEYS, Hardware, ModelSpec
from msopt.sim.hf_config import ConfigModel, architecture, config_path, model_from_config

CATALOG_DIR = Path(__file__).resolve().parent / "catalog"

def _entry_dirs(kind: str, extra_dirs: Iterable[str | Path]) -> list[Path]:
    dirs = []
    for d in extra_dirs:
        d = Path(d).expanduser()
        dirs.extend([d / kind, d])
    dirs.append(CATALOG_DIR / kind)
    return dirs


def _list(kind: str, extra_dirs: Iterable[str | Path]) -> list[str]:
    names: set[str] = set()
    for d in _entry_dirs(kind, extra_dirs):
        if d.is_dir():
            names.update(p.stem for p in d.glob("*.toml"))
    return sorted(names)


def _find(kind: str, name_or_path: str | Path, extra_dirs: Iterable[str | Path]) -> Path:
    extra_dirs = tuple(extra_dirs)
    text = str(name_or_path)
    as_path = Path(text).expanduser()
    if text.endswith(".toml") or as_path.is_file():
        if not as_path.is_file():
            raise ConfigError(f"{kind} catalog file {text!r} does not exist; give an existing TOML file")
        return as_path
    for d in _entry_dirs(kind, extra_dirs):
        candidate = d / f"{text}.toml"
        if candidate.is_file():
            return candidate
    other = _other_name(kind, text, extra_dirs)
    if other is not None:
        return _find(kind, other, extra_dirs)
    valid = _list(kind, extra_dirs)
    hint = close_matches(text, valid)
    raise ConfigError(
        f"unknown {kind} {text!r}; valid names: {', '.join(valid)}"
        + (f" (did you mean {hint[0]!r}?)" if hint else "")
        + ("; or a device name as nvidia-smi / npu-smi print it (\"NVIDIA A100-SXM4-40GB\")" if kind == "hardware"
           else "; or the Hugging Face id of one")
        + "; or give the path of a TOML file (see docs/simulator.md)"
    )


def _other_name(kind: str, text: str, extra_dirs: tuple[str | Path, ...]) -> str | None:
    """The entry a name that is not an entry's own means: a device name as nvidia-smi, npu-smi or a
    write-up gives it ("NVIDIA A100-SXM4-40GB", "Atlas 800I A3") for hardware; for a model, the
    entry whose ``hf_id`` or ``aliases`` hold the Hugging Face id (case aside)."""
    if kind == "hardware":
        # a lower-case slug is meant as an entry's name: a typo of one gets "did you mean", not a part
        return None if re.fullmatch(r"[a-z0-9._-]+", text) else catalog_part(text)
    want = text.lower()
    for name in _list(kind, extra_dirs):
        d = _read(_find(kind, name, extra_dirs))
        ids = [d.get("hf_id", "")] + list(d.get("aliases", []) if isinstance(d.get("aliases"), list) else [])
        if want in (str(i).lower() for i in ids if i):
            return name
    return None


def _read(path: Path) -> dict[str, Any]:
    try:
        with path.open("rb") as f:
            return tomllib.load(f)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: invalid TOML ({exc}); fix the file") from None


def _get(data: Mapping[str, Any], path: Path, *keys: str, cast: type = float, default: Any = None) -> Any:
    node: Any = data
    for k in keys:
        if not isinstance(node, Mapping) or k not in node:
            if default is not None:
                return default
            raise ConfigError(f"{path}: missing key {'.'.join(keys)!r}; add it (see docs/simulator.md)")
        node = node[k]
    try:
        value = cast(node)
    except (TypeError, ValueError):
        raise ConfigError(f"{path}: key {'.'.join(keys)!r} = {node!r} is not a {cast.__name__}") from None
    if cast in (int, float) and value < 0:
        raise ConfigError(f"{path}: key {'.'.join(keys)!r} = {node!r} must be >= 0")
    return value


def _bool(d: Mapping[str, Any], path: Path, table: str, key: str) -> bool:
    value = d.get(table, {}).get(key, False) if isinstance(d.get(table, {}), Mapping) else False
    if not isinstance(value, bool):
        raise ConfigError(f"{path}: key {table}.{key} = {value!r} must be true or false")
    return value


def _engine_overrides(d: Mapping[str, Any], path: Path) -> dict[str, dict[str, float]]:
    engines = d.get("engines", {})
    if not isinstance(engines, Mapping):
        raise ConfigError(f"{path}: [engines] must hold tables [engines.<engine>] of {list(ENGINE_KEYS)}")
    out: dict[str, dict[str, float]] = {}
    for engine, table in engines.items():
        if not isinstance(table, Mapping):
            raise ConfigError(f"{path}: engines.{engine} must be a table of {list(ENGINE_KEYS)}")
        unknown = set(table) - set(ENGINE_KEYS)
        if unknown:
            raise ConfigError(f"{path}: engines.{engine}: unknown key(s) {sorted(unknown)}; "
                              f"valid keys: {list(ENGINE_KEYS)}")
        out[str(engine)] = {k: _get(table, path, k) for k in table}
    return out


def hardware_toml(hw: Hardware, header: str = "") -> str:
    """A hardware TOML file that :func:`load_hardware` reads back as ``hw``.

    Args:
        hw: the entry to write.
        header: comment lines (without ``#``) put on top, e.g. how it was calibrated.
    """
    def num(v: float) -> str:
        return repr(float(f"{float(v):.6g}"))

    lines = [f"# {line}".rstrip() for line in header.splitlines()]
    lines += [f"name = {_toml_str(hw.name)}", f"description = {_toml_str(hw.description)}",
              f"memory_kind = {_toml_str(hw.memory_kind)}"]
    if hw.efficiency_from:
        lines.append(f"efficiency_from = {_toml_str(hw.efficiency_from)}")
    lines += ["", "[compute]"]
    lines += [f"{k} = {num(v)}" for k, v in hw.tflops.items()]
    lines += ["", "[memory]", f"hbm_gib = {num(hw.hbm_gib)}", f"hbm_tb_s = {num(hw.hbm_tb_s)}",
              f"reserve_gib = {num(hw.reserve_gib)}", "", "[interconnect]",
              f"intra_node_gb_s = {num(hw.intra_node_gb_s)}", f"inter_node_gb_s = {num(hw.inter_node_gb_s)}",
              f"devices_per_node = {int(hw.devices_per_node)}", "", "[efficiency]",
              f"compute = {num(hw.compute_eff)}", f"memory = {num(hw.memory_eff)}", f"comm = {num(hw.comm_eff)}"]
    for key in ("allreduce_latency_us", *(k for k in ENGINE_KEYS if k != "reserve_gib")):
        lines.append(f"{key} = {num(getattr(hw, key))}")
    if hw.verify_kv_per_token:
        lines.append("verify_kv_per_token = true")
    for engine, table in sorted(hw.engine_overrides.items()):
        lines += ["", f"[engines.{engine}]"] + [f"{k} = {num(v)}" for k, v in table.items()]
    return "\n".join(lines) + "\n"


def _toml_str(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n").replace("\t", "\\t") + '"'


def entry_path(kind: str, name_or_path: str | Path, extra_dirs: Iterable[str | Path] = ()) -> Path:
    """The TOML file of a ``"hardware"`` or ``"models"`` entry (a name or a path).

    Raises:
        ConfigError: unknown name or missing file.
    """
    return _find(kind, name_or_path, extra_dirs)


def list_hardware(extra_dirs: Iterable[str | Path] = ()) -> list[str]:
    """Names of the packaged hardware entries and those in ``extra_dirs``."""
    return _list("hardware", extra_dirs)


def list_models(extra_dirs: Iterable[str | Path] = ()) -> list[str]:
    """Names of the packaged model entries and those in ``extra_dirs``."""
    return _list("models", extra_dirs)


def load_hardware(name_or_path: str | Path, extra_dirs: Iterable[str | Path] = ()) -> Hardware:
    """Load a hardware entry by catalog name or TOML file path.

    Raises:
        ConfigError: unknown name (the message lists valid ones) or an invalid file.
    """
    path = _find("hardware", name_or_path, extra_dirs)
    d = _read(path)
    tflops = d.get("compute", {})
    if not isinstance(tflops, Mapping):
        raise ConfigError(f"{path}: [compute] must be a table of TFLOPS per dtype")
    hw = Hardware(
        name=str(d.get("name", path.stem)),
        description=str(d.get("description", "")),
        memory_kind=str(d.get("memory_kind", "CUDA")),
        tflops={str(k): _get(tflops, path, k) for k in tflops},
        hbm_gib=_get(d, path, "memory", "hbm_gib"),
        hbm_tb_s=_get(d, path, "memory", "hbm_tb_s"),
        reserve_gib=_get(d, path, "memory", "reserve_gib", default=3.0),
        intra_node_gb_s=_get(d, path, "interconnect", "intra_node_gb_s"),
        inter_node_gb_s=_get(d, path, "interconnect", "inter_node_gb_s", default=25.0),
        devices_per_node=_get(d, path, "interconnect", "devices_per_node", cast=int),
        compute_eff=_get(d, path, "efficiency", "compute"),
        memory_eff=_get(d, path, "efficiency", "memory"),
        comm_eff=_get(d, path, "efficiency", "comm"),
        allreduce_latency_us=_get(d, path, "efficiency", "allreduce_latency_us", default=10.0),
        step_overhead_ms=_get(d, path, "efficiency", "step_overhead_ms", default=3.0),
        per_seq_overhead_us=_get(d, path, "efficiency", "per_seq_overhead_us", default=0.0),
        api_overhead_ms=_get(d, path, "efficiency", "api_overhead_ms", default=0.0),
        frontend_ms_per_req=_get(d, path, "efficiency", "frontend_ms_per_req", default=0.0),
        frontend_us_per_token=_get(d, path, "efficiency", "frontend_us_per_token", default=0.0),
        api_jitter_ms=_get(d, path, "efficiency", "api_jitter_ms", default=0.0),
        client_think_ms=_get(d, path, "efficiency", "client_think_ms", default=0.0),
        frontend_us_per_output_token=_get(d, path, "efficiency", "frontend_us_per_output_token", default=0.0),
        engine_overrides=_engine_overrides(d, path),
        efficiency_from=str(d.get("efficiency_from", "")),
        verify_kv_per_token=_bool(d, path, "efficiency", "verify_kv_per_token"),
    )
    for key in ("compute_eff", "memory_eff", "comm_eff"):
        if not 0 < getattr(hw, key) <= 1:
            raise ConfigError(f"{path}: efficiency {key} = {getattr(hw, key)} must be in (0, 1]")
    if hw.hbm_gib <= 0 or hw.hbm_tb_s <= 0 or hw.devices_per_node < 1:
        raise ConfigError(f"{path}: hbm_gib, hbm_tb_s and devices_per_node must be positive")
    return hw


def _aliases(d: Mapping[str, Any], path: Path) -> tuple[str, ...]:
    raw = d.get("aliases", [])
    if not isinstance(raw, list) or not all(isinstance(a, str) and a for a in raw):
        raise ConfigError(f"{path}: aliases must be a list of names (Hugging Face ids), got {raw!r}")
    return tuple(raw)


def load_model(name_or_path: str | Path, extra_dirs: Iterable[str | Path] = ()) -> ModelSpec:
    """Load a model entry by catalog name or TOML file path.

    A Hugging Face model directory (or its config.json) is read as such
    (:func:`read_config_model`: the catalog entry of the same architecture,
    else the spec its config.json describes).

    Raises:
        ConfigError: unknown name (the message lists valid ones) or an invalid file.
    """
    if config_path(name_or_path) is not None:
        return read_config_model(name_or_path, extra_dirs).spec
    return catalog_model(name_or_path, extra_dirs)


def catalog_model(name_or_path: str | Path, extra_dirs: Iterable[str | Path] = ()) -> ModelSpec:
    """The catalog model ``name_or_path`` (a name, or a catalog TOML file), never a model directory of that
    name: :func:`read_config_model` matches a directory against the catalog by name, which must not read the
    directory again.

    Raises:
        ConfigError: unknown name (the message lists valid ones) or an invalid file.
    """
    path = _find("models", name_or_path, extra_dirs)
    d = _read(path)
    ints = ("layers", "hidden", "heads", "kv_heads", "head_dim", "ffn", "vocab", "max_position")
    values = {k: _get(d, path, k, cast=int) for k in ints}
    for k, v in values.items():
        if v < 1:
            raise ConfigError(f"{path}: {k} = {v} must be >= 1")
    attention = str(d.get("attention", "gqa"))
    if attention not in ("gqa", "mla"):
        raise ConfigError(f"{path}: attention = {attention!r}: use \"gqa\" or \"mla\"")
    opt = ("q_lora_rank", "kv_lora_rank", "qk_rope_head_dim", "v_head_dim", "experts", "experts_per_token",
           "shared_experts", "moe_ffn", "dense_layers", "topk_group", "full_attention_interval", "linear_key_heads",
           "linear_value_heads", "linear_key_dim", "linear_value_dim", "linear_conv_kernel")
    extra = {k: _get(d, path, k, cast=int) if k in d else 0 for k in opt}
    model = ModelSpec(
        name=str(d.get("name", path.stem)),
        hf_id=str(d.get("hf_id", "")),
        params_b=_get(d, path, "params_b", default=0.0),
        active_params_b=_get(d, path, "active_params_b", default=0.0),
        tie_embeddings=bool(d.get("tie_embeddings", False)),
        attention=attention,
        aliases=_aliases(d, path),
        model_type=str(d.get("model_type", "")),
        mtp_layers=_get(d, path, "mtp_layers", cast=int) if "mtp_layers" in d else 0,
        attn_output_gate=bool(d.get("attn_output_gate", False)),
        **values,
        **extra,
    )
    if model.heads % model.kv_heads:
        raise ConfigError(f"{path}: heads ({model.heads}) must be a multiple of kv_heads ({model.kv_heads})")
    if model.is_mla and not (model.kv_lora_rank and model.qk_rope_head_dim and model.v_head_dim):
        raise ConfigError(f"{path}: attention = \"mla\" needs kv_lora_rank, qk_rope_head_dim and v_head_dim")
    if model.is_moe and not (model.experts_per_token and model.moe_ffn):
        raise ConfigError(f"{path}: experts = {model.experts} needs experts_per_token and moe_ffn")
    if model.is_moe and not 0 < model.experts_per_token <= model.experts:
        raise ConfigError(f"{path}: experts_per_token ({model.experts_per_token}) must be in 1..experts "
                          f"({model.experts})")
    if model.dense_layers >= model.layers and model.is_moe:
        raise ConfigError(f"{path}: dense_layers ({model.dense_layers}) must be below layers ({model.layers})")
    if model.full_attention_interval > 1 and not (model.linear_key_heads and model.linear_value_heads
                                                  and model.linear_key_dim and model.linear_value_dim
                                                  and model.linear_conv_kernel):
        raise ConfigError(f"{path}: full_attention_interval = {model.full_attention_interval} needs "
                          "linear_key_heads, linear_value_heads, linear_key_dim, linear_value_dim and "
                          "linear_conv_kernel")
    return model


def match_catalog(spec: Any, extra_dirs: Iterable[str | Path] = ()) -> str:
    """The name of the catalog model with ``spec``'s architecture (:func:`architecture`), else ""."""
    want = architecture(spec)
    for name in list_models(extra_dirs):
        try:
            if architecture(catalog_model(name, extra_dirs)) == want:
                return name
        except ConfigError:
            continue
    return ""


def read_config_model(model: str | Path, extra_dirs: Iterable[str | Path] = ()) -> ConfigModel:
    """The model of a model directory (or its config.json), matched against the catalog.

    Raises:
        ConfigError: no config.json there, or one that does not describe a transformer.
    """
    path = config_path(model)
    if path is None:
        raise ConfigError(f"{model}: no config.json there; give a Hugging Face model directory")
    spec, dtype, notes = model_from_config(path)
    name = match_catalog(spec, extra_dirs)
    if name:
        spec = catalog_model(name, extra_dirs)
    return ConfigModel(spec, path, name, dtype, notes)
