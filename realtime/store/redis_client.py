"""The one module that imports redis (redis-py asyncio, or fakeredis as the embedded store).

`RedisClient` is built in one place for every kind of Redis (a URL, Redis Cluster, the embedded
store) and carries the Lua scripts, registered on it once. The stores (`tasks`, `sessions`,
`events`, `leases`) are built from it in the composition root; each reaches Redis only through
the client and scripts it was given. Connection failures become -31012 here.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Sequence
from typing import Any, Final

import redis.asyncio as aioredis
import redis.exceptions
from redis.asyncio.cluster import RedisCluster
from redis.crc import key_slot
from redis.maint_notifications import MaintNotificationsConfig

from realtime.errors import Unavailable
from realtime.store.scripts import SOURCES, Scripts

log = logging.getLogger(__name__)

DEFAULT_POOL_SIZE: Final = 64
POOL_TIMEOUT_S: Final = 5  # how long a request waits for a pooled connection
# how long one round trip (a command, a pipeline, a script) may take before Redis counts as
# lost: one deadline per round trip, set by `translated_errors` (redis-py's own socket timeout
# is off: it wraps every command's write in a task of its own and every reply's read in a
# timer); a blocking XREAD adds its block time to it
SOCKET_TIMEOUT_S: Final = 5.0

CONNECTION_ERRORS: Final = (
    redis.exceptions.ConnectionError,
    redis.exceptions.TimeoutError,
    redis.exceptions.ClusterDownError,
    redis.exceptions.ReadOnlyError,  # a failover left us on a replica
    redis.exceptions.BusyLoadingError,
    redis.exceptions.TryAgainError,
    OSError,
)


# what Redis answers a command it refuses (a malformed stream id, a wrong type): raised to the
# caller as a value it can translate, never as a bug
REFUSED_ERRORS: Final = (redis.exceptions.ResponseError,)


def redis_unavailable() -> Unavailable:
    return Unavailable(
        "The state store (Redis) is unreachable; nothing was changed. Retry the request.",
        service="redis",
    )


class OutageLog:
    """What the log says while Redis cannot be reached: the first failure with the target and
    the reason, then one line per `every_s` at most (with the count), and one when it answers
    again. Every store's calls feed it, so a worker's loops and the requests of an unreachable
    Redis make a few lines a minute, not several a second."""

    def __init__(self, every_s: float = 30.0) -> None:
        self.every_s = every_s
        self.target = "redis"  # what open_store opened, without credentials
        self.down = False
        self._failures = 0
        self._said_at = 0.0

    def failed(self, exc: BaseException) -> None:
        now = time.monotonic()
        self._failures += 1
        if not self.down:
            self.down, self._said_at, self._failures = True, now, 0
            log.warning("redis unavailable: %s: %s", self.target, describe_failure(exc))
        elif now - self._said_at >= self.every_s:
            log.warning(
                "redis still unavailable: %s: %d failed calls in the last %.0f s (%s)",
                self.target,
                self._failures,
                now - self._said_at,
                describe_failure(exc),
            )
            self._said_at, self._failures = now, 0

    def answered(self) -> None:
        if self.down:
            self.down = False
            log.warning("redis reachable again: %s", self.target)


OUTAGES: Final = OutageLog()


def describe_failure(exc: BaseException) -> str:
    """A connection failure in one line: its class and redis-py's message (which names the
    host and port, never a password)."""
    message = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {message}" if message else type(exc).__name__


@contextlib.asynccontextmanager
async def translated_errors(extra_s: float = 0.0) -> AsyncIterator[None]:
    """One round trip to Redis, bounded by `SOCKET_TIMEOUT_S` (+ `extra_s`, a blocking read's
    block time): connection failures and a Redis that does not answer in time become -31012
    (retryable, nothing stored), reported by `OUTAGES`. A reply cut short by the deadline
    closes its connection (redis-py disconnects a connection whose read was cancelled), so a
    late reply is never read as the next command's."""
    try:
        async with asyncio.timeout(SOCKET_TIMEOUT_S + extra_s):
            yield
    except CONNECTION_ERRORS as exc:  # TimeoutError is an OSError
        OUTAGES.failed(exc)
        raise redis_unavailable() from exc
    if OUTAGES.down:
        OUTAGES.answered()


class RedisClient:
    """One Redis client (a pool, or a cluster client) with the scripts registered on it."""

    def __init__(self, client: Any, *, embedded: bool = False) -> None:
        self.client = client
        self.embedded = embedded
        self.target = "redis"  # what it is, without credentials (`selection.open_store`)
        self.cluster = isinstance(client, RedisCluster)
        self.scripts = Scripts.register(client)

    @property
    def can_block(self) -> bool:
        """Whether one blocking XREAD may cover many streams: not on Cluster (one slot per
        call) and not on the embedded store (it would only poll inside)."""
        return not (self.cluster or self.embedded)

    @classmethod
    def from_url(
        cls, url: str, *, cluster: bool = False, pool_size: int = DEFAULT_POOL_SIZE
    ) -> RedisClient:
        if cluster:
            return cls(
                RedisCluster.from_url(
                    url,
                    max_connections=pool_size,
                    socket_timeout=None,  # the deadline is ours (`translated_errors`)
                    socket_connect_timeout=SOCKET_TIMEOUT_S,
                )
            )
        # maintenance notifications need RESP3, which we do not speak; left at redis-py's "auto",
        # the pool skips its check for connections the server closed (restart, idle timeout) and
        # hands them out, so each one failed a request with -31012 after Redis was back
        pool = aioredis.BlockingConnectionPool.from_url(
            url,
            max_connections=pool_size,
            timeout=POOL_TIMEOUT_S,
            socket_timeout=None,  # the deadline is ours (`translated_errors`)
            socket_connect_timeout=SOCKET_TIMEOUT_S,
            maint_notifications_config=MaintNotificationsConfig(enabled=False),
        )
        return cls(aioredis.Redis.from_pool(pool))

    @classmethod
    def in_process(cls) -> RedisClient:
        """An in-process Redis-compatible store: neither durable nor shared between processes."""
        import fakeredis  # only loaded when no real Redis can be had

        return cls(fakeredis.FakeAsyncRedis(), embedded=True)

    async def pipelined(self, commands: Sequence[tuple[Any, ...]]) -> list[Any]:
        """`commands` in one pipeline: one round trip. A script runs in it as EVALSHA of its
        `sha`; a server whose script cache is empty (a restart, SCRIPT FLUSH) answers NOSCRIPT,
        and then every script is loaded and the whole pipeline sent once more, so its other
        commands must be idempotent. (redis-py's own script objects would ask SCRIPT EXISTS in a
        round trip of its own before every such pipeline.)"""
        for attempt in range(2):
            async with self.client.pipeline(transaction=False) as pipe:
                for command in commands:
                    pipe.execute_command(*command)
                try:
                    async with translated_errors():
                        return list(await pipe.execute())
                except redis.exceptions.NoScriptError:
                    if attempt:
                        raise
            async with translated_errors():
                for source in SOURCES.values():
                    await self.client.script_load(source)
        raise AssertionError("unreachable")  # pragma: no cover - the loop returns or raises

    async def aclose(self) -> None:
        await self.client.aclose()

    async def ping(self) -> bool:
        return await self.probe() is None

    async def probe(self) -> str | None:
        """None when Redis answers PING, else why not (`describe_failure`)."""
        try:
            async with asyncio.timeout(SOCKET_TIMEOUT_S):
                await self.client.ping()
        except CONNECTION_ERRORS as exc:
            return describe_failure(exc)
        return None


def slot_of(key: str) -> int:
    """The Redis Cluster slot of `key` (its hash tag's, when it has one)."""
    return int(key_slot(key.encode()))


def text(value: bytes | str) -> str:
    """A reply as text (the client returns bytes)."""
    return value.decode() if isinstance(value, bytes) else value
