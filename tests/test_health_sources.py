"""The packaged health patterns: each one sourced, each sample classified as filed."""

from __future__ import annotations

import pytest

from msopt.config import DEFAULTS_PATH, read_toml
from msopt.evaluate.health import BENIGN_LINES, PATTERN_SOURCES, HealthCheck


def packaged() -> set[tuple[str, str, str, str]]:
    table = read_toml(DEFAULTS_PATH, "packaged defaults")["health_check"]
    return {(kind, sev, etype, p) for kind in ("service", "benchmark")
            for sev, types in table.get(kind, {}).items() for etype, pats in types.items() for p in pats}


def test_every_packaged_pattern_has_a_source_and_every_source_is_packaged() -> None:
    sourced = {(s.kind, s.severity, s.error_type, s.pattern) for s in PATTERN_SOURCES}
    assert packaged() == sourced
    assert all(s.origin.strip() and s.sample.strip() for s in PATTERN_SOURCES)


@pytest.mark.parametrize("src", PATTERN_SOURCES, ids=lambda s: f"{s.kind}-{s.error_type}-{s.pattern[:20]}")
def test_each_sample_is_classified_as_filed(src) -> None:
    verdict = HealthCheck.default().check(["INFO starting", src.sample, "INFO shutting down"], src.kind)
    assert (verdict.kind, verdict.error_type) == (src.severity, src.error_type)


@pytest.mark.parametrize(("origin", "line"), BENIGN_LINES)
def test_benign_lines_match_nothing(origin: str, line: str) -> None:
    assert HealthCheck.default().check([line], "service").ok, origin
