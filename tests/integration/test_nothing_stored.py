"""What a request the service refuses, or a feature it is not configured for, leaves in Redis:
nothing. The answers the clients and operators see are tested end to end
(tests/e2e/test_without_livekit.py, tests/e2e/test_session_events.py); here, the keys."""

from __future__ import annotations

import pytest

from realtime.store import keys
from tests.e2e.agent_operation_helpers import agent_call, open_session
from tests.e2e.realtime_helpers import call, create_session, new_id
from tests.e2e.rotation_helpers import ahead_of_now

pytestmark = pytest.mark.redis


async def test_a_session_asked_of_a_service_without_livekit_stores_no_key(client, store):
    body = await create_session(client)

    assert body["error"]["code"] == -31012
    assert [k async for k in store.client.scan_iter(match=f"{keys.PREFIX}:*")] == []


async def test_a_service_without_event_destinations_keeps_no_delivery_state(
    rt_client, livekit, store
):
    live = await open_session(rt_client, livekit)
    ended = await call(
        rt_client, "EndSession", sessionId=live.sid, commandId=new_id(), reason="done"
    )
    assert "result" in ended
    client = store.client
    assert await client.exists(keys.deliveries_key(live.sid)) == 0
    assert await client.exists(keys.delivery_state_key(live.sid)) == 0
    assert await client.exists(keys.deliveries_due_key()) == 0
    snapshot = await client.hget(keys.session_key(live.sid), "s")
    assert b"eventsSeq" not in snapshot


async def test_refused_rotation_requests_leave_the_session_as_it_was(rt_client, livekit, store):
    """A deadline in the past, a context over 64 KiB, a write from another generation or an
    old epoch: refused, and the session's hash (its snapshot, its version, no saved context)
    is byte for byte what it was (profile §23)."""
    live = await open_session(rt_client, livekit)
    before = await store.client.hgetall(keys.session_key(live.sid))
    refusals = [
        ("ReportDeadline", {"deadline": "2001-01-01T00:00:00Z", "reason": "provider_cap"}),
        ("SaveContext", {"context": "x" * (64 * 1024 + 1)}),
        ("ReportDeadline", {"deadline": ahead_of_now(60), "reason": "planned", "sessionEpoch": 5}),
        ("AckInteractions", {"commandIds": []}),
    ]
    for method, params in refusals:
        _, body, _ = await agent_call(rt_client, live, method, **{"sessionEpoch": 1, **params})
        assert "error" in body, (method, body)
    assert await store.client.hgetall(keys.session_key(live.sid)) == before
    assert b"x" not in before
