"""The provider API (profile §10) as the agent worker uses it: POST /provider with the token
from its dispatch metadata."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import httpx
import jwt
import pytest

from realtime.a2a.provider import MAX_ACTION_BYTES
from realtime.app import create_app
from realtime.provider_tokens import PROVIDER_AUDIENCE, PROVIDER_ISSUER, mint_provider_token
from tests.conftest import (
    livekit_settings,
    rpc,
    serving,
    violations,
)
from tests.e2e.agent_operation_helpers import (
    AGENT,
    Live,
    agent_call,
    append_transcript,
    get_session,
    get_task,
    meta,
    open_session,
    provider_call,
    request_action,
    request_operation,
    update_operation,
)
from tests.e2e.realtime_helpers import new_id
from tests.e2e.webhook_helpers import post, send_webhook, webhook_event

pytestmark = pytest.mark.e2e


def secret_of(livekit) -> str:
    secret: str = livekit_settings(livekit).provider_secret
    return secret


async def test_dispatch_metadata_hands_over_the_provider_url_and_token(rt_client, livekit):
    live = await open_session(rt_client, livekit, transcript="on")
    dispatch_meta = json.loads(livekit.dispatches_in(live.room)[-1].metadata)
    assert dispatch_meta["sessionId"] == live.sid
    assert dispatch_meta["sessionEpoch"] == 1
    assert dispatch_meta["taskId"] == live.task_id
    assert dispatch_meta["providerUrl"].endswith("/provider")
    assert dispatch_meta["retention"]["transcript"] == "on"
    claims = jwt.decode(
        live.provider_token, secret_of(livekit), algorithms=["HS256"], audience=PROVIDER_AUDIENCE
    )
    assert claims["sid"] == live.sid
    assert claims["epoch"] == 1
    assert "aim.provider" in claims["scope"].split()


async def test_report_agent_state_shows_in_get_session(rt_client, livekit):
    live = await open_session(rt_client, livekit)
    for state in ("listening", "thinking", "speaking"):
        status, body, _ = await agent_call(
            rt_client,
            live,
            "ReportAgentState",
            sessionEpoch=1,
            state=state,
        )
        assert status == 200, body
        assert "result" in body, body
        assert (await get_session(rt_client, live.sid))["agent"]["state"] == state
    status, body, _ = await agent_call(
        rt_client,
        live,
        "ReportAgentState",
        sessionEpoch=1,
        state="dancing",
    )
    assert body["error"]["code"] == -32602
    assert "params.state" in violations(body)
    ahead = (
        await agent_call(
            rt_client,
            live,
            "ReportAgentState",
            sessionEpoch=9,
            state="listening",
        )
    )[1]
    assert ahead["error"]["code"] == -31002, ahead
    assert meta(ahead)["reason"] == "ahead"


async def test_request_operation_is_exactly_once_by_request_id(rt_client, livekit):
    live = await open_session(rt_client, livekit)
    request_id = new_id()
    params = {
        "sessionId": live.sid,
        "sessionEpoch": 1,
        "requestId": request_id,
        "kind": "action",
        "action": {"title": "Send the email", "arguments": {"to": "x@example.com"}},
        "confirmation": "required",
    }
    token = live.provider_token
    _, first, raw_first = await provider_call(rt_client, token, "RequestOperation", **params)
    _, second, raw_second = await provider_call(rt_client, token, "RequestOperation", **params)
    assert "result" in first, first
    assert second == first
    assert raw_second.content == raw_first.content
    session = await get_session(rt_client, live.sid)
    assert session["pendingOperationIds"] == [first["result"]["operation"]["operationId"]]
    changed = {**params, "action": {"title": "Send another email"}}
    _, clash, _ = await provider_call(rt_client, token, "RequestOperation", **changed)
    assert clash["error"]["code"] == -31004, clash
    assert meta(clash)["requestId"] == request_id
    assert len((await get_session(rt_client, live.sid))["pendingOperationIds"]) == 1


async def test_request_operation_params_are_checked(rt_client, livekit):
    live = await open_session(rt_client, livekit)
    base = {"sessionId": live.sid, "sessionEpoch": 1, "confirmation": "required"}
    cases = [
        {
            "kind": "media.request",
            "media": {"side": "user", "source": "camera"},
            "confirmation": "none",
        },
        {"kind": "action"},
        {"kind": "action", "action": {"title": ""}},
        {"kind": "action", "action": {"title": "x"}, "media": {"side": "user", "source": "camera"}},
        {"kind": "media.request", "action": {"title": "x"}},
        {"kind": "action", "action": {"title": "x"}, "expiresInSeconds": 0},
        {"kind": "action", "action": {"title": "x", "colour": "red"}},
        {"kind": "teleport", "action": {"title": "x"}},
    ]
    for case in cases:
        _, body, _ = await provider_call(
            rt_client,
            live.provider_token,
            "RequestOperation",
            **{**base, "requestId": new_id(), **case},
        )
        assert body["error"]["code"] == -32602, (case, body)
    assert (await get_session(rt_client, live.sid))["pendingOperationIds"] == []


async def test_update_operation_drives_a_confirmed_operation_to_its_end(rt_client, livekit):
    live = await open_session(rt_client, livekit)
    token = live.provider_token
    running = await request_action(rt_client, live, confirmation="none")
    op_id = running["operationId"]

    async def update(**params):
        return (
            await provider_call(
                rt_client, token, "UpdateOperation", sessionId=live.sid, operationId=op_id, **params
            )
        )[1]

    again = await update(requestId=new_id(), state="running")
    assert again["result"]["operation"]["state"] == "running", again
    bad = await update(requestId=new_id(), state="running", result={"x": 1})
    assert bad["error"]["code"] == -32602, bad
    request_id = new_id()
    done = await update(requestId=request_id, state="succeeded", result={"booked": True})
    assert done["result"]["operation"]["state"] == "succeeded", done
    assert done["result"]["operation"]["result"] == {"booked": True}
    replay = await update(requestId=request_id, state="succeeded", result={"booked": True})
    assert replay == done
    clash = await update(requestId=request_id, state="succeeded", result={"booked": False})
    assert clash["error"]["code"] == -31004, clash
    late = await update(requestId=new_id(), state="failed", error={"message": "oops"})
    assert late["error"]["code"] == -31003, late
    assert (await get_session(rt_client, live.sid))["pendingOperationIds"] == []
    unknown = (
        await update_operation(
            rt_client,
            live,
            new_id(),
            "succeeded",
        )
    )[1]
    assert unknown["error"]["code"] == -31006, unknown
    # a failure keeps the provider's error
    other = await request_action(rt_client, live, confirmation="none")
    failed = (
        await update_operation(
            rt_client,
            live,
            other["operationId"],
            "failed",
            error={"code": "busy", "message": "no table free"},
        )
    )[1]
    assert failed["result"]["operation"]["state"] == "failed", failed
    assert failed["result"]["operation"]["error"] == {"code": "busy", "message": "no table free"}


async def test_the_provider_cannot_run_an_unconfirmed_operation(rt_client, livekit):
    live = await open_session(rt_client, livekit)
    waiting = await request_action(rt_client, live)
    for state in ("running", "succeeded"):
        _, body, _ = await update_operation(
            rt_client,
            live,
            waiting["operationId"],
            state,
        )
        assert body["error"]["code"] == -31003, (state, body)
    task = await get_task(rt_client, live.task_id)
    assert task["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"


async def test_append_transcript_with_retention_on_joins_the_task_history(rt_client, livekit):
    live = await open_session(rt_client, livekit, transcript="on")
    item_id = f"item-{new_id()}"
    for _ in range(2):  # idempotent by itemId
        _, body, _ = await append_transcript(
            rt_client, live, item_id, "agent", "Hello, how can I help?"
        )
        assert body["result"] == {"itemId": item_id}, body
    _, user_line, _ = await append_transcript(rt_client, live, "u-1", "user", "I want a table")
    assert "result" in user_line, user_line
    history = (await get_task(rt_client, live.task_id))["history"]
    lines = [(m["messageId"], m["role"], m["parts"]) for m in history[-2:]]
    assert lines == [
        (item_id, "ROLE_AGENT", [{"text": "Hello, how can I help?"}]),
        ("u-1", "ROLE_USER", [{"text": "I want a table"}]),
    ]
    assert [m["messageId"] for m in history].count(item_id) == 1


async def test_append_transcript_without_retention_is_capability_unavailable(rt_client, livekit):
    live = await open_session(rt_client, livekit, transcript="off")
    _, body, _ = await append_transcript(rt_client, live, "i-1", "agent", "not kept")
    assert body["error"]["code"] == -31009, body
    assert meta(body)["missing"] == "transcript"
    history = (await get_task(rt_client, live.task_id)).get("history", [])
    assert all(m["messageId"] != "i-1" for m in history)


async def expect_401(client, token, session_id):
    status, body, response = await provider_call(
        client, token, "ReportAgentState", sessionId=session_id, sessionEpoch=1, state="listening"
    )
    assert status == 401, (status, body)
    assert "error" in body
    assert body["id"] == 7
    assert response.headers["WWW-Authenticate"].startswith("Bearer")
    return body


async def test_provider_tokens_are_checked(rt_client, livekit):
    live: Live = await open_session(rt_client, livekit)
    other = await open_session(rt_client, livekit, join=False, agent=False)
    secret = secret_of(livekit)
    now = int(time.time())
    await expect_401(rt_client, None, live.sid)
    # a client's A2A token is not a provider token
    from tests.conftest import token as client_token

    await expect_401(rt_client, client_token(), live.sid)
    expired = mint_provider_token(secret, session_id=live.sid, epoch=1, ttl_s=1, now=now - 3600)
    await expect_401(rt_client, expired, live.sid)
    claims = {
        "iss": PROVIDER_ISSUER,
        "aud": "urn:something:else",
        "sid": live.sid,
        "epoch": 1,
        "scope": "aim.provider",
        "iat": now,
        "exp": now + 600,
    }
    await expect_401(rt_client, jwt.encode(claims, secret, algorithm="HS256"), live.sid)
    forged = mint_provider_token("x" * 48, session_id=live.sid, epoch=1, ttl_s=600, now=now)
    await expect_401(rt_client, forged, live.sid)
    # another session's token: 403, whether the named session exists or not
    for target in (live.sid, new_id()):
        status, body, response = await provider_call(
            rt_client,
            other.provider_token,
            "ReportAgentState",
            sessionId=target,
            sessionEpoch=1,
            state="listening",
        )
        assert status == 403, body
        assert "insufficient_scope" in response.headers["WWW-Authenticate"]
    # the provider token opens nothing on /a2a
    a2a = await live_a2a_with(rt_client, live.provider_token)
    assert a2a.status_code == 401
    assert (await get_session(rt_client, live.sid))["agent"]["state"] != "listening"


async def live_a2a_with(client, bearer):
    body = {"jsonrpc": "2.0", "id": 1, "method": "ListTasks", "params": {}}
    return await client.post(
        "/a2a", json=body, headers={"Authorization": f"Bearer {bearer}", "A2A-Version": "1.0"}
    )


async def test_provider_token_of_an_ended_session_is_refused(rt_client, livekit):
    live = await open_session(rt_client, livekit)
    await rpc(rt_client, "CancelTask", {"id": live.task_id})
    status, body, _ = await request_operation(
        rt_client,
        live,
        kind="action",
        action={"title": "too late"},
        confirmation="none",
    )
    assert status == 200
    assert body["error"]["code"] in (-31002, -31003), body


async def test_after_a_rebind_only_the_new_rooms_token_counts(rt_client, livekit):
    live = await open_session(rt_client, livekit)
    livekit.close_room(live.room)
    response = await post(rt_client, webhook_event("room_finished", live.room))
    assert response.status_code == 200
    new_room = f"aim-{live.sid}-e2"
    deadline = time.monotonic() + 5
    # the service's dispatch, with the agent's metadata (a room created without agents gets an
    # empty default dispatch first, as LiveKit's does)
    while not (dispatched := [d for d in livekit.dispatches_in(new_room) if d.metadata]):
        assert time.monotonic() < deadline, "no dispatch into the new room"
        await asyncio.sleep(0.02)
    session = await get_session(rt_client, live.sid)
    assert session["sessionEpoch"] == 2
    new_token = json.loads(dispatched[-1].metadata)["providerToken"]
    # the new room's agent joins (its reports count once it has started)
    livekit.add_participant(new_room, AGENT, kind="agent")
    assert await send_webhook(rt_client, "participant_joined", new_room, AGENT, agent=True) == (
        "applied"
    )
    for epoch in (1, 2):
        _, old, _ = await agent_call(
            rt_client,
            live,
            "ReportAgentState",
            sessionEpoch=epoch,
            state="speaking",
        )
        assert old["error"]["code"] == -31002, old
        assert meta(old)["reason"] == "rebound"
        assert meta(old)["currentEpoch"] == "2"
    _, new, _ = await provider_call(
        rt_client,
        new_token,
        "ReportAgentState",
        sessionId=live.sid,
        sessionEpoch=2,
        state="speaking",
    )
    assert "result" in new, new
    assert (await get_session(rt_client, live.sid))["agent"]["state"] == "speaking"


async def test_an_action_the_digest_cannot_encode_is_invalid_params(rt_client, livekit):
    live = await open_session(rt_client, livekit)
    _, body, _ = await request_operation(
        rt_client,
        live,
        kind="action",
        action={"title": "Transfer", "arguments": {"amount": 2**60}},
        confirmation="required",
    )
    assert body["error"]["code"] == -32602, body
    assert any(f.startswith("params.action") for f in violations(body))


async def request_import(rt_client, live: Live, rows: int) -> dict[str, Any]:
    """The agent's RequestOperation of an action whose arguments hold `rows` characters."""
    _, body, _ = await request_operation(
        rt_client,
        live,
        kind="action",
        action={"title": "Import", "arguments": {"rows": "r" * rows}},
        confirmation="none",
    )
    answer: dict[str, Any] = body
    return answer


async def test_an_action_over_16_kib_is_refused_and_nothing_is_stored(rt_client, livekit):
    live = await open_session(rt_client, livekit)
    before = await get_session(rt_client, live.sid)
    body = await request_import(rt_client, live, MAX_ACTION_BYTES)
    assert body["error"]["code"] == -32602, body
    assert "params.action" in violations(body)
    assert str(MAX_ACTION_BYTES) in body["error"]["message"]
    after = await get_session(rt_client, live.sid)
    assert after["version"] == before["version"]
    assert after.get("pendingOperationIds", []) == before.get("pendingOperationIds", [])
    # an action within the bound is served
    served = await request_import(rt_client, live, MAX_ACTION_BYTES - 100)
    assert served["result"]["operation"]["state"] == "running", served


async def test_provider_calls_over_the_rate_limit_are_told_when_to_retry(livekit, store):
    """/provider answers its rate limit as /a2a does: -31011 with retryAfterSeconds and the
    same value in a Retry-After header; calls within the limit go on working."""
    # a client budget of 3 requests/s (burst 6: enough to open the session) gives the agent
    # 30/s with a burst of 60; the budgets' clock stands still, so however slowly this machine
    # serves the calls, the burst is all the agent gets
    app = create_app(
        livekit_settings(livekit, rate_limit_rps=3), store=store, rate_clock=lambda: 1000.0
    )
    async with serving(app) as base_url, httpx.AsyncClient(base_url=base_url) as client:
        live = await open_session(client, livekit)
        # at once: 200 calls against a burst of 60 meet the limit
        replies = await asyncio.gather(
            *(
                agent_call(
                    client,
                    live,
                    "ReportAgentState",
                    sessionEpoch=1,
                    state="listening",
                )
                for _ in range(200)
            )
        )
    limited = [(body, response) for _, body, response in replies if "error" in body]
    assert any("result" in body for _, body, _ in replies)
    assert limited, "200 calls at once never met the limit"
    assert len(limited) == 200 - 60, "the burst is twice the agent's rate"
    for body, response in limited:
        assert body["error"]["code"] == -31011
        retry = meta(body)["retryAfterSeconds"]
        assert int(retry) >= 1
        assert response.headers["retry-after"] == retry
