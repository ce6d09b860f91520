"""One tenant's receiver does not hold up another's session events (profile §21): two receiver
processes on real sockets, one of them taking every connection and never answering."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from realtime.store import keys
from realtime.store.redis_client import RedisClient
from tests.conftest import service
from tests.e2e.operator_api_helpers import TENANT_CLAIM, start_session
from tests.event_receivers import events_settings, receiver

pytestmark = pytest.mark.e2e

ACME_SESSIONS = 70  # more than the worker's 32 sending slots
SHARE = 8  # AIM_EVENTS_MAX_PER_DESTINATION's default: sessions sent to at once per destination


async def leased(store: RedisClient, session_ids: list[str]) -> int:
    """How many of the sessions a worker is sending to right now."""
    return sum([int(await store.client.exists(keys.delivery_lease_key(s))) for s in session_ids])


async def test_a_hanging_receiver_does_not_delay_another_tenants_events(
    livekit, store: RedisClient, tmp_path: Path
) -> None:
    (tmp_path / "acme").mkdir()
    (tmp_path / "other").mkdir()
    async with receiver(tmp_path / "acme") as acme, receiver(tmp_path / "other") as other:
        acme.answer(200, delay_s=60)  # takes each connection and its body, answers nothing
        async with service(
            livekit,
            store,
            auth_tenant_claim=TENANT_CLAIM,
            events_tenant_urls=(("acme", acme.url),),
            max_sessions_per_principal=ACME_SESSIONS,
            **events_settings(other.url, events_timeout_s=3.0),
        ) as http:
            gate = asyncio.Semaphore(8)

            async def acme_session(n: int) -> str:
                async with gate:
                    return await start_session(http, tenant="acme", subject=f"user-{n}")

            ours = await asyncio.gather(*(acme_session(n) for n in range(ACME_SESSIONS)))
            for _ in range(100):  # bounded: 10 s; the worker is busy with acme's receiver
                if await leased(store, ours) >= SHARE:
                    break
                await asyncio.sleep(0.1)
            else:
                raise AssertionError("the worker never started on acme's sessions")

            asked = time.monotonic()
            theirs = await start_session(http, tenant="globex", subject="bob")

            def created() -> bool:
                return "session.created" in [e["type"] for e in other.delivered(theirs)]

            await other.wait_for(created, within=15)
            took = time.monotonic() - asked
            assert took < 1.0, f"globex's session.created took {took:.2f} s"
            # acme's sessions hold at most their destination's share of the slots
            assert await leased(store, ours) <= SHARE
    assert acme.delivered() == []
