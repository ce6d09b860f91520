"""Agent rotation across a kill -9 on a single Redis: the journeys of tests/rotation_processes.py
(an `aim-realtime worker`, or the whole `aim-realtime serve`, killed while a rotation is under
way; another process finishes it with one successor and nothing lost)."""

from __future__ import annotations

import pytest

from tests.rotation_processes import (
    a_worker_killed_mid_rotation_leaves_one_successor,
    the_service_killed_mid_rotation_carries_it_on_after_a_restart,
)
from tests.worker_processes import need_redis

pytestmark = [pytest.mark.redis, pytest.mark.e2e, pytest.mark.slow]


async def test_a_worker_killed_mid_rotation_leaves_one_successor(store, livekit, workers):
    await a_worker_killed_mid_rotation_leaves_one_successor(store, livekit, workers)


async def test_the_service_killed_mid_rotation_carries_it_on_after_a_restart(
    store, livekit, redis_url, tmp_path
):
    await the_service_killed_mid_rotation_carries_it_on_after_a_restart(
        store, livekit, need_redis(redis_url), tmp_path
    )
