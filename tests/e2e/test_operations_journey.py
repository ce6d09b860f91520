"""A whole journey: the agent asks, the user confirms (ContinueTask), the provider finishes."""

from __future__ import annotations

import json

import pytest

from tests.conftest import rpc
from tests.e2e.realtime_helpers import call, create_part, create_session, new_id, session_of
from tests.e2e.webhook_helpers import send_webhook

pytestmark = pytest.mark.e2e


async def provider_call(client, token, method, **params):
    body = {"jsonrpc": "2.0", "id": 1, "method": f"aim.provider.{method}", "params": params}
    response = await client.post(
        "/provider", json=body, headers={"Authorization": f"Bearer {token}"}
    )
    return response.status_code, response.json()


async def test_agent_asks_user_approves_agent_finishes_and_the_history_keeps_it(rt_client, livekit):
    part = create_part(
        requested={
            "mediaBinding": "livekit-webrtc-v1",
            "audio": "bidirectional",
            "userVideoSources": ["camera"],
            "agentVideoSources": ["screen"],
            "interactions": ["text", "confirmation"],
        },
        retention={"transcript": "on", "summary": "off"},
    )
    task = (await create_session(rt_client, part=part))["result"]["task"]
    sid = session_of(task)["sessionId"]
    room = f"aim-{sid}-e1"
    dispatch = livekit.dispatches_in(room)[-1]
    meta = json.loads(dispatch.metadata)
    token = meta["providerToken"]
    caps = {
        "audioInput": True,
        "audioOutput": True,
        "camera": True,
        "screen": False,
        "interactions": ["text", "confirmation"],
    }
    reg = await call(
        rt_client,
        "RegisterEndpoint",
        sessionId=sid,
        sessionEpoch=1,
        commandId=new_id(),
        clientEndpointKey="phone",
        capabilities=caps,
    )
    phone = reg["result"]["endpoint"]["endpointId"]
    await call(
        rt_client,
        "JoinSession",
        sessionId=sid,
        sessionEpoch=1,
        endpointId=phone,
        commandId=new_id(),
    )
    livekit.add_participant(room, phone)
    livekit.add_participant(room, "agent-1", kind="agent")
    assert await send_webhook(rt_client, "participant_joined", room, phone) == "applied"
    assert (
        await send_webhook(rt_client, "participant_joined", room, "agent-1", agent=True)
        == "applied"
    )

    status, body = await provider_call(
        rt_client,
        token,
        "RequestOperation",
        sessionId=sid,
        sessionEpoch=1,
        requestId=new_id(),
        kind="action",
        action={"title": "Book a table", "arguments": {"n": 2}},
        confirmation="required",
    )
    assert status == 200, body
    op = body["result"]["operation"]
    assert op["state"] == "awaiting_confirmation"
    got = await rpc(rt_client, "GetTask", {"id": task["id"]})
    t = got["result"]
    assert t["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
    data = t["status"]["message"]["parts"][1]["data"]
    msg_id = new_id()
    cont = await rpc(
        rt_client,
        "ContinueTask",
        {
            "id": task["id"],
            "requirementId": data["requirementId"],
            "expectedVersion": data["expectedVersion"],
            "actionDigest": data["actionDigest"],
            "message": {
                "messageId": msg_id,
                "role": "ROLE_USER",
                "taskId": task["id"],
                "parts": [{"data": {"decision": "approve"}}],
            },
        },
    )
    assert cont["result"]["task"]["status"]["state"] == "TASK_STATE_WORKING"
    again = await rpc(
        rt_client,
        "ContinueTask",
        {
            "id": task["id"],
            "requirementId": data["requirementId"],
            "expectedVersion": data["expectedVersion"],
            "actionDigest": data["actionDigest"],
            "message": {
                "messageId": msg_id,
                "role": "ROLE_USER",
                "taskId": task["id"],
                "parts": [{"data": {"decision": "approve"}}],
            },
        },
    )
    assert again == cont
    got = await call(rt_client, "GetOperation", sessionId=sid, operationId=op["operationId"])
    assert got["result"]["operation"]["state"] == "running"
    status, done = await provider_call(
        rt_client,
        token,
        "UpdateOperation",
        sessionId=sid,
        requestId=new_id(),
        operationId=op["operationId"],
        state="succeeded",
        result={"booked": True},
    )
    assert done["result"]["operation"]["state"] == "succeeded", done
    assert done["result"]["operation"]["result"] == {"booked": True}
    status, tr = await provider_call(
        rt_client,
        token,
        "AppendTranscript",
        sessionId=sid,
        sessionEpoch=1,
        itemId="it-1",
        role="agent",
        text="Your table is booked.",
    )
    assert tr["result"] == {"itemId": "it-1"}, tr
    await call(
        rt_client,
        "SendInteraction",
        sessionId=sid,
        sessionEpoch=1,
        commandId=new_id(),
        type="input.text",
        payload={"text": "thanks"},
    )
    got = await rpc(rt_client, "GetTask", {"id": task["id"]})
    history = got["result"]["history"]
    assert [m["role"] for m in history][-3:] == ["ROLE_USER", "ROLE_AGENT", "ROLE_USER"]
