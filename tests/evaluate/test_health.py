"""Health checks over service and benchmark logs."""

from __future__ import annotations

from pathlib import Path

import pytest

from msopt.errors import ConfigError
from msopt.evaluate.health import HealthCheck, Verdict


def test_defaults_classify_common_failures() -> None:
    hc = HealthCheck.default()
    assert hc.log_snippet_length == 200
    assert hc.check(["INFO start", "torch.OutOfMemoryError: CUDA OUT OF MEMORY"]).kind == "fatal"
    v = hc.check(["ERROR: [Errno 98] Address already in use"])
    assert (v.kind, v.error_type) == ("retryable", "port")
    assert hc.check(["all good"]) == Verdict("ok") and hc.check([]).ok
    assert hc.check(["aiohttp ServerDisconnectedError"], "benchmark").kind == "retryable"
    with pytest.raises(ValueError):
        hc.check([], "nope")


def test_mindie_busy_port_is_a_port_clash_not_a_bad_configuration() -> None:
    # MindIE-LLM 8b4871a http_server.cpp:232-237 then 400-405: the bind check logs strerror, then this line
    hc = HealthCheck.default()
    v = hc.check(["Socket bind failed, bind_result is -1. Address already in use",
                  "Management or Business or Metrics Http server listen port is occupied",
                  "Failed to init endpoint! Please check the service log or console output."])
    assert (v.kind, v.error_type) == ("retryable", "port")


def test_fatal_wins_and_latest_line_is_reported() -> None:
    hc = HealthCheck.from_mapping({"service": {"fatal": {"oom": ["oom!"]},
                                               "retryable": {"port": ["in use"]}}})
    v = hc.check(["port in use", "oom! first", "oom! second", "port in use"])
    assert v == Verdict("fatal", "oom", "oom! second", "oom!")


def test_snippet_length_limits_the_search(tmp_path: Path) -> None:
    hc = HealthCheck.from_mapping({"log_snippet_length": 2, "service": {"fatal": {"x": ["boom"]}}})
    assert hc.check(["boom", "a", "b"]).ok and not hc.check(["a", "boom", "b"]).ok
    log = tmp_path / "l.log"
    log.write_text("boom\n" + "x\n" * 5)
    assert hc.check_file(log).ok
    log.write_text("x\n" * 5 + "BOOM\n")
    assert hc.check_file(log).kind == "fatal"


def test_from_settings_merges_and_disables(write_toml) -> None:
    from msopt.config import load_settings

    path = write_toml("""
[health_check]
log_snippet_length = 50
[health_check.service.fatal]
oom = []
hccl = ["HCCL error"]
""")
    hc = HealthCheck.from_config(load_settings(path).config.health_check, "vllm")
    assert hc.log_snippet_length == 50
    assert hc.check(["out of memory"]).ok
    assert hc.check(["an HCCL Error here"]).error_type == "hccl"
    assert hc.check(["OSError: [Errno 98] Address already in use"]).kind == "retryable"


@pytest.mark.parametrize(("table", "match"), [
    ({"log_snipet_length": 3}, "health_check.log_snipet_length.*did you mean 'log_snippet_length'"),
    ({"log_snippet_length": 0}, "log_snippet_length"),
    ({"service": {"fatl": {}}}, "health_check.service.fatl.*did you mean 'fatal'"),
    ({"service": {"fatal": {"oom": "out of memory"}}}, "health_check.service.fatal.oom.*list"),
    ({"benchmark": {"retryable": {"c": [""]}}}, "health_check.benchmark.retryable.c"),
    ({"service": []}, "health_check.service"),
])
def test_invalid_tables_name_the_key(table: dict, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        HealthCheck.from_mapping(table)


def test_invalid_table_from_settings_names_the_file(write_toml) -> None:
    from msopt.config import load_settings

    path = write_toml("[health_check.service.fatal]\noom = 3\n")
    with pytest.raises(ConfigError, match=f"{path}.*oom"):
        HealthCheck.from_config(load_settings(path).config.health_check, "vllm")
