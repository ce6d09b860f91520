"""`aim-realtime worker` processes on Redis Cluster: the tests of `tests/integration/test_workers`
whose workers share nothing with this process but Redis (timers fired once across two workers
and a kill -9; provisioning retried by a worker once LiveKit is back), with the workers started
as an operator starts them on a Cluster: AIM_REDIS_URL and AIM_REDIS_CLUSTER=1."""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from realtime.store.redis_client import RedisClient
from tests.cluster import only_on_cluster
from tests.conftest import LIVEKIT_KEY, LIVEKIT_SECRET, TEST_SECRET
from tests.integration.test_workers import (  # the tests run here with this module's `workers`
    IDLE_S,
    LEASE_S,
    StartWorker,
    Worker,
    runner_log,  # noqa: F401 - a fixture of the imported test
    test_a_worker_process_retries_provisioning_once_livekit_is_back,  # noqa: F401
    test_two_workers_and_a_kill_9_fire_every_timer_once,  # noqa: F401
)

pytestmark = [pytest.mark.redis, pytest.mark.e2e, pytest.mark.slow, only_on_cluster]


@pytest.fixture
async def workers(
    redis_url: str, store: RedisClient, livekit: Any, tmp_path: Path
) -> AsyncIterator[StartWorker]:
    """`await workers(name)` starts a worker on the cluster (after `store` has flushed it) and
    the LiveKit stand-in; every worker is stopped when the test ends."""
    started: list[Worker] = []
    base = {k: v for k, v in os.environ.items() if not k.startswith(("AIM_", "OTEL_"))}

    async def start(name: str) -> Worker:
        environ = {
            **base,
            "AIM_REDIS_URL": redis_url,
            "AIM_REDIS_CLUSTER": "1",
            "AIM_LIVEKIT_URL": livekit.ws_url,
            "AIM_LIVEKIT_API_KEY": LIVEKIT_KEY,
            "AIM_LIVEKIT_API_SECRET": LIVEKIT_SECRET,
            "AIM_AUTH_HS256_SECRET": TEST_SECRET,
            "AIM_IDLE_TIMEOUT_S": str(IDLE_S),
            "AIM_WORKER_LEASE_S": str(LEASE_S),
            "AIM_DATA_DIR": str(tmp_path / f"data-{name}"),
            "PYTHONUNBUFFERED": "1",
        }
        log = tmp_path / f"worker-{name}.log"
        with log.open("wb") as out:
            process = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "realtime.cli",
                "worker",
                cwd=tmp_path,  # no stray .env is read
                env=environ,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=out,
                stderr=asyncio.subprocess.STDOUT,
            )
        worker = Worker(name, process, log)
        started.append(worker)
        return worker

    try:
        yield start
    finally:
        await asyncio.gather(*(worker.stop() for worker in started))
