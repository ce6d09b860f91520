"""Durable timers (profile §5): the due index `aim:timers:due` (cross-slot) and each session's
list of its armed timers and of the spans that armed them (on the session's slot). The commit
writes them (`indexes.due_entries`); workers claim, fire and remove them here."""

from __future__ import annotations

from realtime.store import keys
from realtime.store.redis_client import RedisClient, text, translated_errors


class TimerStore:
    """Claims of due timers (leased), the armed ones, and their removal once fired."""

    def __init__(self, redis: RedisClient) -> None:
        self._client = redis.client
        self._cluster = redis.cluster
        self._claim = redis.scripts.claim_timers

    async def claim(self, now_ms: int, lease_ms: int, limit: int = 50) -> list[str]:
        """Due timers, each now leased to the caller until `now_ms + lease_ms`."""
        async with translated_errors():
            members = await self._claim(
                keys=[keys.timers_due_key()], args=[now_ms, now_ms + lease_ms, limit]
            )
        return [text(member) for member in members]

    async def members(self, limit: int) -> list[str]:
        """Up to `limit` armed timers, in no order (ZSCAN: a timer armed for the whole scan is
        seen, whatever the others do meanwhile)."""
        found: list[str] = []
        async with translated_errors():
            async for member, _ in self._client.zscan_iter(keys.timers_due_key(), count=500):
                found.append(text(member))
                if len(found) >= limit:
                    break
        return found

    async def done(self, member: str) -> None:
        """A timer fired (or was refused): out of the due index and its session's list."""
        session_id = member.partition("|")[0]
        async with translated_errors():
            if self._cluster:  # two slots: two commands
                await self._client.zrem(keys.timers_due_key(), member)
                await self._client.hdel(keys.session_timers_key(session_id), member)
                await self._client.hdel(keys.timer_causes_key(session_id), member)
                return
            pipe = self._client.pipeline(transaction=False)
            pipe.zrem(keys.timers_due_key(), member)
            pipe.hdel(keys.session_timers_key(session_id), member)
            pipe.hdel(keys.timer_causes_key(session_id), member)
            await pipe.execute()

    async def cause(self, member: str) -> str | None:
        """The span that armed a timer (a traceparent), when its commit was traced."""
        async with translated_errors():
            cause = await self._client.hget(keys.timer_causes_key(member.partition("|")[0]), member)
        return text(cause) if cause is not None else None
