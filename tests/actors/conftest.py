"""One local Ray session for every Ray test, declaring NPU resources."""

from __future__ import annotations

import logging

import pytest


@pytest.fixture(scope="session")
def ray_session():
    import ray

    from actors.pool import quiet_ray_logs

    quiet_ray_logs()
    ray.init(address="local", num_cpus=2, resources={"NPU": 8}, include_dashboard=False,
             logging_level=logging.ERROR, log_to_driver=False)
    yield ray
    ray.shutdown()
