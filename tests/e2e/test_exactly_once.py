"""Exactly-once commands over HTTP (profile §6): concurrent duplicates, conflicts, replays after an
epoch bump, GetCommand, and a property test of the commandId rules with RegisterEndpoint."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import msgspec
import pytest
from hypothesis import HealthCheck, Phase, example, given, settings
from hypothesis import strategies as st
from livekit.api import TokenVerifier

from tests.conftest import LIVEKIT_KEY, LIVEKIT_SECRET, error_info, headers
from tests.e2e.realtime_helpers import CAPS, call, create_session, new_id, register, session_of

pytestmark = pytest.mark.e2e

DUPLICATES = 50


def rpc_body(method: str, params: dict[str, Any], request_id: int = 7) -> bytes:
    """One JSON-RPC request as raw bytes, so duplicates are byte-for-byte the same request."""
    return msgspec.json.encode(
        {"jsonrpc": "2.0", "id": request_id, "method": f"aim.realtime.{method}", "params": params}
    )


async def post(client: httpx.AsyncClient, body: bytes, subject: str = "alice") -> httpx.Response:
    return await client.post(
        "/a2a",
        content=body,
        headers={"Content-Type": "application/json", **headers(subject, realtime=True)},
    )


async def post_many(client: httpx.AsyncClient, body: bytes, n: int) -> list[httpx.Response]:
    return list(await asyncio.gather(*(post(client, body) for _ in range(n))))


async def new_session(client: httpx.AsyncClient, subject: str = "alice") -> str:
    created = await create_session(client, subject=subject)
    meta = session_of(created["result"]["task"])
    assert meta["sessionState"] == "ready"
    session_id: str = meta["sessionId"]
    return session_id


async def session(client: httpx.AsyncClient, session_id: str, subject: str = "alice") -> Any:
    return (await call(client, "GetSession", subject, sessionId=session_id))["result"]["session"]


async def events_of(store: Any, session_id: str) -> list[dict[str, Any]]:
    """The session's event stream `aim:{<sessionId>}:events`, decoded."""
    entries = await store.client.xrange(f"aim:{{{session_id}}}:events")
    return [msgspec.json.decode(fields[b"e"]) for _, fields in entries]


async def test_fifty_concurrent_identical_joins_apply_once(rt_client, livekit, store):
    session_id = await new_session(rt_client)
    phone = (await register(rt_client, session_id, 1, "phone"))["result"]["endpoint"]
    before = await session(rt_client, session_id)
    join_id = new_id()
    body = rpc_body(
        "JoinSession",
        {"sessionId": session_id, "sessionEpoch": 1, "endpointId": phone["endpointId"],
         "commandId": join_id},
    )  # fmt: skip

    responses = await post_many(rt_client, body, DUPLICATES)

    assert {r.status_code for r in responses} == {200}
    assert len({r.content for r in responses}) == 1, "every duplicate gets the same bytes"
    result = responses[0].json()["result"]
    assert result["session"]["state"] == "joining"
    assert result["session"]["version"] == before["version"] + 1
    claims = TokenVerifier(LIVEKIT_KEY, LIVEKIT_SECRET).verify(result["media"]["token"])
    assert claims.identity == phone["endpointId"]
    assert claims.video.room == f"aim-{session_id}-e1"

    after = await session(rt_client, session_id)
    assert after["version"] == before["version"] + 1, "exactly one transition"
    assert after["sessionEpoch"] == 1
    assert after["activeEndpointId"] == phone["endpointId"]
    joins = [e for e in await events_of(store, session_id) if e.get("commandId") == join_id]
    assert len(joins) == 1
    assert (joins[0]["from"], joins[0]["to"]) == ("ready", "joining")


async def test_fifty_concurrent_identical_ends_delete_the_room_once(rt_client, livekit, store):
    session_id = await new_session(rt_client)
    before = await session(rt_client, session_id)
    end_id = new_id()
    body = rpc_body("EndSession", {"sessionId": session_id, "commandId": end_id, "reason": "bye"})

    responses = await post_many(rt_client, body, DUPLICATES)

    assert {r.status_code for r in responses} == {200}
    assert len({r.content for r in responses}) == 1
    ended = responses[0].json()["result"]["session"]
    assert ended["state"] == "ending"
    assert ended["endReason"] == "bye"
    assert ended["version"] == before["version"] + 1
    await livekit.wait_for_call("DeleteRoom")
    await asyncio.sleep(0.3)  # room for a stray second effect to show up
    assert len(livekit.calls_to("DeleteRoom")) == 1
    assert f"aim-{session_id}-e1" not in livekit.rooms
    ends = [e for e in await events_of(store, session_id) if e.get("commandId") == end_id]
    assert len(ends) == 1
    # a late duplicate still replays the stored outcome, although the session moved on to ended
    late = await post(rt_client, body)
    assert late.content == responses[0].content


async def test_same_command_id_with_other_params_conflicts(rt_client, livekit):
    session_id = await new_session(rt_client)
    phone = (await register(rt_client, session_id, 1, "phone"))["result"]["endpoint"]
    laptop = (await register(rt_client, session_id, 1, "laptop"))["result"]["endpoint"]
    join_id = new_id()
    joined = await call(rt_client, "JoinSession", sessionId=session_id, sessionEpoch=1,
                        endpointId=phone["endpointId"], commandId=join_id)  # fmt: skip
    assert "result" in joined
    version = joined["result"]["session"]["version"]

    other_endpoint = await call(rt_client, "JoinSession", sessionId=session_id, sessionEpoch=1,
                                endpointId=laptop["endpointId"], commandId=join_id)  # fmt: skip
    assert other_endpoint["error"]["code"] == -31004
    info = error_info(other_endpoint)
    assert info["reason"] == "COMMAND_CONFLICT"
    assert info["domain"] == "urn:aim:a2a:realtime:v1"
    assert info["metadata"]["commandId"] == join_id
    assert info["metadata"]["method"] == "aim.realtime.JoinSession"

    other_method = await call(
        rt_client, "RegisterEndpoint", sessionId=session_id, sessionEpoch=1, commandId=join_id,
        clientEndpointKey="tablet", capabilities=CAPS,
    )  # fmt: skip
    assert other_method["error"]["code"] == -31004
    assert error_info(other_method)["metadata"]["commandId"] == join_id

    end_id = new_id()
    ended = await call(rt_client, "EndSession", sessionId=session_id, commandId=end_id,
                       reason="user hung up")  # fmt: skip
    assert ended["result"]["session"]["state"] == "ending"
    other_reason = await call(rt_client, "EndSession", sessionId=session_id, commandId=end_id,
                              reason="changed my mind")  # fmt: skip
    assert other_reason["error"]["code"] == -31004
    info = error_info(other_reason)
    assert info["metadata"] == {"commandId": end_id, "method": "aim.realtime.EndSession"}
    final = await session(rt_client, session_id)
    assert final["endReason"] == "user hung up"
    assert final["version"] >= version + 1


async def test_retry_from_before_a_handoff_replays_its_original_result(rt_client, livekit):
    session_id = await new_session(rt_client)
    phone = (await register(rt_client, session_id, 1, "phone"))["result"]["endpoint"]
    laptop = (await register(rt_client, session_id, 1, "laptop"))["result"]["endpoint"]
    phone_join = rpc_body(
        "JoinSession",
        {"sessionId": session_id, "sessionEpoch": 1, "endpointId": phone["endpointId"],
         "commandId": new_id()},
    )  # fmt: skip
    first = await post(rt_client, phone_join)
    assert first.json()["result"]["session"]["sessionEpoch"] == 1

    handoff = await call(rt_client, "JoinSession", sessionId=session_id, sessionEpoch=1,
                         endpointId=laptop["endpointId"], commandId=new_id())  # fmt: skip
    assert handoff["result"]["session"]["sessionEpoch"] == 2
    before = await session(rt_client, session_id)

    retry = await post(rt_client, phone_join)

    assert retry.content == first.content
    after = await session(rt_client, session_id)
    assert after["version"] == before["version"]
    assert after["sessionEpoch"] == 2
    assert after["activeEndpointId"] == laptop["endpointId"]
    # a new command from the phone at the old epoch is fenced
    stale = await call(rt_client, "JoinSession", sessionId=session_id, sessionEpoch=1,
                       endpointId=phone["endpointId"], commandId=new_id())  # fmt: skip
    assert stale["error"]["code"] == -31002
    assert error_info(stale)["metadata"]["reason"] == "superseded"


async def test_an_epoch_the_server_never_issued_is_ahead(rt_client, livekit):
    session_id = await new_session(rt_client)
    phone = (await register(rt_client, session_id, 1, "phone"))["result"]["endpoint"]
    before = await session(rt_client, session_id)
    join_id = new_id()

    ahead = await call(rt_client, "JoinSession", sessionId=session_id, sessionEpoch=7,
                       endpointId=phone["endpointId"], commandId=join_id)  # fmt: skip

    assert ahead["error"]["code"] == -31002
    info = error_info(ahead)
    assert info["reason"] == "STALE_EPOCH"
    assert info["metadata"] == {"currentEpoch": "1", "state": "ready", "reason": "ahead"}
    assert (await session(rt_client, session_id))["version"] == before["version"]
    # a rejected command stored nothing: it is unknown to GetCommand and can be sent again
    unknown = await call(rt_client, "GetCommand", sessionId=session_id, commandId=join_id)
    assert unknown["error"]["code"] == -31005
    again = await call(rt_client, "JoinSession", sessionId=session_id, sessionEpoch=1,
                       endpointId=phone["endpointId"], commandId=join_id)  # fmt: skip
    assert again["result"]["session"]["state"] == "joining"


async def test_get_command_returns_the_stored_outcome(rt_client, livekit):
    session_id = await new_session(rt_client)
    phone = (await register(rt_client, session_id, 1, "phone"))["result"]["endpoint"]
    join_id = new_id()
    joined = await call(rt_client, "JoinSession", sessionId=session_id, sessionEpoch=1,
                        endpointId=phone["endpointId"], commandId=join_id)  # fmt: skip

    got = await call(rt_client, "GetCommand", sessionId=session_id, commandId=join_id)

    command = got["result"]["command"]
    assert set(command) == {
        "commandId", "sessionId", "method", "status", "sessionEpoch", "createdAt", "result"
    }  # fmt: skip
    assert command["commandId"] == join_id
    assert command["sessionId"] == session_id
    assert command["method"] == "aim.realtime.JoinSession"
    assert command["status"] == "applied"
    assert command["sessionEpoch"] == 1
    assert command["createdAt"].endswith("Z") or "+" in command["createdAt"]
    assert command["result"] == joined["result"]  # the token re-signed from its claims

    unknown = await call(rt_client, "GetCommand", sessionId=session_id, commandId=new_id())
    assert unknown["error"]["code"] == -31005
    assert error_info(unknown)["reason"] == "COMMAND_NOT_FOUND"


# --- property: the commandId rules of RegisterEndpoint -------------------------------------------

KEYS = ("phone", "laptop", "tablet")
SLOTS = 5  # commandIds per example: a step picks one, so reuse is frequent
CAMERA = {**CAPS, "camera": True}

# one step: (which commandId, which clientEndpointKey, camera capability or not)
steps = st.lists(
    st.tuples(st.integers(0, SLOTS - 1), st.sampled_from(KEYS), st.booleans()),
    min_size=1,
    max_size=8,
)


@settings(
    max_examples=20,
    derandomize=True,
    deadline=None,
    database=None,
    # each example is a session over HTTP: shrinking could outlast the 60 s test timeout, and a
    # failing sequence is at most 8 steps, readable as it is
    phases=(Phase.explicit, Phase.generate),
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(steps=steps)
# a no-op registration (known key, same capabilities) under a new commandId, retried after another
# change and then reused with other params: it must replay, then conflict
@example(steps=[(0, "phone", True), (1, "phone", True), (2, "laptop", False), (1, "phone", True),
                (1, "tablet", False)])  # fmt: skip
async def test_register_endpoint_command_ids_property(rt_client, livekit, steps):
    """Model-based: a commandId sent again with its params answers the first bytes; with other
    params it is -31004; neither changes the session version; the endpoints are exactly the
    distinct clientEndpointKeys of the applied commands, with their last applied capabilities.

    Registering a known key with the same capabilities under a new commandId changes nothing, but
    it is an applied command all the same: its retry must replay its first answer too."""
    subject = f"prop-{new_id()}"  # a principal per example: the live-session limit stays far
    session_id = await new_session(rt_client, subject)
    version = (await session(rt_client, session_id, subject))["version"]
    command_ids = [new_id() for _ in range(SLOTS)]
    applied: dict[str, tuple[tuple[str, bool], bytes]] = {}  # commandId → (params, first body)
    cameras: dict[str, bool] = {}  # clientEndpointKey → camera as its last applied command said
    for slot, key, camera in steps:
        command_id = command_ids[slot]
        body = rpc_body(
            "RegisterEndpoint",
            {"sessionId": session_id, "sessionEpoch": 1, "commandId": command_id,
             "clientEndpointKey": key, "capabilities": CAMERA if camera else CAPS},
        )  # fmt: skip
        response = await post(rt_client, body, subject)
        reply = response.json()
        if command_id not in applied:
            result = reply["result"]
            assert result["endpoint"]["clientEndpointKey"] == key
            assert result["endpoint"]["capabilities"]["camera"] is camera
            # one transition at most (none when nothing changed): a replay or a conflict before
            # this step that had bumped the version would show here as a jump of two
            assert result["session"]["version"] in (version, version + 1)
            version = result["session"]["version"]
            applied[command_id] = ((key, camera), response.content)
            cameras[key] = camera
        elif applied[command_id][0] == (key, camera):
            assert response.content == applied[command_id][1]
        else:
            assert reply["error"]["code"] == -31004
            assert error_info(reply)["metadata"] == {
                "commandId": command_id, "method": "aim.realtime.RegisterEndpoint"
            }  # fmt: skip
    final = await session(rt_client, session_id, subject)
    assert final["version"] == version
    assert {e["clientEndpointKey"]: e["capabilities"]["camera"] for e in final["endpoints"]} == (
        cameras
    )
