"""One deadline per Redis round trip (`translated_errors`), with redis-py's own socket timeout
off: a Redis that stops answering (SIGSTOP) fails the call with -31012 at the deadline, the
connection whose reply was cut short is not reused, and once Redis answers again so do calls."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from realtime.errors import Unavailable
from realtime.store import redis_client
from realtime.store.redis_client import RedisClient
from realtime.store.server import PrivateRedis, redis_server_available

pytestmark = pytest.mark.redis

DEADLINE_S = 0.5


@pytest.fixture
async def stoppable(tmp_path: Path, monkeypatch) -> AsyncIterator[tuple[PrivateRedis, RedisClient]]:
    if not redis_server_available():
        pytest.skip("stops a redis-server of its own")
    monkeypatch.setattr(redis_client, "SOCKET_TIMEOUT_S", DEADLINE_S)
    server = PrivateRedis(tmp_path / "redis", appendonly=False)
    store = RedisClient.from_url(server.url)
    try:
        yield server, store
    finally:
        os.kill(server.process.pid, signal.SIGCONT)
        await store.aclose()
        server.stop()


async def test_a_redis_that_stops_answering_fails_at_the_deadline_and_recovers(stoppable):
    server, store = stoppable
    client = store.client
    await client.set("a", "first")
    await client.set("b", "second")

    os.kill(server.process.pid, signal.SIGSTOP)
    started = time.monotonic()
    with pytest.raises(Unavailable):
        async with redis_client.translated_errors():
            await client.get("a")
    waited = time.monotonic() - started
    assert DEADLINE_S * 0.9 <= waited < DEADLINE_S + 2
    assert await store.probe() is not None  # the readiness probe has the same deadline

    os.kill(server.process.pid, signal.SIGCONT)
    # Redis now answers the GET of "a" too, on the connection that gave up on it: had that
    # connection gone back to the pool, this read would get "first"
    for _ in range(3):
        async with redis_client.translated_errors():
            assert await client.get("b") == b"second"
    assert await store.probe() is None


async def test_a_blocking_read_has_its_block_time_on_top_of_the_deadline(stoppable):
    _, store = stoppable
    started = time.monotonic()
    async with redis_client.translated_errors(extra_s=1.0):
        # blocks 1 s on an empty stream: longer than the deadline alone, within it with the block
        assert (
            await store.client.xread({"nothing": "0-0"}, block=int(DEADLINE_S * 1000) + 300) == []
        )
    assert time.monotonic() - started >= DEADLINE_S
