"""MindIE's knobs read from the config.json a launch renders (``BackendConfig``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import Any

from msopt.errors import SimulationError
from msopt.sim.knobs import EngineKnobs, as_bool, as_float, as_int

__all__ = ["knobs_mindie"]

_MINDIE_SCHEDULE = MappingProxyType({
    "maxBatchSize": ("max_num_seqs", as_int),
    "maxPrefillBatchSize": ("max_prefill_seqs", as_int),
    "maxPrefillTokens": ("max_num_batched_tokens", as_int),
    "supportSelectBatch": ("select_batch", as_bool),
    "prefillTimeMsPerReq": ("prefill_time_ms_per_req", as_float),
    "decodeTimeMsPerReq": ("decode_time_ms_per_req", as_float),
    "maxQueueDelayMicroseconds": ("max_queue_delay_s", as_float),
    "maxPreemptCount": ("max_preempt_count", as_int),
    "cacheBlockSize": ("block_size", as_int),
})


def _find_mindie_config(files: Mapping[str, Any]) -> Mapping[str, Any]:
    for content in files.values():
        if isinstance(content, Mapping) and "BackendConfig" in content:
            return content
    raise SimulationError(
        f"mindie launch has no config with a 'BackendConfig' among its files {sorted(files)}; "
        "the adapter must render MindIE's config.json into LaunchSpec.files"
    )


def knobs_mindie(files: Mapping[str, Any]) -> EngineKnobs:
    """MindIE's knobs from the config.json among a launch's files."""
    cfg = _find_mindie_config(files)
    backend = cfg["BackendConfig"]
    kw: dict[str, Any] = {
        "engine": "mindie", "chunked_prefill": False, "mixed_batch": False,
        "max_preempt_count": 0,
    }
    ignored: list[str] = []
    schedule = backend.get("ScheduleConfig", {}) or {}
    for key, value in schedule.items():
        if key in _MINDIE_SCHEDULE:
            name, cast = _MINDIE_SCHEDULE[key]
            kw[name] = cast(f"BackendConfig.ScheduleConfig.{key}", value)
        elif key == "maxIterTimes":
            pass  # output cap: the workload's output_len decides lengths here
        elif key == "enablePrefixCache":
            pass  # read below, with ModelConfig's plugin_params
        else:
            ignored.append(f"BackendConfig.ScheduleConfig.{key}")
    if "max_queue_delay_s" in kw:
        kw["max_queue_delay_s"] = kw["max_queue_delay_s"] * 1e-6
    deploy = backend.get("ModelDeployConfig", {}) or {}
    models = deploy.get("ModelConfig") or [{}]
    model0 = models[0] if isinstance(models, Sequence) and models else {}
    for key, name in (("tp", "tp"), ("dp", "dp"), ("pp", "pp"), ("moe_ep", "ep"), ("moe_tp", "moe_tp")):
        if key in model0:
            kw[name] = as_int(f"BackendConfig.ModelDeployConfig.ModelConfig[0].{key}", model0[key])
    if kw.get("dp", 1) > 1:
        kw["dp_attention"] = True  # MindIE's dp ranks live in one instance and share its MoE layers
    if backend.get("multiNodesInferEnabled") is True:
        world = kw.get("tp", 1) * kw.get("dp", 1) * kw.get("pp", 1)
        ids = backend.get("npuDeviceIds") or [[]]
        local = len(ids[0]) if isinstance(ids, Sequence) and ids and isinstance(ids[0], Sequence) else 0
        if local:
            kw["nnodes"] = max(1, -(-world // local))
    # Prefix Cache: ScheduleConfig.enablePrefixCache true with ModelConfig plugin_params naming
    # prefix_cache (MindIE 1.0.0, mindie_llm0302.html: "若enablePrefixCache开启,则此处必须开启为prefix_cache")
    plugins = str(model0.get("plugin_params", "") if isinstance(model0, Mapping) else "")
    if "enablePrefixCache" in schedule:
        enabled = as_bool("BackendConfig.ScheduleConfig.enablePrefixCache", schedule["enablePrefixCache"])
        kw["prefix_caching"] = enabled and "prefix_cache" in plugins
    if "maxSeqLen" in deploy:
        kw["max_model_len"] = as_int("BackendConfig.ModelDeployConfig.maxSeqLen", deploy["maxSeqLen"])
    # MindIE reads npuMemSize from ModelConfig (model_deploy_config.cpp, g_modelParamsConstraint);
    # -1 lets it size the KV cache itself, a positive value is GiB per device.
    npu_mem = model0.get("npuMemSize", -1) if isinstance(model0, Mapping) else -1
    if isinstance(npu_mem, (int, float)) and not isinstance(npu_mem, bool) and npu_mem > 0:
        kw["kv_cache_gib"] = float(npu_mem)
    return EngineKnobs(ignored=tuple(ignored), **kw)
