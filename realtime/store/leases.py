"""Leases on duties that one worker of all replicas carries out (the reconciler)."""

from __future__ import annotations

from realtime.store.redis_client import RedisClient, translated_errors


class DutyLease:
    """A lease on one duty that a single worker of all replicas carries out (the reconciler):
    SET NX PX with the holder's token; renewed and released only while the token is ours, like
    the runner's per-session lease."""

    def __init__(self, redis: RedisClient, key: str) -> None:
        self._client, self.key = redis.client, key
        self._renew = redis.scripts.renew_lease
        self._release = redis.scripts.release_lease

    async def hold(self, token: str, ttl_ms: int) -> bool:
        """Renew the lease if `token` holds it, else take it if nobody does."""
        async with translated_errors():
            if await self._renew(keys=[self.key], args=[token, ttl_ms]):
                return True
            return bool(await self._client.set(self.key, token, nx=True, px=ttl_ms))

    async def release(self, token: str) -> None:
        async with translated_errors():
            await self._release(keys=[self.key], args=[token])
