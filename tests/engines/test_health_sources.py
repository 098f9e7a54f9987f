"""The packaged health patterns: each one sourced, each sample classified as filed."""

from __future__ import annotations

import pytest

from msopt.config import DEFAULTS_PATH, read_toml
from msopt.evaluate.health import HealthCheck, benign_lines, pattern_sources


def packaged() -> set[tuple[str, str, str, str]]:
    table = read_toml(DEFAULTS_PATH, "packaged defaults")["health_check"]
    return {(kind, sev, etype, p) for kind in ("service", "benchmark")
            for sev, types in table.get(kind, {}).items() for etype, pats in types.items() for p in pats}


def test_every_packaged_pattern_has_a_source_and_every_source_is_packaged() -> None:
    sourced = {(s.kind, s.severity, s.error_type, s.pattern) for s in pattern_sources()}
    assert packaged() == sourced
    assert all(s.origin.strip() and s.sample.strip() for s in pattern_sources())


@pytest.mark.parametrize("src", pattern_sources(), ids=lambda s: f"{s.kind}-{s.error_type}-{s.pattern[:20]}")
def test_each_sample_is_classified_as_filed(src) -> None:
    verdict = HealthCheck.default().check(["INFO starting", src.sample, "INFO shutting down"], src.kind)
    assert (verdict.kind, verdict.error_type) == (src.severity, src.error_type)


@pytest.mark.parametrize(("origin", "line"), benign_lines())
def test_benign_lines_match_nothing(origin: str, line: str) -> None:
    assert HealthCheck.default().check([line], "service").ok, origin


def test_vllm_ascend_free_memory_message_as_its_source_builds_it() -> None:
    # vllm-ascend 0.23.0.post1 vllm_ascend/worker/worker.py:470-479, the f-string with its values filled in
    free, total, util, requested = 12.5, 61.0, 0.9, 54.9
    line = (f"ValueError: Free memory on device "
            f"({free}/"
            f"{total} GiB) on startup "
            f"is less than desired GPU memory utilization "
            f"({util}, "
            f"{requested} GiB). Decrease GPU memory "
            f"utilization or reduce GPU memory used by other processes.")
    verdict = HealthCheck.default().check(["(Worker pid=1) INFO loading", line], "service")
    assert (verdict.kind, verdict.error_type) == ("retryable", "device_busy")


def test_an_hccl_port_clash_between_two_trials_is_retryable() -> None:
    # the log of vllm-project/vllm-ascend issue #405 (a second tp=4 server on the node)
    log = ["[rank0]: RuntimeError: createHCCLComm:build/CMakeFiles/torch_npu.dir/compiler_depend.ts:1479 HCCL "
           "function error: HcclGetRootInfo(&hcclID), error code is 11",
           "[rank0]: [ERROR] 2025-03-26-17:01:03 (PID:159, Device:0, RankID:-1) ERR02200 DIST call hccl api failed.",
           "[rank0]: EJ0003: [PID: 159] 2025-03-26-17:01:02.816.428 Failed to bind the IP port. Reason: The IP "
           "address and port have been bound already.",
           "[rank0]:         host nic listen start failed, port[60000], return[11][FUNC:StartListenSocket]"
           "[FILE:network_manager.cc][LINE:1163]"]
    verdict = HealthCheck.default().check(log, "service")
    assert (verdict.kind, verdict.error_type) == ("retryable", "hccl")
    assert "EJ0003" in (verdict.line or "")
    # vllm-ascend pyhccl_wrapper.py:216 raises RuntimeError(f"HCCL error: {error_str}")
    error_str = "remote rank error"
    assert HealthCheck.default().check([f"RuntimeError: HCCL error: {error_str}"], "service").error_type == "hccl"
