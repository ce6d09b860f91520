"""LiveKit webhooks sent to the service as LiveKit sends them, and the sessions they move.

`webhook_event` builds a WebhookEvent (the members LiveKit fills for its type) and `deliver`
posts it correctly signed (`realtime.livekit_dev.standin.sign_webhook`: protojson body, HS256
JWT with the body's sha256, no Bearer prefix), expecting it verified; `send_webhook` builds,
signs and posts a participant's event in one call and returns its outcome label.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import time
from collections.abc import Callable
from typing import Any

import httpx
from livekit import api

from realtime.livekit_dev.standin import sign_webhook, webhook_headers
from tests.conftest import LIVEKIT_KEY, LIVEKIT_SECRET
from tests.conftest import service as service  # tests/e2e/test_webhooks.py imports it here
from tests.e2e.realtime_helpers import call, create_session, new_id, register, session_of

# --- building and sending webhooks ---------------------------------------------------------------

_ids = itertools.count(1)


def event_id() -> str:
    return f"EV_{next(_ids)}_{new_id()[:8]}"


def participant(identity: str, epoch: int | None = None, *, agent: bool = False) -> Any:
    """A participant as LiveKit reports it: endpoints carry their token's metadata."""
    return api.ParticipantInfo(
        sid=f"PA_{identity[:8]}",
        identity=identity,
        state=api.ParticipantInfo.ACTIVE,
        kind=api.ParticipantInfo.Kind.AGENT if agent else api.ParticipantInfo.Kind.STANDARD,
        metadata="" if epoch is None else json.dumps({"sessionEpoch": epoch}),
    )


def webhook_event(
    kind: str,
    room: str,
    *,
    identity: str = "",
    epoch: int | None = None,
    agent: bool = False,
    ev_id: str | None = None,
) -> Any:
    """A WebhookEvent of type `kind` in `room`, with the members LiveKit fills for that type."""
    event = api.WebhookEvent(
        event=kind, id=ev_id or event_id(), created_at=int(time.time()), room=api.Room(name=room)
    )
    if identity:
        event.participant.CopyFrom(participant(identity, epoch, agent=agent))
    if kind.startswith("track_"):
        event.track.CopyFrom(
            api.TrackInfo(sid="TR_mic", source=api.TrackSource.MICROPHONE, type=api.TrackType.AUDIO)
        )
    elif kind.startswith("egress_"):
        event.egress_info.CopyFrom(api.EgressInfo(egress_id="EG_1", room_name=room))
    elif kind.startswith("ingress_"):
        event.ingress_info.CopyFrom(api.IngressInfo(ingress_id="IN_1", room_name=room))
    elif kind.startswith("agent_job_"):
        event.job.CopyFrom(api.Job(id="AJ_1", room=api.Room(name=room)))
    return event


async def post_raw(client: httpx.AsyncClient, body: str, authorization: str | None):
    headers = webhook_headers(authorization or "")
    if authorization is None:
        headers.pop("Authorization")
    return await client.post("/livekit/webhook", content=body.encode(), headers=headers)


async def post(
    client: httpx.AsyncClient, event: Any, key: str = LIVEKIT_KEY, secret: str = LIVEKIT_SECRET
) -> httpx.Response:
    body, authorization = sign_webhook(event, key, secret)
    return await post_raw(client, body, authorization)


async def deliver(client: httpx.AsyncClient, event: Any) -> str:
    """Post a correctly signed webhook; it must be verified (200): its outcome label."""
    response = await post(client, event)
    assert response.status_code == 200, response.text
    status: str = response.json()["status"]
    assert status in ("applied", "ignored", "duplicate")
    return status


# --- sessions ------------------------------------------------------------------------------------


async def get(client: httpx.AsyncClient, session_id: str) -> dict[str, Any]:
    body = await call(client, "GetSession", sessionId=session_id)
    assert "result" in body, body
    found: dict[str, Any] = body["result"]["session"]
    return found


# what a transition can change; runtime counters beside them (e.g. outbox sizes) are left out
DURABLE = ("version", "state", "sessionEpoch", "updatedAt", "endedAt", "endReason", "media",
           "agent", "activeEndpointId", "endpoints")  # fmt: skip


async def snapshot(client: httpx.AsyncClient, session_id: str) -> dict[str, Any]:
    """The session's state as transitions see it, to compare before and after a webhook."""
    session = await get(client, session_id)
    return {key: session.get(key) for key in DURABLE}


async def wait_until(
    client: httpx.AsyncClient,
    session_id: str,
    check: Callable[[dict[str, Any]], bool],
    within: float = 5.0,
) -> dict[str, Any]:
    deadline = time.monotonic() + within
    while True:
        session = await get(client, session_id)
        if check(session):
            return session
        assert time.monotonic() < deadline, f"condition not met within {within} s: {session}"
        await asyncio.sleep(0.05)


def room(session_id: str, epoch: int = 1) -> str:
    return f"aim-{session_id}-e{epoch}"


async def ready_session(client: httpx.AsyncClient) -> tuple[str, str]:
    """(taskId, sessionId) of a new session in `ready`."""
    task = (await create_session(client))["result"]["task"]
    meta = session_of(task)
    assert meta["sessionState"] == "ready"
    return task["id"], meta["sessionId"]


async def join(client: httpx.AsyncClient, session_id: str, endpoint_id: str, epoch: int) -> Any:
    return await call(client, "JoinSession", sessionId=session_id, sessionEpoch=epoch,
                      endpointId=endpoint_id, commandId=new_id())  # fmt: skip


def assert_active_on(session: dict[str, Any], endpoint: str) -> None:
    """`session` (GetSession's) is active on `endpoint`, its one endpoint, connected."""
    assert session["state"] == "active"
    assert session["activeEndpointId"] == endpoint
    assert [e["state"] for e in session["endpoints"]] == ["connected"]


async def joining_session(client: httpx.AsyncClient, key: str = "phone") -> tuple[str, str]:
    """(sessionId, endpointId) of a session whose endpoint has JoinSession'ed (`joining`)."""
    _, session_id = await ready_session(client)
    endpoint = (await register(client, session_id, 1, key))["result"]["endpoint"]["endpointId"]
    joined = await join(client, session_id, endpoint, 1)
    assert joined["result"]["session"]["state"] == "joining"
    return session_id, endpoint


async def active_session(client: httpx.AsyncClient) -> tuple[str, str]:
    """(sessionId, endpointId) of a session whose endpoint is in the room (`active`)."""
    session_id, endpoint = await joining_session(client)
    event = webhook_event("participant_joined", room(session_id), identity=endpoint, epoch=1)
    assert await deliver(client, event) == "applied"
    assert (await get(client, session_id))["state"] == "active"
    return session_id, endpoint


# --- posting a participant event in one call -----------------------------------------------------


async def send_webhook(
    client, event: str, room: str, identity: str, *, epoch=1, agent=False, **extra
):
    kind = api.ParticipantInfo.Kind.AGENT if agent else api.ParticipantInfo.Kind.STANDARD
    ev = api.WebhookEvent(
        event=event,
        id=new_id(),
        created_at=int(time.time()),
        room=api.Room(name=room),
        participant=api.ParticipantInfo(
            identity=identity, kind=kind, metadata=json.dumps({"sessionEpoch": epoch})
        ),
        **extra,
    )
    body, auth = sign_webhook(ev, LIVEKIT_KEY, LIVEKIT_SECRET)
    response = await client.post("/livekit/webhook", content=body, headers=webhook_headers(auth))
    assert response.status_code == 200
    return response.json()["status"]
