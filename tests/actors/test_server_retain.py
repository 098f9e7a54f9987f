"""Issue 26 with Ray: the RayPool stops a kept server once nothing pending needs it (the in-process
pool's tests are in tests/run/test_server_reuse.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.run.test_server_reuse import run_stops_kept_servers


@pytest.mark.slow  # a whole run through sim-serve on Ray actors
def test_a_ray_run_stops_every_kept_server_once_nothing_needs_it(ray_session, tmp_path: Path) -> None:
    run_stops_kept_servers(tmp_path, ray=True)
