"""A local Ray that fails to start is one line naming the way out, not Ray's traceback."""

from __future__ import annotations

from pathlib import Path

import pytest

import actors.pool as pool_mod
from actors.pool import ClusterError, init_ray
from msopt.config import load_settings

ROOT = Path(__file__).resolve().parents[2]


def test_local_ray_start_timeout_is_one_cluster_error(monkeypatch: pytest.MonkeyPatch) -> None:
    shut: list[bool] = []

    def timed_out(*args: object, **kwargs: object) -> None:
        raise Exception("The current node timed out during startup.")  # what ray/_private/node.py raises

    monkeypatch.setattr(pool_mod.ray, "is_initialized", lambda: False)
    monkeypatch.setattr(pool_mod.ray, "init", timed_out)
    monkeypatch.setattr(pool_mod.ray, "shutdown", lambda: shut.append(True))
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    settings = load_settings(str(ROOT / "configs" / "quickstart.toml"), environ={})
    with pytest.raises(ClusterError, match=r"Ray did not start on this machine: The current node timed out.*--no-ray"):
        init_ray(settings.config, None, simulate=True, slots=1)
    assert shut == [True]
