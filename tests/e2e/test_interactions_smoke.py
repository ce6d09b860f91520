"""Interactions inside a live session: delivery to the agent and user media consent."""

from __future__ import annotations

import json

import pytest
from livekit import api

from tests.e2e.agent_operation_helpers import interact, open_session
from tests.e2e.realtime_helpers import call
from tests.e2e.webhook_helpers import send_webhook

pytestmark = pytest.mark.e2e


async def live_session(client, livekit) -> tuple[str, str, str]:
    """A live session whose user may send the camera, the agent nothing, and whose device
    (with a camera) and agent are in the room: (sessionId, room, phone)."""
    live = await open_session(client, livekit, interactions=("text",), agent_sources=())
    return live.sid, live.room, live.phone


async def test_text_is_delivered_to_the_agent_as_a_reliable_data_message(rt_client, livekit):
    sid, _, _ = await live_session(rt_client, livekit)
    sent = await interact(rt_client, sid, "input.text", {"text": "hello"})
    assert sent["result"]["interaction"]["type"] == "input.text"
    call_ = await livekit.wait_for_call("SendData")
    request = call_.request
    assert request.topic == "aim.realtime.v1"
    assert list(request.destination_identities) == ["agent-1"]
    body = json.loads(request.data)
    assert body["type"] == "input.text"
    assert body["payload"] == {"text": "hello"}
    assert body["commandId"] == sent["result"]["interaction"]["commandId"]


async def test_pointer_not_requested_is_capability_unavailable(rt_client, livekit):
    sid, _, _ = await live_session(rt_client, livekit)
    body = await interact(rt_client, sid, "visual.select", {"targetId": "btn"})
    assert body["error"]["code"] == -31009
    assert body["error"]["data"][0]["metadata"]["missing"] == "pointer"


async def test_camera_request_live_revoke_and_tokens(rt_client, livekit):
    sid, room, phone = await live_session(rt_client, livekit)
    granted = await interact(rt_client, sid, "media.request", {"side": "user", "source": "camera"})
    assert granted["result"]["session"]["media"]["sources"]["user"]["camera"] == "granted"
    # the first update came when the device connected (its permission as its grants allow)
    await livekit.wait_for_call("UpdateParticipant", count=2)
    assert list(livekit.permission(room, phone).can_publish_sources) == [
        api.TrackSource.MICROPHONE,
        api.TrackSource.CAMERA,
    ]
    track = api.TrackInfo(sid="TR_1", source=api.TrackSource.CAMERA)
    assert await send_webhook(rt_client, "track_published", room, phone, track=track) == "applied"
    session = (await call(rt_client, "GetSession", sessionId=sid))["result"]["session"]
    assert session["media"]["sources"]["user"]["camera"] == "live"
    await interact(rt_client, sid, "media.revoke", {"side": "user", "source": "camera"})
    await livekit.wait_for_call("UpdateParticipant", count=3)
    assert list(livekit.permission(room, phone).can_publish_sources) == [api.TrackSource.MICROPHONE]
    again = await interact(rt_client, sid, "media.prepare", {"side": "user", "source": "camera"})
    assert again["error"]["code"] == -31003
