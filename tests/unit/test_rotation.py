"""Agent rotation in the pure core (profile §23): a deadline, a successor dispatched into the same
room and epoch, the handover, generations fencing the predecessor, and each fallback."""

from __future__ import annotations

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from state_machines import Accepted, Rejected, RejectReason, decide
from state_machines.effects import DeleteDispatch, DispatchAgent, RemoveParticipant, SendData
from state_machines.interactions import Deliver
from state_machines.provider import (
    AckInteractions,
    ReportAgentState,
    ReportDeadline,
    RequestOperation,
    SaveContext,
    UpdateOperation,
)
from state_machines.rotation import MAX_SUCCESSOR_MISSES, MAX_UNACKED
from state_machines.session import (
    MAX_AGENT_DISPATCHES,
    AgentDeadline,
    AgentDispatched,
    AgentJobEnded,
    AgentJobStarted,
    AgentStartTimeout,
    End,
    LeaveGrace,
    ParticipantJoined,
    ParticipantLeft,
    RoomLost,
    RotationDue,
    Session,
)
from state_machines.session_model import Deadline, replace
from tests.unit.session_operation_helpers import live

T0 = "2025-01-01T00:00:10Z"
SOON = "2025-01-01T00:00:40Z"
DEADLINE = "2025-01-01T00:01:00Z"
LATER = "2025-01-01T00:02:00Z"
PAST = "2025-01-01T00:00:00Z"


def step(session: Session, event: object, now: str = T0) -> Accepted[Session]:
    outcome = decide(session, event, now=now)  # type: ignore[arg-type]
    assert isinstance(outcome, Accepted), outcome
    return outcome


def refused(
    session: Session,
    event: object,
    reason: RejectReason = RejectReason.INVALID_STATE,
    now: str = T0,
) -> Rejected:
    outcome = decide(session, event, now=now)  # type: ignore[arg-type]
    assert isinstance(outcome, Rejected), outcome
    assert outcome.reason is reason, outcome
    return outcome


def serving() -> Session:
    """An active session whose first agent (agent-1, job AJ_1 of dispatch 1) joined."""
    session = live()
    return step(session, AgentJobStarted(1, 1, "AJ_1", "agent-1", "AD_1")).state


def deadline(session: Session, at: str = DEADLINE, generation: int = 1) -> Session:
    return step(session, ReportDeadline(1, 1, generation, at, "provider_cap")).state


def rotating(session: Session | None = None) -> Accepted[Session]:
    """A successor (generation 2, dispatch 2) on its way for the serving agent's deadline."""
    session = deadline(session or serving())
    return step(session, RotationDue(1, session.agent_generation, DEADLINE, "provider_cap"))


def successor_started(session: Session, attempt: int = 2, who: str = "agent-2") -> Session:
    return step(session, AgentJobStarted(1, attempt, f"AJ_{attempt}", who, f"AD_{attempt}")).state


def handed_over(session: Session | None = None) -> Accepted[Session]:
    session = successor_started(rotating(session).state)
    return step(session, ParticipantJoined(1, "agent-2", True))


# --- the deadline ------------------------------------------------------------------------------


def test_a_deadline_is_kept_and_a_new_one_replaces_it() -> None:
    session = deadline(serving())
    assert session.agent_deadline == Deadline(DEADLINE, "provider_cap")
    assert step(session, ReportDeadline(1, 1, 1, DEADLINE, "provider_cap")).state is session
    moved = step(session, ReportDeadline(1, 1, 1, LATER, "provider_goaway")).state
    assert moved.agent_deadline == Deadline(LATER, "provider_goaway")


def test_a_deadline_in_the_past_is_refused_naming_the_parameter() -> None:
    outcome = refused(
        serving(), ReportDeadline(1, 1, 1, PAST, "provider_cap"), RejectReason.INVALID_PARAMS
    )
    assert outcome.missing == ("deadline",)
    assert "is not after now" in outcome.detail


def test_while_rotating_only_an_earlier_deadline_counts() -> None:
    session = rotating().state
    later = step(session, ReportDeadline(1, 1, 1, LATER, "provider_cap"))
    assert later.state is session
    assert not later.outbox
    sooner = step(session, ReportDeadline(1, 1, 1, SOON, "provider_goaway")).state
    # one rotation: the successor under way stays, the deadline comes closer
    assert sooner.rotation is not None
    assert session.rotation is not None
    assert sooner.rotation.generation == session.rotation.generation
    assert sooner.rotation.attempt == session.rotation.attempt
    assert sooner.agent_deadline == Deadline(SOON, "provider_goaway")


def test_a_deadline_from_an_ending_session_is_refused() -> None:
    ending = step(serving(), End("bye")).state
    refused(ending, ReportDeadline(1, 1, 1, DEADLINE, "provider_cap"))


# --- the rotation begins -----------------------------------------------------------------------


def test_the_rotation_dispatches_the_next_generation_into_the_same_room_and_epoch() -> None:
    before = deadline(serving())
    began = step(before, RotationDue(1, 1, DEADLINE, "provider_cap"))
    session = began.state

    assert (session.state, session.epoch, session.room) == ("active", 1, before.room)
    assert session.rotation is not None
    assert (session.rotation.generation, session.rotation.attempt) == (2, 2)
    assert session.agent_generation == 1  # the predecessor serves until the handover
    assert began.outbox == (DispatchAgent(before.room, 1, 2, generation=2, successor_of=1),)


def test_a_configured_interval_gives_each_agent_a_deadline_when_it_joins() -> None:
    session = replace(live(agent_joined=False), rotate_after_s=120)
    joined = step(session, ParticipantJoined(1, "agent-1", True)).state
    assert joined.agent_deadline == Deadline("2025-01-01T00:02:10.000Z", "planned")
    reported = step(joined, ReportDeadline(1, 1, 1, DEADLINE, "provider_cap")).state
    assert reported.agent_deadline == Deadline(DEADLINE, "provider_cap")  # the agent knows best
    began = step(joined, RotationDue(1, 1, "2025-01-01T00:02:10.000Z", "planned")).state
    assert began.rotation is not None
    assert began.rotation.reason == "planned"
    successor = step(successor_started(began), ParticipantJoined(1, "agent-2", True), now=SOON)
    # the successor's own interval runs from its join
    assert successor.state.agent_deadline == Deadline("2025-01-01T00:02:40.000Z", "planned")


@pytest.mark.parametrize(
    ("setup", "event", "why"),
    [
        (lambda: deadline(serving()), RotationDue(1, 2, DEADLINE, "provider_cap"), "generation"),
        (lambda: rotating().state, RotationDue(1, 1, DEADLINE, "provider_cap"), "under way"),
        (
            lambda: deadline(live(agent_joined=False)),
            RotationDue(1, 1, DEADLINE, "provider_cap"),
            "not started",
        ),
        (lambda: deadline(serving(), LATER), RotationDue(1, 1, DEADLINE, "provider_cap"), "moved"),
        (serving, RotationDue(1, 1, DEADLINE, "provider_cap"), "no deadline"),
    ],
)
def test_a_stale_or_needless_rotation_timer_is_refused(setup, event, why) -> None:  # type: ignore[no-untyped-def]
    assert why in refused(setup(), event).detail


# --- the handover ------------------------------------------------------------------------------


def test_the_successor_joining_takes_over_and_the_predecessor_is_told_to_leave() -> None:
    op = RequestOperation(1, 1, "op-1", "action", '{"title":"t"}')
    with_op = step(deadline(serving()), op).state
    with_op = step(with_op, UpdateOperation(1, "op-1", "running")).state
    session = successor_started(rotating(with_op).state)

    done = step(session, ParticipantJoined(1, "agent-2", True))
    after = done.state

    assert (after.agent_generation, after.agent_attempt, after.agent_identity) == (2, 2, "agent-2")
    assert (after.rotation, after.agent_deadline, after.agent_leaving) == (None, None, "agent-1")
    assert (after.rotations, after.agent_handovers, after.state) == (1, 1, "active")
    assert "agent-1" in after.agents_replaced
    leave, sync = done.outbox
    assert isinstance(leave, SendData)
    assert leave.destination == ("agent-1",)
    body = msgspec.json.decode(leave.body)
    assert body["type"] == "agent.leave"
    assert body["payload"] == {"generation": 1, "successorGeneration": 2}
    # the successor is told what became of the operations, as an agent that joins is
    assert isinstance(sync, SendData)
    assert sync.destination == ("agent-2",)
    assert b"op-1" in sync.body.encode()


def test_the_successors_own_report_is_the_handover() -> None:
    session = rotating().state  # its job not heard yet: only its token says who it is
    done = step(session, ReportAgentState(1, 1, "listening", generation=2))

    assert (done.state.agent_generation, done.state.agent_state) == (2, "listening")
    assert done.state.agent_identity is None  # reachable once LiveKit reports its join
    joined = step(done.state, ParticipantJoined(1, "agent-2", True)).state
    assert joined.agent_identity == "agent-2"


def test_the_successor_reporting_it_left_before_serving_changes_nothing() -> None:
    session = rotating().state
    assert step(session, ReportAgentState(1, 1, "left", generation=2)).state is session


def test_an_unknown_agent_joining_during_a_rotation_is_not_taken_for_the_successor() -> None:
    named = rotating().state  # the serving agent's job named it
    assert (
        "stranger is not the agent of AJ_1"
        in refused(named, ParticipantJoined(1, "stranger", True)).detail
    )
    unnamed = rotating(live()).state  # it joined, its job unheard
    assert "not known yet" in refused(unnamed, ParticipantJoined(1, "stranger", True)).detail


def test_the_predecessor_cannot_write_after_the_handover_but_its_operation_stays() -> None:
    op = RequestOperation(1, 1, "op-1", "action", '{"title":"t"}')
    with_op = step(deadline(serving()), op).state
    after = handed_over(step(with_op, UpdateOperation(1, "op-1", "running")).state).state

    stale = refused(
        after, UpdateOperation(1, "op-1", "succeeded", generation=1), RejectReason.AGENT_REPLACED
    )
    assert stale.current_version == 2
    assert "taken over by generation 2" in stale.detail
    refused(after, SaveContext(1, 1, 1, 10), RejectReason.AGENT_REPLACED)
    refused(after, ReportDeadline(1, 1, 1, LATER, "planned"), RejectReason.AGENT_REPLACED)
    finished = step(after, UpdateOperation(1, "op-1", "succeeded", generation=2)).state
    assert finished.operations[0].state == "succeeded"


def test_the_successor_may_not_write_before_the_handover_nor_a_stranger_ever() -> None:
    session = rotating().state
    early = refused(session, SaveContext(1, 1, 2, 10))
    assert "takes over once it reports" in early.detail
    unknown = refused(session, SaveContext(1, 1, 7, 10), RejectReason.AGENT_REPLACED)
    assert "not an agent of this session" in unknown.detail


def test_a_second_handover_removes_a_predecessor_still_in_its_grace() -> None:
    first = handed_over().state
    again = deadline(first, LATER, generation=2)
    again = step(again, RotationDue(1, 2, LATER, "provider_cap")).state
    again = successor_started(again, attempt=3, who="agent-3")
    done = step(again, ParticipantJoined(1, "agent-3", True))

    assert RemoveParticipant(first.room, "agent-1", revoke_before=T0) in done.outbox
    assert (done.state.agent_generation, done.state.agent_leaving) == (3, "agent-2")


def test_the_grace_ends_with_the_predecessor_removed() -> None:
    after = handed_over().state
    gone = step(after, LeaveGrace(1, "agent-1"))
    assert gone.state.agent_leaving is None
    assert gone.outbox == (
        RemoveParticipant(after.room, "agent-1", revoke_before=T0),
        DeleteDispatch(after.room, 1, 2),
    )
    assert "not the agent leaving" in refused(gone.state, LeaveGrace(1, "agent-1")).detail


# --- the successor's own progress --------------------------------------------------------------


def test_the_successors_dispatch_and_job_are_recorded_on_the_rotation() -> None:
    session = rotating().state
    dispatched = step(session, AgentDispatched(1, 2, "AD_2")).state
    assert dispatched.rotation is not None
    assert dispatched.rotation.dispatch_id == "AD_2"
    started = successor_started(dispatched)
    assert started.rotation is not None
    assert started.rotation.job is not None
    assert step(started, AgentJobStarted(1, 2, "AJ_2", "agent-2")).state is started
    assert "not the successor's job" in refused(started, AgentJobStarted(1, 2, "AJ_X")).detail
    assert "has started" in refused(started, AgentStartTimeout(1, 2)).detail
    # the serving agent is untouched
    assert (started.agent_generation, started.agent_attempt) == (1, 1)


def test_a_successor_that_never_starts_is_dispatched_again_while_time_is_left() -> None:
    session = rotating().state
    retried = step(session, AgentStartTimeout(1, 2))

    assert retried.state.rotation is not None
    assert (retried.state.rotation.attempt, retried.state.rotation.generation) == (3, 3)
    assert retried.state.rotation.misses == 1
    assert retried.outbox == (
        DeleteDispatch(session.room, 1, 2, only=True),
        DispatchAgent(session.room, 1, 3, generation=3, successor_of=1),
    )
    assert retried.state.agent_generation == 1  # the predecessor is kept


def test_a_successor_that_ends_or_leaves_is_replaced_too() -> None:
    ended = step(successor_started(rotating().state), AgentJobEnded(1, 2, "AJ_2"))
    assert ended.state.rotation is not None
    assert ended.state.rotation.misses == 0
    assert (
        "not the successor's job"
        in refused(successor_started(rotating().state), AgentJobEnded(1, 2, "AJ_9")).detail
    )
    left = step(successor_started(rotating().state), ParticipantLeft(1, "agent-2", True))
    assert left.state.rotation is not None
    assert left.state.rotation.attempt == 3


def test_with_no_time_left_the_rotation_waits_for_the_deadline() -> None:
    session = rotating().state
    late = step(session, AgentStartTimeout(1, 2), now=DEADLINE)
    assert late.state.rotation is not None
    assert late.state.rotation.attempt == 0
    assert late.outbox == (DeleteDispatch(session.room, 1, 2, only=True),)


def test_repeated_misses_stop_the_retries() -> None:
    session = rotating().state
    for attempt in range(2, 2 + MAX_SUCCESSOR_MISSES):
        session = step(session, AgentStartTimeout(1, attempt)).state
    assert session.rotation is not None
    assert session.rotation.attempt == 0


def test_the_dispatch_budget_stops_the_retries() -> None:
    session = replace(rotating().state, agent_attempt=MAX_AGENT_DISPATCHES - 2)
    assert session.rotation is not None
    session = replace(session, rotation=replace(session.rotation, attempt=MAX_AGENT_DISPATCHES - 1))
    waited = step(session, AgentStartTimeout(1, MAX_AGENT_DISPATCHES - 1)).state
    assert waited.rotation is not None
    assert waited.rotation.attempt == 0


# --- fallbacks ---------------------------------------------------------------------------------


def test_the_deadline_with_a_successor_dispatched_hands_over_at_once() -> None:
    session = successor_started(rotating().state)
    passed = step(session, AgentDeadline(1, 1, DEADLINE), now=DEADLINE)

    after = passed.state
    assert (after.agent_generation, after.agent_attempt, after.agent_state) == (2, 2, "started")
    assert after.rotation is None
    assert "agent-1" in after.agents_replaced
    assert RemoveParticipant(session.room, "agent-1", revoke_before=DEADLINE) in passed.outbox
    assert DeleteDispatch(session.room, 1, 2) in passed.outbox


def test_the_deadline_with_no_successor_follows_the_agent_lost_path() -> None:
    session = step(rotating().state, AgentStartTimeout(1, 2), now=DEADLINE).state  # waiting
    passed = step(session, AgentDeadline(1, 1, DEADLINE), now=DEADLINE)

    after = passed.state
    assert after.rotation is None
    assert after.agent_state == "dispatching"
    assert after.agent_generation == 3  # after the serving 1 and the failed successor 2
    assert passed.outbox[-1] == DispatchAgent(session.room, 1, after.agent_attempt, generation=3)


def test_the_deadline_with_no_rotation_at_all_is_the_agent_lost() -> None:
    session = deadline(serving())
    passed = step(session, AgentDeadline(1, 1, DEADLINE), now=DEADLINE)
    assert passed.state.agent_generation == 2
    assert passed.state.agent_state == "dispatching"


def test_a_stale_deadline_timer_is_refused() -> None:
    session = deadline(serving())
    refused(session, AgentDeadline(1, 2, DEADLINE))
    refused(session, AgentDeadline(1, 1, LATER))
    refused(serving(), AgentDeadline(1, 1, DEADLINE))


def test_a_predecessor_lost_before_the_handover_makes_the_successor_its_replacement() -> None:
    session = rotating().state
    lost = step(session, AgentJobEnded(1, 1, "AJ_1", "agent-1"))

    after = lost.state
    assert (after.agent_generation, after.agent_attempt, after.agent_state) == (2, 2, "dispatching")
    assert after.rotation is None
    assert "agent-1" in after.agents_replaced
    assert lost.outbox == (DeleteDispatch(session.room, 1, 2),)
    dispatched = step(
        step(session, AgentDispatched(1, 2, "AD_2")).state, ParticipantLeft(1, "agent-1", True)
    )
    assert dispatched.state.agent_state == "dispatched"
    # the successor then joins as the serving agent
    joined = step(successor_started(after), ParticipantJoined(1, "agent-2", True)).state
    assert (joined.agent_identity, joined.agent_state) == ("agent-2", "joined")


def test_a_rebind_during_a_rotation_starts_over_with_a_new_generation() -> None:
    session = rotating().state
    rebound = step(session, RoomLost(session.room)).state
    assert rebound.rotation is None
    assert rebound.agent_deadline is None
    assert rebound.agent_generation == 3


# --- interactions awaiting an acknowledgement --------------------------------------------------


def deliver(session: Session, command_id: str) -> Session:
    return step(session, Deliver(1, command_id, "input.text", '{"text":"hi"}')).state


def test_without_a_planned_successor_no_words_are_kept() -> None:
    assert deliver(serving(), "c-1").unacked == ()


def test_interactions_stay_until_acknowledged_and_a_successor_keeps_them() -> None:
    session = deliver(deliver(deadline(serving()), "c-1"), "c-2")
    assert [u.command_id for u in session.unacked] == ["c-1", "c-2"]
    acked = step(session, AckInteractions(1, 1, 1, ("c-1", "unknown"))).state
    assert [u.command_id for u in acked.unacked] == ["c-2"]
    assert step(acked, AckInteractions(1, 1, 1, ("c-1",))).state is acked

    after = handed_over(acked).state
    assert [u.command_id for u in after.unacked] == ["c-2"]  # for the successor
    refused(after, AckInteractions(1, 1, 1, ("c-2",)), RejectReason.AGENT_REPLACED)
    assert step(after, AckInteractions(1, 1, 2, ("c-2",))).state.unacked == ()


def test_unacknowledged_interactions_are_bounded_and_go_when_the_session_ends() -> None:
    session = deadline(serving())
    for n in range(MAX_UNACKED + 5):
        session = deliver(session, f"c-{n}")
    assert len(session.unacked) == MAX_UNACKED
    assert session.unacked[0].command_id == "c-5"
    assert step(session, End("bye")).state.unacked == ()


def test_the_seam_starts_at_the_serving_agents_last_word_during_the_rotation() -> None:
    session = rotating().state
    spoke = step(session, SaveContext(1, 1, 1, 10), now=SOON).state
    assert spoke.rotation is not None
    assert spoke.rotation.last_word_at == SOON
    assert spoke.agent_context is not None
    assert spoke.agent_context.size == 10


@given(
    st.lists(
        st.sampled_from(
            ["due", "start", "join", "timeout", "lost", "deadline", "report", "grace", "ack"]
        ),
        max_size=12,
    )
)
def test_any_order_of_rotation_events_keeps_generations_and_one_rotation(names: list[str]) -> None:
    session = deadline(serving())
    seen = {session.agent_generation}
    for name in names:
        rotation = session.rotation
        attempt = rotation.attempt if rotation is not None and rotation.attempt else 99
        gen = session.agent_generation
        event = {
            "due": RotationDue(1, gen, DEADLINE, "provider_cap"),
            "start": AgentJobStarted(1, attempt, f"AJ_{attempt}", f"agent-{attempt}"),
            "join": ParticipantJoined(1, f"agent-{attempt}", True),
            "timeout": AgentStartTimeout(1, attempt),
            "lost": AgentJobEnded(1, session.agent_attempt, f"AJ_{session.agent_attempt}"),
            "deadline": AgentDeadline(1, gen, DEADLINE),
            "report": ReportAgentState(1, 1, "listening", generation=gen + 1),
            "grace": LeaveGrace(1, session.agent_leaving or "none"),
            "ack": AckInteractions(1, 1, gen, ("c",)),
        }[name]
        outcome = decide(session, event, now=T0)  # type: ignore[arg-type]
        if isinstance(outcome, Rejected):
            continue
        after = outcome.state
        # generations never go back; a successor's is above every generation given out
        assert after.agent_generation >= session.agent_generation
        if after.rotation is not None:
            assert after.rotation.generation > after.agent_generation
            if session.rotation is None or after.rotation.attempt != session.rotation.attempt:
                # a new successor: a generation never given out before
                assert after.rotation.generation not in seen
            seen.add(after.rotation.generation)
        # the serving agent's and the successor's dispatches are never the same
        if after.rotation is not None and after.rotation.attempt:
            assert after.rotation.attempt != after.agent_attempt
        # the same room and epoch throughout
        assert (after.room, after.epoch) == (session.room, session.epoch) or after.state == "failed"
        seen.add(after.agent_generation)
        session = after


def test_a_predecessor_never_seen_in_the_room_is_not_told_to_leave() -> None:
    # the first agent reported its state itself: neither its job nor its join was heard
    session = step(live(agent_joined=False), ReportAgentState(1, 1, "listening")).state
    done = handed_over(session)
    assert done.state.agent_leaving is None
    assert not any(
        isinstance(effect, SendData) and b"agent.leave" in effect.body.encode()
        for effect in done.outbox
    )
