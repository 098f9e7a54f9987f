"""The capacity stage on Ray actors: an actor killed mid-probe costs a retry, not the stage."""

from __future__ import annotations

import os
import signal

import pytest

from msopt.run.driver import Driver
from msopt.run.events import Running

from .test_pool import settings_for

pytestmark = pytest.mark.slow  # a Ray session and its actors


class KillOnFirstProbe:
    """A callback of the run: kills the actor (from outside) as soon as the first capacity probe is running."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.killed_during: int | None = None

    def on_event(self, event) -> None:
        if isinstance(event, Running) and event.phase == "capacity" and self.killed_during is None:
            self.killed_during = event.eval_id
            os.kill(self.pid, signal.SIGKILL)


def test_actor_killed_during_capacity_costs_a_retry(ray_session, tmp_path):
    """One actor, two configurations (issue 38): the probes go server key by server key, and the kill
    costs a retry, not the stage, nor the other configuration's probes."""
    from actors.pool import RayPool

    settings = settings_for(tmp_path, n=3, iters=1, k=2, emulate="true", secs=0.5)  # one candidate refused: 2 picks
    settings = settings.replace(capacity={"enabled": True, "max_probes": 3}, data_storage={"pso_top_k": 2})
    pool = RayPool(settings.config, simulate=True, max_concurrent=1)
    try:
        (info,) = pool.actor_infos()
        progress = KillOnFirstProbe(info["pid"])
        driver = Driver(settings.config, pool, callbacks=[progress])
        out = driver.run()
    finally:
        pool.close()
    probes = {r.eval_id: r for r in out.results if r.phase == "capacity"}
    assert progress.killed_during in probes
    assert probes[progress.killed_during].attempts == 2 and pool.replaced == 1
    assert all(r.attempts == 1 for i, r in probes.items() if i != progress.killed_during)
    assert len(out.capacity) == 2
    for c in out.capacity:
        assert 1 <= len(c["probes"]) <= 3 and c["sustainable_load"] > 0 and c["goodput"] > 0
    ordered = sorted(probes.values(), key=lambda r: r.started)
    keys = [r.server["key"] for r in ordered]
    assert len(set(keys)) == 2  # two server keys, one actor
    assert [k for i, k in enumerate(keys) if i == 0 or keys[i - 1] != k] == list(dict.fromkeys(keys))
    for key in set(keys):  # one start at most per key in the stage, the killed probe's retry included
        assert sum(r.server["start"] == "started" for r in ordered if r.server["key"] == key) <= 1
