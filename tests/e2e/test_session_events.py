"""Session events for the app's backend (profile §21), received by a real receiver process that
verifies every signature with the `standardwebhooks` package."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from realtime.store.redis_client import RedisClient
from tests.conftest import headers, service, token
from tests.e2e.agent_operation_helpers import (
    confirm_operation,
    open_session,
    request_action,
)
from tests.e2e.operator_api_helpers import TENANT_CLAIM, rpc_as
from tests.e2e.realtime_helpers import (
    call,
    create_part,
    create_session,
    hand_over,
    new_id,
    session_of,
)
from tests.e2e.webhook_helpers import send_webhook
from tests.event_receivers import Receiver, events_settings, receiver

pytestmark = pytest.mark.e2e

LIFE = [
    "session.created",
    "session.ready",
    "session.active",
    "agent.joined",
    "operation.requested",
    "operation.confirmed",
    "session.handoff",
    "session.active",
    "session.ended",
]


@contextlib.asynccontextmanager
async def sending(
    livekit: Any, store: RedisClient, tmp_path: Path, **events: Any
) -> AsyncIterator[tuple[httpx.AsyncClient, Receiver]]:
    """A service that sends its session events to a receiver process, each attempt given 2 s,
    with the `events_settings` `events`."""
    async with (
        receiver(tmp_path) as got,
        service(livekit, store, **events_settings(got.url, events_timeout_s=2.0, **events)) as http,
    ):
        yield http, got


@pytest.fixture
async def sent(
    livekit: Any, store: RedisClient, tmp_path: Path
) -> AsyncIterator[tuple[httpx.AsyncClient, Receiver]]:
    async with sending(livekit, store, tmp_path) as found:
        yield found


async def whole_life(http: httpx.AsyncClient, livekit: Any) -> str:
    """A session from creation to its end: joined, an action confirmed, handed off."""
    live = await open_session(http, livekit)
    operation = await request_action(http, live, title="Book a table for Ada Lovelace")
    requirement = operation["requirement"]
    confirmed = await confirm_operation(http, live, operation, requirement)
    assert "result" in confirmed, confirmed
    laptop, epoch = await hand_over(http, live.sid, 1, "laptop")
    assert epoch == 2
    livekit.add_participant(live.room, laptop)
    assert await send_webhook(http, "participant_joined", live.room, laptop, epoch=2) == "applied"
    ended = await call(http, "EndSession", sessionId=live.sid, commandId=new_id(), reason="bye")
    assert "result" in ended, ended
    return live.sid


async def test_a_whole_session_arrives_in_seq_order_signed(sent, livekit) -> None:
    http, got = sent
    sid = await whole_life(http, livekit)
    await got.wait_for(lambda: "session.ended" in [e["type"] for e in got.delivered(sid)])

    events = got.delivered(sid)
    assert [e["type"] for e in events] == LIFE
    assert [e["seq"] for e in events] == list(range(1, len(LIFE) + 1))
    assert all(r["verified"] for r in got.requests())
    assert [r["webhookId"] for r in got.requests()] == [f"{sid}:{n}" for n in range(1, 10)]
    first = events[0]
    assert first["principal"] == {"tenant": None, "sub": "alice"}
    assert {e["taskId"] for e in events} == {first["taskId"]}
    assert [e["sessionEpoch"] for e in events] == [1, 1, 1, 1, 1, 1, 2, 2, 2]
    assert events[3]["data"] == {"identity": "agent-1", "dispatchAttempt": 1}
    handoff = events[6]["data"]
    assert handoff["fromEpoch"] == 1
    assert len(handoff["supersededEndpointIds"]) == 1
    end = events[-1]["data"]
    assert end["reason"] == "bye"
    assert end["secondsActive"] >= 0
    assert [e["clientEndpointKey"] for e in end["endpoints"]] == ["phone", "laptop"]
    # no message text, no tokens: the action's title (the agent's words) is never sent
    text = str(got.requests())
    assert "Ada Lovelace" not in text
    assert "token" not in text.lower()


async def test_a_receiver_that_fails_then_recovers_gets_every_event_with_one_id(
    sent, livekit
) -> None:
    http, got = sent
    got.answer(500)
    created = await create_session(http)
    sid = session_of(created["result"]["task"])["sessionId"]
    # the first event is tried again and again, the second waits behind it
    await got.wait_for(lambda: sum(r["answered"] == 500 for r in got.requests()) >= 3)
    assert {r["event"]["seq"] for r in got.requests()} == {1}
    got.answer(200)
    await got.wait_for(lambda: [e["seq"] for e in got.delivered(sid)] == [1, 2], within=20)

    by_seq: dict[int, set[str]] = {}
    for request in got.requests():
        by_seq.setdefault(request["event"]["seq"], set()).add(request["webhookId"])
    assert by_seq == {1: {f"{sid}:1"}, 2: {f"{sid}:2"}}
    assert [r["answered"] for r in got.requests()][-2:] == [200, 200]

    metrics = (await http.get("/metrics")).text
    assert 'aim_events_delivered_total{type="session.created"} 1.0' in metrics
    assert 'aim_events_attempts_failed_total{reason="status"}' in metrics
    assert "aim_events_backlog" in metrics
    assert "aim_events_oldest_undelivered_seconds" in metrics

    ops = await http.get(f"/ops/api/sessions/{sid}/deliveries", headers=operator())
    assert ops.status_code == 200, ops.text
    first, second = ops.json()["deliveries"]
    assert first["seq"] == 1
    assert first["status"] == "delivered"
    assert first["attempts"] >= 4
    assert first["lastStatus"] == 200
    assert first["webhookId"] == f"{sid}:1"
    assert first["type"] == "session.created"
    assert second["attempts"] == 1
    assert second["deliveredAt"]


async def test_two_sessions_interleave_and_each_stays_in_order(sent, livekit) -> None:
    http, got = sent
    got.answer(200, delay_s=0.05)
    first, second = await asyncio.gather(whole_life(http, livekit), whole_life(http, livekit))
    await got.wait_for(
        lambda: all(len(got.delivered(s)) == len(LIFE) for s in (first, second)), within=40
    )
    for sid in (first, second):
        assert [e["seq"] for e in got.delivered(sid)] == list(range(1, len(LIFE) + 1))
    arrivals = [e["sessionId"] for e in got.delivered()]
    # neither session waited for the other to finish
    assert arrivals.index(second) < max(i for i, s in enumerate(arrivals) if s == first)
    assert arrivals.index(first) < max(i for i, s in enumerate(arrivals) if s == second)


async def test_an_operator_sees_the_attempts_and_redelivers_from_a_seq(sent, livekit) -> None:
    http, got = sent
    sid = await whole_life(http, livekit)
    await got.wait_for(lambda: len(got.delivered(sid)) == len(LIFE))
    before = len(got.requests())

    bad = await http.post(
        f"/ops/api/sessions/{sid}/events/redeliver", json={"fromSeq": 0}, headers=operator()
    )
    assert bad.status_code == 400
    missing = await http.post(
        f"/ops/api/sessions/{new_id()}/events/redeliver", json={"fromSeq": 1}, headers=operator()
    )
    assert missing.status_code == 404
    client_only = await http.post(
        f"/ops/api/sessions/{sid}/events/redeliver", json={"fromSeq": 7}, headers=headers()
    )
    assert client_only.status_code == 403
    again = await http.post(
        f"/ops/api/sessions/{sid}/events/redeliver", json={"fromSeq": 7}, headers=operator()
    )
    assert again.status_code == 200, again.text
    assert again.json() == {"sessionId": sid, "fromSeq": 7, "redelivering": 3}
    await got.wait_for(lambda: len(got.requests()) == before + 3)
    resent = got.requests()[before:]
    assert [r["webhookId"] for r in resent] == [f"{sid}:7", f"{sid}:8", f"{sid}:9"]
    assert [r["event"]["type"] for r in resent] == LIFE[6:]
    listed = (await http.get(f"/ops/api/sessions/{sid}/deliveries", headers=operator())).json()
    assert [d["attempts"] for d in listed["deliveries"]] == [1] * 9
    assert all(d["status"] == "delivered" for d in listed["deliveries"])


async def test_an_unconfigured_service_sends_and_stores_nothing(rt_client, livekit, store) -> None:
    live = await open_session(rt_client, livekit)
    ended = await call(
        rt_client, "EndSession", sessionId=live.sid, commandId=new_id(), reason="done"
    )
    assert "result" in ended
    listed = await rt_client.get(f"/ops/api/sessions/{live.sid}/deliveries", headers=operator())
    assert listed.json() == {"enabled": False, "dropped": 0, "deliveries": []}


def operator() -> dict[str, str]:
    return {"Authorization": f"Bearer {token('ops', scopes=('aim.operator',))}"}


async def test_a_tenant_with_its_own_receiver_gets_its_sessions_events(
    livekit, store, tmp_path: Path
) -> None:
    (tmp_path / "shared").mkdir()
    (tmp_path / "acme").mkdir()
    async with (
        receiver(tmp_path / "shared") as shared,
        receiver(tmp_path / "acme") as acme,
        service(
            livekit,
            store,
            auth_tenant_claim=TENANT_CLAIM,
            events_tenant_urls=(("acme", acme.url),),
            **events_settings(shared.url),
        ) as http,
    ):
        part = {"messageId": new_id(), "role": "ROLE_USER", "parts": [create_part()]}
        ours = await rpc_as(http, "SendMessage", {"message": part}, tenant="acme")
        theirs = await rpc_as(
            http, "SendMessage", {"message": {**part, "messageId": new_id()}}, tenant="other"
        )
        mine = session_of(ours["result"]["task"])["sessionId"]
        other = session_of(theirs["result"]["task"])["sessionId"]
        await acme.wait_for(lambda: len(acme.delivered(mine)) == 2)
        await shared.wait_for(lambda: len(shared.delivered(other)) == 2)
    assert {e["sessionId"] for e in acme.delivered()} == {mine}
    assert {e["sessionId"] for e in shared.delivered()} == {other}
    assert acme.delivered()[0]["principal"] == {"tenant": "acme", "sub": "alice"}


async def test_the_bound_is_on_the_backlog_and_a_dropped_event_leaves_a_gap(
    livekit, store, tmp_path: Path, caplog
) -> None:
    async with sending(livekit, store, tmp_path, events_max_per_session=3) as (http, got):
        got.answer(500)
        # created, ready, active: the bound (the agent does not join: no agent.joined)
        live = await open_session(http, livekit, agent=False)
        await request_action(http, live)  # a fourth, while none was delivered
        assert "1 session events not kept" in caplog.text
        got.answer(200)
        await got.wait_for(lambda: [e["seq"] for e in got.delivered(live.sid)] == [1, 2, 4])
        # the ones delivered make room: the end (its operation canceled) is kept and sent
        ended = await call(http, "EndSession", sessionId=live.sid, commandId=new_id(), reason="x")
        assert "result" in ended
        await got.wait_for(lambda: len(got.delivered(live.sid)) == 5)
    events = got.delivered(live.sid)
    # session.active (3), the oldest waiting event that may go, made room for the fourth
    assert [e["seq"] for e in events] == [1, 2, 4, 5, 6]
    assert [e["type"] for e in events] == [
        "session.created",
        "session.ready",
        "operation.requested",
        "operation.canceled",
        "session.ended",
    ]
    assert events[2]["droppedBefore"] == 1  # the gap, said where it is
    assert all("droppedBefore" not in e for i, e in enumerate(events) if i != 2)


async def test_a_full_backlog_keeps_the_end_and_says_what_it_dropped(
    livekit, store, tmp_path: Path
) -> None:
    async with sending(livekit, store, tmp_path, events_max_per_session=6) as (http, got):
        got.answer(500)  # the receiver fails: nothing leaves, the backlog fills
        # created, ready, active: 1 to 3 (the agent does not join: no agent.joined)
        live = await open_session(http, livekit, agent=False)
        epoch = 1
        for key in ("laptop", "phone", "laptop", "phone", "laptop", "phone"):
            _, epoch = await hand_over(http, live.sid, epoch, key)  # a handoff each: 4 to 9
        ended = await call(http, "EndSession", sessionId=live.sid, commandId=new_id(), reason="bye")
        assert "result" in ended, ended  # session.ended: 10, the backlog full
        got.answer(200)

        def ended_arrived() -> bool:
            return "session.ended" in [e["type"] for e in got.delivered(live.sid)]

        await got.wait_for(ended_arrived, within=30)
        listed = await http.get(f"/ops/api/sessions/{live.sid}/deliveries", headers=operator())
    events = got.delivered(live.sid)
    assert [e["seq"] for e in events] == [1, 2, 7, 8, 9, 10]
    assert [e["type"] for e in events][:2] == ["session.created", "session.ready"]
    end = events[-1]
    assert end["type"] == "session.ended"
    assert end["data"]["reason"] == "bye"
    assert end["data"]["secondsActive"] >= 0
    # the oldest waiting events went first; the first kept after them says how many
    assert events[2]["droppedBefore"] == 4
    view = listed.json()
    assert view["dropped"] == 4
    assert [d["seq"] for d in view["deliveries"]] == [1, 2, 7, 8, 9, 10]
    assert view["deliveries"][2]["droppedBefore"] == 4
    assert view["deliveries"][2]["event"]["droppedBefore"] == 4  # the body as sent
