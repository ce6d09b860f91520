"""What a request the service refuses, or a feature it is not configured for, leaves in Redis:
nothing. The answers the clients and operators see are tested end to end
(tests/e2e/test_without_livekit.py, tests/e2e/test_session_events.py); here, the keys."""

from __future__ import annotations

import pytest

from realtime.store import keys
from tests.e2e.agent_operation_helpers import open_session
from tests.e2e.realtime_helpers import call, create_session, new_id

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
