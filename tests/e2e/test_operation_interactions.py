"""SendInteraction as a client sees it (profile §7): delivery to the agent, class and state
checks, epochs, payload validation and exactly-once by commandId."""

from __future__ import annotations

import msgspec
import pytest

from tests.conftest import REALTIME, headers, violations
from tests.e2e.agent_operation_helpers import (
    AGENT,
    TOPIC,
    data_to_agent,
    get_session,
    interact,
    meta,
    open_session,
    quiet,
    wait_for_data,
)
from tests.e2e.realtime_helpers import call, new_id
from tests.e2e.webhook_helpers import send_webhook

pytestmark = pytest.mark.e2e


async def test_input_text_reaches_the_agent_with_the_profile_envelope(rt_client, livekit):
    live = await open_session(rt_client, livekit)
    command_id = new_id()
    sent = await interact(rt_client, live.sid, "input.text", {"text": "hi"}, command_id=command_id)
    interaction = sent["result"]["interaction"]
    assert interaction["type"] == "input.text"
    assert interaction["commandId"] == command_id
    assert interaction["acceptedAt"].endswith("Z")
    assert sent["result"]["session"]["sessionId"] == live.sid
    assert "operation" not in sent["result"]
    (body,) = await wait_for_data(livekit, live.room, "input.text")
    assert body == {
        "type": "input.text",
        "commandId": command_id,
        "sessionEpoch": 1,
        "payload": {"text": "hi"},
    }
    (request,) = [r for r in livekit.data_messages if r.room == live.room]
    assert request.topic == TOPIC
    assert list(request.destination_identities) == [AGENT]


async def test_visual_select_with_pointer_class_is_delivered(rt_client, livekit):
    live = await open_session(rt_client, livekit, interactions=("text", "pointer"))
    payload = {"targetId": "btn-ok", "point": {"x": 0.25, "y": 1}, "label": "OK"}
    sent = await interact(rt_client, live.sid, "visual.select", payload)
    assert sent["result"]["interaction"]["type"] == "visual.select"
    (body,) = await wait_for_data(livekit, live.room, "visual.select")
    assert body["payload"] == payload
    assert body["sessionEpoch"] == 1


async def test_response_interrupt_needs_no_interaction_class(rt_client, livekit):
    live = await open_session(rt_client, livekit, interactions=("text",))
    sent = await interact(rt_client, live.sid, "response.interrupt", {"responseId": "r-1"})
    assert "result" in sent, sent
    (body,) = await wait_for_data(livekit, live.room, "response.interrupt")
    assert body["payload"] == {"responseId": "r-1"}
    empty = await interact(rt_client, live.sid, "response.interrupt", {})
    assert "result" in empty, empty


async def test_pointer_requested_but_not_offered_by_the_device_is_unavailable(rt_client, livekit):
    live = await open_session(
        rt_client, livekit, interactions=("text", "pointer"), device_interactions=("text",)
    )
    refused = await interact(rt_client, live.sid, "visual.select", {"targetId": "a"})
    assert refused["error"]["code"] == -31009
    assert meta(refused)["missing"] == "pointer"


async def test_text_not_requested_is_unavailable(rt_client, livekit):
    live = await open_session(rt_client, livekit, interactions=("confirmation",))
    refused = await interact(rt_client, live.sid, "input.text", {"text": "x"})
    assert refused["error"]["code"] == -31009
    assert meta(refused)["missing"] == "text"
    await quiet(0.1)
    assert data_to_agent(livekit, live.room) == []


def confirmation_payloads() -> dict[str, dict[str, str]]:
    return {
        "operation.confirm": {
            "operationId": new_id(),
            "requirementId": new_id(),
            "actionDigest": "sha256:" + "0" * 64,
        },
        "operation.cancel": {"operationId": new_id()},
        "media.decide": {"operationId": new_id(), "decision": "allow"},
    }


async def test_confirmation_class_needed_on_both_session_and_device(rt_client, livekit):
    not_requested = await open_session(rt_client, livekit, interactions=("text",))
    not_offered = await open_session(
        rt_client, livekit, interactions=("text", "confirmation"), device_interactions=("text",)
    )
    for live in (not_requested, not_offered):
        for kind, payload in confirmation_payloads().items():
            refused = await interact(rt_client, live.sid, kind, payload)
            assert refused["error"]["code"] == -31009, (kind, refused)
            assert meta(refused)["missing"] == "confirmation"


async def test_interaction_before_the_agent_joined_is_invalid_state(rt_client, livekit):
    live = await open_session(rt_client, livekit, agent=False)
    refused = await interact(rt_client, live.sid, "input.text", {"text": "anyone?"})
    assert refused["error"]["code"] == -31003
    assert "state" in meta(refused)
    await quiet(0.1)
    assert data_to_agent(livekit, live.room) == []
    # nothing stored: the same commandId is evaluated again once the agent is there
    command_id = new_id()
    first = await interact(rt_client, live.sid, "input.text", {"text": "a"}, command_id=command_id)
    assert first["error"]["code"] == -31003


async def test_interaction_without_a_joined_device_is_invalid_state(rt_client, livekit):
    live = await open_session(rt_client, livekit, join=False)
    refused = await interact(rt_client, live.sid, "input.text", {"text": "hello"})
    assert refused["error"]["code"] == -31003
    assert meta(refused)["state"] == "ready"


async def test_interaction_in_an_ended_session_is_invalid_state(rt_client, livekit):
    live = await open_session(rt_client, livekit)
    ended = await call(
        rt_client, "EndSession", sessionId=live.sid, commandId=new_id(), reason="bye"
    )
    assert "result" in ended, ended
    refused = await interact(rt_client, live.sid, "input.text", {"text": "still there?"})
    assert refused["error"]["code"] == -31003, refused


async def test_stale_and_future_epochs_are_fenced(rt_client, livekit):
    live = await open_session(rt_client, livekit)
    ahead = await interact(rt_client, live.sid, "input.text", {"text": "x"}, epoch=5)
    assert ahead["error"]["code"] == -31002
    assert meta(ahead)["reason"] == "ahead"
    assert meta(ahead)["currentEpoch"] == "1"
    # handoff to a second device: epoch 2, the phone's epoch 1 is superseded
    caps = {
        "audioInput": True,
        "audioOutput": True,
        "camera": True,
        "screen": False,
        "interactions": ["text", "confirmation"],
    }
    laptop = await call(
        rt_client,
        "RegisterEndpoint",
        sessionId=live.sid,
        sessionEpoch=1,
        commandId=new_id(),
        clientEndpointKey="laptop",
        capabilities=caps,
    )
    laptop_id = laptop["result"]["endpoint"]["endpointId"]
    handoff = await call(
        rt_client,
        "JoinSession",
        sessionId=live.sid,
        sessionEpoch=1,
        endpointId=laptop_id,
        commandId=new_id(),
    )
    assert handoff["result"]["session"]["sessionEpoch"] == 2
    stale = await interact(rt_client, live.sid, "input.text", {"text": "old"}, epoch=1)
    assert stale["error"]["code"] == -31002
    assert meta(stale)["currentEpoch"] == "2"
    assert meta(stale)["reason"] == "superseded"
    fresh = await interact(rt_client, live.sid, "input.text", {"text": "new"}, epoch=2)
    assert "result" in fresh, fresh
    (body,) = await wait_for_data(livekit, live.room, "input.text")
    assert body["sessionEpoch"] == 2
    assert body["payload"] == {"text": "new"}


BAD_PAYLOADS = [
    ("input.text", {"text": "x", "extra": 1}, "params.payload.extra"),
    ("input.text", {"text": 5}, "params.payload.text"),
    ("input.text", {"text": ""}, "params.payload.text"),
    ("input.text", {"text": "x" * 4001}, "params.payload.text"),
    ("input.text", {}, "params.payload.text"),
    ("visual.select", {"point": {"x": 1.5, "y": 0}}, "params.payload.point.x"),
    ("visual.select", {"targetId": "a", "colour": "red"}, "params.payload.colour"),
    ("media.request", {"side": "user", "source": "microphone"}, "params.payload.source"),
    ("media.request", {"side": "both", "source": "camera"}, "params.payload.side"),
    ("operation.cancel", {"operationId": "not-a-uuid"}, "params.payload.operationId"),
    ("media.decide", {"operationId": new_id(), "decision": "maybe"}, "params.payload.decision"),
]


async def test_bad_payloads_name_the_offending_path(rt_client, livekit):
    live = await open_session(rt_client, livekit, interactions=("text", "pointer", "confirmation"))
    for kind, payload, field in BAD_PAYLOADS:
        refused = await interact(rt_client, live.sid, kind, payload)
        assert refused["error"]["code"] == -32602, (kind, payload, refused)
        assert field in violations(refused), (field, violations(refused))
    await quiet(0.1)
    assert data_to_agent(livekit, live.room) == []


async def test_visual_select_needs_a_target_or_a_point(rt_client, livekit):
    live = await open_session(rt_client, livekit, interactions=("pointer",))
    refused = await interact(rt_client, live.sid, "visual.select", {"label": "that one"})
    assert refused["error"]["code"] == -32602
    assert any(field.startswith("params.payload") for field in violations(refused))


async def test_payload_over_16_kib_is_invalid_params(rt_client, livekit):
    live = await open_session(rt_client, livekit, interactions=("pointer",))
    refused = await interact(rt_client, live.sid, "visual.select", {"targetId": "a" * 17000})
    assert refused["error"]["code"] == -32602
    assert any(field.startswith("params.payload") for field in violations(refused))


async def test_a_replayed_command_returns_the_same_bytes_and_sends_once(rt_client, livekit):
    live = await open_session(rt_client, livekit)
    params = {
        "sessionId": live.sid,
        "sessionEpoch": 1,
        "commandId": new_id(),
        "type": "input.text",
        "payload": {"text": "once only"},
    }
    envelope = {"jsonrpc": "2.0", "id": 3, "method": "aim.realtime.SendInteraction"}
    content = msgspec.json.encode({**envelope, "params": params})
    hdrs = {"Content-Type": "application/json", **headers(realtime=True)}
    first = await rt_client.post("/a2a", content=content, headers=hdrs)
    assert "result" in first.json(), first.json()
    await wait_for_data(livekit, live.room, "input.text")
    # the session moves on between the two calls: the replay is still the stored outcome
    other = await interact(rt_client, live.sid, "input.text", {"text": "another"})
    assert "result" in other
    second = await rt_client.post("/a2a", content=content, headers=hdrs)
    assert second.content == first.content
    assert REALTIME in second.headers.get("A2A-Extensions", "")
    await wait_for_data(livekit, live.room, "input.text", count=2)
    await quiet()
    texts = [b["payload"]["text"] for b in data_to_agent(livekit, live.room, "input.text")]
    assert texts == ["once only", "another"]


async def test_a_reused_command_id_with_other_params_conflicts(rt_client, livekit):
    live = await open_session(rt_client, livekit)
    command_id = new_id()
    first = await interact(rt_client, live.sid, "input.text", {"text": "a"}, command_id=command_id)
    assert "result" in first
    clash = await interact(rt_client, live.sid, "input.text", {"text": "b"}, command_id=command_id)
    assert clash["error"]["code"] == -31004
    assert meta(clash)["commandId"] == command_id
    await quiet()
    assert len(data_to_agent(livekit, live.room, "input.text")) == 1


async def test_another_principal_cannot_interact_with_the_session(rt_client, livekit):
    live = await open_session(rt_client, livekit)
    foreign = await interact(rt_client, live.sid, "input.text", {"text": "hi"}, subject="bob")
    assert foreign["error"]["code"] == -31001
    await quiet(0.1)
    assert data_to_agent(livekit, live.room) == []


async def test_unknown_operation_is_operation_not_found(rt_client, livekit):
    live = await open_session(rt_client, livekit)
    missing = new_id()
    for kind, payload in [
        ("operation.cancel", {"operationId": missing}),
        (
            "operation.confirm",
            {
                "operationId": missing,
                "requirementId": new_id(),
                "actionDigest": "sha256:" + "a" * 64,
            },
        ),
        ("media.decide", {"operationId": missing, "decision": "deny"}),
    ]:
        refused = await interact(rt_client, live.sid, kind, payload)
        assert refused["error"]["code"] == -31006, (kind, refused)
    got = await call(rt_client, "GetOperation", sessionId=live.sid, operationId=missing)
    assert got["error"]["code"] == -31006
    foreign = await call(rt_client, "GetOperation", "bob", sessionId=live.sid, operationId=missing)
    assert foreign["error"]["code"] == -31001


async def test_interaction_after_the_agent_left_is_invalid_state(rt_client, livekit):
    live = await open_session(rt_client, livekit)
    livekit.leave(live.room, AGENT)
    assert (
        await send_webhook(rt_client, "participant_left", live.room, AGENT, agent=True) == "applied"
    )
    # lost: a replacement is dispatched, and until it joins nobody hears the user
    assert (await get_session(rt_client, live.sid))["agent"]["state"] == "dispatching"
    refused = await interact(rt_client, live.sid, "input.text", {"text": "hello?"})
    assert refused.get("error", {}).get("code") == -31003, refused
