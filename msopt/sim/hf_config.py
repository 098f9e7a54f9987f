"""A simulator model spec from a Hugging Face model directory's ``config.json``.

Any decoder-only model whose config.json names its architecture in the usual Hugging Face keys
becomes a :class:`~msopt.sim.catalog_types.ModelSpec`: ``num_hidden_layers``, ``hidden_size``,
``num_attention_heads``, ``num_key_value_heads``, ``head_dim``, ``intermediate_size``,
``vocab_size``, ``max_position_embeddings``, ``tie_word_embeddings``; mixture-of-experts keys of
Qwen-MoE (``num_experts``, ``moe_intermediate_size``, ``shared_expert_intermediate_size``,
``mlp_only_layers``), Mixtral (``num_local_experts``) and DeepSeek (``n_routed_experts``,
``n_shared_experts``, ``first_k_dense_replace``, ``topk_group``, MLA's ``kv_lora_rank`` ...);
a multimodal config's ``text_config``. The weights' dtype comes from ``quantization_config``
or ``torch_dtype`` (``dtype`` in newer transformers).

A config whose architecture equals a catalog entry's is that entry
(:func:`msopt.sim.catalog_load.match_catalog`, which reads it with :func:`architecture`), so a
local copy of a catalog model simulates exactly as the catalog name does.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from msopt.errors import ConfigError
from msopt.sim.catalog_types import ModelSpec

__all__ = ["ConfigModel", "architecture", "config_path", "hub_cache_config", "model_from_config", "weight_dtype_of"]

#: torch dtype names -> the simulator's dtypes (float32 weights are served as bf16 by default)
_TORCH_DTYPES = {"bfloat16": "bf16", "float16": "fp16", "half": "fp16", "float32": "bf16", "float": "bf16"}


@dataclass(frozen=True)
class ConfigModel:
    """A model read from a config.json.

    Attributes:
        spec: the simulator's model spec (a catalog entry's when the architecture matches one).
        path: the config.json it came from.
        catalog: the catalog entry's name when the architecture matched one, else "".
        weight_dtype: the simulator dtype of the weights ("bf16", "fp16", "fp8", "int8").
        notes: what was assumed (a 4-bit quantization served as int8, say).
    """

    spec: Any
    path: Path
    catalog: str = ""
    weight_dtype: str = "bf16"
    notes: tuple[str, ...] = ()

    def summary(self) -> str:
        """``llama, 32 layers, hidden 4096, 32/8 heads, bf16`` (and the catalog entry it matched)."""
        s = self.spec
        parts = [f"{s.layers} layers", f"hidden {s.hidden}", f"{s.heads}/{s.kv_heads} heads"]
        if s.is_moe:
            parts.append(f"{s.experts} experts top-{s.experts_per_token}")
        parts.append(self.weight_dtype)
        head = f"{self.catalog} (catalog entry, same architecture)" if self.catalog else s.name
        return ", ".join([head, *parts])


def hub_cache_config(repo_id: str) -> Path | None:
    """The config.json of a Hugging Face hub id in the local hub cache (``$HF_HUB_CACHE``, else
    ``$HF_HOME/hub``, else ``~/.cache/huggingface/hub``; huggingface_hub's layout
    ``models--ORG--NAME/snapshots/REVISION/``), the newest snapshot's; None when not cached."""
    if repo_id.count("/") != 1 or repo_id.startswith(("/", ".", "~")):
        return None
    home = os.environ.get("HF_HOME")
    root = Path(os.environ.get("HF_HUB_CACHE") or (Path(home) / "hub" if home else
                                                   Path.home() / ".cache" / "huggingface" / "hub"))
    snaps = root / f"models--{repo_id.replace('/', '--')}" / "snapshots"
    found = sorted(snaps.glob("*/config.json"), key=lambda p: p.stat().st_mtime) if snaps.is_dir() else []
    return found[-1] if found else None


def config_path(model: str | Path) -> Path | None:
    """The config.json of a model directory (or the file itself), else of a Hugging Face hub id in
    the local hub cache (:func:`hub_cache_config`); None when there is none."""
    if not str(model):
        return None
    p = Path(str(model)).expanduser()
    if p.is_file() and p.name == "config.json":
        return p
    if p.is_dir() and (p / "config.json").is_file():
        return p / "config.json"
    return hub_cache_config(str(model))


def _read(path: Path) -> dict[str, Any]:
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ConfigError(f"{path}: not a readable JSON file ({exc}); fix the model's config.json") from None
    if not isinstance(doc, dict):
        raise ConfigError(f"{path}: a config.json must hold a JSON object")
    text = doc.get("text_config")
    if isinstance(text, dict) and "num_hidden_layers" in text:
        merged = {k: v for k, v in doc.items() if k not in ("text_config", "vision_config")}
        merged.update(text)
        return merged
    return doc


def _int(doc: Mapping[str, Any], path: Path, *keys: str, default: int | None = None) -> int:
    for k in keys:
        v = doc.get(k)
        if isinstance(v, int) and not isinstance(v, bool) and v >= 0:
            return v
        if v is not None and not (isinstance(v, int) and not isinstance(v, bool)):
            raise ConfigError(f"{path}: {k} = {v!r} is not a non-negative integer")
    if default is not None:
        return default
    raise ConfigError(f"{path}: missing {' or '.join(keys)}; msopt needs it to simulate the model "
                      "(give [simulator] model a catalog name or a model TOML instead)")


def weight_dtype_of(doc: Mapping[str, Any]) -> tuple[str, tuple[str, ...]]:
    """The simulator dtype of a config's weights and what was assumed, from ``quantization_config``
    (fp8, compressed-tensors, bitsandbytes, GPTQ/AWQ) or ``torch_dtype``."""
    q = doc.get("quantization_config")
    if isinstance(q, Mapping):
        method = str(q.get("quant_method", "")).lower()
        bits = q.get("bits", q.get("w_bit"))
        if method in ("fp8", "fbgemm_fp8") or "fp8" in str(q.get("fmt", "")).lower():
            return "fp8", ()
        if method == "compressed-tensors":
            for group in (q.get("config_groups") or {}).values():
                w = group.get("weights") if isinstance(group, Mapping) else None
                if isinstance(w, Mapping) and w.get("num_bits") == 8:
                    return ("fp8" if str(w.get("type", "")).lower() == "float" else "int8"), ()
                if isinstance(w, Mapping) and isinstance(w.get("num_bits"), int):
                    bits = w["num_bits"]
        if method == "bitsandbytes" and q.get("load_in_8bit"):
            return "int8", ()
        if isinstance(bits, int) and bits == 8:
            return "int8", ()
        if method or bits:
            return "int8", (f"quantization {method or '?'} ({bits or '?'} bits) is not modelled; simulated as "
                            "int8 weights",)
    dt = str(doc.get("torch_dtype", doc.get("dtype", "bfloat16"))).replace("torch.", "").lower()
    out = _TORCH_DTYPES.get(dt)
    if out is None:
        return "bf16", (f"torch_dtype {dt!r} is not modelled; simulated as bf16",)
    notes = ("float32 weights simulated as bf16 (the engines' default --dtype auto serves them as such on "
             "accelerators)",) if dt in ("float32", "float") else ()
    return out, notes


def model_from_config(path: str | Path, name: str | None = None) -> tuple[Any, str, tuple[str, ...]]:
    """The :class:`~msopt.sim.catalog_types.ModelSpec` a config.json describes, its weight dtype and notes.

    Raises:
        ConfigError: the file is unreadable or lacks an architecture key (named).
    """
    path = Path(path)
    doc = _read(path)
    layers = _int(doc, path, "num_hidden_layers", "n_layer", "num_layers")
    hidden = _int(doc, path, "hidden_size", "n_embd", "d_model")
    heads = _int(doc, path, "num_attention_heads", "n_head")
    kv_heads = _int(doc, path, "num_key_value_heads", "multi_query_group_num", default=heads) or heads
    vocab = _int(doc, path, "vocab_size", "padded_vocab_size")
    experts = _int(doc, path, "num_experts", "n_routed_experts", "num_local_experts", default=0)
    moe_ffn = _int(doc, path, "moe_intermediate_size", default=0)
    ffn = _int(doc, path, "intermediate_size", "ffn_hidden_size", "n_inner", default=4 * hidden)
    if experts and not moe_ffn:
        moe_ffn = ffn  # Mixtral: intermediate_size is one expert's width
    top_k = _int(doc, path, "num_experts_per_tok", "moe_topk", "top_k", default=2 if experts else 0)
    shared = _int(doc, path, "n_shared_experts", "num_shared_experts", default=0)
    shared_ffn = _int(doc, path, "shared_expert_intermediate_size", default=0)
    if experts and shared_ffn and not shared and moe_ffn:
        shared = max(1, round(shared_ffn / moe_ffn))  # Qwen2-MoE: one shared expert of its own width
    dense = _int(doc, path, "first_k_dense_replace", default=0)
    mlp_only = doc.get("mlp_only_layers")
    if experts and not dense and isinstance(mlp_only, list):
        dense = len(mlp_only)
    kv_lora = _int(doc, path, "kv_lora_rank", default=0)
    mla = bool(kv_lora)
    head_dim = _int(doc, path, "qk_nope_head_dim" if mla else "head_dim", default=hidden // max(heads, 1))
    notes: list[str] = []
    if experts and dense >= layers:
        dense, notes = 0, [*notes, "every layer listed dense; simulated as MoE throughout"]
    max_pos = _int(doc, path, "max_position_embeddings", "n_positions", "seq_length", default=4096) or 4096
    arch = doc.get("architectures")
    label = name or str(doc.get("_name_or_path") or "") or path.parent.name or "model"
    kind = str(doc.get("model_type") or (arch[0] if isinstance(arch, list) and arch else "model"))
    spec = ModelSpec(
        name=label, hf_id=str(doc.get("_name_or_path", "")), layers=layers, hidden=hidden, heads=heads,
        kv_heads=kv_heads, head_dim=head_dim, ffn=ffn, vocab=vocab, params_b=0.0, max_position=max_pos,
        tie_embeddings=bool(doc.get("tie_word_embeddings", False)), attention="mla" if mla else "gqa",
        q_lora_rank=_int(doc, path, "q_lora_rank", default=0) if mla else 0, kv_lora_rank=kv_lora,
        qk_rope_head_dim=_int(doc, path, "qk_rope_head_dim", default=0) if mla else 0,
        v_head_dim=_int(doc, path, "v_head_dim", default=head_dim) if mla else 0,
        experts=experts, experts_per_token=min(top_k, experts) if experts else 0,
        shared_experts=shared if experts else 0, moe_ffn=moe_ffn if experts else 0,
        dense_layers=dense if experts else 0, topk_group=_int(doc, path, "topk_group", default=0) if experts else 0,
        model_type=str(doc.get("model_type") or ""), mtp_layers=_int(doc, path, "num_nextn_predict_layers", default=0),
        # hybrid attention (Qwen3-Next): linear-attention layers beside every interval-th full-attention one
        full_attention_interval=_int(doc, path, "full_attention_interval", default=0),
        linear_key_heads=_int(doc, path, "linear_num_key_heads", default=0),
        linear_value_heads=_int(doc, path, "linear_num_value_heads", default=0),
        linear_key_dim=_int(doc, path, "linear_key_head_dim", default=0),
        linear_value_dim=_int(doc, path, "linear_value_head_dim", default=0),
        linear_conv_kernel=_int(doc, path, "linear_conv_kernel_dim", default=0),
        # sglang 0.5.23 srt/models/qwen3_next.py:649: getattr(config, "attn_output_gate", True)
        attn_output_gate=bool(doc.get("attn_output_gate", str(doc.get("model_type")) == "qwen3_next")))
    if heads < 1 or layers < 1 or hidden < 1 or vocab < 1 or heads % kv_heads:
        raise ConfigError(f"{path}: num_attention_heads {heads} / num_key_value_heads {kv_heads} / layers "
                          f"{layers} / hidden {hidden} do not describe a transformer msopt can simulate")
    spec = replace(spec, params_b=spec.total_params / 1e9, name=f"{kind} ({label})" if name is None
                   else label)
    dtype, dnotes = weight_dtype_of(doc)
    return spec, dtype, (*notes, *dnotes)


def architecture(spec: Any) -> tuple[Any, ...]:
    """The facts that make two specs the same model for the simulator (names and counts aside)."""
    return (spec.layers, spec.hidden, spec.heads, spec.kv_heads, spec.head_dim, spec.vocab, spec.attention,
            spec.experts, spec.experts_per_token, spec.moe_ffn if spec.is_moe else spec.ffn,
            spec.kv_lora_rank, spec.shared_experts, spec.dense_layers, getattr(spec, "kv_layers", spec.layers))
