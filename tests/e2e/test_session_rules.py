"""The rules of realtime sessions over HTTP (profile §2, §3, §6): idempotent creation, capability
gaps, returnImmediately, endpoints, join preconditions, ending and canceling, the live-session limit
per principal, and that another principal's session looks exactly like an unknown one."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import httpx
import pytest

from tests.conftest import error_info, rpc, service
from tests.e2e.realtime_helpers import (
    CAPS,
    call,
    create_part,
    create_session,
    new_id,
    register,
    session_of,
)

pytestmark = pytest.mark.e2e

AGENT = "aim-realtime-agent"


async def session(client: httpx.AsyncClient, session_id: str, subject: str = "alice") -> Any:
    return (await call(client, "GetSession", subject, sessionId=session_id))["result"]["session"]


async def wait_for_state(
    client: httpx.AsyncClient,
    session_id: str,
    state: str,
    within: float = 5.0,
    *,
    settled: bool = False,
) -> Any:
    """The session once it is in `state` (`settled`: and its outbox is empty; the effect whose
    follow-up made the state is forgotten just after that commit)."""
    seen: list[str] = []
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        current = await session(client, session_id)
        if current["state"] == state and not (settled and current["effects"]["pending"]):
            return current
        seen.append(current["state"])
        await asyncio.sleep(0.02)
    raise AssertionError(f"session {session_id} never reached {state}; it went {seen[-3:]}")


async def new_session(client: httpx.AsyncClient, subject: str = "alice") -> tuple[str, str]:
    """(taskId, sessionId) of a new session that is ready."""
    task = (await create_session(client, subject=subject))["result"]["task"]
    meta = session_of(task)
    assert meta["sessionState"] == "ready"
    return task["id"], meta["sessionId"]


def rooms_created(livekit: Any, room: str) -> int:
    return sum(1 for c in livekit.calls_to("CreateRoom") if c.request.name == room)


# --- creating -------------------------------------------------------------------------------------


async def test_create_is_idempotent_by_client_session_id(rt_client, livekit):
    part = create_part()
    first = (await create_session(rt_client, part=part))["result"]["task"]
    again = (await create_session(rt_client, part=part))["result"]["task"]  # a new messageId

    assert again["id"] == first["id"]
    assert session_of(again)["sessionId"] == session_of(first)["sessionId"]
    assert again["status"]["state"] == "TASK_STATE_WORKING"
    room = f"aim-{session_of(first)['sessionId']}-e1"
    await asyncio.sleep(0.2)  # room for a second provisioning to show up
    assert rooms_created(livekit, room) == 1
    assert len(livekit.dispatches_in(room, AGENT)) == 1

    other = create_part(part["data"]["clientSessionId"], requiredCapabilities=["audio_input"])
    conflict = await create_session(rt_client, part=other)
    assert conflict["error"]["code"] == -31004
    info = error_info(conflict)
    assert info["reason"] == "COMMAND_CONFLICT"
    assert info["metadata"]["commandId"] == part["data"]["clientSessionId"]
    assert len(livekit.calls_to("CreateRoom")) == 1


async def test_a_repeated_message_id_replays_the_first_task(rt_client, livekit):
    message_id = new_id()
    part = create_part()
    first = (await create_session(rt_client, part=part, message_id=message_id))["result"]["task"]
    again = (await create_session(rt_client, part=part, message_id=message_id))["result"]["task"]
    assert again["id"] == first["id"]
    # the messageId is the key: a retry that rebuilt its payload still gets the first task
    rebuilt = await create_session(rt_client, part=create_part(), message_id=message_id)
    assert rebuilt["result"]["task"]["id"] == first["id"]
    await asyncio.sleep(0.2)
    assert len(livekit.calls_to("CreateRoom")) == 1
    assert len(livekit.dispatches_in(f"aim-{session_of(first)['sessionId']}-e1", AGENT)) == 1


async def test_concurrent_duplicate_creates_make_one_session(rt_client, livekit):
    part = create_part()
    replies = await asyncio.gather(*(create_session(rt_client, part=part) for _ in range(10)))

    tasks = [reply["result"]["task"] for reply in replies]
    assert len({task["id"] for task in tasks}) == 1
    session_id = session_of(tasks[0])["sessionId"]
    assert {session_of(task)["sessionId"] for task in tasks} == {session_id}
    assert (await wait_for_state(rt_client, session_id, "ready"))["clientSessionId"] == (
        part["data"]["clientSessionId"]
    )
    await asyncio.sleep(0.3)  # room for stray provisioning effects to show up
    room = f"aim-{session_id}-e1"
    assert [c.request.name for c in livekit.calls_to("CreateRoom")] == [room]
    assert len(livekit.dispatches_in(room, AGENT)) == 1


@pytest.mark.parametrize(
    ("overrides", "missing"),
    [
        pytest.param(
            {"requested": {**create_part()["data"]["requested"], "userVideoSources": ["camera"]}},
            ["vision_input"],
            id="user-camera",
        ),
        pytest.param(
            {"requiredCapabilities": ["audio_input", "audio_output", "vision_input"]},
            ["vision_input"],
            id="required-vision",
        ),
        pytest.param(
            {"retention": {"transcript": "on", "summary": "off"}},
            ["transcript_history"],
            id="transcript-on",
        ),
    ],
)
async def test_capability_gaps_reject_the_task(livekit, store, tracer_provider, overrides, missing):
    audio_only = frozenset({"audio_input", "audio_output"})
    async with service(livekit, store, tracer_provider, provider_capabilities=audio_only) as client:
        created = await create_session(client, part=create_part(**overrides))
        task = created["result"]["task"]
        assert task["status"]["state"] == "TASK_STATE_REJECTED"
        message = task["status"]["message"]
        assert message["role"] == "ROLE_AGENT"
        assert any(part.get("text") for part in message["parts"])
        data = [part["data"] for part in message["parts"] if "data" in part]
        assert data == [{"reason": "capability_unavailable", "missing": missing}]
        stored = await rpc(client, "GetTask", {"id": task["id"]})
        assert stored["result"]["status"]["state"] == "TASK_STATE_REJECTED"
        await asyncio.sleep(0.1)
    assert livekit.calls_to("CreateRoom") == []
    assert livekit.calls_to("CreateDispatch") == []
    assert livekit.rooms == {}


async def test_return_immediately_answers_while_provisioning(rt_client, livekit):
    created = await create_session(rt_client, returnImmediately=True)
    task = created["result"]["task"]
    assert task["status"]["state"] == "TASK_STATE_WORKING"
    meta = session_of(task)
    assert meta["sessionState"] == "provisioning"
    ready = await wait_for_state(rt_client, meta["sessionId"], "ready")
    assert ready["media"]["room"] in livekit.rooms


# --- endpoints and joining ------------------------------------------------------------------------


async def test_register_endpoint_by_key_and_the_endpoint_limit(rt_client, livekit):
    _, session_id = await new_session(rt_client)
    phone = (await register(rt_client, session_id, 1, "phone"))["result"]["endpoint"]
    assert phone["capabilities"]["camera"] is False

    again = await call(rt_client, "RegisterEndpoint", sessionId=session_id, sessionEpoch=1,
                       commandId=new_id(), clientEndpointKey="phone",
                       capabilities={**CAPS, "camera": True})  # fmt: skip
    endpoint = again["result"]["endpoint"]
    assert endpoint["endpointId"] == phone["endpointId"]
    assert endpoint["capabilities"]["camera"] is True
    assert len(again["result"]["session"]["endpoints"]) == 1

    for index in range(7):
        assert "result" in await register(rt_client, session_id, 1, f"device-{index}")
    ninth = await register(rt_client, session_id, 1, "one-too-many")
    assert ninth["error"]["code"] == -31011
    assert error_info(ninth)["reason"] == "LIMIT_EXCEEDED"
    assert error_info(ninth)["metadata"]["limit"] == "endpoints_per_session"
    after = await session(rt_client, session_id)
    assert len(after["endpoints"]) == 8
    # a known device may still register again at the limit
    assert "result" in await register(rt_client, session_id, 1, "phone")


async def test_join_needs_a_registered_endpoint(rt_client, livekit):
    _, session_id = await new_session(rt_client)
    unknown = await call(rt_client, "JoinSession", sessionId=session_id, sessionEpoch=1,
                         endpointId=new_id(), commandId=new_id())  # fmt: skip
    assert unknown["error"]["code"] == -31010
    assert error_info(unknown)["reason"] == "ENDPOINT_NOT_FOUND"
    assert (await session(rt_client, session_id))["state"] == "ready"


async def test_join_while_provisioning_is_invalid_state(rt_client, livekit):
    livekit.delay(1.0, n=1, method="CreateRoom")
    created = await create_session(rt_client, returnImmediately=True)
    session_id = session_of(created["result"]["task"])["sessionId"]
    phone = (await register(rt_client, session_id, 1, "phone"))["result"]["endpoint"]
    join_id = new_id()

    early = await call(rt_client, "JoinSession", sessionId=session_id, sessionEpoch=1,
                       endpointId=phone["endpointId"], commandId=join_id)  # fmt: skip

    assert early["error"]["code"] == -31003
    assert error_info(early)["reason"] == "INVALID_STATE"
    assert error_info(early)["metadata"]["state"] == "provisioning"
    await wait_for_state(rt_client, session_id, "ready")
    # the rejection stored nothing: the same command applies once the session is ready
    joined = await call(rt_client, "JoinSession", sessionId=session_id, sessionEpoch=1,
                        endpointId=phone["endpointId"], commandId=join_id)  # fmt: skip
    assert joined["result"]["session"]["state"] == "joining"


# --- ending and canceling -------------------------------------------------------------------------


async def test_ending_an_ended_session_returns_it_unchanged(rt_client, livekit):
    _, session_id = await new_session(rt_client)
    ended = await call(rt_client, "EndSession", sessionId=session_id, commandId=new_id(),
                       reason="done")  # fmt: skip
    assert ended["result"]["session"]["state"] == "ending"
    await livekit.wait_for_call("DeleteRoom")
    final = await wait_for_state(rt_client, session_id, "ended", settled=True)

    again = await call(rt_client, "EndSession", sessionId=session_id, commandId=new_id(),
                       reason="another reason")  # fmt: skip

    # GetSession adds the live `effects` queue report; the session itself is unchanged
    assert final.pop("effects") == {"pending": 0, "retrying": 0}
    assert again["result"]["session"] == final
    assert final["endReason"] == "done"
    assert await session(rt_client, session_id) == {
        **final,
        "effects": {"pending": 0, "retrying": 0},
    }
    assert len(livekit.calls_to("DeleteRoom")) == 1


async def test_cancel_task_ends_the_session_and_deletes_the_room(rt_client, livekit):
    task_id, session_id = await new_session(rt_client)
    room = f"aim-{session_id}-e1"

    canceled = await rpc(rt_client, "CancelTask", {"id": task_id})

    assert canceled["result"]["id"] == task_id
    assert canceled["result"]["status"]["state"] == "TASK_STATE_CANCELED"
    await livekit.wait_for_call("DeleteRoom")
    assert room not in livekit.rooms
    ended = await wait_for_state(rt_client, session_id, "ended")
    assert ended["endReason"] == "canceled"
    stored = await rpc(rt_client, "GetTask", {"id": task_id})
    assert stored["result"]["status"]["state"] == "TASK_STATE_CANCELED"

    again = await rpc(rt_client, "CancelTask", {"id": task_id})
    assert again["error"]["code"] == -32002
    assert error_info(again)["reason"] == "TASK_NOT_CANCELABLE"


# --- limits and ownership -------------------------------------------------------------------------


async def test_live_sessions_are_limited_per_principal(livekit, store, tracer_provider):
    async with service(livekit, store, tracer_provider, max_sessions_per_principal=2) as client:
        _, first = await new_session(client)
        await new_session(client)
        part = create_part()

        third = await create_session(client, part=part)

        assert third["error"]["code"] == -31011
        info = error_info(third)
        assert info["reason"] == "LIMIT_EXCEEDED"
        assert info["metadata"]["limit"] == "live_sessions_per_principal"
        assert int(info["metadata"]["retryAfterSeconds"]) > 0
        assert len(livekit.calls_to("CreateRoom")) == 2
        # another principal has a limit of its own
        assert "result" in await create_session(client, subject="bob")

        ended = await call(client, "EndSession", sessionId=first, commandId=new_id(), reason="x")
        assert ended["result"]["session"]["state"] == "ending"
        # the refused create stored nothing: the same clientSessionId now creates the session
        retried = await create_session(client, part=part)
        assert session_of(retried["result"]["task"])["sessionState"] == "ready"


async def test_another_principals_session_looks_unknown(rt_client, livekit):
    _, session_id = await new_session(rt_client, subject="bob")
    phone = (await register(rt_client, session_id, 1, "phone", subject="bob"))["result"]
    endpoint_id = phone["endpoint"]["endpointId"]
    join_id = new_id()
    joined = await call(rt_client, "JoinSession", "bob", sessionId=session_id, sessionEpoch=1,
                        endpointId=endpoint_id, commandId=join_id)  # fmt: skip
    before = await session(rt_client, session_id, "bob")
    unknown_id = new_id()

    def attempts(target: str) -> list[tuple[str, dict[str, Any]]]:
        return [
            ("GetSession", {"sessionId": target}),
            ("RegisterEndpoint", {"sessionId": target, "sessionEpoch": 1, "commandId": new_id(),
                                  "clientEndpointKey": "phone", "capabilities": CAPS}),
            ("JoinSession", {"sessionId": target, "sessionEpoch": 1, "endpointId": endpoint_id,
                             "commandId": join_id}),
            ("EndSession", {"sessionId": target, "commandId": new_id(), "reason": "mine now"}),
            ("GetCommand", {"sessionId": target, "commandId": join_id}),
        ]  # fmt: skip

    for (method, foreign), (_, unknown) in zip(
        attempts(session_id), attempts(unknown_id), strict=True
    ):
        as_foreign = await call(rt_client, method, "alice", **foreign)
        as_unknown = await call(rt_client, method, "alice", **unknown)
        assert as_foreign["error"]["code"] == -31001, method
        assert error_info(as_foreign)["reason"] == "SESSION_NOT_FOUND", method
        # the same answer, word for word, once the ids asked about are set aside
        assert _without(as_foreign["error"], session_id) == _without(
            as_unknown["error"], unknown_id
        ), method

    assert await session(rt_client, session_id, "bob") == before
    got = await call(rt_client, "GetCommand", "bob", sessionId=session_id, commandId=join_id)
    assert got["result"]["command"]["result"] == joined["result"]


def _without(error: dict[str, Any], session_id: str) -> Any:
    return json.loads(json.dumps(error).replace(session_id, "<sessionId>"))
