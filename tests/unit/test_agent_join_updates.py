"""The agent joining the room hears what became of the session's operations (profile §7, §8):
one `operation.update` per operation past its question, with a commandId fixed by the
operation and its state (`sync:<operationId>:<state>`), so a repeat sends the same messages."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from state_machines import Accepted, SendData
from state_machines import provider as agent
from state_machines.interactions import Resolve
from state_machines.session import (
    Join,
    ParticipantJoined,
    ParticipantLeft,
    RegisterEndpoint,
    RoomLost,
    Session,
)
from tests.unit.session_operation_helpers import CAPS, ask, confirm, live, run, step

AGENT = "agent-1"


def joined(session: Session, identity: str = AGENT, epoch: int = 1) -> Accepted[Session]:
    outcome = step(session, ParticipantJoined(epoch, identity, True))
    assert isinstance(outcome, Accepted), outcome
    return outcome


def bodies(outcome: Accepted[Session]) -> list[dict[str, Any]]:
    return [json.loads(e.body) for e in outcome.outbox if isinstance(e, SendData)]


def cancel(op: str) -> Resolve:
    return Resolve(command_id="c-x", decision="cancel", via="interaction", epoch=1, operation_id=op)


def expire(op: str, req: str) -> Resolve:
    return Resolve(
        command_id="t-x", decision="expire", via="timer", operation_id=op, requirement_id=req
    )


def finish(op: str, state: str = "succeeded") -> agent.UpdateOperation:
    return agent.UpdateOperation(1, op, state)  # type: ignore[arg-type]


def test_an_agent_joining_a_session_without_answers_is_told_nothing() -> None:
    assert joined(live(agent_joined=False)).outbox == ()
    waiting = run(live(agent_joined=False), ask(), ask("op-2", "req-2"))
    assert joined(waiting).outbox == ()  # still awaiting confirmation: nothing to tell


def test_a_confirmation_made_before_the_agent_joined_reaches_it_on_join() -> None:
    session = run(live(agent_joined=False), ask())
    answered = step(session, confirm())
    assert isinstance(answered, Accepted)
    assert not any(isinstance(e, SendData) for e in answered.outbox)  # nobody to tell yet
    outcome = joined(answered.state)
    assert outcome.state.agent_identity == AGENT
    assert outcome.outbox == (
        SendData(
            "aim-s1-e1",
            (AGENT,),
            '{"type":"operation.update","commandId":"sync:op-1:running","sessionEpoch":1,'
            '"payload":{"operationId":"op-1","state":"running"}}',
        ),
    )


def test_every_operation_past_its_question_is_told_oldest_first() -> None:
    session = run(
        live(agent_joined=False),
        ask("op-1", "req-1"),
        ask("op-2", "req-2"),
        ask("op-3", "req-3"),
        ask("op-4", "req-4"),
        ask("op-5", "req-5", requirement=None),
        ask("op-6", "req-6", requirement=None),
        ask("op-7", "req-7"),
        confirm("op-1", "req-1"),
        cancel("op-2"),
        expire("op-3", "req-3"),
        confirm("op-4", "req-4"),
        finish("op-4"),
        finish("op-5", "failed"),
    )
    told = [(b["commandId"], b["payload"]) for b in bodies(joined(session))]
    expected = [
        ("op-1", "running"),
        ("op-2", "canceled"),
        ("op-3", "expired"),
        ("op-4", "succeeded"),
        ("op-5", "failed"),
        ("op-6", "running"),
    ]
    assert told == [
        (f"sync:{op}:{state}", {"operationId": op, "state": state}) for op, state in expected
    ]


def test_a_repeated_join_or_a_replacement_sends_the_same_messages_again() -> None:
    session = run(live(agent_joined=False), ask(), confirm())
    first = joined(session)
    again = joined(first.state)  # the same participant_joined without its event id
    assert again.outbox == first.outbox
    # the agent left: it is replaced in the same room, and the new one (another identity) is
    # told what the first was, addressed to itself
    left = run(first.state, ParticipantLeft(1, AGENT, True))
    other = joined(left, "agent-2")
    assert bodies(other) == bodies(first)
    assert [e.destination for e in other.outbox if isinstance(e, SendData)] == [("agent-2",)]


def test_the_update_carries_the_current_epoch_and_room() -> None:
    session = run(live(agent_joined=False), ask(), confirm())
    handed = run(session, RegisterEndpoint(1, "ep-b", "tablet", CAPS, 8), Join(1, "ep-b"))
    assert handed.epoch == 2
    (update,) = joined(handed).outbox  # a handoff keeps the room and its agent epoch
    assert isinstance(update, SendData)
    assert update.room == "aim-s1-e1"
    assert json.loads(update.body)["sessionEpoch"] == 2


def test_the_agent_of_a_new_room_hears_the_operations_the_rebind_canceled() -> None:
    session = run(live(), ask())
    rebound = run(session, RoomLost("aim-s1-e1"))
    told = joined(rebound, epoch=2)
    rooms = [e.room for e in told.outbox if isinstance(e, SendData)]
    assert rooms == ["aim-s1-e2"]
    assert [b["commandId"] for b in bodies(told)] == ["sync:op-1:canceled"]


@given(st.lists(st.sampled_from(["ask", "ask_free", "confirm", "cancel", "expire", "finish"])))
def test_the_join_tells_exactly_the_operations_past_their_question(steps: list[str]) -> None:
    session = live(agent_joined=False)
    count = 0
    for name in steps:
        last, req = f"op-{count}", f"req-{count}"
        event: object
        if name in ("ask", "ask_free"):
            count += 1
            extra = {"requirement": None} if name == "ask_free" else {}
            event = ask(f"op-{count}", f"req-{count}", **extra)
        elif name == "confirm":
            event = confirm(last, req)
        elif name == "cancel":
            event = cancel(last)
        elif name == "expire":
            event = expire(last, req)
        else:
            event = finish(last)
        outcome = step(session, event)
        if isinstance(outcome, Accepted):
            assert not any(isinstance(e, SendData) for e in outcome.outbox)
            session = outcome.state
    told = joined(session)
    answered = [
        op for op in session.operations if op.state not in ("pending", "awaiting_confirmation")
    ]
    assert [(b["payload"]["operationId"], b["payload"]["state"]) for b in bodies(told)] == [
        (op.operation_id, op.state) for op in answered
    ]
    assert [b["commandId"] for b in bodies(told)] == [
        f"sync:{op.operation_id}:{op.state}" for op in answered
    ]
    assert joined(told.state).outbox == told.outbox  # deterministic: the same join, the same ids
