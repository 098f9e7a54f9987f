"""MindIE's start-up rules (the ``mindie`` adapter's ``startup_rules``).

They read the config.json msopt rendered into ``LaunchSpec.files`` (:func:`mindie_config`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from msopt.engines.rules import RenderedCandidate, Rule

# -- MindIE (MindIE-LLM master 8b4871a, 2026-04-23) -------------------------------------------
MINDIE_VERSION = "MindIE-LLM 8b4871a (master, 2026-04-23)"
_MAPPING = "examples/atb_models/atb_llm/utils/mapping.py"


def mindie_config(c: RenderedCandidate) -> Mapping[str, Any]:
    """The rendered config.json (the file of ``spec.files`` holding ``BackendConfig``), empty when none."""
    for doc in c.spec.files.values():
        if isinstance(doc, Mapping) and "BackendConfig" in doc:
            return doc
    return {}


def mindie_model(c: RenderedCandidate) -> Mapping[str, Any]:
    """``BackendConfig.ModelDeployConfig.ModelConfig[0]`` of the rendered config.json."""
    doc = mindie_config(c)
    try:
        model = doc["BackendConfig"]["ModelDeployConfig"]["ModelConfig"][0]
    except (KeyError, IndexError, TypeError):
        return {}
    return model if isinstance(model, Mapping) else {}


def _mindie_int(model: Mapping[str, Any], key: str, default: int | None) -> int | None:
    v = model.get(key, default)
    return int(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else default


def _mindie_nodes(c: RenderedCandidate) -> int:
    """Nodes of a multi-node launch (``server_count`` of the rank table msopt rendered), else 1."""
    for doc in c.spec.files.values():
        if isinstance(doc, Mapping) and "server_list" in doc:
            try:
                return max(1, int(doc.get("server_count", 1)))
            except (TypeError, ValueError):
                return 1
    return 1


def _mindie_parallel(c: RenderedCandidate) -> tuple[int | None, int, int, int]:
    m = mindie_model(c)
    world = _mindie_int(m, "worldSize", None)
    if world is not None:
        world *= _mindie_nodes(c)  # worldSize counts one node's devices; the rank table all of them
    tp = _mindie_int(m, "tp", world) or 1  # mapping.py: tp defaults to world_size
    return world, tp, _mindie_int(m, "dp", 1) or 1, _mindie_int(m, "pp", 1) or 1


def _mindie_cp(c: RenderedCandidate) -> int:
    """ModelConfig's ``cp`` (attention's context parallel, mapping.py:315-317), 1 when absent."""
    return _mindie_int(mindie_model(c), "cp", 1) or 1


def _mindie_dp_pp(c: RenderedCandidate) -> str | None:
    _, _, dp, pp = _mindie_parallel(c)
    if _mindie_cp(c) != 1 and dp != 1:  # mapping.py:354-358
        return ("The attention module cannot support context parallel and data parallel simultaneously. "
                "Please check `cp` and `dp`.")
    if pp != 1 and dp != 1:
        return ("The attention module cannot support data parallel and pipeline parallel simultaneously. "
                "Please check `dp` and `pp`.")
    return None


def _mindie_world(c: RenderedCandidate) -> str | None:
    world, tp, dp, pp = _mindie_parallel(c)
    cp = _mindie_cp(c)
    if world is None:
        return None
    if pp > 1 and tp * pp != world:
        return (f"World size must equal to attention's tp_size * pp_size. pp_size is {pp}. pp's tp_size is "
                f"{tp}. World size is {world}. Please check `tp`, `pp` and `world_size`.")
    # mapping.py:379-388 (Mapping.validate_pp): tp x cp x dp, cp from ModelConfig
    if pp == 1 and tp * cp * dp != world:
        return ("World size must equal to attention's dp_size * attention's cp_size * attention's tp_size. "
                f"Attention's tp_size is {tp}. Attention's dp_size is {dp}. Attention's cp_size is {cp}. "
                f"World size is {world}. Please check `dp`, `cp`, `tp` and `world_size`.")
    return None


def _mindie_master(c: RenderedCandidate) -> str | None:
    _, _, _, pp = _mindie_parallel(c)
    if pp > 1 and not c.environ.get("MASTER_IP"):
        return "Master ip cannot be None when pipeline parallel is used. Please export MASTER_IP."
    if pp > 1 and not c.environ.get("MASTER_PORT"):
        return ("MASTER_PORT or Network adapter cannot be None when pipeline parallel is used. "
                "Please export environment.")
    return None


def _mindie_device_ids(c: RenderedCandidate) -> str | None:
    backend = mindie_config(c).get("BackendConfig", {})
    ids = backend.get("npuDeviceIds") if isinstance(backend, Mapping) else None
    if not isinstance(ids, list):
        return None
    if backend.get("modelInstanceNumber") is not None and len(ids) != backend.get("modelInstanceNumber"):
        return "The size of npuDeviceIds does not equal to modelInstanceNumber"
    world = mindie_model(c).get("worldSize")
    if any(isinstance(s, list) and len(s) != world for s in ids):
        return "The size of npuDeviceIds (subset) does not equal to worldSize"
    return None


_CONFIG_MANAGER = "src/config_manager/config_manager_impl.cpp"


def _mindie_schedule(c: RenderedCandidate, key: str) -> int | None:
    """``BackendConfig.ScheduleConfig.<key>`` as an integer, None when absent or not a number."""
    backend = mindie_config(c).get("BackendConfig", {})
    schedule = backend.get("ScheduleConfig", {}) if isinstance(backend, Mapping) else {}
    return _mindie_int(schedule, key, None) if isinstance(schedule, Mapping) else None


def _mindie_models(c: RenderedCandidate) -> list[Mapping[str, Any]]:
    """Every element of ``ModelConfig`` (MindIE checks each, config_manager_impl.cpp:320)."""
    try:
        models = mindie_config(c)["BackendConfig"]["ModelDeployConfig"]["ModelConfig"]
    except (KeyError, TypeError):
        return []
    return [m for m in models if isinstance(m, Mapping)] if isinstance(models, list) else []


def _mindie_prefill_tokens(c: RenderedCandidate) -> str | None:
    # config_manager_impl.cpp:318-332 (8b4871a): maxPrefillTokens < ModelDeployConfig.maxInputTokenLen is
    # refused unless ScheduleConfig.templateType is "Mix".
    backend = mindie_config(c).get("BackendConfig", {})
    deploy = backend.get("ModelDeployConfig", {}) if isinstance(backend, Mapping) else {}
    schedule = backend.get("ScheduleConfig", {}) if isinstance(backend, Mapping) else {}
    tokens = _mindie_schedule(c, "maxPrefillTokens")
    longest = _mindie_int(deploy, "maxInputTokenLen", None) if isinstance(deploy, Mapping) else None
    template = schedule.get("templateType") if isinstance(schedule, Mapping) else None
    if tokens is None or longest is None or template in (None, "Mix") or not _mindie_models(c):
        return None
    if tokens < longest:
        return "The value of maxPrefillTokens should not be less than maxInputTokenLen."
    return None


def _mindie_iter_times(c: RenderedCandidate) -> str | None:
    # config_manager_impl.cpp:321-324 (8b4871a)
    if _mindie_schedule(c, "maxIterTimes") == 0 and _mindie_models(c):
        return "The value of ScheduleParam.maxIterTimes can not be 0."
    return None


def _mindie_preempt_cpu_mem(c: RenderedCandidate) -> str | None:
    # config_manager_impl.cpp:325-328 (8b4871a): swapping preempted sequences out needs host memory
    preempt = _mindie_schedule(c, "maxPreemptCount")
    if preempt is None or preempt == 0:
        return None
    if any(_mindie_int(m, "cpuMemSize", None) == 0 for m in _mindie_models(c)):
        return "The value of modelParam.cpuMemSize can not be 0 when maxPreemptCount is not 0."
    return None


def _not_above_batch(c: RenderedCandidate, key: str, batch_name: str) -> str | None:
    """MindIE's refusal of a ``scheduleParam`` ``key`` above maxBatchSize (``batch_name``: how its message spells
    maxBatchSize)."""
    value, batch = _mindie_schedule(c, key), _mindie_schedule(c, "maxBatchSize")
    if value is not None and batch is not None and value > batch:
        return (f"The {key} cannot be set greater than {batch_name}, please set '{key}' to be not greater than "
                f"'{batch_name}' in config.json.")
    return None


def _mindie_preempt_batch(c: RenderedCandidate) -> str | None:
    # src/config_manager/schedule_config.cpp:276-281 (8b4871a)
    return _not_above_batch(c, "maxPreemptCount", "maxBatchsize")


_SCHEDULE = "src/config_manager/schedule_config.cpp"
#: ``ScheduleConfig`` key -> (min, max) as ScheduleConfigManager::CheckParam checks it
#: (schedule_config.cpp:265-302, 8b4871a); a str bound is the key whose value is the bound.
#: MAX_INPUT_LEN = 4M (schedule_config.cpp:23).
SCHEDULE_RANGES: Mapping[str, tuple[int | str, int | str]] = {
    "cacheBlockSize": (1, 128),
    "decodeTimeMsPerReq": (0, 1000),
    "maxBatchSize": (1, 819200),
    "maxPrefillTokens": (1, 4 * 1024 * 1024),
    "maxPrefillBatchSize": (1, "maxBatchSize"),
    "maxQueueDelayMicroseconds": (500, 1000000),
    "maxFirstTokenWaitTime": (0, 3600000),
    "prefillTimeMsPerReq": (0, 1000),
    "maxNumPartialPrefills": (1, 64),
    "maxLongPartialPrefills": (1, "maxNumPartialPrefills"),
    "longPrefillTokenThreshold": (1, 8192),
    # CheckSLOParam (schedule_config.cpp:227-251), only where the key is in the file
    "stageSelectPolicy": (0, 2),
    "prefillExpectedTime": (1, 10000),
    "decodeExpectedTime": (1, 10000),
    # CheckBeamSearchParam (schedule_config.cpp:253-263)
    "maxN": (1, 8192),
}
#: Policy keys and the values ParamChecker accepts (src/config_manager/param_checker.cpp:363-379).
SCHEDULE_POLICIES: Mapping[str, tuple[tuple[int, ...], str]] = {
    "decodePolicyType": ((0, 1, 2, 3), "is outside the expected schedule policy range: 0, 1, 2, 3"),
    "prefillPolicyType": ((0, 1, 2, 3), "is outside the expected schedule policy range: 0, 1, 2, 3"),
    "policyType": ((0, 4, 5, 6, 7), "is outside the expected range: 0 or 4~7."),
}


def _mindie_schedule_ranges(c: RenderedCandidate) -> str | None:
    # ParamChecker::CheckMaxMinValue's messages (src/include/config/param_checker.h:79-90, 8b4871a)
    for key, (lo, hi) in SCHEDULE_RANGES.items():
        value = _mindie_schedule(c, key)
        if key == "maxPrefillBatchSize" and value == 0:
            # schedule_config.cpp:80-82: 0 (the manual: "可以设置为0") is read as maxBatchSize
            value = _mindie_schedule(c, "maxBatchSize")
        low = _mindie_schedule(c, lo) if isinstance(lo, str) else lo
        high = _mindie_schedule(c, hi) if isinstance(hi, str) else hi
        if value is None:
            continue
        if high is not None and value > high:
            return f"scheduleParam.{key} [{value}] is out of bound [{high}]"
        if low is not None and value < low:
            return f"scheduleParam.{key} [{value}] is less than [{low}]"
    for key, (allowed, text) in SCHEDULE_POLICIES.items():
        value = _mindie_schedule(c, key)
        if value is not None and value not in allowed:
            return f"scheduleParam.{key} [{value}] {text}"
    return None


def _mindie_max_n(c: RenderedCandidate) -> str | None:
    # schedule_config.cpp:256-261 (CheckBeamSearchParam, 8b4871a)
    return _not_above_batch(c, "maxN", "maxBatchSize")


def _mindie_torch_master_port(c: RenderedCandidate) -> str | None:
    # mindie_llm/runtime/utils/distributed/__init__.py:59-61 (init_distributed, 8b4871a): the torch backend
    # starts torch.distributed over tcp://MASTER_IP:MASTER_PORT even on one node; MASTER_IP defaults to
    # 127.0.0.1 (mindie_llm/runtime/utils/helpers/env.py:37), MASTER_PORT to nothing (:38).
    if any(str(m.get("backendType", "")).lower() == "torch" for m in _mindie_models(c)) \
            and not c.environ.get("MASTER_PORT"):
        return "Master port is not set, use export MASTER_PORT=xxxx to solve"
    return None


#: MindIE's start-up rules.
RULES: tuple[Rule, ...] = (
    Rule("mindie.dp_and_pp", "mindie", _mindie_dp_pp, f"{_MAPPING}:354-364 (Mapping.validate)", MINDIE_VERSION),
    Rule("mindie.world_size", "mindie", _mindie_world, f"{_MAPPING}:369-388 (Mapping.validate_pp)", MINDIE_VERSION),
    Rule("mindie.pp_master_address", "mindie", _mindie_master, f"{_MAPPING} (Mapping.update_pp)",
         MINDIE_VERSION),
    Rule("mindie.npu_device_ids", "mindie", _mindie_device_ids,
         "src/config_manager/backend_config.cpp (BackendConfigManager::InitFromJson)", MINDIE_VERSION),
    Rule("mindie.max_prefill_tokens_vs_max_input_token_len", "mindie", _mindie_prefill_tokens,
         f"{_CONFIG_MANAGER}:329-332 (ConfigManager::Impl::CheckAllParam)", MINDIE_VERSION),
    Rule("mindie.max_iter_times_nonzero", "mindie", _mindie_iter_times,
         f"{_CONFIG_MANAGER}:321-324 (ConfigManager::Impl::CheckAllParam)", MINDIE_VERSION),
    Rule("mindie.preempt_needs_cpu_mem", "mindie", _mindie_preempt_cpu_mem,
         f"{_CONFIG_MANAGER}:325-328 (ConfigManager::Impl::CheckAllParam)", MINDIE_VERSION),
    Rule("mindie.max_preempt_count_vs_max_batch_size", "mindie", _mindie_preempt_batch,
         "src/config_manager/schedule_config.cpp:276-281 (ScheduleConfigManager::CheckParam)", MINDIE_VERSION),
    Rule("mindie.schedule_value_ranges", "mindie", _mindie_schedule_ranges,
         f"{_SCHEDULE}:227-302 (CheckParam, CheckSLOParam; maxPrefillBatchSize <= maxBatchSize at 284-286, 0 read as "
         "maxBatchSize at 80-82), "
         "src/config_manager/param_checker.cpp:363-379", MINDIE_VERSION),
    Rule("mindie.max_n_vs_max_batch_size", "mindie", _mindie_max_n,
         f"{_SCHEDULE}:253-263 (ScheduleConfigManager::CheckBeamSearchParam)", MINDIE_VERSION),
    Rule("mindie.torch_backend_master_port", "mindie", _mindie_torch_master_port,
         "mindie_llm/runtime/utils/distributed/__init__.py:59-61 (init_distributed)", MINDIE_VERSION),


)
