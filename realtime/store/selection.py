"""Open the store the settings ask for (profile §14): URL, private redis-server, or embedded."""

from __future__ import annotations

import logging
from collections.abc import Callable
from urllib.parse import urlsplit

from realtime.settings import Settings
from realtime.store.redis_client import RedisClient
from realtime.store.server import RedisUnavailableError, redis_server_available
from realtime.store.shared import SharedRedis

log = logging.getLogger(__name__)

EMBEDDED_WARNING = (
    "NO REDIS: running on the embedded in-process store. State is neither durable nor shared "
    "between processes. Install redis-server or set AIM_REDIS_URL for anything but a demo."
)


def open_store(settings: Settings) -> tuple[RedisClient, Callable[[], None]]:
    """The Redis client and a function that releases what opening it started."""
    if settings.redis_url:
        log.info("redis: %s (AIM_REDIS_URL)", _without_secrets(settings.redis_url))
        return RedisClient.from_url(settings.redis_url, cluster=settings.redis_cluster), _nothing
    if redis_server_available():
        server = SharedRedis.open(settings.data_path / "redis")
        log.info(
            "redis: the private redis-server of %s (pid %s, unix socket %s), %s",
            server.redis_dir,
            server.pid,
            server.socket,
            "started by this process" if server.started else "already running",
        )
        return RedisClient.from_url(server.url), server.release
    if settings.require_redis:
        raise RedisUnavailableError(
            "AIM_REQUIRE_REDIS is set but neither AIM_REDIS_URL nor a redis-server binary exists"
        )
    log.warning(EMBEDDED_WARNING)
    return RedisClient.in_process(), _nothing


def _without_secrets(url: str) -> str:
    """The URL without user and password (they must never reach the log)."""
    parts = urlsplit(url)
    if parts.scheme == "unix":
        return f"unix://{parts.path}"
    host = parts.hostname or ""
    port = f":{parts.port}" if parts.port else ""
    return f"{parts.scheme}://{host}{port}{parts.path}"


def _nothing() -> None:
    return None
