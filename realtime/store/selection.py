"""Open the store the settings ask for (profile §14): URL, private redis-server, or embedded."""

from __future__ import annotations

import logging
from collections.abc import Callable

from realtime.environment import without_credentials
from realtime.settings import Settings
from realtime.store.redis_client import OUTAGES, RedisClient
from realtime.store.server import RedisUnavailableError, redis_server_available
from realtime.store.shared import SharedRedis

log = logging.getLogger(__name__)

EMBEDDED_WARNING = (
    "NO REDIS: running on the embedded in-process store. State is neither durable nor shared "
    "between processes. Install redis-server or set AIM_REDIS_URL for anything but a demo."
)


def missing_redis(settings: Settings) -> str | None:
    """Why the settings cannot work for want of a Redis (AIM_REQUIRE_REDIS without one), or
    None: a configuration problem every command reports before it starts."""
    if settings.require_redis and not settings.redis_url and not redis_server_available():
        return (
            "AIM_REQUIRE_REDIS is set but neither AIM_REDIS_URL nor a redis-server binary "
            "exists: set AIM_REDIS_URL, install redis-server, or unset AIM_REQUIRE_REDIS"
        )
    return None


def open_store(settings: Settings) -> tuple[RedisClient, Callable[[], None]]:
    """The Redis client and a function that releases what opening it started. Raises
    RedisUnavailableError when AIM_REQUIRE_REDIS is set and there is no Redis to use, or the
    private redis-server does not start."""
    if settings.redis_url:
        client = RedisClient.from_url(settings.redis_url, cluster=settings.redis_cluster)
        release = _nothing
        target = f"{without_credentials(settings.redis_url)} (AIM_REDIS_URL)"
    elif redis_server_available():
        server = SharedRedis.open(settings.data_path / "redis")
        client, release = RedisClient.from_url(server.url), server.release
        target = f"the private redis-server of {server.redis_dir} (unix socket {server.socket})"
        log.info(
            "redis: the private redis-server of %s (pid %s, unix socket %s), %s",
            server.redis_dir,
            server.pid,
            server.socket,
            "started by this process" if server.started else "already running",
        )
    elif (problem := missing_redis(settings)) is not None:
        raise RedisUnavailableError(problem)
    else:
        log.warning(EMBEDDED_WARNING)
        return _named(RedisClient.in_process(), "the embedded in-process store"), _nothing
    if settings.redis_url:
        log.info("redis: %s", target)
    return _named(client, target), release


def _named(client: RedisClient, target: str) -> RedisClient:
    """`client`, named by `target` in `check` and in the outage log."""
    client.target = OUTAGES.target = target
    return client


def _nothing() -> None:
    return None
