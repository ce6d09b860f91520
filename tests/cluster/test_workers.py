"""`aim-realtime worker` processes on Redis Cluster: the journeys of `tests/worker_processes.py`
whose workers share nothing with this process but Redis (timers fired once across two workers
and a kill -9; provisioning retried by a worker once LiveKit is back), run also on a single Redis
by `tests/integration/test_workers.py`, with the workers started as an operator starts them on a
Cluster: AIM_REDIS_URL and AIM_REDIS_CLUSTER=1 (the `workers` fixture does so on the Cluster
pass)."""

from __future__ import annotations

import pytest

from tests.cluster import only_on_cluster
from tests.worker_processes import (
    a_worker_process_retries_provisioning_once_livekit_is_back,
    two_workers_and_a_kill_9_fire_every_timer_once,
)

pytestmark = [pytest.mark.redis, pytest.mark.e2e, pytest.mark.slow, only_on_cluster]


async def test_two_workers_and_a_kill_9_fire_every_timer_once(store, livekit, workers):
    await two_workers_and_a_kill_9_fire_every_timer_once(store, livekit, workers)


async def test_a_worker_process_retries_provisioning_once_livekit_is_back(
    store, livekit, workers, runner_log
):
    await a_worker_process_retries_provisioning_once_livekit_is_back(
        store, livekit, workers, runner_log
    )
