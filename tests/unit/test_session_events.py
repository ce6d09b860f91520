"""The session events of a commit (profile §21), computed from the move it makes: which types,
numbered how, saying what (and never the agent's words)."""

from __future__ import annotations

import json
from typing import Any

import msgspec
from hypothesis import given
from hypothesis import strategies as st

from realtime.engine.session_events import notices, session_events
from realtime.settings import SESSION_EVENT_TYPES, Settings
from realtime.store.records import SessionRecord
from state_machines.interactions import Resolve
from state_machines.session import (
    End,
    Join,
    ParticipantJoined,
    Provisioned,
    RegisterEndpoint,
    Session,
)
from state_machines.session_model import rebind
from tests.unit.session_operation_helpers import CAPS, T1, ask, confirm, created, live, run

EVERY = frozenset(SESSION_EVENT_TYPES)
NOW_MS = 1_796_000_000_000
CONFIGURED = Settings(events_url="https://backend.example/aim", events_secret="whsec_" + "A" * 32)


def record(session: Session, tenant: str | None = "acme") -> SessionRecord:
    return SessionRecord(owner="o", principal_name="alice", session=session, tenant=tenant)


def events(old: Session | None, new: Session, types: frozenset[str] = EVERY, seq: int = 0):
    found = session_events(old, new, record(new), seq=seq, now_ms=NOW_MS, types=types)
    return [json.loads(body) for _, body in found]


def kinds(old: Session | None, new: Session) -> list[str]:
    return [e["type"] for e in events(old, new)]


def just_created() -> Session:
    return created(live().requested, required=(), now="2026-01-01T00:00:00.000Z")


def test_a_new_session_is_created_and_becomes_ready() -> None:
    fresh = just_created()
    (first,) = events(None, fresh)
    assert first["type"] == "session.created"
    assert first["seq"] == 1
    assert first["sessionId"] == "s1"
    assert first["taskId"] == "t1"
    assert first["principal"] == {"tenant": "acme", "sub": "alice"}
    assert first["sessionEpoch"] == 1
    assert first["occurredAt"].startswith("2026-")
    assert first["data"]["state"] == "provisioning"
    ready = run(fresh, Provisioned(1))
    assert [(e["type"], e["seq"]) for e in events(fresh, ready, seq=1)] == [("session.ready", 2)]


def test_joining_is_no_event_and_the_device_in_the_room_is_active() -> None:
    ready = run(just_created(), Provisioned(1), RegisterEndpoint(1, "ep-a", "phone", CAPS, 8))
    joining = run(ready, Join(1, "ep-a"))
    assert kinds(ready, joining) == []
    active = run(joining, ParticipantJoined(1, "ep-a", False))
    assert events(joining, active)[0]["data"] == {"endpointId": "ep-a"}


def test_a_handoff_names_the_epochs_and_the_superseded_device() -> None:
    session = run(live(), RegisterEndpoint(1, "ep-b", "laptop", CAPS, 8))
    handed = run(session, Join(1, "ep-b"))
    (handoff,) = events(session, handed)
    assert handoff["type"] == "session.handoff"
    assert handoff["sessionEpoch"] == 2
    assert handoff["data"] == {
        "fromEpoch": 1,
        "endpointId": "ep-b",
        "supersededEndpointIds": ["ep-a"],
    }


def test_a_rebind_is_rebound_and_cancels_the_open_operations() -> None:
    asked = run(live(), ask())
    rebound = rebind(asked, "provisioning", T1).state
    assert kinds(asked, rebound) == ["session.rebound", "operation.canceled"]
    assert events(asked, rebound)[0]["data"]["fromEpoch"] == 1


def test_operations_requested_confirmed_canceled_expired() -> None:
    session = live()
    asked = run(session, ask())
    (requested,) = events(session, asked)
    assert requested["type"] == "operation.requested"
    assert requested["data"] == {
        "operationId": "op-1",
        "kind": "action",
        "createdBy": "provider",
        "state": "awaiting_confirmation",
        "confirmation": True,
        "expiresAt": "2026-01-01T00:02:00.000Z",
    }
    assert kinds(asked, run(asked, confirm())) == ["operation.confirmed"]
    deny = Resolve(
        command_id="c-2", decision="cancel", via="interaction", epoch=1, operation_id="op-1"
    )
    assert kinds(asked, run(asked, deny)) == ["operation.canceled"]
    expire = Resolve(
        command_id="t-1",
        decision="expire",
        via="timer",
        operation_id="op-1",
        requirement_id="req-1",
    )
    assert kinds(asked, run(asked, expire)) == ["operation.expired"]
    # an action that needs no confirmation is requested and runs: nothing was confirmed
    started = run(session, ask("op-2", requirement=None))
    assert kinds(session, started) == ["operation.requested"]


def test_the_end_says_why_when_and_which_devices_joined() -> None:
    session = run(live(), End("user hung up"))
    over = msgspec.structs.replace(
        session, state="ended", ended_at="2026-01-01T00:00:31.500Z", end_reason="user hung up"
    )
    (ended,) = events(session, over)
    assert ended["type"] == "session.ended"
    assert ended["data"]["reason"] == "user hung up"
    assert ended["data"]["secondsActive"] == 30.5  # from the first JoinSession (T1) to the end
    assert ended["data"]["endpoints"] == [{"endpointId": "ep-a", "clientEndpointKey": "phone"}]
    # what it used: from its creation (T0) to its end; every step of `live()` and the end
    # were committed at T1, so no second of connection or of the agent passed between them
    assert ended["data"]["usage"] == {
        "sessionSeconds": 31.5,
        "connectedSeconds": 0.0,
        "agentSeconds": 0.0,
        "handoffs": 0,
        "rotations": 0,
    }


def test_the_types_asked_for_are_the_ones_numbered() -> None:
    session = live()
    asked = run(session, ask(), ask("op-2", "req-2"))
    only = frozenset({"operation.requested"})
    found = events(session, asked, types=only, seq=7)
    assert [(e["type"], e["seq"]) for e in found] == [
        ("operation.requested", 8),
        ("operation.requested", 9),
    ]
    assert events(session, asked, types=frozenset({"session.ended"})) == []


def test_nothing_is_written_unless_events_are_configured() -> None:
    session = live()
    asked = run(session, ask())
    unchanged, none = notices(Settings(), session, asked, record(asked), now_ms=NOW_MS, window_s=9)
    assert none.items == ()
    assert unchanged.events_seq is msgspec.UNSET
    moved, kept = notices(CONFIGURED, session, asked, record(asked), now_ms=NOW_MS, window_s=9)
    assert [seq for seq, _ in kept.items] == [1]
    assert moved.events_seq == 1
    assert kept.ttl_s == CONFIGURED.events_retry_s  # kept at least as long as retried
    assert kept.kept == CONFIGURED.events_max_per_session
    again, more = notices(CONFIGURED, asked, asked, moved, now_ms=NOW_MS, window_s=10**7)
    assert more.items == ()
    assert again.events_seq == 1
    assert b"eventsSeq" not in msgspec.json.encode(unchanged)


@given(
    seq=st.integers(min_value=0, max_value=10**6),
    titles=st.lists(st.text(max_size=20).map("Title: ".__add__), min_size=1, max_size=4),
    types=st.sets(st.sampled_from(SESSION_EVENT_TYPES)),
)
def test_events_are_numbered_on_without_gaps_and_carry_no_words(
    seq: int, titles: list[str], types: set[str]
) -> None:
    session = live()
    moves: list[Any] = [
        ask(f"op-{i}", f"req-{i}", action_json=json.dumps({"title": title}))
        for i, title in enumerate(titles)
    ]
    asked = run(session, *moves)
    found = session_events(
        session, asked, record(asked), seq=seq, now_ms=NOW_MS, types=frozenset(types)
    )
    assert [n for n, _ in found] == list(range(seq + 1, seq + 1 + len(found)))
    assert all(json.loads(body)["seq"] == n for n, body in found)
    assert all(b"Title: " not in body for _, body in found)  # the agent's words stay out


def test_the_lifecycle_and_terminal_events_are_marked_to_be_kept_whatever_the_backlog() -> None:
    begun = just_created()
    ready = run(begun, Provisioned(1))
    _, first = notices(CONFIGURED, None, ready, record(ready), now_ms=NOW_MS, window_s=9)
    assert [seq for seq, _ in first.items] == [1, 2]  # session.created, session.ready
    assert first.lasting == {1, 2}
    session = live()
    asked = run(session, ask())
    _, asking = notices(CONFIGURED, session, asked, record(asked), now_ms=NOW_MS, window_s=9)
    assert asking.lasting == frozenset()  # operation.requested may go when the backlog is full
    over = msgspec.structs.replace(
        run(asked, End("bye")), state="ended", ended_at="2026-01-01T00:00:31.500Z"
    )
    _, ending = notices(CONFIGURED, asked, over, record(over), now_ms=NOW_MS, window_s=9)
    kinds_of = {seq: json.loads(body)["type"] for seq, body in ending.items}
    assert {kinds_of[seq] for seq in ending.lasting} == {"session.ended"}
    assert set(kinds_of.values()) == {"operation.canceled", "session.ended"}


def test_the_agent_joining_and_its_replacements_are_told() -> None:
    from state_machines.session import AgentJobEnded, AgentStartTimeout, ParticipantLeft

    ready = run(just_created(), Provisioned(1))
    joined = run(ready, ParticipantJoined(1, "agent-1", True))
    assert events(ready, joined)[0] | {"occurredAt": ""} == {
        "type": "agent.joined",
        "sessionId": "s1",
        "taskId": "t1",
        "principal": {"tenant": "acme", "sub": "alice"},
        "seq": 1,
        "sessionEpoch": 1,
        "occurredAt": "",
        "data": {"identity": "agent-1", "dispatchAttempt": 1},
    }
    assert kinds(joined, run(joined, ParticipantJoined(1, "agent-1", True))) == []  # again
    lost = run(joined, ParticipantLeft(1, "agent-1", True))
    assert [(e["type"], e["data"]) for e in events(joined, lost)] == [
        ("agent.replaced", {"dispatchAttempt": 2, "reason": "lost"})
    ]
    missed = run(lost, AgentStartTimeout(1, 2))
    assert [(e["type"], e["data"]) for e in events(lost, missed)] == [
        ("agent.replaced", {"dispatchAttempt": 3, "reason": "not_started"})
    ]
    assert kinds(missed, run(missed, AgentJobEnded(1, 3, "AJ_3"))) == ["agent.replaced"]
    # a third dispatch in a row starts nothing: no agent can be had
    last = run(missed, AgentStartTimeout(1, 3))
    gone = run(last, AgentStartTimeout(1, 4))
    assert [(e["type"], e["data"]["reason"]) for e in events(last, gone)] == [
        ("session.failed", "agent_unavailable")
    ]
