"""Issue 48: after every benchmark the real path asks the server's log and process whether the engine died; a death
is an EngineCrashError with its cause and the request in flight, never metrics (msopt/evaluate/real.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from msopt.engines import get_engine
from msopt.errors import EngineCrashError
from msopt.evaluate.real import RealRunner, failed_prompt_tokens
from tests.engines.test_crash import BETWEEN_STEPS, MID_STEP


class _Proc:
    def __init__(self, code: int | None) -> None:
        self.code = code

    def poll(self) -> int | None:
        return self.code


class _Runner:
    """What RealRunner._raise_crash reads of its runner: the engine adapter."""

    def __init__(self, engine: str) -> None:
        self.engine = get_engine(engine)


def _requests(result_dir: Path, rows: list[dict]) -> Path:
    result_dir.mkdir(parents=True, exist_ok=True)
    (result_dir / "requests.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return result_dir


ROWS = [{"index": 0, "start": 0.5, "success": True, "input_tokens": 90},
        {"index": 1, "start": 0.9, "success": False, "input_tokens": 37, "error": "HTTP 500"},
        {"index": 2, "start": 0.7, "success": False, "input_tokens": 12, "error": "HTTP 500"}]


def _raise(engine: str, log_text: str, code: int | None, tmp: Path, rows: list[dict] | None = None) -> None:
    log = tmp / "server.log"
    log.write_text(log_text)
    result = _requests(tmp / "result", rows) if rows is not None else tmp / "result"
    RealRunner._raise_crash(_Runner(engine), _Proc(code), log, result)  # type: ignore[arg-type]


def test_the_engines_dump_names_the_request_first(tmp_path: Path) -> None:
    with pytest.raises(EngineCrashError) as got:
        _raise("vllm", MID_STEP, None, tmp_path, ROWS)
    assert str(got.value) == f"vLLM's worker died serving a 4-token prompt (log {tmp_path / 'server.log'})"
    assert got.value.crash["prompt_tokens"] == 4 and got.value.crash["source"] == "the server log"


def test_without_a_dump_the_first_request_that_failed_is_named(tmp_path: Path) -> None:
    with pytest.raises(EngineCrashError) as got:
        _raise("vllm", BETWEEN_STEPS, 1, tmp_path, ROWS)
    assert got.value.crash["prompt_tokens"] == 12 and got.value.crash["source"] == "the benchmark"
    assert str(got.value).startswith("vLLM's worker died serving a 12-token prompt (log ")


@pytest.mark.parametrize("engine", ["vllm", "sglang", "mindie"])
def test_a_server_that_exited_nonzero_mid_benchmark_is_a_crash_of_every_engine(engine: str, tmp_path: Path) -> None:
    with pytest.raises(EngineCrashError) as got:
        _raise(engine, "INFO serving\n", 139, tmp_path, ROWS)
    assert "server exited with code 139 serving a 12-token prompt (log " in str(got.value)


@pytest.mark.parametrize("code", [None, 0])
def test_a_server_that_lives_and_logs_no_death_is_no_crash(code: int | None, tmp_path: Path) -> None:
    _raise("vllm", "INFO: 200 OK\n", code, tmp_path, ROWS)  # returns: the measurement stands


def test_failed_prompt_tokens_reads_none_where_nothing_is_recorded(tmp_path: Path) -> None:
    assert failed_prompt_tokens(tmp_path) is None
    assert failed_prompt_tokens(_requests(tmp_path / "r", [{"start": 0, "success": False}])) is None
