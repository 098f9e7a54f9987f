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
    from actors.pool import RayPool

    settings = settings_for(tmp_path, n=1, iters=1, k=2, emulate="true", secs=0.5)
    settings = settings.replace(capacity={"enabled": True, "max_probes": 3})
    pool = RayPool(settings.config, simulate=True)
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
    (c,) = out.capacity
    assert 1 <= len(c["probes"]) <= 3 and c["sustainable_load"] > 0 and c["goodput"] > 0
