"""Signed LiveKit webhooks drive a session (the basic path; journeys live elsewhere)."""

from __future__ import annotations

import json
import time

import pytest
from livekit import api

from realtime.livekit_dev.standin import sign_webhook, webhook_headers
from tests.conftest import LIVEKIT_KEY, LIVEKIT_SECRET
from tests.e2e.realtime_helpers import call, create_session, new_id, register, session_of

pytestmark = pytest.mark.e2e


def joined(room: str, identity: str, epoch: int, event_id: str) -> api.WebhookEvent:
    return api.WebhookEvent(
        event="participant_joined",
        id=event_id,
        created_at=int(time.time()),
        room=api.Room(name=room),
        participant=api.ParticipantInfo(
            identity=identity,
            state=api.ParticipantInfo.ACTIVE,
            metadata=json.dumps({"sessionEpoch": epoch}),
        ),
    )


async def post_webhook(client, event, secret=LIVEKIT_SECRET, body_override=None):
    body, auth = sign_webhook(event, LIVEKIT_KEY, secret)
    return await client.post(
        "/livekit/webhook", content=body_override or body, headers=webhook_headers(auth)
    )


async def test_participant_joined_makes_the_session_active(rt_client):
    task = (await create_session(rt_client))["result"]["task"]
    sid = session_of(task)["sessionId"]
    phone = (await register(rt_client, sid, 1, "phone"))["result"]["endpoint"]["endpointId"]
    await call(rt_client, "JoinSession", sessionId=sid, sessionEpoch=1, endpointId=phone,
               commandId=new_id())  # fmt: skip
    event = joined(f"aim-{sid}-e1", phone, 1, "EV_1")
    response = await post_webhook(rt_client, event)
    assert response.status_code == 200
    assert response.json() == {"status": "applied"}
    session = (await call(rt_client, "GetSession", sessionId=sid))["result"]["session"]
    assert session["state"] == "active"
    again = await post_webhook(rt_client, event)
    assert again.json() == {"status": "duplicate"}


async def test_forged_or_altered_webhooks_are_401(rt_client):
    event = joined("aim-x-e1", "someone", 1, "EV_2")
    forged = await post_webhook(rt_client, event, secret="another-secret-" + "y" * 40)
    assert forged.status_code == 401
    altered = await post_webhook(rt_client, event, body_override='{"event":"room_finished"}')
    assert altered.status_code == 401
    unsigned = await rt_client.post("/livekit/webhook", content=b"{}")
    assert unsigned.status_code == 401
