"""Open the store the settings ask for (profile §14): URL, private redis-server, or embedded."""

from __future__ import annotations

import logging
from collections.abc import Callable

from realtime.settings import Settings
from realtime.store.redis_store import RedisStore
from realtime.store.server import PrivateRedis, RedisUnavailableError, redis_server_available

log = logging.getLogger(__name__)

EMBEDDED_WARNING = (
    "NO REDIS: running on the embedded in-process store. State is neither durable nor shared "
    "between processes. Install redis-server or set AIM_REDIS_URL for anything but a demo."
)


def open_store(settings: Settings) -> tuple[RedisStore, Callable[[], None]]:
    """The store and a function that releases what opening it started."""
    if settings.redis_url:
        return RedisStore.from_url(settings.redis_url, cluster=settings.redis_cluster), _nothing
    if redis_server_available():
        server = PrivateRedis(settings.data_path / "redis")
        log.info("started a private redis-server on %s", server.socket)
        return RedisStore.from_url(server.url), server.stop
    if settings.require_redis:
        raise RedisUnavailableError(
            "AIM_REQUIRE_REDIS is set but neither AIM_REDIS_URL nor a redis-server binary exists"
        )
    log.warning(EMBEDDED_WARNING)
    return RedisStore.embedded_store(), _nothing


def _nothing() -> None:
    return None
