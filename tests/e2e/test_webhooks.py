"""LiveKit webhooks over HTTP (profile §5, §6, §9; livekit-notes §2).

Every webhook here is signed exactly as LiveKit signs one
(`realtime.livekit_dev.standin.sign_webhook`: protojson body, HS256 JWT with the body's sha256,
no Bearer prefix) unless the test forges it. A verified webhook always answers 200 with applied
| ignored | duplicate; only the session-relevant ones move the session. Anything unverified is
401 and changes nothing (the session `version` stays put and the event id is not even recorded).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import json
import time
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

import httpx
import jwt
import pytest
from google.protobuf import json_format
from livekit import api

from realtime.store.redis_client import RedisClient
from tests.conftest import LIVEKIT_KEY, LIVEKIT_SECRET
from tests.e2e.realtime_helpers import new_id, register
from tests.e2e.webhook_helpers import (
    active_session,
    assert_active_on,
    deliver,
    event_id,
    get,
    join,
    joining_session,
    post,
    post_raw,
    ready_session,
    room,
    service,
    snapshot,
    wait_until,
    webhook_event,
)
from tests.tcp_proxy import TcpProxy, redis_proxy

pytestmark = pytest.mark.e2e

AGENT_IDENTITY = "agent-AJ_worker-1"
OTHER_SECRET = "another-secret-0123456789-abcdefghijklmnopqrstuvwxyz"


# --- forging webhooks ---------------------------------------------------------------------------


def body_of(event: Any) -> str:
    return json_format.MessageToJson(event, indent=None)


def sha256_claim(body: str) -> str:
    return base64.b64encode(hashlib.sha256(body.encode()).digest()).decode()


# --- every event type ----------------------------------------------------------------------------

NOT_FOLLOWED = (
    "room_started",
    "track_published",
    "track_unpublished",
    "egress_started",
    "egress_updated",
    "egress_ended",
    "ingress_started",
    "ingress_ended",
    "agent_job_started",
    "agent_job_ended",
)


@pytest.mark.parametrize("kind", NOT_FOLLOWED)
async def test_verified_events_sessions_do_not_follow_answer_200_and_change_nothing(
    rt_client, kind
):
    session_id, endpoint = await active_session(rt_client)
    before = await snapshot(rt_client, session_id)
    identity = endpoint if kind.startswith("track_") else ""
    event = webhook_event(kind, room(session_id), identity=identity, epoch=1 if identity else None)
    status = await deliver(rt_client, event)
    # track events drive the camera/screen sources (§9); a microphone track is not one of them
    assert status == "ignored" or kind.startswith("track_")
    assert await snapshot(rt_client, session_id) == before


async def test_participant_joined_of_the_active_endpoint_makes_the_session_active(rt_client):
    session_id, endpoint = await joining_session(rt_client)
    event = webhook_event("participant_joined", room(session_id), identity=endpoint, epoch=1)
    assert await deliver(rt_client, event) == "applied"
    assert_active_on(await get(rt_client, session_id), endpoint)


@pytest.mark.parametrize("kind", ["participant_left", "participant_connection_aborted"])
async def test_the_active_endpoint_leaving_makes_the_session_reconnect(rt_client, kind):
    session_id, endpoint = await active_session(rt_client)
    event = webhook_event(kind, room(session_id), identity=endpoint, epoch=1)
    assert await deliver(rt_client, event) == "applied"
    session = await get(rt_client, session_id)
    assert session["state"] == "reconnecting"
    assert session["activeEndpointId"] == endpoint
    assert [e["state"] for e in session["endpoints"]] == ["disconnected"]
    assert session["sessionEpoch"] == 1


async def test_room_finished_for_the_current_room_rebinds(rt_client, livekit):
    session_id, _ = await active_session(rt_client)
    assert await deliver(rt_client, webhook_event("room_finished", room(session_id))) == "applied"
    session = await wait_until(rt_client, session_id, lambda s: s["state"] == "ready")
    assert session["sessionEpoch"] == 2
    assert session["media"]["room"] == room(session_id, 2)
    assert room(session_id, 2) in livekit.rooms


async def test_events_for_rooms_that_are_not_ours_are_ignored(rt_client):
    session_id, endpoint = await active_session(rt_client)
    before = await snapshot(rt_client, session_id)
    strangers = [
        webhook_event("participant_left", "somebody-elses-room", identity=endpoint, epoch=1),
        webhook_event("room_finished", "aim-not-a-session-e1"),
        webhook_event("room_finished", room(new_id())),  # well-formed, but no such session
        webhook_event("room_finished", f"aim-{session_id}-e01"),  # not a name this service writes
        webhook_event("room_finished", f"aim-{session_id}-e{'9' * 5000}"),  # not a small integer
        webhook_event("participant_left", room(new_id()), identity=endpoint, epoch=1),
        webhook_event("egress_ended", ""),  # egress events may carry no room at all
    ]
    for event in strangers:
        assert await deliver(rt_client, event) == "ignored"
    assert await snapshot(rt_client, session_id) == before


# --- signatures ----------------------------------------------------------------------------------


def forged(kind: str, body: str, other_body: str) -> tuple[str, str | None]:
    """(body sent, Authorization sent) for each way a webhook can fail verification."""
    good = api.AccessToken(LIVEKIT_KEY, LIVEKIT_SECRET).with_sha256(sha256_claim(body))
    now = int(time.time())
    if kind == "wrong secret":
        return body, api.AccessToken(LIVEKIT_KEY, OTHER_SECRET).with_sha256(
            sha256_claim(body)
        ).to_jwt()
    if kind == "wrong key":
        return body, api.AccessToken("lk-other-key", LIVEKIT_SECRET).with_sha256(
            sha256_claim(body)
        ).to_jwt()
    if kind == "signature of another body":
        return other_body, good.to_jwt()
    if kind == "expired":
        return body, good.with_ttl(timedelta(seconds=-120)).to_jwt()
    if kind == "expired (pyjwt)":
        claims = {"iss": LIVEKIT_KEY, "sub": "", "nbf": now - 400, "exp": now - 100,
                  "sha256": sha256_claim(body)}  # fmt: skip
        return body, jwt.encode(claims, LIVEKIT_SECRET, algorithm="HS256")
    if kind == "not valid yet":
        claims = {"iss": LIVEKIT_KEY, "sub": "", "nbf": now + 300, "exp": now + 600,
                  "sha256": sha256_claim(body)}  # fmt: skip
        return body, jwt.encode(claims, LIVEKIT_SECRET, algorithm="HS256")
    if kind == "no sha256 claim":
        return body, api.AccessToken(LIVEKIT_KEY, LIVEKIT_SECRET).to_jwt()
    if kind == "no exp":
        claims = {"iss": LIVEKIT_KEY, "sub": "", "nbf": now, "sha256": sha256_claim(body)}
        return body, jwt.encode(claims, LIVEKIT_SECRET, algorithm="HS256")
    if kind == "HS512":
        claims = {"iss": LIVEKIT_KEY, "sub": "", "nbf": now, "exp": now + 300,
                  "sha256": sha256_claim(body)}  # fmt: skip
        return body, jwt.encode(claims, LIVEKIT_SECRET + "-longer-for-hs512", algorithm="HS512")
    if kind == "re-serialised body":
        return json.dumps(json.loads(body), indent=2), good.to_jwt()
    if kind == "missing Authorization":
        return body, None
    if kind == "empty Authorization":
        return body, ""
    if kind == "Bearer prefix":
        return body, "Bearer " + good.to_jwt()
    raise AssertionError(kind)


FORGERIES = (
    "wrong secret",
    "wrong key",
    "signature of another body",
    "expired",
    "expired (pyjwt)",
    "not valid yet",
    "no sha256 claim",
    "no exp",
    "HS512",
    "re-serialised body",
    "missing Authorization",
    "empty Authorization",
    "Bearer prefix",
)


@pytest.mark.parametrize("kind", FORGERIES)
async def test_unverified_webhooks_are_401_and_change_nothing(rt_client, kind):
    session_id, endpoint = await active_session(rt_client)
    before = await snapshot(rt_client, session_id)
    ev_id = event_id()
    harmful = webhook_event(
        "participant_left", room(session_id), identity=endpoint, epoch=1, ev_id=ev_id
    )
    other = webhook_event("room_finished", room(session_id))
    body, authorization = forged(kind, body_of(harmful), body_of(other))
    response = await post_raw(rt_client, body, authorization)
    assert response.status_code == 401, response.text
    assert "error" in response.json()
    assert await snapshot(rt_client, session_id) == before
    # the refused delivery recorded nothing: the genuine event with that id still applies
    assert await deliver(rt_client, harmful) == "applied"
    assert (await get(rt_client, session_id))["state"] == "reconnecting"


async def test_a_token_expired_within_livekits_60_s_leeway_is_accepted(rt_client):
    session_id, endpoint = await active_session(rt_client)
    body = body_of(webhook_event("participant_left", room(session_id), identity=endpoint, epoch=1))
    token = api.AccessToken(LIVEKIT_KEY, LIVEKIT_SECRET).with_sha256(sha256_claim(body))
    response = await post_raw(rt_client, body, token.with_ttl(timedelta(seconds=-20)).to_jwt())
    assert response.status_code == 200
    assert response.json() == {"status": "applied"}


async def test_every_configured_webhook_key_is_accepted(livekit, store, tracer_provider):
    key2, secret2 = "lk-second-key", "lk-second-secret-0123456789-abcdefghijklmnop"
    keys = ((LIVEKIT_KEY, LIVEKIT_SECRET), (key2, secret2))
    async with service(livekit, store, tracer_provider, livekit_webhook_keys=keys) as client:
        session_id, endpoint = await joining_session(client)
        joined = webhook_event("participant_joined", room(session_id), identity=endpoint, epoch=1)
        response = await post(client, joined, key2, secret2)
        assert (response.status_code, response.json()) == (200, {"status": "applied"})
        assert (await get(client, session_id))["state"] == "active"
        left = webhook_event("participant_left", room(session_id), identity=endpoint, epoch=1)
        response = await post(client, left, LIVEKIT_KEY, LIVEKIT_SECRET)
        assert (response.status_code, response.json()) == (200, {"status": "applied"})
        before = await snapshot(client, session_id)
        assert before["state"] == "reconnecting"
        for key, secret in (("lk-third-key", secret2), (key2, LIVEKIT_SECRET)):
            again = webhook_event(
                "participant_joined", room(session_id), identity=endpoint, epoch=1
            )
            assert (await post(client, again, key, secret)).status_code == 401
        assert await snapshot(client, session_id) == before


async def test_without_webhook_keys_every_webhook_is_refused(livekit, store, tracer_provider):
    async with service(livekit, store, tracer_provider, livekit_webhook_keys=()) as client:
        session_id, endpoint = await joining_session(client)
        joined = webhook_event("participant_joined", room(session_id), identity=endpoint, epoch=1)
        assert (await post(client, joined)).status_code == 401
        assert (await get(client, session_id))["state"] == "joining"


# --- duplicates ----------------------------------------------------------------------------------


async def test_a_repeated_event_id_is_a_duplicate_and_applies_once(rt_client):
    session_id, endpoint = await active_session(rt_client)
    ev_id = event_id()
    left = webhook_event(
        "participant_left", room(session_id), identity=endpoint, epoch=1, ev_id=ev_id
    )
    assert await deliver(rt_client, left) == "applied"
    after_first = await snapshot(rt_client, session_id)
    assert after_first["state"] == "reconnecting"
    assert await deliver(rt_client, left) == "duplicate"
    # another body under a seen id is not news either: it causes no second transition
    rejoin = webhook_event(
        "participant_joined", room(session_id), identity=endpoint, epoch=1, ev_id=ev_id
    )
    assert await deliver(rt_client, rejoin) in ("duplicate", "ignored")
    assert await snapshot(rt_client, session_id) == after_first
    fresh = webhook_event("participant_joined", room(session_id), identity=endpoint, epoch=1)
    assert await deliver(rt_client, fresh) == "applied"
    assert (await get(rt_client, session_id))["state"] == "active"


async def test_concurrent_deliveries_of_one_event_apply_once(rt_client):
    session_id, endpoint = await joining_session(rt_client)
    before = await snapshot(rt_client, session_id)
    joined = webhook_event("participant_joined", room(session_id), identity=endpoint, epoch=1)
    statuses = await asyncio.gather(*(deliver(rt_client, joined) for _ in range(8)))
    assert sorted(statuses) == ["applied"] + ["duplicate"] * 7
    after = await get(rt_client, session_id)
    assert after["state"] == "active"
    assert after["version"] == before["version"] + 1


# --- fencing, order ------------------------------------------------------------------------------


async def test_events_of_an_older_room_after_a_rebind_are_ignored(rt_client):
    session_id, endpoint = await active_session(rt_client)
    assert await deliver(rt_client, webhook_event("room_finished", room(session_id))) == "applied"
    await wait_until(rt_client, session_id, lambda s: s["state"] == "ready")
    joined = await join(rt_client, session_id, endpoint, 2)
    assert joined["result"]["media"]["room"] == room(session_id, 2)
    before = await snapshot(rt_client, session_id)
    assert before["state"] == "joining"
    old = room(session_id, 1)
    late = [
        webhook_event("participant_joined", old, identity=endpoint, epoch=1),
        webhook_event("participant_left", old, identity=endpoint, epoch=1),
        webhook_event("participant_connection_aborted", old, identity=endpoint, epoch=1),
        webhook_event(
            "participant_joined", old, identity=endpoint
        ),  # no metadata: the room's epoch
        webhook_event("participant_joined", old, identity=AGENT_IDENTITY, agent=True),
        webhook_event("participant_left", old, identity=AGENT_IDENTITY, agent=True),
        webhook_event("room_finished", old),
    ]
    for event in late:
        assert await deliver(rt_client, event) == "ignored", event.event
    assert await snapshot(rt_client, session_id) == before
    current = webhook_event("participant_joined", room(session_id, 2), identity=endpoint, epoch=2)
    assert await deliver(rt_client, current) == "applied"
    assert (await get(rt_client, session_id))["state"] == "active"


async def test_events_of_an_endpoint_superseded_by_a_handoff_are_ignored(rt_client, livekit):
    session_id, phone = await active_session(rt_client)
    laptop = (await register(rt_client, session_id, 1, "laptop"))["result"]["endpoint"]
    laptop_id = laptop["endpointId"]
    handoff = await join(rt_client, session_id, laptop_id, 1)
    assert handoff["result"]["session"]["sessionEpoch"] == 2
    assert handoff["result"]["media"]["room"] == room(session_id)  # a handoff keeps the room
    before = await snapshot(rt_client, session_id)
    assert before["state"] == "joining"
    # the phone's leave (its token says epoch 1) arrives after the handoff: fenced
    phone_left = webhook_event("participant_left", room(session_id), identity=phone, epoch=1)
    assert await deliver(rt_client, phone_left) == "ignored"
    assert await snapshot(rt_client, session_id) == before
    # an endpoint's token epoch the server never issued is not believed either
    ahead = webhook_event("participant_joined", room(session_id), identity=laptop_id, epoch=3)
    assert await deliver(rt_client, ahead) == "ignored"
    assert await snapshot(rt_client, session_id) == before
    laptop_joined = webhook_event(
        "participant_joined", room(session_id), identity=laptop_id, epoch=2
    )
    assert await deliver(rt_client, laptop_joined) == "applied"
    session = await get(rt_client, session_id)
    assert session["state"] == "active"
    assert {e["endpointId"]: e["state"] for e in session["endpoints"]} == {
        phone: "superseded",
        laptop_id: "connected",
    }


async def test_a_superseded_endpoint_rejoining_with_its_old_token_is_removed(rt_client, livekit):
    session_id, phone = await active_session(rt_client)
    laptop_id = (await register(rt_client, session_id, 1, "laptop"))["result"]["endpoint"][
        "endpointId"
    ]
    await join(rt_client, session_id, laptop_id, 1)
    await livekit.wait_for_call("RemoveParticipant")  # the handoff removes the phone once
    removals = len(livekit.calls_to("RemoveParticipant"))
    laptop_joined = webhook_event(
        "participant_joined", room(session_id), identity=laptop_id, epoch=2
    )
    assert await deliver(rt_client, laptop_joined) == "applied"
    before = await snapshot(rt_client, session_id)

    # the phone still holds its (unrevocable) epoch-1 token and connects again
    livekit.add_participant(room(session_id), phone, metadata=json.dumps({"sessionEpoch": 1}))
    rejoined = webhook_event("participant_joined", room(session_id), identity=phone, epoch=1)
    assert await deliver(rt_client, rejoined) == "applied"
    removal = await livekit.wait_for_call("RemoveParticipant", count=removals + 1)
    assert (removal.request.room, removal.request.identity) == (room(session_id), phone)
    assert removal.code == "ok"
    assert livekit.participant(room(session_id), phone) is None
    after = await get(rt_client, session_id)
    assert (after["state"], after["sessionEpoch"]) == ("active", 2)
    assert after["activeEndpointId"] == laptop_id
    assert {e["endpointId"]: e["state"] for e in after["endpoints"]} == {
        e["endpointId"]: e["state"] for e in before["endpoints"]
    }


async def test_participant_left_before_its_joined_corrupts_nothing(rt_client):
    session_id, endpoint = await joining_session(rt_client)
    before = await snapshot(rt_client, session_id)
    left = webhook_event("participant_left", room(session_id), identity=endpoint, epoch=1)
    aborted = webhook_event(
        "participant_connection_aborted", room(session_id), identity=endpoint, epoch=1
    )
    assert await deliver(rt_client, left) == "ignored"
    assert await deliver(rt_client, aborted) == "ignored"
    assert await snapshot(rt_client, session_id) == before
    joined = webhook_event("participant_joined", room(session_id), identity=endpoint, epoch=1)
    assert await deliver(rt_client, joined) == "applied"
    session = await get(rt_client, session_id)
    assert session["state"] == "active"
    assert [e["state"] for e in session["endpoints"]] == ["connected"]
    # and the next leave is the real one
    real = webhook_event("participant_left", room(session_id), identity=endpoint, epoch=1)
    assert await deliver(rt_client, real) == "applied"
    assert (await get(rt_client, session_id))["state"] == "reconnecting"


async def test_participants_the_session_does_not_await_are_ignored(rt_client):
    _, session_id = await ready_session(rt_client)
    registered = (await register(rt_client, session_id, 1, "tablet"))["result"]["endpoint"]
    before = await snapshot(rt_client, session_id)
    strangers = [
        webhook_event("participant_joined", room(session_id), identity="not-an-endpoint", epoch=1),
        webhook_event("participant_left", room(session_id), identity="not-an-endpoint", epoch=1),
        # registered but never joined: its participant_joined is not awaited in `ready`
        webhook_event(
            "participant_joined", room(session_id), identity=registered["endpointId"], epoch=1
        ),
        webhook_event(
            "participant_left", room(session_id), identity=registered["endpointId"], epoch=1
        ),
    ]
    for event in strangers:
        assert await deliver(rt_client, event) == "ignored"
    assert await snapshot(rt_client, session_id) == before


# --- the agent -----------------------------------------------------------------------------------


async def test_agent_presence_is_reported_but_does_not_drive_the_session(rt_client):
    _, session_id = await ready_session(rt_client)
    session = await get(rt_client, session_id)
    assert session["agent"]["state"] in ("dispatching", "dispatched")
    joined = webhook_event(
        "participant_joined", room(session_id), identity=AGENT_IDENTITY, agent=True
    )
    assert await deliver(rt_client, joined) == "applied"
    session = await get(rt_client, session_id)
    assert session["agent"] == {"state": "joined", "dispatchAttempt": 1, "identity": AGENT_IDENTITY}
    assert session["state"] == "ready"
    assert session["endpoints"] == []

    endpoint = (await register(rt_client, session_id, 1, "phone"))["result"]["endpoint"]
    await join(rt_client, session_id, endpoint["endpointId"], 1)
    me = webhook_event(
        "participant_joined", room(session_id), identity=endpoint["endpointId"], epoch=1
    )
    assert await deliver(rt_client, me) == "applied"
    # the agent leaves a live session: it is lost and replaced in the same room and epoch, and
    # the session goes on (test_agent_presence.py)
    left = webhook_event("participant_left", room(session_id), identity=AGENT_IDENTITY, agent=True)
    assert await deliver(rt_client, left) == "applied"
    session = await get(rt_client, session_id)
    assert (session["agent"]["state"], session["agent"]["dispatchAttempt"]) == ("dispatching", 2)
    assert session["state"] == "active"
    assert session["sessionEpoch"] == 1
    # the agent that left is not the session's any more; its replacement joins
    back = webhook_event(
        "participant_joined", room(session_id), identity=AGENT_IDENTITY, agent=True
    )
    assert await deliver(rt_client, back) == "ignored"
    other = webhook_event("participant_joined", room(session_id), identity="agent-AJ_2", agent=True)
    assert await deliver(rt_client, other) == "applied"
    session = await get(rt_client, session_id)
    # the replacement is the session's second agent (its provider token says so)
    assert session["agent"] == {
        "state": "joined",
        "dispatchAttempt": 2,
        "generation": 2,
        "identity": "agent-AJ_2",
    }
    assert session["state"] == "active"


async def test_the_agent_is_known_by_its_kind_not_by_its_identity(rt_client):
    session_id, endpoint = await joining_session(rt_client)
    # a standard participant that merely looks like an agent is a stranger
    impostor = webhook_event("participant_joined", room(session_id), identity=AGENT_IDENTITY)
    assert await deliver(rt_client, impostor) == "ignored"
    assert (await get(rt_client, session_id))["agent"]["state"] != "joined"
    # and an agent never takes the endpoint's place, even with the endpoint's identity
    agent = webhook_event("participant_joined", room(session_id), identity=endpoint, agent=True)
    assert await deliver(rt_client, agent) == "applied"
    session = await get(rt_client, session_id)
    assert session["state"] == "joining"
    assert [e["state"] for e in session["endpoints"]] == ["joining"]


# --- Redis unavailable ---------------------------------------------------------------------------


async def test_webhooks_answer_503_when_redis_is_unreachable(livekit, tracer_provider):
    dead = RedisClient.from_url("redis://127.0.0.1:1/0", pool_size=4)
    try:
        async with service(livekit, dead, tracer_provider) as client:
            session_id = new_id()
            joined = webhook_event("participant_joined", room(session_id), identity="ep", epoch=1)
            response = await post(client, joined)
            assert response.status_code == 503, response.text
            assert "unavailable" in response.json()["error"]
            # a forged one is still refused first: verification needs no Redis
            forged_response = await post(client, joined, secret=OTHER_SECRET)
            assert forged_response.status_code == 401
            # and events for rooms that are not ours need no Redis either
            foreign = webhook_event("room_finished", "not-ours")
            assert (await post(client, foreign)).json() == {"status": "ignored"}
    finally:
        await dead.aclose()


@contextlib.asynccontextmanager
async def behind_a_proxy(
    redis_url: str | None, livekit: Any, tracer_provider: Any
) -> AsyncIterator[tuple[TcpProxy, RedisClient, httpx.AsyncClient]]:
    """The service over the test Redis through a proxy the test cuts: the proxy, the service's
    Redis client and a client of the service."""
    if redis_url is None:
        pytest.skip("needs a real Redis (the embedded store has no socket to cut)")
    async with redis_proxy(redis_url) as (proxy, url):
        proxied = RedisClient.from_url(url, pool_size=8)
        try:
            async with service(livekit, proxied, tracer_provider) as client:
                yield proxy, proxied, client
        finally:
            await proxied.aclose()


async def endpoint_joined(client: httpx.AsyncClient) -> tuple[str, Any]:
    """A joining session's id and the webhook of its endpoint joining the room."""
    session_id, endpoint = await joining_session(client)
    joined = webhook_event("participant_joined", room(session_id), identity=endpoint, epoch=1)
    return session_id, joined


async def assert_the_retry_applies(client: httpx.AsyncClient, joined: Any, session_id: str) -> None:
    """LiveKit retries the same event (same id): it is news, not a duplicate."""
    response = await post(client, joined)
    assert (response.status_code, response.json()) == (200, {"status": "applied"})
    assert (await get(client, session_id))["state"] == "active"


@pytest.mark.redis
async def test_a_503_records_nothing_so_livekits_retry_applies(
    redis_url, store, livekit, tracer_provider
):
    async with behind_a_proxy(redis_url, livekit, tracer_provider) as (proxy, _, client):
        session_id, joined = await endpoint_joined(client)
        proxy.refuse()
        assert (await post(client, joined)).status_code == 503
        proxy.restore()
        await assert_the_retry_applies(client, joined, session_id)


@pytest.mark.redis
async def test_redis_lost_during_the_commit_answers_503_and_the_retry_applies(
    redis_url, store, livekit, tracer_provider
):
    async with behind_a_proxy(redis_url, livekit, tracer_provider) as (proxy, proxied, client):
        session_id, joined = await endpoint_joined(client)
        # Redis goes away exactly when the session's commit is sent: nothing is applied, and the
        # event id must not stay recorded either
        commit = b"$7\r\nEVALSHA\r\n$40\r\n" + proxied.scripts.commit.sha.encode()
        tripped = proxy.arm(commit, forward=False, refuse=True)
        assert (await post(client, joined)).status_code == 503
        assert tripped.is_set()
        proxy.restore()
        await assert_the_retry_applies(client, joined, session_id)
