"""A session's usage in the pure core (profile §24): the seconds a device was connected and the
agent was in the room, counted by the commits that start and stop each clock."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from state_machines import Accepted, decide
from state_machines.session import (
    End,
    Join,
    ParticipantJoined,
    ParticipantLeft,
    Provisioned,
    RegisterEndpoint,
    RoomDeleted,
    RoomLost,
    Session,
)
from state_machines.usage import Usage, usage_of
from tests.unit.session_operation_helpers import AUDIO_TEXT, created

T0 = "2026-01-01T00:00:00.000Z"


def at(seconds: float) -> str:
    whole, ms = divmod(round(seconds * 1000), 1000)
    minutes, secs = divmod(whole, 60)
    return f"2026-01-01T00:{minutes:02d}:{secs:02d}.{ms:03d}Z"


def step(session: Session, event: object, seconds: float) -> Session:
    outcome = decide(session, event, now=at(seconds))  # type: ignore[arg-type]
    assert isinstance(outcome, Accepted), outcome
    return outcome.state


def joined() -> Session:
    """Created at 0 s, ready at 1 s, the phone registered and joining at 2 s."""
    session = step(created(now=T0), Provisioned(1), 1)
    session = step(session, RegisterEndpoint(1, "ep-a", "a", AUDIO_TEXT, 8), 2)
    return step(session, Join(1, "ep-a"), 2)


def test_connected_time_runs_while_a_device_is_in_and_stops_while_it_reconnects() -> None:
    session = step(joined(), ParticipantJoined(1, "ep-a", False), 3)  # active
    session = step(session, ParticipantLeft(1, "ep-a", False), 13)  # reconnecting: 10 s
    assert (session.active_ms, session.active_since) == (10_000, None)
    session = step(session, ParticipantJoined(1, "ep-a", False), 20)  # back
    session = step(session, End("bye"), 25)  # 5 s more
    session = step(session, RoomDeleted(1), 26)

    assert usage_of(session) == Usage(
        session_ms=26_000, connected_ms=15_000, agent_ms=0, handoffs=0, rotations=0
    )


def test_agent_time_runs_while_it_is_in_the_room_and_stops_at_the_end() -> None:
    session = step(joined(), ParticipantJoined(1, "agent-1", True), 4)
    session = step(session, ParticipantLeft(1, "agent-1", True), 9)  # lost: 5 s
    assert (session.agent_ms, session.agent_since) == (5_000, None)
    session = step(session, ParticipantJoined(1, "agent-2", True), 12)  # the replacement
    session = step(session, End("bye"), 20)  # 8 s more

    assert (session.agent_ms, session.agent_since) == (13_000, None)
    assert usage_of(session).agent_ms == 13_000


def test_a_handoff_is_counted_and_the_new_device_is_connected_once_it_is_in() -> None:
    session = step(joined(), ParticipantJoined(1, "ep-a", False), 3)
    session = step(session, RegisterEndpoint(1, "ep-b", "b", AUDIO_TEXT, 8), 5)
    session = step(session, Join(1, "ep-b"), 6)  # epoch 2; joining: the clock stops
    session = step(session, ParticipantJoined(2, "ep-b", False), 8)
    session = step(session, End("bye"), 10)

    usage = usage_of(session)
    assert (usage.handoffs, usage.connected_ms) == (1, 3_000 + 2_000)


def test_a_lost_room_stops_both_clocks_until_the_new_room_is_joined() -> None:
    session = step(joined(), ParticipantJoined(1, "ep-a", False), 3)
    session = step(session, ParticipantJoined(1, "agent-1", True), 3)
    session = step(session, RoomLost(session.room), 7)
    assert (session.active_ms, session.agent_ms) == (4_000, 4_000)
    assert (session.active_since, session.agent_since) == (None, None)


@given(st.lists(st.sampled_from(["in", "out", "agent_in", "agent_out", "wait"]), max_size=20))
def test_any_sequence_counts_no_more_time_than_passed(moves: list[str]) -> None:
    session, now = joined(), 2.0
    for move in moves:
        now += 1.5
        event = {
            "in": ParticipantJoined(1, "ep-a", False),
            "out": ParticipantLeft(1, "ep-a", False),
            "agent_in": ParticipantJoined(1, f"agent-{len(session.agents_replaced) + 1}", True),
            "agent_out": ParticipantLeft(1, session.agent_identity or "none", True),
            "wait": None,
        }[move]
        if event is None:
            continue
        outcome = decide(session, event, now=at(now))
        if isinstance(outcome, Accepted):
            session = outcome.state
    ended = step(session, End("bye"), now + 1)
    usage = usage_of(ended)
    assert 0 <= usage.connected_ms <= usage.session_ms
    assert 0 <= usage.agent_ms <= usage.session_ms
    assert (ended.active_since, ended.agent_since) == (None, None)
