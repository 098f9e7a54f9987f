"""Hardware and model catalogs: TOML data files shipped in ``msopt/sim/catalog/``.

An entry is found by name in the packaged catalog or in ``extra_dirs`` (a file
``<name>.toml`` directly in the directory or in its ``hardware/`` / ``models/`` folder), or
given directly as the path of a TOML file.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import MappingProxyType
from typing import Any

from msopt.errors import ConfigError, SimulationError
from msopt.registry import close_matches

CATALOG_DIR = Path(__file__).resolve().parent / "catalog"

#: bytes per element of each supported weight / KV-cache dtype
DTYPE_BYTES = MappingProxyType({"bf16": 2.0, "fp16": 2.0, "fp8": 1.0, "int8": 1.0, "int4": 0.5})

#: dtypes whose matrix multiplies run at another dtype's peak: fp16 at bf16's; int4 weights
#: (Ascend's W4A8, modelslim) are multiplied with 8-bit activations at int8's
_COMPUTE_AS = MappingProxyType({"fp16": "bf16", "int4": "int8"})

#: ``[efficiency]`` keys a hardware file may set per engine in ``[engines.<engine>]``
ENGINE_KEYS = ("reserve_gib", "step_overhead_ms", "per_seq_overhead_us", "api_overhead_ms", "frontend_ms_per_req",
               "frontend_us_per_token", "api_jitter_ms", "client_think_ms", "frontend_us_per_output_token")


@dataclass(frozen=True)
class Hardware:
    """One accelerator type, per device, with calibrated achieved-efficiency factors.

    Attributes:
        name: catalog name ("h100-sxm").
        description: human readable.
        memory_kind: "CUDA" or "NPU", for out-of-memory log lines.
        tflops: dense peak per precision ("bf16", "fp8", "int8"); 0 = unsupported.
        hbm_gib: device memory as the runtime reports it, GiB.
        hbm_tb_s: HBM bandwidth, TB/s.
        reserve_gib: memory the framework never gets (context, comm buffers, graphs).
        intra_node_gb_s: scale-up link bandwidth per direction, GB/s.
        inter_node_gb_s: scale-out bandwidth per device, GB/s.
        devices_per_node: accelerators per node.
        compute_eff: achieved fraction of peak FLOPS in large GEMMs.
        memory_eff: achieved fraction of HBM bandwidth in streaming reads.
        comm_eff: achieved fraction of link bandwidth in all-reduce.
        allreduce_latency_us: fixed cost of one all-reduce.
        step_overhead_ms: fixed cost of one engine step (scheduling, launch, sampling).
        per_seq_overhead_us: cost per sequence in a step (sampling, detokenizing, output).
        api_overhead_ms: client -> engine latency of a request (network, HTTP), host side.
        frontend_ms_per_req: API-server time per request, requests handled one at a time.
        frontend_us_per_token: API-server time per prompt token (tokenization).
        api_jitter_ms: mean of a random (exponential) per-request client/network delay.
        client_think_ms: mean of a random (exponential) delay before a client sends its next request.
        frontend_us_per_output_token: API-server time per streamed output token (detokenize, one
            SSE event, the client's parsing) on one serial resource every stream shares: it caps
            the delivered token rate and makes TPOT grow with the concurrent streams.
        engine_overrides: per-engine values of the overhead factors (``[engines.<engine>]``:
            any of :data:`ENGINE_KEYS`), e.g. SGLang's step overhead differs from vLLM's.
        efficiency_from: the entry whose efficiency factors this one took without a fit of its
            own (another hardware kind's); "" when they were fitted to this hardware.
        verify_kv_per_token: a speculative verify step reads each sequence's KV cache once per
            verified token (attention kernels that run the verify tokens as separate decode
            queries) instead of once per sequence (a multi-query kernel).
    """

    name: str
    description: str
    memory_kind: str
    tflops: Mapping[str, float]
    hbm_gib: float
    hbm_tb_s: float
    reserve_gib: float
    intra_node_gb_s: float
    inter_node_gb_s: float
    devices_per_node: int
    compute_eff: float
    memory_eff: float
    comm_eff: float
    allreduce_latency_us: float
    step_overhead_ms: float
    per_seq_overhead_us: float
    api_overhead_ms: float = 0.0
    frontend_ms_per_req: float = 0.0
    frontend_us_per_token: float = 0.0
    api_jitter_ms: float = 0.0
    client_think_ms: float = 0.0
    frontend_us_per_output_token: float = 0.0
    engine_overrides: Mapping[str, Mapping[str, float]] = field(default_factory=dict)
    efficiency_from: str = ""
    verify_kv_per_token: bool = False

    def for_engine(self, engine: str) -> Hardware:
        """This hardware with ``[engines.<engine>]`` applied (itself when there is none)."""
        over: dict[str, Any] = dict(self.engine_overrides.get(engine) or {})
        return replace(self, **over) if over else self

    def peak_flops(self, dtype: str) -> float:
        """Dense peak in FLOP/s for ``dtype`` (fp16 counts as bf16, int4 as int8); raises if unsupported."""
        key = _COMPUTE_AS.get(dtype, dtype)
        value = float(self.tflops.get(key, 0.0))
        if value <= 0:
            raise SimulationError(
                f"hardware {self.name!r} has no {dtype} compute (tflops.{key} = {value}); "
                f"use weight_dtype one of {sorted(k for k, v in self.tflops.items() if v > 0)}"
            )
        return value * 1e12


@dataclass(frozen=True)
class ModelSpec:
    """A decoder-only transformer's architecture facts.

    Attributes:
        name: catalog name ("qwen3-32b").
        hf_id: the Hugging Face repository it describes.
        layers, hidden, heads, kv_heads, head_dim, ffn, vocab: architecture.
        params_b: published parameter count, billions (for checks and docs).
        max_position: the longest context the model supports (vLLM's default max_model_len).
        tie_embeddings: whether lm_head shares the embedding matrix.
        attention: "gqa" (grouped-query, also MHA/MQA) or "mla" (multi-head latent attention;
            ``head_dim`` is then qk_nope_head_dim).
        q_lora_rank, kv_lora_rank, qk_rope_head_dim, v_head_dim: MLA's low-rank projections.
        experts, experts_per_token, shared_experts, moe_ffn: routed experts per MoE layer, top-k,
            always-on shared experts, one expert's intermediate size (0 experts: a dense model).
        dense_layers: leading layers with a dense MLP of width ``ffn`` (DeepSeek's
            first_k_dense_replace); the other layers are MoE.
        topk_group: group-limited routing (DeepSeek's n_group/topk_group): a token's experts lie in at
            most this many expert groups, hence on at most this many nodes when a node holds a group;
            0: unlimited.
        active_params_b: published activated parameters per token, billions (for checks and docs).
        model_type: config.json's ``model_type`` ("" unknown): engines choose their MTP drafts by it.
        mtp_layers: config.json's ``num_nextn_predict_layers``, the model's own MTP layers (0: none or unknown).
        aliases: other names of the same weights' architecture (``aliases = [...]``: the base model's
            Hugging Face id beside the instruct one's hf_id, say), matched as the hf_id is.
    """

    name: str
    hf_id: str
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    ffn: int
    vocab: int
    params_b: float
    max_position: int
    tie_embeddings: bool = False
    attention: str = "gqa"
    q_lora_rank: int = 0
    kv_lora_rank: int = 0
    qk_rope_head_dim: int = 0
    v_head_dim: int = 0
    experts: int = 0
    experts_per_token: int = 0
    shared_experts: int = 0
    moe_ffn: int = 0
    dense_layers: int = 0
    topk_group: int = 0
    active_params_b: float = 0.0
    aliases: tuple[str, ...] = ()
    model_type: str = ""
    mtp_layers: int = 0

    @property
    def is_moe(self) -> bool:
        """True for a mixture-of-experts model (routed experts in its MLP layers)."""
        return self.experts > 0

    @property
    def is_mla(self) -> bool:
        """True for multi-head latent attention (DeepSeek-V2/V3): one compressed KV latent per token."""
        return self.attention == "mla"

    @property
    def attn_params(self) -> int:
        """Parameters of one layer's attention projections."""
        if self.is_mla:
            # DeepSeek-V3 modeling: q_a (hidden x q_lora), q_b (q_lora x heads*(nope+rope)),
            # kv_a (hidden x (kv_lora+rope)), kv_b (kv_lora x heads*(nope+v)), o (heads*v x hidden);
            # head_dim is qk_nope_head_dim here
            qk = self.head_dim + self.qk_rope_head_dim
            q = (self.hidden * self.q_lora_rank + self.q_lora_rank * self.heads * qk if self.q_lora_rank
                 else self.hidden * self.heads * qk)
            kv = (self.hidden * (self.kv_lora_rank + self.qk_rope_head_dim)
                  + self.kv_lora_rank * self.heads * (self.head_dim + self.v_head_dim))
            return q + kv + self.heads * self.v_head_dim * self.hidden
        q = self.hidden * self.heads * self.head_dim
        kv = 2 * self.hidden * self.kv_heads * self.head_dim
        o = self.heads * self.head_dim * self.hidden
        return q + kv + o

    @property
    def moe_layers(self) -> int:
        """Layers whose MLP is routed experts (0 for a dense model)."""
        return self.layers - self.dense_layers if self.is_moe else 0

    @property
    def expert_params(self) -> int:
        """Parameters of one expert (a gated MLP of width ``moe_ffn``)."""
        return 3 * self.hidden * self.moe_ffn

    @property
    def routed_params(self) -> int:
        """Parameters of all routed experts of the whole model (what expert parallelism splits)."""
        return self.moe_layers * self.experts * self.expert_params

    @property
    def dense_params(self) -> int:
        """Parameters every token uses in every layer, summed over layers: attention, dense MLPs,
        shared experts and routers (everything but the routed experts and the embeddings)."""
        dense_mlp = (self.layers - self.moe_layers) * 3 * self.hidden * self.ffn
        shared = self.moe_layers * (self.shared_experts * self.expert_params + self.hidden * self.experts)
        return self.layers * self.attn_params + dense_mlp + shared

    @property
    def layer_params(self) -> int:
        """Parameters of one decoder layer on average (attention projections and MLP or experts)."""
        return (self.dense_params + self.routed_params) // self.layers

    @property
    def active_layer_params(self) -> int:
        """Parameters one token uses in one decoder layer on average (top-k experts only)."""
        routed = self.moe_layers * self.experts_per_token * self.expert_params
        return (self.dense_params + routed) // self.layers

    @property
    def embed_params(self) -> int:
        """Embedding plus lm_head parameters."""
        return self.vocab * self.hidden * (1 if self.tie_embeddings else 2)

    @property
    def total_params(self) -> int:
        """Parameters computed from the architecture (norms ignored)."""
        return self.layers * self.layer_params + self.embed_params

    def kv_bytes_per_token(self, kv_dtype: str = "bf16") -> float:
        """KV-cache bytes per token over all layers, whole model (not per device).

        MLA caches one latent of ``kv_lora_rank + qk_rope_head_dim`` per layer instead of K and V.
        """
        if self.is_mla:
            return self.layers * (self.kv_lora_rank + self.qk_rope_head_dim) * dtype_bytes(kv_dtype)
        return 2.0 * self.layers * self.kv_heads * self.head_dim * dtype_bytes(kv_dtype)

    def kv_elems_per_token_layer(self, tp: int) -> float:
        """KV-cache elements one device holds per token and layer under attention TP ``tp``.

        GQA splits KV heads over tp (at least one head per device); MLA's latent is not split
        by heads, so every TP rank holds the whole latent (vLLM/SGLang MLA backends).
        """
        if self.is_mla:
            return float(self.kv_lora_rank + self.qk_rope_head_dim)
        return 2.0 * max(1.0, self.kv_heads / tp) * self.head_dim


def dtype_bytes(dtype: str) -> float:
    """Bytes per element of ``dtype``; ConfigError for an unknown one."""
    try:
        return DTYPE_BYTES[dtype]
    except KeyError:
        raise ConfigError(
            f"unknown dtype {dtype!r}; valid dtypes: {sorted(DTYPE_BYTES)}"
        ) from None


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
        from msopt.sim.detect import catalog_part

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
    (:func:`msopt.sim.hf_config.read_config_model`: the catalog entry of the same architecture,
    else the spec its config.json describes).

    Raises:
        ConfigError: unknown name (the message lists valid ones) or an invalid file.
    """
    from msopt.sim.hf_config import config_path, read_config_model

    if config_path(name_or_path) is not None:
        return read_config_model(name_or_path, extra_dirs).spec
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
           "shared_experts", "moe_ffn", "dense_layers", "topk_group")
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
    return model
