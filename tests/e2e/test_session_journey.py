"""The whole journey of a realtime session over HTTP, against the LiveKit stand-in."""

from __future__ import annotations

import pytest
from livekit.api import TokenVerifier

from tests.conftest import LIVEKIT_KEY, LIVEKIT_SECRET, error_info
from tests.e2e.realtime_helpers import call, create_session, new_id, register, session_of

pytestmark = pytest.mark.e2e


async def test_create_join_handoff_end(rt_client, livekit):
    created = await create_session(rt_client)
    task = created["result"]["task"]
    meta = session_of(task)
    assert task["status"]["state"] == "TASK_STATE_WORKING"
    session_id = meta["sessionId"]
    room = f"aim-{session_id}-e1"
    assert meta["sessionState"] == "ready"

    got = await call(rt_client, "GetSession", sessionId=session_id)
    session = got["result"]["session"]
    assert session["state"] == "ready"
    assert session["media"]["room"] == room
    assert len(livekit.calls_to("CreateRoom")) == 1
    assert [d.agent_name for d in livekit.dispatches_in(room, "aim-realtime-agent")] == [
        "aim-realtime-agent"
    ]

    phone = (await register(rt_client, session_id, 1, "phone"))["result"]["endpoint"]
    join_id = new_id()
    joined = await call(rt_client, "JoinSession", sessionId=session_id, sessionEpoch=1,
                        endpointId=phone["endpointId"], commandId=join_id)  # fmt: skip
    media = joined["result"]["media"]
    claims = TokenVerifier(LIVEKIT_KEY, LIVEKIT_SECRET).verify(media["token"])
    assert claims.identity == phone["endpointId"]
    assert claims.video.room == room
    assert claims.video.room_join is True
    assert claims.video.can_publish_sources == ["microphone"]
    assert claims.video.can_publish_data is False
    assert not claims.video.room_admin
    assert not claims.video.room_create
    assert joined["result"]["session"]["state"] == "joining"

    laptop = (await register(rt_client, session_id, 1, "laptop"))["result"]["endpoint"]
    handoff = await call(rt_client, "JoinSession", sessionId=session_id, sessionEpoch=1,
                         endpointId=laptop["endpointId"], commandId=new_id())  # fmt: skip
    assert handoff["result"]["session"]["sessionEpoch"] == 2
    await livekit.wait_for_call("RemoveParticipant")
    removed = livekit.calls_to("RemoveParticipant")[-1].request
    assert removed.identity == phone["endpointId"]

    stale = await call(rt_client, "JoinSession", sessionId=session_id, sessionEpoch=1,
                       endpointId=phone["endpointId"], commandId=new_id())  # fmt: skip
    assert stale["error"]["code"] == -31002
    assert error_info(stale)["metadata"]["reason"] == "superseded"
    assert error_info(stale)["metadata"]["currentEpoch"] == "2"

    ended = await call(rt_client, "EndSession", sessionId=session_id, commandId=new_id(),
                       reason="user hung up")  # fmt: skip
    assert ended["result"]["session"]["state"] == "ending"
    await livekit.wait_for_call("DeleteRoom")
    final_task = await rpc_get_task(rt_client, task["id"])
    assert final_task["status"]["state"] == "TASK_STATE_COMPLETED"
    assert room not in livekit.rooms


async def rpc_get_task(client, task_id):
    from tests.conftest import rpc

    return (await rpc(client, "GetTask", {"id": task_id}))["result"]
