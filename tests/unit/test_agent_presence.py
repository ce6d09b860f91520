"""The agent's presence (profile §22) in the session machine: LiveKit's job reports and the agent
participant's joins and leaves, the start timeout, replacement in the same room, fencing of
older dispatches and replaced agents, and `agent_unavailable` when no dispatch is left."""

from __future__ import annotations

import msgspec
import pytest

from state_machines import Accepted, Rejected, RejectReason, decide
from state_machines.effects import DeleteDispatch, DeleteRoom, DispatchAgent, RemoveParticipant
from state_machines.provider import ReportAgentState
from state_machines.session import (
    MAX_AGENT_DISPATCHES,
    MAX_AGENT_MISSES,
    AgentDispatched,
    AgentJobEnded,
    AgentJobStarted,
    AgentStartTimeout,
    End,
    Join,
    ParticipantJoined,
    ParticipantLeft,
    Provisioned,
    RegisterEndpoint,
    RoomDeleted,
    RoomLost,
    Session,
    SessionEvent,
)
from state_machines.session_model import AgentJob
from tests.unit.session_operation_helpers import AUDIO_TEXT, created

T0 = "2025-01-01T00:00:00Z"
T1 = "2025-01-01T00:00:10Z"
ROOM = "aim-s1-e1"


def fresh() -> Session:
    return created(now=T0)


def step(session: Session, event: SessionEvent | ReportAgentState) -> Accepted[Session]:
    outcome = decide(session, event, now=T1)
    assert isinstance(outcome, Accepted), outcome
    return outcome


def run(session: Session, *events: SessionEvent | ReportAgentState) -> Session:
    for event in events:
        session = step(session, event).state
    return session


def refused(session: Session, event: SessionEvent, why: str = "") -> Rejected:
    outcome = decide(session, event, now=T1)
    assert isinstance(outcome, Rejected), outcome
    assert outcome.reason is RejectReason.INVALID_STATE
    assert why in outcome.detail
    return outcome


def ready() -> Session:
    return run(fresh(), Provisioned(1))


def active() -> Session:
    """A device in the room, the agent dispatched (no job heard yet)."""
    return run(
        ready(),
        RegisterEndpoint(1, "ep-a", "a", AUDIO_TEXT, 8),
        Join(1, "ep-a"),
        ParticipantJoined(1, "ep-a", False),
    )


def started(session: Session, attempt: int = 1, job: str = "AJ_1", who: str = "agent-1") -> Session:
    return run(session, AgentJobStarted(1, attempt, job, who, f"AD_{attempt}"))


def with_agent(
    session: Session, attempt: int = 1, job: str = "AJ_1", who: str = "agent-1"
) -> Session:
    return run(started(session, attempt, job, who), ParticipantJoined(1, who, True))


# --- a job accepted: agent_job_started or the agent joining, whichever first -------------------


def test_a_started_job_is_recorded_before_the_agent_joins() -> None:
    session = started(active())

    assert (session.state, session.agent_state) == ("active", "started")
    assert session.agent_job == AgentJob("AJ_1", "agent-1", "AD_1")
    assert (session.agent_dispatch, session.agent_identity) == ("AD_1", None)

    joined = step(session, ParticipantJoined(1, "agent-1", True))
    assert (joined.state.agent_state, joined.state.agent_identity) == ("joined", "agent-1")


def test_an_agent_that_joins_before_its_job_is_heard_has_started() -> None:
    session = run(active(), ParticipantJoined(1, "agent-1", True))
    assert session.agent_state == "joined"
    # the job's report comes after: recorded, the agent stays joined
    session = started(session)
    assert (session.agent_state, session.agent_job) == (
        "joined",
        AgentJob("AJ_1", "agent-1", "AD_1"),
    )
    # and the start timer of this dispatch finds it started
    refused(session, AgentStartTimeout(1, 1), "has started")


def test_a_job_start_heard_again_changes_nothing_and_another_job_is_refused() -> None:
    session = started(active())

    again = step(session, AgentJobStarted(1, 1, "AJ_1", "agent-1", "AD_1"))

    assert again.state is session
    refused(session, AgentJobStarted(1, 1, "AJ_2", "agent-2", "AD_1"), "not the agent's job")


def test_only_the_jobs_agent_may_join_as_the_agent() -> None:
    session = started(active())
    refused(session, ParticipantJoined(1, "agent-9", True), "not the agent of AJ_1")


def test_a_join_keeps_a_state_the_agent_reported_since() -> None:
    session = run(with_agent(active()), ReportAgentState(1, 1, "listening"))

    again = step(session, ParticipantJoined(1, "agent-1", True))

    assert again.state.agent_state == "listening"


def test_a_replacement_dispatch_confirmed_is_recorded() -> None:
    session = run(active(), AgentStartTimeout(1, 1))
    assert session.agent_state == "dispatching"

    confirmed = run(session, AgentDispatched(1, 2, "AD_2"))
    assert (confirmed.agent_state, confirmed.agent_dispatch) == ("dispatched", "AD_2")
    # a job heard before the confirmation keeps the agent started
    early = run(started(session, attempt=2, job="AJ_2"), AgentDispatched(1, 2, "AD_2"))
    assert early.agent_state == "started"


# --- the start timeout and replacement ---------------------------------------------------------


def test_a_dispatch_that_started_no_job_is_replaced_in_the_same_room_and_epoch() -> None:
    session = active()

    outcome = step(session, AgentStartTimeout(1, 1))

    after = outcome.state
    assert (after.state, after.epoch, after.room) == ("active", 1, ROOM)
    assert (after.agent_state, after.agent_attempt, after.agent_misses) == ("dispatching", 2, 1)
    assert outcome.outbox == (DeleteDispatch(ROOM, 1, 2), DispatchAgent(ROOM, 1, 2, generation=2))
    assert after.active_endpoint_id == "ep-a"  # the user stays connected
    assert after.task_state == "TASK_STATE_WORKING"


def test_after_the_last_dispatch_that_started_nothing_the_session_fails_agent_unavailable() -> None:
    session = active()
    for attempt in range(1, MAX_AGENT_MISSES):
        session = run(session, AgentStartTimeout(1, attempt))
    assert (session.agent_attempt, session.agent_misses) == (MAX_AGENT_MISSES, MAX_AGENT_MISSES - 1)

    outcome = step(session, AgentStartTimeout(1, MAX_AGENT_MISSES))

    failed = outcome.state
    assert (failed.state, failed.end_reason, failed.task_state) == (
        "failed",
        "agent_unavailable",
        "TASK_STATE_FAILED",
    )
    assert failed.ended_at == T1
    assert all(e.state == "removed" for e in failed.endpoints)
    # the user is in the room: removed with its tokens revoked, and the room deleted
    assert outcome.outbox == (
        RemoveParticipant(ROOM, "ep-a", revoke_before=T1),
        DeleteRoom(ROOM, 1),
    )
    # the room's deletion, once done, changes nothing of a failed session
    assert isinstance(decide(failed, RoomDeleted(1), now=T1), Rejected)


def test_the_timer_of_a_replaced_dispatch_is_fenced() -> None:
    session = run(active(), AgentStartTimeout(1, 1))

    refused(session, AgentStartTimeout(1, 1), "fenced")
    refused(session, AgentStartTimeout(1, 3), "fenced")  # not one it dispatched


def test_a_job_that_starts_resets_the_count_of_dispatches_that_started_nothing() -> None:
    session = run(active(), AgentStartTimeout(1, 1), AgentStartTimeout(1, 2))
    assert session.agent_misses == 2
    session = with_agent(session, attempt=3, job="AJ_3", who="agent-3")

    lost = run(session, AgentJobEnded(1, 3, "AJ_3", "agent-3"))

    assert (lost.state, lost.agent_attempt, lost.agent_misses) == ("active", 4, 0)


# --- an agent lost mid-session -----------------------------------------------------------------


@pytest.mark.parametrize(
    "lost",
    [AgentJobEnded(1, 1, "AJ_1", "agent-1"), ParticipantLeft(1, "agent-1", True)],
    ids=["job ended", "agent left"],
)
def test_an_agent_lost_while_live_is_replaced_in_the_same_room(lost: SessionEvent) -> None:
    session = with_agent(active())

    outcome = step(session, lost)

    after = outcome.state
    assert (after.state, after.epoch, after.room, after.active_endpoint_id) == (
        "active",
        1,
        ROOM,
        "ep-a",
    )
    assert (after.agent_state, after.agent_identity, after.agent_job) == ("dispatching", None, None)
    assert (after.agent_attempt, after.agent_misses, after.agents_replaced) == (2, 0, ("agent-1",))
    assert outcome.outbox == (DeleteDispatch(ROOM, 1, 2), DispatchAgent(ROOM, 1, 2, generation=2))


def test_the_replaced_agents_other_reports_are_fenced() -> None:
    # LiveKit reports both the job's end and the agent's leave, in either order
    session = run(with_agent(active()), ParticipantLeft(1, "agent-1", True))

    refused(session, AgentJobEnded(1, 1, "AJ_1", "agent-1"), "fenced")
    refused(session, AgentJobStarted(1, 1, "AJ_1", "agent-1", "AD_1"), "fenced")
    refused(session, ParticipantLeft(1, "agent-1", True), "fenced")
    refused(session, ParticipantJoined(1, "agent-1", True), "fenced")
    refused(session, AgentDispatched(1, 1, "AD_1"), "fenced")


def test_the_new_agent_learns_the_session_as_a_joining_agent_does() -> None:
    session = run(with_agent(active()), AgentJobEnded(1, 1, "AJ_1", "agent-1"))
    session = started(session, attempt=2, job="AJ_2", who="agent-2")

    joined = step(session, ParticipantJoined(1, "agent-2", True))

    assert (joined.state.agent_state, joined.state.agent_identity) == ("joined", "agent-2")


def test_a_job_that_ends_before_its_start_is_heard_is_a_lost_agent() -> None:
    session = active()

    after = run(session, AgentJobEnded(1, 1, "AJ_1", "agent-1"))

    assert (after.agent_attempt, after.agent_misses) == (2, 0)
    assert after.agents_replaced == ()  # its agent was never seen
    # its start, heard late, belongs to the replaced dispatch
    refused(after, AgentJobStarted(1, 1, "AJ_1", "agent-1", "AD_1"), "fenced")


def test_the_end_of_another_job_than_the_agents_is_refused() -> None:
    refused(started(active()), AgentJobEnded(1, 1, "AJ_9", "agent-9"), "not the agent's job")


def test_a_leave_of_an_agent_that_is_not_the_sessions_is_refused() -> None:
    refused(active(), ParticipantLeft(1, "agent-1", True), "not the session's agent")
    refused(with_agent(active()), ParticipantLeft(1, "agent-2", True), "not the session's agent")


def test_the_jobs_agent_leaving_before_its_join_was_heard_is_lost() -> None:
    after = run(started(active()), ParticipantLeft(1, "agent-1", True))
    assert (after.agent_attempt, after.agents_replaced) == (2, ("agent-1",))


def test_a_room_replaces_its_agent_a_bounded_number_of_times() -> None:
    session = active()
    for attempt in range(1, MAX_AGENT_DISPATCHES):
        session = with_agent(session, attempt, f"AJ_{attempt}", f"agent-{attempt}")
        session = run(session, AgentJobEnded(1, attempt, f"AJ_{attempt}", f"agent-{attempt}"))
    assert (session.state, session.agent_attempt) == ("active", MAX_AGENT_DISPATCHES)
    last = MAX_AGENT_DISPATCHES
    session = with_agent(session, last, f"AJ_{last}", f"agent-{last}")

    failed = run(session, ParticipantLeft(1, f"agent-{last}", True))

    assert (failed.state, failed.end_reason) == ("failed", "agent_unavailable")


# --- fencing by room, and what the agent reports ------------------------------------------------


def test_job_events_of_another_room_are_fenced() -> None:
    session = run(active(), RoomLost(ROOM), Provisioned(2))
    assert (session.room_epoch, session.agent_attempt) == (2, 1)

    refused(session, AgentJobStarted(1, 1, "AJ_1", "agent-1", "AD_1"), "fenced")
    refused(session, AgentStartTimeout(1, 1), "fenced")


def test_a_rebind_starts_the_agents_presence_again() -> None:
    session = run(
        with_agent(active()), ParticipantLeft(1, "agent-1", True), AgentStartTimeout(1, 2)
    )
    assert (session.agent_attempt, session.agent_misses) == (3, 1)

    rebound = run(session, RoomLost(ROOM))

    assert (rebound.agent_attempt, rebound.agent_misses, rebound.agents_replaced) == (1, 0, ())
    assert (rebound.agent_job, rebound.agent_dispatch) == (None, None)


def test_a_state_report_counts_only_from_an_agent_that_started() -> None:
    session = run(active(), AgentStartTimeout(1, 1))  # a replaced agent may still report

    replaced = decide(session, ReportAgentState(1, 1, "speaking", generation=1), now=T1)
    report = step(session, ReportAgentState(1, 1, "speaking", generation=2))

    assert isinstance(replaced, Rejected)
    assert replaced.reason is RejectReason.AGENT_REPLACED
    assert report.state is session  # the replacement's token, before its job started
    speaking = run(started(session, 2, "AJ_2"), ReportAgentState(1, 1, "speaking", generation=2))
    assert speaking.agent_state == "speaking"


def test_the_rooms_first_agent_reporting_its_state_has_started() -> None:
    # its job and join were not heard (yet): its own report says it is there
    session = run(active(), ReportAgentState(1, 1, "listening"))

    assert session.agent_state == "listening"
    refused(session, AgentStartTimeout(1, 1), "has started")


def test_ending_the_session_leaves_the_agent_alone() -> None:
    ending = run(with_agent(active()), End("bye"))
    refused(ending, ParticipantLeft(1, "agent-1", True), "does not accept")
    refused(ending, AgentJobEnded(1, 1, "AJ_1", "agent-1"), "does not accept")


def test_a_snapshot_stored_before_presence_was_tracked_still_decodes() -> None:
    stored = msgspec.to_builtins(active())
    for name in ("agent_attempt", "agent_misses", "agent_job", "agent_dispatch", "agents_replaced"):
        del stored[name]

    decoded = msgspec.convert(stored, Session)

    assert (decoded.agent_attempt, decoded.agent_misses, decoded.agent_job) == (1, 0, None)
    assert decoded.agents_replaced == ()
    assert msgspec.json.decode(msgspec.json.encode(with_agent(active())), type=Session) == (
        with_agent(active())
    )
