"""Media consent (profile §5, §7, §9): the user's camera and screen through live permission
changes in LiveKit, the agent's sources through operations, and agent-initiated requests the
user decides."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest
from livekit import api
from livekit.api import TokenVerifier

from tests.conftest import LIVEKIT_KEY, LIVEKIT_SECRET, headers, rpc
from tests.e2e import agent_operation_helpers as ops
from tests.e2e.realtime_helpers import call, new_id
from tests.e2e.webhook_helpers import send_webhook

pytestmark = pytest.mark.e2e

MIC, CAMERA = api.TrackSource.MICROPHONE, api.TrackSource.CAMERA
SCREEN, SCREEN_AUDIO = api.TrackSource.SCREEN_SHARE, api.TrackSource.SCREEN_SHARE_AUDIO


async def decide(client, live: ops.Live, operation_id: str, decision: str) -> dict[str, Any]:
    """The user's media.decide of the agent's request `operation_id`: allow or deny."""
    body = {"operationId": operation_id, "decision": decision}
    return await ops.interact(client, live.sid, "media.decide", body)


def sources(session, side):
    found: dict[str, str] = session["media"]["sources"][side]
    return found


async def join_token_sources(client, sid, endpoint_id, epoch=1) -> list[str]:
    joined = await call(
        client,
        "JoinSession",
        sessionId=sid,
        sessionEpoch=epoch,
        endpointId=endpoint_id,
        commandId=new_id(),
    )
    claims = TokenVerifier(LIVEKIT_KEY, LIVEKIT_SECRET).verify(joined["result"]["media"]["token"])
    return list(claims.video.can_publish_sources)


async def test_user_camera_request_prepare_live_revoke_and_request_again(rt_client, livekit):
    live = await ops.open_session(rt_client, livekit)
    room, phone = live.room, live.phone
    joined_updates = len(ops.updates_for(livekit, room, phone))
    granted = await ops.interact(
        rt_client, live.sid, "media.request", {"side": "user", "source": "camera"}
    )
    assert sources(granted["result"]["session"], "user")["camera"] == "granted"
    assert "operation" not in granted["result"]
    update = await ops.wait_for_update(livekit, room, phone, joined_updates + 1)
    assert ops.sources_of(update) == [MIC, CAMERA]
    assert update.permission.can_subscribe is True
    assert update.permission.can_publish_data is False
    assert list(livekit.permission(room, phone).can_publish_sources) == [MIC, CAMERA]

    prepared = await ops.interact(
        rt_client, live.sid, "media.prepare", {"side": "user", "source": "camera"}
    )
    assert sources(prepared["result"]["session"], "user")["camera"] == "preparing"
    track = api.TrackInfo(sid="TR_cam", source=CAMERA)
    assert await send_webhook(rt_client, "track_published", room, phone, track=track) == "applied"
    assert sources(await ops.get_session(rt_client, live.sid), "user")["camera"] == "live"

    revoked = await ops.interact(
        rt_client, live.sid, "media.revoke", {"side": "user", "source": "camera"}
    )
    assert sources(revoked["result"]["session"], "user")["camera"] == "revoked"
    update = await ops.wait_for_update(livekit, room, phone, joined_updates + 2)
    assert ops.sources_of(update) == [MIC]
    assert list(livekit.permission(room, phone).can_publish_sources) == [MIC]
    # a fresh join token of the same device no longer allows the camera either
    assert await join_token_sources(rt_client, live.sid, phone) == ["microphone"]
    refused = await ops.interact(
        rt_client, live.sid, "media.prepare", {"side": "user", "source": "camera"}
    )
    assert refused["error"]["code"] == -31003
    assert ops.meta(refused)["state"] == "revoked"

    again = await ops.interact(
        rt_client, live.sid, "media.request", {"side": "user", "source": "camera"}
    )
    assert sources(again["result"]["session"], "user")["camera"] == "granted"
    update = await ops.wait_for_update(livekit, room, phone, joined_updates + 3)
    assert ops.sources_of(update) == [MIC, CAMERA]
    assert await join_token_sources(rt_client, live.sid, phone) == ["microphone", "camera"]


async def test_user_screen_grants_screen_share_and_its_audio(rt_client, livekit):
    live = await ops.open_session(
        rt_client, livekit, user_sources=("camera", "screen"), screen=True
    )
    before = len(ops.updates_for(livekit, live.room, live.phone))
    granted = await ops.interact(
        rt_client, live.sid, "media.request", {"side": "user", "source": "screen"}
    )
    assert sources(granted["result"]["session"], "user") == {"camera": "off", "screen": "granted"}
    update = await ops.wait_for_update(livekit, live.room, live.phone, before + 1)
    assert ops.sources_of(update) == [MIC, SCREEN, SCREEN_AUDIO]
    camera = await ops.interact(
        rt_client, live.sid, "media.request", {"side": "user", "source": "camera"}
    )
    assert "result" in camera
    update = await ops.wait_for_update(livekit, live.room, live.phone, before + 2)
    assert sorted(ops.sources_of(update)) == sorted([MIC, CAMERA, SCREEN, SCREEN_AUDIO])


async def test_sources_not_requested_or_not_offered_are_unavailable(rt_client, livekit):
    # screen requested for the session but the device has none; camera not requested at all
    live = await ops.open_session(
        rt_client, livekit, user_sources=("screen",), agent_sources=("screen",)
    )
    before = len(ops.updates_for(livekit, live.room, live.phone))
    for side, source in (("user", "screen"), ("user", "camera"), ("agent", "camera")):
        refused = await ops.interact(
            rt_client, live.sid, "media.request", {"side": side, "source": source}
        )
        assert refused["error"]["code"] == -31009, (side, source, refused)
        assert ops.meta(refused)["missing"] == source
    for action in ("media.prepare", "media.revoke"):
        refused = await ops.interact(
            rt_client, live.sid, action, {"side": "user", "source": "camera"}
        )
        assert refused["error"]["code"] == -31009, refused
    await ops.quiet(0.1)
    assert len(ops.updates_for(livekit, live.room, live.phone)) == before
    assert ops.data_to_agent(livekit, live.room) == []


async def test_media_steps_out_of_order_are_invalid_state(rt_client, livekit):
    live = await ops.open_session(rt_client, livekit)
    for action in ("media.prepare", "media.stop", "media.revoke"):
        refused = await ops.interact(
            rt_client, live.sid, action, {"side": "user", "source": "camera"}
        )
        assert refused["error"]["code"] == -31003, (action, refused)
        assert ops.meta(refused)["state"] == "off"
    await ops.interact(rt_client, live.sid, "media.request", {"side": "user", "source": "camera"})
    twice = await ops.interact(
        rt_client, live.sid, "media.request", {"side": "user", "source": "camera"}
    )
    assert twice["error"]["code"] == -31003
    assert ops.meta(twice)["state"] == "granted"


async def test_media_stop_takes_the_permission_away_until_requested_again(rt_client, livekit):
    """docs/decisions.md 20: a stopped camera cannot come back without the user asking again."""
    live = await ops.open_session(rt_client, livekit)
    await ops.interact(rt_client, live.sid, "media.request", {"side": "user", "source": "camera"})
    track = api.TrackInfo(sid="TR_cam", source=CAMERA)
    assert (
        await send_webhook(rt_client, "track_published", live.room, live.phone, track=track)
        == "applied"
    )
    stopped = await ops.interact(
        rt_client, live.sid, "media.stop", {"side": "user", "source": "camera"}
    )
    assert sources(stopped["result"]["session"], "user")["camera"] == "stopped"
    await ops.quiet()
    assert list(livekit.permission(live.room, live.phone).can_publish_sources) == [MIC]
    again = await ops.interact(
        rt_client, live.sid, "media.request", {"side": "user", "source": "camera"}
    )
    assert sources(again["result"]["session"], "user")["camera"] == "granted"
    await ops.quiet()
    assert list(livekit.permission(live.room, live.phone).can_publish_sources) == [MIC, CAMERA]


async def test_agent_screen_request_is_an_operation_the_agent_answers(rt_client, livekit):
    live = await ops.open_session(rt_client, livekit, agent_sources=("screen",))
    asked = await ops.interact(
        rt_client, live.sid, "media.request", {"side": "agent", "source": "screen"}
    )
    operation = asked["result"]["operation"]
    assert operation["kind"] == "media.request"
    assert operation["createdBy"] == "client"
    assert operation["state"] == "running"
    assert operation["media"] == {"side": "agent", "source": "screen"}
    assert sources(asked["result"]["session"], "agent")["screen"] == "requested"
    assert asked["result"]["session"]["pendingOperationIds"] == [operation["operationId"]]
    (body,) = await ops.wait_for_data(livekit, live.room, "media.request")
    assert body["payload"] == {
        "side": "agent",
        "source": "screen",
        "operationId": operation["operationId"],
    }
    assert body["commandId"] == asked["result"]["interaction"]["commandId"]

    _, done, _ = await ops.update_operation(
        rt_client,
        live,
        operation["operationId"],
        "succeeded",
    )
    assert done["result"]["operation"]["state"] == "succeeded", done
    assert sources(await ops.get_session(rt_client, live.sid), "agent")["screen"] == "granted"

    track = api.TrackInfo(sid="TR_agent", source=SCREEN)
    status = await send_webhook(
        rt_client, "track_published", live.room, "agent-1", agent=True, track=track
    )
    assert status == "applied"
    session = await ops.get_session(rt_client, live.sid)
    assert sources(session, "agent")["screen"] == "live"
    assert sources(session, "user")["camera"] == "off"

    stopped = await ops.interact(
        rt_client, live.sid, "media.stop", {"side": "agent", "source": "screen"}
    )
    assert sources(stopped["result"]["session"], "agent")["screen"] == "stopped"
    (stop_body,) = await ops.wait_for_data(livekit, live.room, "media.stop")
    assert stop_body["payload"] == {"side": "agent", "source": "screen"}


async def test_agent_source_request_refused_by_the_agent_leaves_it_off(rt_client, livekit):
    live = await ops.open_session(rt_client, livekit, agent_sources=("camera",))
    asked = await ops.interact(
        rt_client, live.sid, "media.request", {"side": "agent", "source": "camera"}
    )
    operation = asked["result"]["operation"]
    _, failed, _ = await ops.update_operation(
        rt_client,
        live,
        operation["operationId"],
        "failed",
        error={"message": "no camera"},
    )
    assert failed["result"]["operation"]["state"] == "failed", failed
    assert sources(await ops.get_session(rt_client, live.sid), "agent")["camera"] == "off"


async def agent_asks_for_user_camera(client, live):
    status, body, _ = await ops.request_operation(
        client,
        live,
        kind="media.request",
        media={"side": "user", "source": "camera"},
        confirmation="required",
    )
    assert status == 200, body
    assert "result" in body, body
    operation: dict = body["result"]["operation"]
    return operation


async def test_agent_asks_for_the_camera_user_denies_then_allows(rt_client, livekit):
    live = await ops.open_session(rt_client, livekit)
    before = len(ops.updates_for(livekit, live.room, live.phone))
    first = await agent_asks_for_user_camera(rt_client, live)
    assert first["state"] == "awaiting_confirmation"
    assert first["kind"] == "media.request"
    assert first["createdBy"] == "provider"
    assert first["media"] == {"side": "user", "source": "camera"}
    assert sources(await ops.get_session(rt_client, live.sid), "user")["camera"] == "requested"
    task = await ops.get_task(rt_client, live.task_id)
    assert task["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
    assert task["status"]["message"]["parts"][0]["text"]
    assert ops.requirement_data(task)["operationId"] == first["operationId"]

    denied = await decide(rt_client, live, first["operationId"], "deny")
    assert denied["result"]["operation"]["state"] == "canceled", denied
    assert sources(denied["result"]["session"], "user")["camera"] == "off"
    assert (await ops.get_task(rt_client, live.task_id))["status"]["state"] == "TASK_STATE_WORKING"
    await ops.quiet(0.1)
    assert len(ops.updates_for(livekit, live.room, live.phone)) == before

    second = await agent_asks_for_user_camera(rt_client, live)
    allowed = await decide(rt_client, live, second["operationId"], "allow")
    assert allowed["result"]["operation"]["state"] == "running", allowed
    assert sources(allowed["result"]["session"], "user")["camera"] == "granted"
    update = await ops.wait_for_update(livekit, live.room, live.phone, before + 1)
    assert ops.sources_of(update) == [MIC, CAMERA]
    updates = await ops.wait_for_data(livekit, live.room, "operation.update", count=2)
    assert [u["payload"]["state"] for u in updates] == ["canceled", "running"]
    again = await decide(rt_client, live, second["operationId"], "deny")
    assert again["error"]["code"] == -31003, again


async def test_agent_camera_request_answered_through_continue_task(rt_client, livekit):
    live = await ops.open_session(rt_client, livekit)
    before = len(ops.updates_for(livekit, live.room, live.phone))
    operation = await agent_asks_for_user_camera(rt_client, live)
    task = await ops.get_task(rt_client, live.task_id)
    answered = await rpc(
        rt_client, "ContinueTask", ops.continue_params(live.task_id, ops.requirement_data(task))
    )
    assert answered["result"]["task"]["status"]["state"] == "TASK_STATE_WORKING", answered
    got = await ops.get_operation(rt_client, live.sid, operation["operationId"])
    assert got["result"]["operation"]["state"] == "running"
    assert sources(await ops.get_session(rt_client, live.sid), "user")["camera"] == "granted"
    update = await ops.wait_for_update(livekit, live.room, live.phone, before + 1)
    assert ops.sources_of(update) == [MIC, CAMERA]


async def test_media_decide_answers_only_the_agents_media_requests(rt_client, livekit):
    live = await ops.open_session(rt_client, livekit, agent_sources=("screen",))
    action = await ops.request_action(rt_client, live)
    refused = await decide(rt_client, live, action["operationId"], "allow")
    assert refused["error"]["code"] == -31003, refused
    mine = await ops.interact(
        rt_client, live.sid, "media.request", {"side": "agent", "source": "screen"}
    )
    refused = await decide(rt_client, live, mine["result"]["operation"]["operationId"], "allow")
    assert refused["error"]["code"] == -31003, refused
    got = await ops.get_operation(rt_client, live.sid, action["operationId"])
    assert got["result"]["operation"]["state"] == "awaiting_confirmation"


async def test_agent_cannot_ask_for_a_source_the_session_did_not_request(rt_client, livekit):
    live = await ops.open_session(rt_client, livekit, user_sources=(), agent_sources=())
    for side in ("user", "agent"):
        _, body, _ = await ops.request_operation(
            rt_client,
            live,
            kind="media.request",
            media={"side": side, "source": "camera"},
            confirmation="required",
        )
        assert body["error"]["code"] == -31009, (side, body)
        assert ops.meta(body)["missing"] == "camera"
    assert (await ops.get_session(rt_client, live.sid))["pendingOperationIds"] == []


async def test_a_replayed_agent_media_request_opens_one_operation(rt_client, livekit):
    live = await ops.open_session(rt_client, livekit, agent_sources=("camera",))
    params = {
        "sessionId": live.sid,
        "sessionEpoch": 1,
        "commandId": new_id(),
        "type": "media.request",
        "payload": {"side": "agent", "source": "camera"},
    }
    content = msgspec.json.encode(
        {"jsonrpc": "2.0", "id": 1, "method": "aim.realtime.SendInteraction", "params": params}
    )
    hdrs = {"Content-Type": "application/json", **headers(realtime=True)}
    first = await rt_client.post("/a2a", content=content, headers=hdrs)
    second = await rt_client.post("/a2a", content=content, headers=hdrs)
    assert "result" in first.json(), first.json()
    assert second.content == first.content
    operation_id = first.json()["result"]["operation"]["operationId"]
    assert (await ops.get_session(rt_client, live.sid))["pendingOperationIds"] == [operation_id]
    await ops.wait_for_data(livekit, live.room, "media.request")
    await ops.quiet()
    assert len(ops.data_to_agent(livekit, live.room, "media.request")) == 1


async def test_canceling_an_agent_media_request_leaves_the_source_off(rt_client, livekit):
    live = await ops.open_session(rt_client, livekit, agent_sources=("screen",))
    asked = await ops.interact(
        rt_client, live.sid, "media.request", {"side": "agent", "source": "screen"}
    )
    operation_id = asked["result"]["operation"]["operationId"]
    canceled = await ops.interact(
        rt_client, live.sid, "operation.cancel", {"operationId": operation_id}
    )
    assert canceled["result"]["operation"]["state"] == "canceled", canceled
    assert sources(canceled["result"]["session"], "agent")["screen"] == "off"
    _, late, _ = await ops.update_operation(
        rt_client,
        live,
        operation_id,
        "succeeded",
    )
    assert late["error"]["code"] == -31003, late
    assert sources(await ops.get_session(rt_client, live.sid), "agent")["screen"] == "off"
    updates = await ops.wait_for_data(livekit, live.room, "operation.update")
    assert updates[-1]["payload"] == {"operationId": operation_id, "state": "canceled"}
