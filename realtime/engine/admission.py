"""Tenant admission (profile §24): which limits apply to a tenant (the policy in force), a new
session admitted within them, a session's end released, and the places of sessions that no
longer live reclaimed.

Without a policy file nothing is counted for tenants (a create is its owner's claim alone) but
every end is still released: its usage counts in its tenant's day. With one, every session
takes a place among its tenant's live sessions before its create commits; its end, by any
path, gives it back in the release that follows the commit that ended it. What a crash
between the two leaves (a place held by a session that ended, or by a create that never
committed) is reclaimed when the tenant is refused (then admission is tried once more), by the
reconciler, and by the live set's expiry. Each answer is a value; the methods say it.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Final

from realtime.policy import Limits, PolicySource
from realtime.settings import Settings
from realtime.store.admissions import Admitted, Refused, Used
from realtime.store.records import SessionRecord
from realtime.store.sessions import SessionStore
from realtime.store.tenants import TenantStore
from state_machines.session import TERMINAL_STATES

# a place whose session does not exist is reclaimed only this long after its admission: the
# create's commit follows the admission within milliseconds, or failed
RECLAIM_GRACE_MS: Final = 60_000
# a tenant refused again within this long is not looked through again (by this process): a
# tenant hammering at its limit does not make every refusal read all its sessions
RECLAIM_EVERY_S: Final = 5.0
RECLAIM_MEMORY: Final = 4096  # tenants whose last look this process remembers


class Admission:
    """Admits, releases and reclaims for every tenant; one per process."""

    def __init__(
        self,
        settings: Settings,
        policy: PolicySource,
        tenants: TenantStore,
        sessions: SessionStore,
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.settings = settings
        self.policy = policy
        self.tenants = tenants
        self.sessions = sessions
        self.clock = clock
        self._looked: OrderedDict[str | None, float] = OrderedDict()

    @property
    def enabled(self) -> bool:
        """Whether tenants are counted (a policy file is configured)."""
        return self.policy.enabled

    def limits(self, tenant: str | None) -> Limits:
        settings = self.settings
        return self.policy.current().limits(
            tenant,
            max_session_s=settings.max_session_s,
            per_principal=settings.max_sessions_per_principal,
        )

    async def standing(self, tenant: str | None) -> tuple[Limits, Used]:
        """The tenant's limits and what it uses of them now (the operator API)."""
        return self.limits(tenant), await self.tenants.used(tenant)

    async def admit(
        self, tenant: str | None, session_id: str, limits: Limits
    ) -> Admitted | Refused:
        """A place for `session_id` among its tenant's live sessions, within `limits`. A
        refusal by the live sessions or the allowances is checked again once the places of
        sessions that no longer live are reclaimed."""
        if not self.enabled:
            return Admitted(0)
        ttl_s = self.settings.task_ttl_s
        admitted = await self.tenants.admit(tenant, session_id, limits, ttl_s)
        if (
            isinstance(admitted, Refused)
            and admitted.by != "rate"
            and await self._reclaimed(tenant)
        ):
            admitted = await self.tenants.admit(tenant, session_id, limits, ttl_s)
        return admitted

    async def release(self, record: SessionRecord, session_id: str, ended_ms: int | None) -> None:
        """The session ended (the commit stored `ended_ms`): its place goes, its usage counts."""
        await self.tenants.release_ended(record, session_id, ended_ms, self.settings.usage_ttl_s)

    async def _reclaimed(self, tenant: str | None) -> bool:
        now = self.clock()
        last = self._looked.get(tenant)
        if last is not None and now - last < RECLAIM_EVERY_S:
            return False
        self._looked[tenant] = now
        self._looked.move_to_end(tenant)
        while len(self._looked) > RECLAIM_MEMORY:
            self._looked.popitem(last=False)
        return bool(await self.reclaim(tenant))

    async def reclaim(self, tenant: str | None) -> list[str]:
        """The tenant's places held by sessions that are over (released, with their usage) or
        gone (admitted over RECLAIM_GRACE_MS ago); the ids of the sessions that left."""
        left = []
        for session_id in await self.tenants.live(tenant):
            loaded = await self.sessions.load(session_id)
            record = loaded.record
            if record is None:
                if await self.tenants.forget(tenant, session_id, RECLAIM_GRACE_MS):
                    left.append(session_id)
            elif record.session.state in TERMINAL_STATES:
                ended_ms = await self.sessions.ended_ms(session_id)
                gone, _ = await self.tenants.release_ended(
                    record, session_id, ended_ms, self.settings.usage_ttl_s
                )
                if gone:
                    left.append(session_id)
        return left

    async def exhausted(self, tenant: str | None) -> list[str]:
        """The tenant's live sessions, when it used up its allowance of the day or the month
        (they must end), once the places of sessions that no longer live are reclaimed; else
        none."""
        limits = self.limits(tenant)
        if not self.enabled or (limits.day_ms is None and limits.month_ms is None):
            return []
        if not _over(await self.tenants.used(tenant), limits):
            return []
        if await self.reclaim(tenant) and not _over(await self.tenants.used(tenant), limits):
            return []
        return await self.tenants.live(tenant)


def _over(used: Used, limits: Limits) -> bool:
    return (limits.day_ms is not None and used.today_ms >= limits.day_ms) or (
        limits.month_ms is not None and used.this_month_ms >= limits.month_ms
    )
