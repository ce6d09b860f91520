"""The agent learns what became of its operations (profile §7, §8, §10): it reads them with
aim.provider.ListOperations / GetOperation, and when it joins the room it is sent an
`operation.update` for every operation answered while it was not there."""

from __future__ import annotations

import time
from typing import Any

import pytest

from realtime.provider_tokens import mint_provider_token
from tests.conftest import livekit_settings, rpc, violations
from tests.e2e.agent_operation_helpers import (
    AGENT,
    Live,
    agent_call,
    confirm_operation,
    data_to_agent,
    get_session,
    interact,
    meta,
    open_session,
    provider_call,
    quiet,
    request_action,
    wait_for_data,
)
from tests.e2e.realtime_helpers import new_id
from tests.e2e.webhook_helpers import deliver, send_webhook, webhook_event

pytestmark = pytest.mark.e2e


async def list_operations(client, live: Live, token: str | None = None) -> dict[str, Any]:
    _, body, _ = await provider_call(
        client, token or live.provider_token, "ListOperations", sessionId=live.sid
    )
    return body


def states(body: dict[str, Any]) -> list[tuple[str, str]]:
    assert "result" in body, body
    return [(op["operationId"], op["state"]) for op in body["result"]["operations"]]


async def confirm(client, live: Live, operation: dict[str, Any]) -> None:
    asked = operation["requirement"]
    confirmed = await confirm_operation(client, live, operation, asked)
    assert confirmed["result"]["operation"]["state"] == "running", confirmed


def agent_joined(live: Live, ev_id: str) -> Any:
    return webhook_event("participant_joined", live.room, identity=AGENT, agent=True, ev_id=ev_id)


def sent_to_agent(livekit, live: Live) -> list[list[str]]:
    return [
        list(request.destination_identities)
        for request in livekit.data_messages
        if request.room == live.room
    ]


async def test_an_answer_given_before_the_agent_joined_reaches_it_when_it_joins(rt_client, livekit):
    # the agent asks right after its dispatch, before LiveKit's participant_joined for it
    live = await open_session(rt_client, livekit, agent=False)
    operation = await request_action(rt_client, live)
    op_id = operation["operationId"]
    assert states(await list_operations(rt_client, live)) == [(op_id, "awaiting_confirmation")]
    await confirm(rt_client, live, operation)
    await quiet()
    assert data_to_agent(livekit, live.room, "operation.update") == []  # nobody to tell yet
    # ... but it can read the answer
    before = await list_operations(rt_client, live)
    assert states(before) == [(op_id, "running")]
    assert before["result"]["operations"][0]["requirement"] == operation["requirement"]

    livekit.add_participant(live.room, AGENT, kind="agent")
    assert await deliver(rt_client, agent_joined(live, f"EV_{new_id()}")) == "applied"
    (update,) = await wait_for_data(livekit, live.room, "operation.update")
    assert update == {
        "type": "operation.update",
        "commandId": f"sync:{op_id}:running",
        "sessionEpoch": 1,
        "payload": {"operationId": op_id, "state": "running"},
    }
    assert sent_to_agent(livekit, live) == [[AGENT]]
    assert states(await list_operations(rt_client, live)) == [(op_id, "running")]


async def test_a_redelivered_join_sends_nothing_again_and_a_replacement_hears_the_states_again(
    rt_client, livekit
):
    live = await open_session(rt_client, livekit, agent=False)
    confirmed = await request_action(rt_client, live)
    canceled = await request_action(rt_client, live)
    waiting = await request_action(rt_client, live)
    await confirm(rt_client, live, confirmed)
    cancel = await interact(
        rt_client, live.sid, "operation.cancel", {"operationId": canceled["operationId"]}
    )
    assert cancel["result"]["operation"]["state"] == "canceled", cancel
    expected = [
        f"sync:{confirmed['operationId']}:running",
        f"sync:{canceled['operationId']}:canceled",
    ]

    livekit.add_participant(live.room, AGENT, kind="agent")
    joined = agent_joined(live, f"EV_{new_id()}")
    assert await deliver(rt_client, joined) == "applied"
    first = await wait_for_data(livekit, live.room, "operation.update", count=2)
    # oldest first; the operation still waiting for the user is not an update
    assert [body["commandId"] for body in first] == expected
    # LiveKit delivers the same webhook again: recognised by its event id, nothing is sent
    assert await deliver(rt_client, joined) == "duplicate"
    await quiet()
    assert len(data_to_agent(livekit, live.room, "operation.update")) == 2

    # the agent drops out: it is replaced, and its successor hears the current states again,
    # with the same ids
    livekit.leave(live.room, AGENT)
    assert (
        await send_webhook(rt_client, "participant_left", live.room, AGENT, agent=True) == "applied"
    )
    successor = "agent-2"
    livekit.add_participant(live.room, successor, kind="agent")
    again = webhook_event(
        "participant_joined", live.room, identity=successor, agent=True, ev_id=f"EV_{new_id()}"
    )
    assert await deliver(rt_client, again) == "applied"
    both = await wait_for_data(livekit, live.room, "operation.update", count=4)
    assert [body["commandId"] for body in both[2:]] == expected
    assert both[2:] == first
    assert sent_to_agent(livekit, live)[2:] == [[successor]] * 2
    assert waiting["operationId"] not in {body["payload"]["operationId"] for body in both}


async def test_list_and_get_operation_for_the_agent(rt_client, livekit):
    live = await open_session(rt_client, livekit)
    # a new session has none
    assert (await list_operations(rt_client, live))["result"] == {"operations": []}
    first = await request_action(rt_client, live, confirmation="none")
    second = await request_action(rt_client, live, title="Pay the bill")
    listed = (await list_operations(rt_client, live))["result"]["operations"]
    # the same objects RequestOperation (and the client's GetOperation) answers, oldest first
    assert listed == [first, second]
    _, got, _ = await agent_call(
        rt_client,
        live,
        "GetOperation",
        operationId=second["operationId"],
    )
    assert got["result"] == {"operation": second}
    _, unknown, _ = await provider_call(
        rt_client, live.provider_token, "GetOperation", sessionId=live.sid, operationId=new_id()
    )
    assert unknown["error"]["code"] == -31006, unknown


async def test_list_operations_is_authorized_and_checked_like_every_provider_call(
    rt_client, livekit
):
    live = await open_session(rt_client, livekit)
    other = await open_session(rt_client, livekit, join=False, agent=False)
    await request_action(rt_client, live)
    # another session's token: 403, whether or not the named session exists
    for target in (live.sid, new_id()):
        status, body, response = await provider_call(
            rt_client, other.provider_token, "ListOperations", sessionId=target
        )
        assert status == 403, body
        assert "insufficient_scope" in response.headers["WWW-Authenticate"]
    status, body, _ = await provider_call(rt_client, None, "ListOperations", sessionId=live.sid)
    assert status == 401, body
    # strict params, the offending path named
    for params, path in [
        ({"sessionId": live.sid, "sessionEpoch": 1}, "params.sessionEpoch"),
        ({"sessionId": "not-a-uuid"}, "params.sessionId"),
        ({}, "params.sessionId"),
    ]:
        _, body, _ = await provider_call(rt_client, live.provider_token, "ListOperations", **params)
        assert body["error"]["code"] == -32602, (params, body)
        assert path in violations(body), (params, body)
    _, body, _ = await provider_call(
        rt_client, live.provider_token, "GetOperation", sessionId=live.sid, operationId="x"
    )
    assert "params.operationId" in violations(body), body
    # a token for a session that is gone (or never was)
    gone = new_id()
    secret = livekit_settings(livekit).provider_secret
    stray = mint_provider_token(secret, session_id=gone, epoch=1, ttl_s=600, now=int(time.time()))
    _, body, _ = await provider_call(rt_client, stray, "ListOperations", sessionId=gone)
    assert body["error"]["code"] == -31001, body


async def test_list_operations_is_a_read_that_commits_nothing_and_ends_with_the_session(
    rt_client, livekit
):
    live = await open_session(rt_client, livekit)
    asked = await request_action(rt_client, live)
    before = await get_session(rt_client, live.sid)
    for _ in range(3):
        assert "result" in await list_operations(rt_client, live)
    after = await get_session(rt_client, live.sid)
    assert (after["version"], after["updatedAt"]) == (before["version"], before["updatedAt"])
    # the session ends: the agent's token reads nothing more (its writes are refused as well)
    await rpc(rt_client, "CancelTask", {"id": live.task_id})
    ended = await list_operations(rt_client, live)
    assert ended["error"]["code"] == -31003, ended
    _, got, _ = await agent_call(
        rt_client,
        live,
        "GetOperation",
        operationId=asked["operationId"],
    )
    assert got["error"]["code"] == -31003, got


async def test_reads_need_the_token_of_the_current_room(rt_client, livekit):
    live = await open_session(rt_client, livekit)
    asked = await request_action(rt_client, live)
    secret = livekit_settings(livekit).provider_secret
    now = int(time.time())
    for epoch in (99, 2):  # a token of a room that never was (or not yet)
        stray = mint_provider_token(secret, session_id=live.sid, epoch=epoch, ttl_s=600, now=now)
        listed = await list_operations(rt_client, live, stray)
        assert listed["error"]["code"] == -31002, listed
        assert meta(listed)["currentEpoch"] == "1", listed
        _, got, _ = await provider_call(
            rt_client, stray, "GetOperation", sessionId=live.sid, operationId=asked["operationId"]
        )
        assert got["error"]["code"] == -31002, got
    # the current room's token still reads
    assert states(await list_operations(rt_client, live)) == [
        (asked["operationId"], "awaiting_confirmation")
    ]
