"""A service without LiveKit configured says so at once when a session is asked for, and stores
nothing (profile §14: media calls fail with -31012), instead of waiting as if LiveKit were down."""

from __future__ import annotations

import time

import pytest

from realtime.store import keys
from tests.conftest import error_info, rpc
from tests.e2e.realtime_helpers import create_session

pytestmark = pytest.mark.e2e


async def test_a_session_asked_of_a_service_without_livekit_is_31012_at_once(client, store):
    started = time.monotonic()
    body = await create_session(client)
    took = time.monotonic() - started

    assert body["error"]["code"] == -31012
    assert "LiveKit is not configured on this service" in body["error"]["message"]
    assert "AIM_LIVEKIT_URL" in body["error"]["message"]
    assert error_info(body)["metadata"]["service"] == "livekit"
    assert took < 2.0  # not the 5 s a blocking create waits for an unreachable LiveKit
    listed = await rpc(client, "ListTasks", {})
    assert listed["result"]["tasks"] == []
    assert [k async for k in store.client.scan_iter(match=f"{keys.PREFIX}:*")] == []


async def test_plain_text_still_gets_its_realtime_only_task(client):
    # not a session: no LiveKit needed, the profile's rejected task as before
    sent = await rpc(
        client,
        "SendMessage",
        {"message": {"messageId": "m-1", "role": "ROLE_USER", "parts": [{"text": "hello"}]}},
    )
    assert sent["result"]["task"]["status"]["state"] == "TASK_STATE_REJECTED"
