"""When the Agent Card's content last changed (its `Last-Modified`), kept in Redis so that every
process of the service, and the same process after a restart, answers the same time for the
same card."""

from __future__ import annotations

from realtime.store import keys
from realtime.store.redis_client import RedisClient, translated_errors


class CardStore:
    """The Agent Card's change record `aim:{card}:modified`."""

    def __init__(self, redis: RedisClient) -> None:
        self._modified = redis.scripts.card_modified

    async def modified(self, etag: str, now_s: int) -> int:
        """The time (Unix seconds) the card with `etag` has been served since: the stored time
        when the record holds `etag`, else `now_s`, recorded as this card's (-31012 when Redis
        is unreachable)."""
        async with translated_errors():
            return int(await self._modified(keys=[keys.agent_card_key()], args=[etag, now_s]))
