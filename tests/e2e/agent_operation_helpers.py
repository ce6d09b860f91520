"""Building blocks for the agent operations, interactions and provider e2e tests.

A "live" session here is one the way a user sees it after joining: created with the realtime
extension, one device registered and joined, the device and the agent in the stand-in's room
(participant_joined webhooks applied), and the provider token taken from the agent dispatch's
metadata, as the agent worker would take it.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import time
from dataclasses import dataclass
from typing import Any

import httpx
import rfc8785
from livekit import api

from tests.conftest import error_info, rpc
from tests.e2e.realtime_helpers import call, create_part, create_session, new_id, session_of
from tests.e2e.webhook_helpers import send_webhook

AGENT = "agent-1"
TOPIC = "aim.realtime.v1"


@dataclass
class Live:
    sid: str
    task_id: str
    context_id: str
    room: str
    phone: str
    provider_token: str


async def open_session(
    client: httpx.AsyncClient,
    livekit: Any,
    *,
    interactions: tuple[str, ...] = ("text", "confirmation"),
    device_interactions: tuple[str, ...] | None = None,
    user_sources: tuple[str, ...] = ("camera",),
    agent_sources: tuple[str, ...] = ("screen",),
    camera: bool = True,
    screen: bool = False,
    transcript: str = "off",
    join: bool = True,
    agent: bool = True,
    subject: str = "alice",
) -> Live:
    part = create_part(
        requested={
            "mediaBinding": "livekit-webrtc-v1",
            "audio": "bidirectional",
            "userVideoSources": list(user_sources),
            "agentVideoSources": list(agent_sources),
            "interactions": list(interactions),
        },
        retention={"transcript": transcript, "summary": "off"},
    )
    created = await create_session(client, part=part, subject=subject)
    task = created["result"]["task"]
    sid = session_of(task)["sessionId"]
    room = f"aim-{sid}-e1"
    meta = json.loads(livekit.dispatches_in(room)[-1].metadata)
    caps = {
        "audioInput": True,
        "audioOutput": True,
        "camera": camera,
        "screen": screen,
        "interactions": list(interactions if device_interactions is None else device_interactions),
    }
    reg = await call(
        client,
        "RegisterEndpoint",
        subject,
        sessionId=sid,
        sessionEpoch=1,
        commandId=new_id(),
        clientEndpointKey="phone",
        capabilities=caps,
    )
    phone = reg["result"]["endpoint"]["endpointId"]
    if join:
        joined = await call(
            client,
            "JoinSession",
            subject,
            sessionId=sid,
            sessionEpoch=1,
            endpointId=phone,
            commandId=new_id(),
        )
        assert "result" in joined, joined
        livekit.add_participant(room, phone)
        assert await send_webhook(client, "participant_joined", room, phone) == "applied"
        # the join sends the device its permission (an outbox effect, carried out after the
        # commit): wait for it, so that tests counting later updates do not count this one
        await wait_for_update(livekit, room, phone, 1)
    if agent:
        livekit.add_participant(room, AGENT, kind="agent")
        assert (
            await send_webhook(client, "participant_joined", room, AGENT, agent=True) == "applied"
        )
    return Live(sid, task["id"], task["contextId"], room, phone, meta["providerToken"])


async def interact(
    client: httpx.AsyncClient,
    sid: str,
    kind: str,
    payload: Any,
    *,
    epoch: int = 1,
    command_id: str | None = None,
    subject: str = "alice",
) -> dict[str, Any]:
    return await call(
        client,
        "SendInteraction",
        subject,
        sessionId=sid,
        sessionEpoch=epoch,
        commandId=command_id or new_id(),
        type=kind,
        payload=payload,
    )


async def confirm_operation(
    client: httpx.AsyncClient, live: Live, operation: dict[str, Any], requirement: dict[str, Any]
) -> dict[str, Any]:
    """The user's SendInteraction operation.confirm of `operation`, answering `requirement`."""
    return await interact(
        client,
        live.sid,
        "operation.confirm",
        {
            "operationId": operation["operationId"],
            "requirementId": requirement["requirementId"],
            "actionDigest": requirement["actionDigest"],
        },
    )


async def provider_call(
    client: httpx.AsyncClient, token: str | None, method: str, **params: Any
) -> tuple[int, dict[str, Any], httpx.Response]:
    body = {"jsonrpc": "2.0", "id": 7, "method": f"aim.provider.{method}", "params": params}
    headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
    response = await client.post("/provider", json=body, headers=headers)
    return response.status_code, response.json(), response


async def agent_call(
    client: httpx.AsyncClient, live: Live, method: str, **params: Any
) -> tuple[int, dict[str, Any], httpx.Response]:
    """The agent's provider call `method` about `live`, with its own provider token."""
    return await provider_call(client, live.provider_token, method, sessionId=live.sid, **params)


async def request_operation(
    client: httpx.AsyncClient, live: Live, *, request_id: str | None = None, **fields: Any
) -> tuple[int, dict[str, Any], httpx.Response]:
    """The agent's RequestOperation in `live` at epoch 1 (`request_id`, a new one unless given)."""
    request = request_id or new_id()
    return await agent_call(
        client, live, "RequestOperation", sessionEpoch=1, requestId=request, **fields
    )


async def append_transcript(
    client: httpx.AsyncClient, live: Live, item_id: str, role: str, text: str
) -> tuple[int, dict[str, Any], httpx.Response]:
    """The agent's AppendTranscript of one line of `role` in `live` at epoch 1."""
    line = {"itemId": item_id, "role": role, "text": text}
    return await agent_call(client, live, "AppendTranscript", sessionEpoch=1, **line)


async def update_operation(
    client: httpx.AsyncClient, live: Live, operation_id: str, state: str, **fields: Any
) -> tuple[int, dict[str, Any], httpx.Response]:
    """The agent's UpdateOperation of `operation_id` in `live` to `state`, a new request id."""
    update = {"requestId": new_id(), "operationId": operation_id, "state": state}
    return await agent_call(client, live, "UpdateOperation", **update, **fields)


async def request_action(
    client: httpx.AsyncClient,
    live: Live,
    *,
    title: str = "Book a table",
    arguments: dict[str, Any] | None = None,
    confirmation: str = "required",
    request_id: str | None = None,
    description: str | None = None,
    **extra: Any,
) -> dict[str, Any]:
    action: dict[str, Any] = {"title": title, "tool": "booking"}
    action["arguments"] = arguments if arguments is not None else {"people": 2}
    if description is not None:
        action["description"] = description
    status, body, _ = await request_operation(
        client,
        live,
        request_id=request_id,
        kind="action",
        action=action,
        confirmation=confirmation,
        **extra,
    )
    assert status == 200, body
    assert "result" in body, body
    operation: dict[str, Any] = body["result"]["operation"]
    return operation


async def get_task(client: httpx.AsyncClient, task_id: str, **params: Any) -> dict[str, Any]:
    body = await rpc(client, "GetTask", {"id": task_id, **params})
    task: dict[str, Any] = body["result"]
    return task


async def get_session(client: httpx.AsyncClient, sid: str) -> dict[str, Any]:
    body = await call(client, "GetSession", sessionId=sid)
    session: dict[str, Any] = body["result"]["session"]
    return session


async def get_operation(client: httpx.AsyncClient, sid: str, operation_id: str) -> dict[str, Any]:
    return await call(client, "GetOperation", sessionId=sid, operationId=operation_id)


def requirement_data(task: dict[str, Any]) -> dict[str, Any]:
    parts = task["status"]["message"]["parts"]
    data = [part["data"] for part in parts if "data" in part]
    assert len(data) == 1, parts
    found: dict[str, Any] = data[0]
    return found


def continue_params(
    task_id: str,
    requirement: dict[str, Any],
    decision: str | None = "approve",
    *,
    message_id: str | None = None,
    **overrides: Any,
) -> dict[str, Any]:
    parts: list[dict[str, Any]] = [{"text": "ok"}]
    if decision is not None:
        parts.append({"data": {"decision": decision}})
    message: dict[str, Any] = {
        "messageId": message_id or new_id(),
        "role": "ROLE_USER",
        "taskId": task_id,
        "parts": parts,
    }
    message.update(overrides.pop("message", {}))
    params: dict[str, Any] = {
        "id": task_id,
        "requirementId": requirement["requirementId"],
        "expectedVersion": requirement["expectedVersion"],
        "actionDigest": requirement["actionDigest"],
        "message": message,
    }
    params.update(overrides)
    return params


def digest_of(action: Any) -> str:
    """The profile's actionDigest, computed independently of the service."""
    return "sha256:" + hashlib.sha256(rfc8785.dumps(action)).hexdigest()


def data_to_agent(livekit: Any, room: str, kind: str | None = None) -> list[dict[str, Any]]:
    """Bodies of the data messages the stand-in received for `room` (optionally one type)."""
    found = []
    for request in livekit.data_messages:
        if request.room != room:
            continue
        body = json.loads(request.data)
        if kind is None or body["type"] == kind:
            found.append(body)
    return found


async def wait_for_data(
    livekit: Any, room: str, kind: str, count: int = 1, within: float = 5.0
) -> list[dict[str, Any]]:
    deadline = time.monotonic() + within
    while len(found := data_to_agent(livekit, room, kind)) < count:
        assert time.monotonic() < deadline, f"only {len(found)} {kind} data messages arrived"
        await asyncio.sleep(0.02)
    return found


async def quiet(seconds: float = 0.2) -> None:
    """Give any (wrongly) pending effect time to reach the stand-in before counting calls."""
    await asyncio.sleep(seconds)


def updates_for(livekit: Any, room: str, identity: str) -> list[api.UpdateParticipantRequest]:
    return [
        c.request
        for c in livekit.calls_to("UpdateParticipant")
        if c.request.room == room and c.request.identity == identity
    ]


def sources_of(request: api.UpdateParticipantRequest) -> list[int]:
    return list(request.permission.can_publish_sources)


async def wait_for_update(
    livekit: Any, room: str, identity: str, count: int, within: float = 5.0
) -> api.UpdateParticipantRequest:
    deadline = time.monotonic() + within
    while len(found := updates_for(livekit, room, identity)) < count:
        assert time.monotonic() < deadline, f"only {len(found)} UpdateParticipant calls"
        await asyncio.sleep(0.02)
    return found[count - 1]


def meta(body: dict[str, Any]) -> dict[str, Any]:
    metadata: dict[str, Any] = error_info(body)["metadata"]
    return metadata


async def wait_operation_state(
    client: httpx.AsyncClient, sid: str, operation_id: str, state: str, within: float = 5.0
) -> dict[str, Any]:
    deadline = time.monotonic() + within
    while True:
        got = await get_operation(client, sid, operation_id)
        operation: dict[str, Any] = got["result"]["operation"]
        if operation["state"] == state:
            return operation
        assert time.monotonic() < deadline, f"operation stayed {operation['state']}"
        await asyncio.sleep(0.05)


def provider_token_of(livekit: Any, sid: str, epoch: int = 1) -> str:
    """The provider token the service handed the agent in its room's dispatch metadata."""
    token: str = json.loads(livekit.dispatches_in(f"aim-{sid}-e{epoch}")[-1].metadata)[
        "providerToken"
    ]
    return token


async def agent_asks_to_book(client: httpx.AsyncClient, provider_token: str, sid: str) -> str:
    """The agent asks the user to confirm booking a table (RequestOperation, confirmation
    required, epoch 1); the new operation's id."""
    status, asked, _ = await provider_call(
        client, provider_token, "RequestOperation", sessionId=sid, sessionEpoch=1,
        requestId=new_id(), kind="action", confirmation="required",
        action={"title": "Book a table for two", "tool": "reservations.book"},
    )  # fmt: skip
    assert status == 200, asked
    operation_id: str = asked["result"]["operation"]["operationId"]
    return operation_id


@dataclass(frozen=True)
class Words:
    """What a user typed and the agent spoke in a session: the agent's copy of the typed words,
    the answer to the agent's AppendTranscript of the spoken ones."""

    live: Live
    typed: str
    spoken: str
    heard: dict[str, Any]
    appended: dict[str, Any]


async def type_and_speak(
    client: httpx.AsyncClient, livekit: Any, transcript: str, *, command_id: str | None = None
) -> Words:
    """A session with `retention.transcript: transcript`, in which the user types words and the
    agent appends words it spoke; each text is unique to the call."""
    live = await open_session(client, livekit, transcript=transcript)
    typed = f"typed-{transcript}-{new_id()}"
    spoken = f"spoken-{transcript}-{new_id()}"
    sent = await interact(client, live.sid, "input.text", {"text": typed}, command_id=command_id)
    assert "result" in sent, sent
    (heard,) = await wait_for_data(livekit, live.room, "input.text")
    _, appended, _ = await append_transcript(client, live, f"item-{new_id()}", "agent", spoken)
    return Words(live, typed, spoken, heard, appended)
