"""Tenants in Redis (profile §24): admission, the release of a session's end with its usage,
and what a tenant used of its allowances; each one script on the tenant's slot
(`keys.tenant_*`), timed by Redis, so replicas with clocks apart agree."""

from __future__ import annotations

from typing import cast

from realtime.policy import Limits
from realtime.store import keys
from realtime.store.admissions import (
    DAY_MS,
    NONE,
    Admitted,
    Refused,
    RefusedBy,
    Used,
    day_of,
    ms_of,
)
from realtime.store.indexes import USAGE_ENCODER
from realtime.store.records import SessionRecord
from realtime.store.redis_client import RedisClient, text, translated_errors
from state_machines.usage import Usage, usage_of


def _limit(value: int | None) -> int:
    return NONE if value is None else value


class TenantStore:
    """The tenant scripts, on one client."""

    def __init__(self, redis: RedisClient) -> None:
        self._client = redis.client
        scripts = redis.scripts
        self._admit = scripts.admit_tenant
        self._release = scripts.release_tenant
        self._usage = scripts.tenant_usage

    async def admit(
        self, tenant: str | None, session_id: str, limits: Limits, ttl_s: int
    ) -> Admitted | Refused:
        """Admit `session_id` within `limits` (again: admitted, nothing changes)."""
        async with translated_errors():
            reply = await self._admit(
                keys=[
                    keys.tenant_live_key(tenant),
                    keys.tenant_starts_key(tenant),
                    keys.tenant_used_key(tenant),
                    keys.tenant_since_key(tenant),
                ],
                args=[
                    session_id,
                    _limit(limits.live_sessions),
                    _limit(limits.starts_per_minute),
                    _limit(limits.day_ms),
                    _limit(limits.month_ms),
                    ttl_s,
                ],
            )
        status = text(reply[0])
        if status == "ok":
            return Admitted(int(reply[1]))
        by = cast(RefusedBy, status)
        if by == "rate":
            return Refused(by, int(reply[1]), int(reply[2]), 0, int(reply[3]))
        return Refused(by, int(reply[1]), int(reply[2]), int(reply[3]))

    async def release(
        self,
        tenant: str | None,
        session_id: str,
        usage: Usage,
        ended_ms: int,
        usage_ttl_s: int,
    ) -> tuple[bool, bool]:
        """The session ended (at `ended_ms`, Redis time): its place goes and its usage counts,
        once however often this runs. (left the live sessions now, usage counted now)."""
        day = day_of(ended_ms)
        async with translated_errors():
            left, counted = await self._release(
                keys=[
                    keys.tenant_live_key(tenant),
                    keys.tenant_used_key(tenant),
                    keys.usage_key(tenant, day.isoformat()),
                    keys.tenant_since_key(tenant),
                ],
                args=[
                    session_id,
                    USAGE_ENCODER.encode(usage),
                    usage.session_ms,
                    ended_ms // DAY_MS,
                    day.year * 100 + day.month,
                    usage_ttl_s,
                    0,
                ],
            )
        return bool(left), bool(counted)

    async def release_ended(
        self, record: SessionRecord, session_id: str, ended_ms: int | None, usage_ttl_s: int
    ) -> tuple[bool, bool]:
        """`release` of a session that is over, from its record: `ended_ms` the Redis time its
        end was committed at (None for a session that ended before it was stored: its
        `endedAt`)."""
        session = record.session
        if ended_ms is None:
            ended_ms = ms_of(session.ended_at or session.updated_at)
        return await self.release(
            record.tenant, session_id, usage_of(session), ended_ms, usage_ttl_s
        )

    async def forget(self, tenant: str | None, session_id: str, grace_ms: int) -> bool:
        """A session that is gone (or never was created) leaves the tenant's live sessions,
        once admitted at least `grace_ms` ago (a create under way keeps its place)."""
        async with translated_errors():
            left, _ = await self._release(
                keys=[
                    keys.tenant_live_key(tenant),
                    keys.tenant_used_key(tenant),
                    keys.usage_key(tenant, "-"),
                    keys.tenant_since_key(tenant),
                ],
                args=[session_id, "", 0, 0, 0, 0, grace_ms],
            )
        return bool(left)

    async def used(self, tenant: str | None) -> Used:
        async with translated_errors():
            reply = await self._usage(
                keys=[
                    keys.tenant_live_key(tenant),
                    keys.tenant_used_key(tenant),
                    keys.tenant_since_key(tenant),
                ],
                args=[],
            )
        return Used(*(int(value) for value in reply))

    async def live(self, tenant: str | None) -> list[str]:
        """The sessions holding a place among the tenant's live sessions."""
        async with translated_errors():
            members = await self._client.zrange(keys.tenant_live_key(tenant), 0, -1)
        return [text(member) for member in members]
