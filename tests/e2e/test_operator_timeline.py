"""A session's timeline in the operator API (profile §17): one session's whole life, in order,
with the trace ids of the requests behind it, and never its message text."""

from __future__ import annotations

import asyncio
import re
from typing import Any

import httpx
import pytest

from tests.conftest import service
from tests.e2e import operator_api_helpers as operator_api
from tests.e2e.realtime_helpers import CAPS, new_id
from tests.e2e.webhook_helpers import deliver, room, webhook_event

pytestmark = [pytest.mark.e2e, pytest.mark.redis]

AGENT = "agent-AJ_worker-1"
TIMESTAMP = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z")


def trace(n: int) -> str:
    return f"{n:032x}"


async def command(http: httpx.AsyncClient, method: str, n: int, **params: Any) -> dict[str, Any]:
    return await operator_api.rpc_as(
        http, f"aim.realtime.{method}", params, traceparent=operator_api.traceparent(trace(n))
    )


def find(entries: list[dict[str, Any]], **wanted: Any) -> list[int]:
    """Indexes of the entries that hold every wanted member."""
    return [
        i
        for i, entry in enumerate(entries)
        if all(entry.get(key) == value for key, value in wanted.items())
    ]


def one(entries: list[dict[str, Any]], **wanted: Any) -> dict[str, Any]:
    found = find(entries, **wanted)
    assert len(found) == 1, (wanted, [entries[i] for i in found], entries)
    return entries[found[0]]


async def session_state(http: httpx.AsyncClient, session_id: str) -> str:
    body = await operator_api.operator_json(http, f"/ops/api/sessions/{session_id}")
    state: str = body["session"]["state"]
    return state


async def test_a_sessions_life_is_on_its_timeline_in_order_with_trace_ids(livekit, store):
    marker = f"private words {new_id()}"
    async with service(livekit, store, reconnect_grace_s=1, provisioning_timeout_s=1) as http:
        sid = await operator_api.start_session(http, traceparent=operator_api.traceparent(trace(1)))
        register_id = new_id()
        registered = await command(
            http, "RegisterEndpoint", 2, sessionId=sid, sessionEpoch=1, commandId=register_id,
            clientEndpointKey="phone", capabilities=CAPS,
        )  # fmt: skip
        phone = registered["result"]["endpoint"]["endpointId"]
        again = await command(
            http, "RegisterEndpoint", 3, sessionId=sid, sessionEpoch=1, commandId=register_id,
            clientEndpointKey="phone", capabilities=CAPS,
        )  # fmt: skip
        assert again["result"] == registered["result"]
        stale_id = new_id()
        stale = await command(
            http, "JoinSession", 4, sessionId=sid, sessionEpoch=7, endpointId=phone,
            commandId=stale_id,
        )  # fmt: skip
        assert stale["error"]["code"] == -31002
        join_id = new_id()
        joined = await command(
            http, "JoinSession", 5, sessionId=sid, sessionEpoch=1, endpointId=phone,
            commandId=join_id,
        )  # fmt: skip
        assert joined["result"]["session"]["state"] == "joining"
        arrived = webhook_event("participant_joined", room(sid), identity=phone, epoch=1)
        assert await deliver(http, arrived) == "applied"
        assert await deliver(http, arrived) == "duplicate"
        agent = webhook_event("participant_joined", room(sid), identity=AGENT, agent=True)
        assert await deliver(http, agent) == "applied"
        said = await command(
            http, "SendInteraction", 6, sessionId=sid, sessionEpoch=1, commandId=new_id(),
            type="input.text", payload={"text": marker},
        )  # fmt: skip
        assert "result" in said, said
        await livekit.wait_for_call("SendData")
        left = webhook_event("participant_left", room(sid), identity=phone, epoch=1)
        assert await deliver(http, left) == "applied"
        # the grace timer (1 s here) brings the session back to ready
        await operator_api.eventually(lambda: _is(http, sid, "ready"), within=10)
        ended = await command(
            http, "EndSession", 7, sessionId=sid, commandId=new_id(), reason="test over"
        )
        assert ended["result"]["session"]["state"] == "ending"
        await operator_api.eventually(lambda: _is(http, sid, "ended"))

        async def complete() -> list[dict[str, Any]] | None:
            entries = await operator_api.timeline_of(http, sid)
            done = (
                find(entries, kind="effect", effect="DeleteRoom", result="ok")
                and find(entries, kind="command", outcome="rejected")
                and find(entries, kind="timer", timer="provisioning")
            )
            return entries if done else None

        entries = await operator_api.eventually(complete)
        texts = [
            (await operator_api.operator_get(http, path)).text
            for path in (
                "/ops/api/sessions",
                f"/ops/api/sessions/{sid}",
                f"/ops/api/sessions/{sid}/timeline",
            )
        ]

    # oldest first, every entry with its time
    assert [e["at"] for e in entries] == sorted(e["at"] for e in entries)
    assert all(TIMESTAMP.fullmatch(e["at"]) for e in entries)

    # every transition, each with its cause
    moves = [(e["from"], e["to"], e["cause"]) for e in entries if e["kind"] == "transition"]
    for move in [
        (None, "provisioning", "create"),
        ("provisioning", "ready", "effect"),
        ("ready", "joining", "command"),
        ("joining", "active", "webhook"),
        ("active", "reconnecting", "webhook"),
        ("reconnecting", "ready", "timer"),
        ("ready", "ending", "command"),
        ("ending", "ended", "effect"),
    ]:
        assert move in moves, (move, moves)
    wanted = [
        one(entries, kind="transition", **{"from": before, "to": after})
        for before, after in [
            (None, "provisioning"),
            ("ready", "joining"),
            ("joining", "active"),
            ("active", "reconnecting"),
            ("reconnecting", "ready"),
            ("ready", "ending"),
            ("ending", "ended"),
        ]
    ]
    positions = [entries.index(entry) for entry in wanted]
    assert positions == sorted(positions)
    versions = [e["version"] for e in entries if e["kind"] == "transition"]
    assert versions == sorted(versions)

    # commands: applied, replayed, rejected with its code; the trace id of each request
    create = one(entries, kind="command", method="SendMessage")
    assert (create["outcome"], create["traceId"]) == ("applied", trace(1))
    register = one(entries, kind="command", commandId=register_id, outcome="applied")
    assert register["method"] == "aim.realtime.RegisterEndpoint"
    assert register["traceId"] == trace(2)
    replay = one(entries, kind="command", commandId=register_id, outcome="replayed")
    assert replay["traceId"] == trace(3)
    rejected = one(entries, kind="command", commandId=stale_id)
    assert (rejected["outcome"], rejected["code"], rejected["traceId"]) == (
        "rejected",
        -31002,
        trace(4),
    )
    applied = one(entries, kind="command", commandId=join_id)
    assert (applied["method"], applied["outcome"], applied["traceId"]) == (
        "aim.realtime.JoinSession",
        "applied",
        trace(5),
    )
    joining = wanted[1]
    assert joining["traceId"] == trace(5)
    assert entries.index(applied) < entries.index(joining)
    one(entries, kind="command", method="aim.realtime.SendInteraction", outcome="applied")
    one(entries, kind="command", method="aim.realtime.EndSession", traceId=trace(7))

    # webhooks with their verdicts (LiveKit sends no traceparent)
    first = one(entries, kind="webhook", id=arrived.id, verdict="applied")
    assert first["event"] == "participant_joined"
    assert "traceId" not in first
    one(entries, kind="webhook", id=arrived.id, verdict="duplicate")
    one(entries, kind="webhook", id=left.id, event="participant_left", verdict="applied")

    # LiveKit calls: attempt, result, duration; the ones a request ran carry its trace
    for call in ("CreateRoom", "SendData", "DeleteRoom"):
        effect = one(entries, kind="effect", effect=call)
        assert (effect["attempt"], effect["result"]) == (1, "ok")
        assert isinstance(effect["durationMs"], int)
        assert effect["durationMs"] >= 0
    assert one(entries, kind="effect", effect="CreateRoom")["traceId"] == trace(1)
    assert one(entries, kind="effect", effect="SendData")["traceId"] == trace(6)

    # the timer that fired, in order between the drop and the return to ready
    fired = one(entries, kind="timer", timer="grace")
    assert fired["result"] == "fired"
    assert entries.index(wanted[3]) < entries.index(fired) <= entries.index(wanted[4])

    # a timer that came due after the session had moved on
    refused = one(entries, kind="timer", timer="provisioning")
    assert refused["result"] == "refused"

    # never the message text
    for text in texts:
        assert marker not in text
    assert all(marker not in str(entry) for entry in entries)


async def _is(http: httpx.AsyncClient, session_id: str, state: str) -> bool:
    return await session_state(http, session_id) == state


async def test_trace_ids_are_the_spans_when_tracing_is_on(livekit, store, tracer_provider):
    async with service(livekit, store, tracer_provider) as http:
        sid = await operator_api.start_session(
            http, traceparent=operator_api.traceparent(trace(11))
        )
        untraced = await operator_api.rpc_as(
            http, "aim.realtime.EndSession", {"sessionId": sid, "commandId": new_id(),
                                              "reason": "done"},
        )  # fmt: skip
        assert "result" in untraced
        entries = await operator_api.timeline_of(http, sid)
    assert one(entries, kind="transition", to="provisioning")["traceId"] == trace(11)
    ending = one(entries, kind="transition", to="ending", cause="command")
    # no traceparent: the call's own span started a trace
    assert re.fullmatch(r"[0-9a-f]{32}", ending["traceId"])
    assert ending["traceId"] != trace(11)


async def test_a_failing_effect_shows_its_attempts_and_last_error_without_the_message(
    livekit, store
):
    marker = f"secret words {new_id()}"
    async with service(livekit, store) as http:
        sid = await operator_api.start_session(http)
        registered = await operator_api.rpc_as(
            http, "aim.realtime.RegisterEndpoint", {"sessionId": sid, "sessionEpoch": 1,
            "commandId": new_id(), "clientEndpointKey": "phone", "capabilities": CAPS},
        )  # fmt: skip
        phone = registered["result"]["endpoint"]["endpointId"]
        await operator_api.rpc_as(
            http, "aim.realtime.JoinSession", {"sessionId": sid, "sessionEpoch": 1,
            "endpointId": phone, "commandId": new_id()},
        )  # fmt: skip
        assert await deliver(
            http, webhook_event("participant_joined", room(sid), identity=phone)
        ) == ("applied")
        agent = webhook_event("participant_joined", room(sid), identity=AGENT, agent=True)
        assert await deliver(http, agent) == "applied"
        livekit.fail_next(5, status=500, method="SendData", msg="injected failure")
        said = await operator_api.rpc_as(
            http, "aim.realtime.SendInteraction", {"sessionId": sid, "sessionEpoch": 1,
            "commandId": new_id(), "type": "input.text", "payload": {"text": marker}},
        )  # fmt: skip
        assert "result" in said, said

        async def failing() -> dict[str, Any] | None:
            detail = await operator_api.operator_json(http, f"/ops/api/sessions/{sid}")
            outbox = detail["session"]["outbox"]
            return detail if outbox and outbox[0].get("lastError") else None

        detail = await operator_api.eventually(failing)
        entries = await operator_api.eventually(
            lambda: _with(http, sid, kind="effect", effect="SendData", result="retry")
        )
        raw = (await operator_api.operator_get(http, f"/ops/api/sessions/{sid}")).text
    item = detail["session"]["outbox"][0]
    assert item["effect"] == "SendData"
    assert item["attempts"] >= 1
    assert TIMESTAMP.fullmatch(item["lastAttemptAt"])
    assert "500" in item["lastError"] or "LiveKit" in item["lastError"]
    retry = next(e for e in entries if e["kind"] == "effect" and e["effect"] == "SendData")
    assert (retry["attempt"], retry["result"]) == (1, "retry")
    assert marker not in raw
    assert all(marker not in str(entry) for entry in entries)


async def _with(http: httpx.AsyncClient, sid: str, **wanted: Any) -> list[dict[str, Any]] | None:
    entries = await operator_api.timeline_of(http, sid)
    return entries if find(entries, **wanted) else None


async def test_a_webhook_for_the_room_before_a_rebind_is_fenced(livekit, store):
    async with service(livekit, store) as http:
        sid = await operator_api.start_session(http)
        assert await deliver(http, webhook_event("room_finished", room(sid, 1))) == "applied"
        await operator_api.eventually(lambda: _is(http, sid, "ready"))
        late = webhook_event("participant_joined", room(sid, 1), identity=AGENT, agent=True)
        assert await deliver(http, late) == "ignored"
        entries = await operator_api.eventually(
            lambda: _with(http, sid, kind="webhook", id=late.id)
        )
    rebind = one(entries, kind="transition", cause="webhook", to="provisioning")
    assert rebind["epoch"] == 2
    assert one(entries, kind="webhook", id=late.id)["verdict"] == "fenced"
    assert len(find(entries, kind="effect", effect="CreateRoom", result="ok")) == 2


async def test_a_page_of_a_timeline_continues_where_the_last_one_stopped(livekit, store):
    async with service(livekit, store) as http:
        sid = await operator_api.start_session(http)
        for key in ("a", "b", "c", "d"):
            await operator_api.rpc_as(
                http, "aim.realtime.RegisterEndpoint", {"sessionId": sid, "sessionEpoch": 1,
                "commandId": new_id(), "clientEndpointKey": key, "capabilities": CAPS},
            )  # fmt: skip
        await asyncio.sleep(0.3)  # the recorder's entries, if any, are written
        everything = await operator_api.timeline_of(http, sid)
        paged = await operator_api.timeline_of(http, sid, limit=3)
        bad = await operator_api.operator_get(
            http, f"/ops/api/sessions/{sid}/timeline", cursor="not-a-cursor"
        )
        too_many = await operator_api.operator_get(
            http, f"/ops/api/sessions/{sid}/timeline", limit=5000
        )
    assert len(everything) >= 10
    assert sorted(map(str, paged)) == sorted(map(str, everything))
    assert bad.status_code == too_many.status_code == 400
    assert bad.json()["error"]["code"] == -32602
