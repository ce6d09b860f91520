"""Agent rotation across provider caps (realtime-profile §23): a successor dispatched into the
same room and epoch before the serving agent's deadline, and the handover to it.

Invariants:
- at most one rotation is under way; it begins only for the serving agent's generation, once
  that agent started, at the deadline the session holds (a stale timer is refused);
- the successor's generation is above every generation the session gave out, so a provider
  token of an earlier agent never passes for a later one's;
- the handover happens once, when the successor is known to be in the room (it reported
  itself with its own token, or LiveKit reported its join); from then on the predecessor's
  writes are refused, it is told to leave and removed when the grace ends;
- a successor that fails (its job never started, ended, or it left) is replaced while the
  deadline allows, the serving agent staying; at the deadline with a successor dispatched it
  takes over at once, with none the session follows the agent-lost path (§22);
- a serving agent lost while a successor is dispatched: the successor is its replacement;
- the interactions no agent acknowledged stay in the session, bounded by MAX_UNACKED, for
  whichever agent serves next.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Final

from state_machines._base import Accepted, Rejected, RejectReason
from state_machines.effects import (
    DeleteDispatch,
    DispatchAgent,
    OutboxEffect,
    RemoveParticipant,
    SendData,
)
from state_machines.interaction_answers import updates_on_join
from state_machines.interaction_model import to_agent
from state_machines.session import MAX_AGENT_DISPATCHES, dispatches_spent
from state_machines.session_events import AgentDeadline, LeaveGrace, RotationDue
from state_machines.session_model import (
    AgentJob,
    AgentState,
    Deadline,
    Rotation,
    Session,
    Unacked,
    agent_identities,
    agent_started,
    next_attempt,
    next_generation,
    replace,
)

# the interactions kept for a successor while no agent acknowledged them: an agent that never
# acknowledges (one written before rotation) costs the session no more than these
MAX_UNACKED: Final = 32
# a successor whose job never started is dispatched again at most this many times in a row
MAX_SUCCESSOR_MISSES: Final = 3
# what the predecessor is told at the handover (a data message of its own type)
LEAVE: Final = "agent.leave"


def is_successor(session: Session, attempt: int) -> bool:
    """`attempt` is the dispatch of the successor under way."""
    rotation = session.rotation
    return rotation is not None and rotation.attempt != 0 and attempt == rotation.attempt


def successor_identity(session: Session) -> str | None:
    """The identity the successor joins with, once LiveKit reported its job."""
    rotation = session.rotation
    if rotation is None or rotation.job is None:
        return None
    return rotation.job.identity or None


def invalid(session: Session, detail: str) -> Rejected:
    return Rejected(
        reason=RejectReason.INVALID_STATE,
        state=session.state,
        current_epoch=session.epoch,
        detail=detail,
    )


def _before(moment: str, other: str) -> bool:
    return datetime.fromisoformat(moment) < datetime.fromisoformat(other)


def planned(session: Session, now: str) -> Session:
    """A serving agent that just joined gets the configured interval as its deadline (when the
    session has one and the agent reported none)."""
    if not session.rotate_after_s or session.agent_deadline is not None:
        return session
    at = datetime.fromisoformat(now) + timedelta(seconds=session.rotate_after_s)
    return replace(session, agent_deadline=Deadline(_rfc3339(at), "planned"))


def _rfc3339(moment: datetime) -> str:
    """`moment` as the service writes times: UTC, milliseconds, `Z`."""
    utc = moment.astimezone(UTC)
    return utc.strftime("%Y-%m-%dT%H:%M:%S.") + f"{utc.microsecond // 1000:03d}Z"


# --- the deadline ------------------------------------------------------------------------------


def report_deadline(session: Session, deadline: Deadline, now: str) -> Accepted[Session] | Rejected:
    """The serving agent's deadline: a new one replaces the last; while a successor is under
    way only an earlier one counts (one rotation at a time)."""
    if not _before(now, deadline.at):
        return Rejected(
            reason=RejectReason.INVALID_PARAMS,
            state=session.state,
            current_epoch=session.epoch,
            missing=("deadline",),
            detail=f"the deadline {deadline.at} is not after now ({now})",
        )
    known = session.agent_deadline
    if session.rotation is not None:
        if known is not None and not _before(deadline.at, known.at):
            return Accepted(session)
        return Accepted(replace(session, agent_deadline=deadline))
    return Accepted(session if known == deadline else replace(session, agent_deadline=deadline))


def begin(session: Session, event: RotationDue, now: str) -> Accepted[Session] | Rejected:
    """The deadline is near: the successor is dispatched into the same room and epoch."""
    if event.generation != session.agent_generation:
        return invalid(session, f"generation {event.generation} is not the serving agent")
    if session.rotation is not None:
        return invalid(session, "a rotation is under way")
    if not agent_started(session):
        return invalid(session, "the serving agent has not started")
    known = session.agent_deadline
    if known is None:
        return invalid(session, "no deadline is set")
    if known.at != event.deadline:
        return invalid(session, f"the deadline moved to {known.at}")
    attempt, generation = next_attempt(session), next_generation(session)
    rotation = Rotation(generation=generation, attempt=attempt, reason=known.reason, began_at=now)
    rotating = replace(session, rotation=rotation)
    dispatch = DispatchAgent(
        session.room,
        session.room_epoch,
        attempt,
        generation=generation,
        successor_of=session.agent_generation,
    )
    return Accepted(rotating, (dispatch,))


def deadline_blocked(session: Session, event: AgentDeadline) -> bool:
    """The deadline timer is stale: another generation serves, or the deadline moved."""
    known = session.agent_deadline
    return (
        event.generation != session.agent_generation or known is None or known.at != event.deadline
    )


def deadline_passed(session: Session, event: AgentDeadline, now: str) -> Accepted[Session]:
    """The serving agent's connection is over with a successor dispatched: the successor takes
    over now, and the predecessor is removed rather than told (§22 covers the case of none)."""
    promoted = promote(session, now)
    removed = tuple(
        RemoveParticipant(session.room, identity, revoke_before=now)
        for identity in agent_identities(session)
    )
    return Accepted(promoted.state, (*promoted.outbox, *removed))


# --- the successor's progress ------------------------------------------------------------------


def successor_dispatched(session: Session, dispatch_id: str) -> Accepted[Session]:
    rotation = session.rotation
    assert rotation is not None  # noqa: S101 - the fence routed a successor's event here
    return Accepted(replace(session, rotation=replace(rotation, dispatch_id=dispatch_id)))


def successor_started(session: Session, job: AgentJob) -> Accepted[Session] | Rejected:
    rotation = session.rotation
    assert rotation is not None  # noqa: S101 - the fence routed a successor's event here
    if rotation.job is not None:
        if rotation.job.job_id == job.job_id:
            return Accepted(session)
        return invalid(session, f"job {job.job_id} is not the successor's job")
    started = replace(rotation, job=job, dispatch_id=job.dispatch_id or rotation.dispatch_id)
    return Accepted(replace(session, rotation=started))


def successor_failed(session: Session, now: str, *, started: bool) -> Accepted[Session]:
    """The successor's job never started, ended, or it left before the handover: its dispatch
    is deleted (the serving agent's stays) and another is made while the deadline allows."""
    rotation = session.rotation
    assert rotation is not None  # noqa: S101 - the fence routed a successor's event here
    stale = DeleteDispatch(session.room, session.room_epoch, rotation.attempt, only=True)
    misses = 0 if started else rotation.misses + 1
    deadline = session.agent_deadline
    time_left = deadline is not None and _before(now, deadline.at)
    budget = dispatches_spent(session) + 1 < MAX_AGENT_DISPATCHES
    if time_left and budget and misses < MAX_SUCCESSOR_MISSES:
        attempt, generation = next_attempt(session), next_generation(session)
        retried = Rotation(
            generation=generation,
            attempt=attempt,
            reason=rotation.reason,
            began_at=rotation.began_at,
            misses=misses,
        )
        again = DispatchAgent(
            session.room,
            session.room_epoch,
            attempt,
            generation=generation,
            successor_of=session.agent_generation,
        )
        return Accepted(replace(session, rotation=retried), (stale, again))
    # no try left before the deadline: the serving agent is kept until then
    waiting = replace(rotation, attempt=0, job=None, dispatch_id=None, misses=misses)
    return Accepted(replace(session, rotation=waiting), (stale,))


# --- the handover ------------------------------------------------------------------------------


def hand_over(
    session: Session, now: str, *, identity: str | None, state: AgentState
) -> Accepted[Session]:
    """The successor is in the room: it serves from now on (its generation, its dispatch), the
    predecessor is told to leave and fenced, and the successor is told what became of every
    operation (as an agent that joins is)."""
    rotation = session.rotation
    assert rotation is not None  # noqa: S101 - called for a rotation under way only
    predecessors = agent_identities(session)
    joined = identity or successor_identity(session)
    leaving = predecessors[0] if predecessors else None
    outbox: list[OutboxEffect] = []
    if session.agent_leaving is not None and session.agent_leaving != leaving:
        # the previous rotation's predecessor is still within its grace: it goes now
        outbox.append(RemoveParticipant(session.room, session.agent_leaving, revoke_before=now))
    successor = replace(
        _takes_over(session, rotation, identity=joined, state=state, misses=0),
        agent_leaving=leaving,
    )
    if leaving is not None:
        payload: dict[str, object] = {
            "generation": session.agent_generation,
            "successorGeneration": rotation.generation,
        }
        body = to_agent(session, LEAVE, f"leave:{session.agent_generation}", payload)
        outbox.append(SendData(session.room, (leaving,), body))
    if joined is not None:
        outbox.extend(updates_on_join(successor, joined))
    return Accepted(planned(successor, now), tuple(outbox))


def promote(session: Session, now: str) -> Accepted[Session]:
    """The serving agent is gone before the handover (lost, or its deadline passed): the
    successor dispatched is its replacement, not yet in the room."""
    rotation = session.rotation
    assert rotation is not None  # noqa: S101 - a successor is under way
    state: AgentState = (
        "started"
        if rotation.job is not None
        else "dispatched"
        if rotation.dispatch_id
        else "dispatching"
    )
    promoted = _takes_over(session, rotation, identity=None, state=state, misses=rotation.misses)
    # the predecessor's dispatch (and any older) goes: its job ends if it has not already
    stale = DeleteDispatch(session.room, session.room_epoch, rotation.attempt)
    return Accepted(promoted, (stale,))


def _takes_over(
    session: Session, rotation: Rotation, *, identity: str | None, state: AgentState, misses: int
) -> Session:
    """The successor of `rotation` serves: its generation, dispatch and job; the predecessor's
    identities are fenced from now on; the rotation is over, and counted."""
    retired = (i for i in agent_identities(session) if i not in session.agents_replaced)
    return replace(
        session,
        agent_generation=rotation.generation,
        agent_attempt=rotation.attempt,
        agent_misses=misses,
        agent_job=rotation.job,
        agent_dispatch=rotation.dispatch_id,
        agent_identity=identity,
        agent_state=state,
        agents_replaced=(*session.agents_replaced, *(i for i in retired if i != identity)),
        agent_deadline=None,
        rotation=None,
        agent_handovers=session.agent_handovers + 1,
        rotations=session.rotations + 1,
    )


def leave_grace(session: Session, event: LeaveGrace, now: str) -> Accepted[Session] | Rejected:
    """The predecessor's grace ended: removed if still there, its dispatch deleted."""
    if session.agent_leaving != event.identity:
        return invalid(session, f"{event.identity} is not the agent leaving")
    gone = replace(session, agent_leaving=None)
    removal = RemoveParticipant(session.room, event.identity, revoke_before=now)
    stale = DeleteDispatch(session.room, session.room_epoch, session.agent_attempt)
    return Accepted(gone, (removal, stale))


# --- interactions awaiting an acknowledgement --------------------------------------------------


def sent(session: Session, command_id: str, body: str) -> Session:
    """`session` remembering an interaction sent to the agent, until one acknowledges it, while
    a successor is planned (the serving agent has a deadline, or one is under way). A session
    whose agents do not rotate keeps no words beyond their delivery."""
    if session.agent_deadline is None and session.rotation is None:
        return session
    kept = (*session.unacked, Unacked(command_id, body))[-MAX_UNACKED:]
    return replace(session, unacked=kept)


def acknowledge(session: Session, command_ids: tuple[str, ...]) -> Accepted[Session]:
    """The serving agent has the interactions `command_ids`: no successor is given them again
    (ids not waiting, already acknowledged or never sent, change nothing)."""
    done = set(command_ids)
    kept = tuple(item for item in session.unacked if item.command_id not in done)
    return Accepted(session if kept == session.unacked else replace(session, unacked=kept))
