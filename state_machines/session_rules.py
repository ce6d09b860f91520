"""The session's rules (realtime-profile §5, §6): what each event the table lets through does.

`state_machines.session` holds the table, the guards and the fences; `apply` checks them in that
order (fence, table, rule) and builds the next session with its effects. What every accepted
decision shares (the task, the idle count, `updated_at`) is settled by `state_machines.decide`.
"""

from __future__ import annotations

from typing import Final, assert_never

from state_machines import endpoint as endpoints
from state_machines import rotation as rotations
from state_machines._base import Accepted, Rejected, RejectReason
from state_machines.effects import OutboxEffect, RemoveParticipant, UpdatePermissions
from state_machines.endpoint import Endpoint
from state_machines.interaction_answers import updates_on_join
from state_machines.session import (
    FALLBACK,
    IDEMPOTENT,
    TRANSITIONS,
    agent_dispatches_exhausted,
    awaits_active,
    fence,
    invalid,
    is_active,
    is_handoff,
    is_superseded,
    rebinds_exhausted,
)
from state_machines.session_events import (
    AgentDeadline,
    AgentDispatched,
    AgentJobEnded,
    AgentJobStarted,
    AgentStartTimeout,
    Cancel,
    End,
    GraceExpired,
    IdleTimeout,
    Join,
    LeaveGrace,
    MaxDuration,
    ParticipantJoined,
    ParticipantLeft,
    Provisioned,
    ProvisioningFailed,
    ProvisioningTimeout,
    RegisterEndpoint,
    RoomDeleted,
    RoomLost,
    RotationDue,
    SessionEvent,
    SessionEventName,
    event_name,
)
from state_machines.session_model import (
    AWAITING_AGENT,
    AgentJob,
    AgentState,
    Session,
    SessionState,
    agent_identities,
    agent_started,
    by_id,
    by_key,
    device_sources,
    end,
    fail,
    finish,
    give_up,
    hand_off,
    handoff_wait,
    join_token,
    limit_exceeded,
    moved,
    put,
    rebind,
    recent_handoffs,
    replace,
    replace_agent,
)

# the agent's states a join moves to `joined` (a state it reported since is kept)
_NOT_IN_ROOM: Final[tuple[AgentState, ...]] = (*AWAITING_AGENT, "started", "left")


def apply(session: Session, event: SessionEvent, *, now: str) -> Accepted[Session] | Rejected:
    """The session's rules for `event`: the next session with its effects, or a rejection that
    changes nothing. The task, the idle count and `updated_at` are settled afterwards by
    `state_machines.decide`, the entry to call."""
    fenced = fence(session, event)
    if fenced is not None:
        return fenced
    name = event_name(event)
    target = TRANSITIONS.get((session.state, name))
    if target is None:
        return invalid(session, f"a session in {session.state} does not accept `{name}`")
    return _rule(session, event, target, now)


def _rule(
    session: Session, event: SessionEvent, target: SessionState, now: str
) -> Accepted[Session] | Rejected:
    match event:
        case Provisioned():
            # the agent's participant_joined may overtake the dispatch confirmation
            return Accepted(replace(session, state=target, agent_state=_dispatched(session)))
        case ProvisioningFailed():
            return fail(session, target, event.reason, now)
        case ProvisioningTimeout():
            return fail(session, target, "provisioning_timeout", now)
        case RegisterEndpoint():
            return _register(session, event, now)
        case Join():
            return _join(session, event, target, now)
        case ParticipantJoined():
            return _participant_joined(session, event, target, now)
        case ParticipantLeft():
            return _participant_left(session, event, target, now)
        case GraceExpired():
            if event.endpoint_id != session.active_endpoint_id:
                return invalid(session, f"{event.endpoint_id} is no longer the active endpoint")
            return Accepted(replace(session, state=target, active_endpoint_id=None))
        case IdleTimeout():
            if session.active_endpoint_id is not None:
                return invalid(session, "an endpoint is active: the session is not idle")
            if event.idle not in (-1, session.idles):
                return invalid(session, "the session was active since this timer was armed")
            return end(session, target, "idle_timeout", now)
        case MaxDuration():
            return end(session, target, "max_duration", now)
        case RoomLost():
            if rebinds_exhausted(session):
                return fail(session, FALLBACK[session.state, "room_lost"], "room_lost", now)
            return rebind(session, target, now)
        case End():
            if (session.state, "end") in IDEMPOTENT:
                return Accepted(session)
            return end(session, target, event.reason, now)
        case Cancel():
            return end(replace(session, canceled=True), target, "canceled", now)
        case RoomDeleted():
            return Accepted(finish(session, target, now))
        case AgentDispatched():
            if rotations.is_successor(session, event.attempt):
                return rotations.successor_dispatched(session, event.dispatch_id)
            return Accepted(
                replace(session, agent_dispatch=event.dispatch_id, agent_state=_dispatched(session))
            )
        case AgentJobStarted():
            if rotations.is_successor(session, event.attempt):
                taken = AgentJob(event.job_id, event.identity, event.dispatch_id)
                return rotations.successor_started(session, taken)
            return _job_started(session, event)
        case AgentJobEnded():
            if rotations.is_successor(session, event.attempt):
                return _successor_ended(session, event, now)
            job = session.agent_job
            if job is not None and job.job_id != event.job_id:
                return invalid(session, f"job {event.job_id} is not the agent's job {job.job_id}")
            # a job that ended had started, even if its start was not heard (yet)
            return _agent_lost(session, "agent_job_ended", now, started=True)
        case AgentStartTimeout():
            if rotations.is_successor(session, event.attempt):
                if session.rotation is not None and session.rotation.job is not None:
                    return invalid(session, "the successor's job has started")
                return rotations.successor_failed(session, now, started=False)
            if agent_started(session):
                return invalid(session, "the agent of this dispatch has started")
            return _agent_lost(session, "agent_start_timeout", now, started=False)
        case RotationDue():
            return rotations.begin(session, event, now)
        case AgentDeadline():
            if rotations.deadline_blocked(session, event):
                return invalid(session, "the deadline is not the serving agent's")
            if session.rotation is None or session.rotation.attempt == 0:
                return _agent_lost(session, "agent_deadline", now, started=True)
            return rotations.deadline_passed(session, event, now)
        case LeaveGrace():
            return rotations.leave_grace(session, event, now)
        case _:
            assert_never(event)


def _dispatched(session: Session) -> AgentState:
    """The agent's state once its dispatch exists: dispatched, unless it went further."""
    return "dispatched" if session.agent_state == "dispatching" else session.agent_state


def _job_started(session: Session, event: AgentJobStarted) -> Accepted[Session] | Rejected:
    job = session.agent_job
    if job is not None:
        if job.job_id == event.job_id:
            return Accepted(session)  # heard again (LiveKit sent it once more, under a new id)
        return invalid(session, f"job {event.job_id} is not the agent's job {job.job_id}")
    started = replace(
        session,
        agent_job=AgentJob(event.job_id, event.identity, event.dispatch_id),
        agent_dispatch=event.dispatch_id or session.agent_dispatch,
        agent_state="started" if session.agent_state in AWAITING_AGENT else session.agent_state,
    )
    return Accepted(started)


def _successor_ended(
    session: Session, event: AgentJobEnded, now: str
) -> Accepted[Session] | Rejected:
    job = session.rotation.job if session.rotation is not None else None
    if job is not None and job.job_id != event.job_id:
        return invalid(session, f"job {event.job_id} is not the successor's job {job.job_id}")
    return rotations.successor_failed(session, now, started=True)


def _agent_lost(
    session: Session, name: SessionEventName, now: str, *, started: bool
) -> Accepted[Session]:
    """The agent left, its job ended, its job never `started`, or its deadline passed with no
    successor: a new dispatch into the same room, or, with none left, the session fails with
    `agent_unavailable`. A successor already dispatched (a rotation) is the replacement."""
    if session.rotation is not None and session.rotation.attempt != 0:
        return rotations.promote(session, now)
    if agent_dispatches_exhausted(session, started=started):
        return give_up(session, FALLBACK[session.state, name], "agent_unavailable", now)
    return replace_agent(session, started=started)


def _register(session: Session, event: RegisterEndpoint, now: str) -> Accepted[Session] | Rejected:
    known = by_key(session, event.client_endpoint_key)
    if known is not None:
        again = endpoints.decide(known, "reregister")
        if isinstance(again, Rejected):
            return _endpoint_refused(session, again)
        updated = replace(again.state, capabilities=event.capabilities)
        return Accepted(replace(session, endpoints=put(session.endpoints, updated)))
    if len(session.endpoints) >= event.max_endpoints:
        return limit_exceeded(
            session,
            "endpoints_per_session",
            f"a session has at most {event.max_endpoints} endpoints",
        )
    added = Endpoint(
        endpoint_id=event.endpoint_id,
        client_endpoint_key=event.client_endpoint_key,
        capabilities=event.capabilities,
        registered_at=now,
    )
    return Accepted(replace(session, endpoints=(*session.endpoints, added)))


def _join(
    session: Session, event: Join, target: SessionState, now: str
) -> Accepted[Session] | Rejected:
    known = by_id(session, event.endpoint_id)
    if known is None:
        return Rejected(
            reason=RejectReason.ENDPOINT_NOT_FOUND,
            state=session.state,
            current_epoch=session.epoch,
            detail=f"no endpoint {event.endpoint_id} in this session",
        )
    joining = endpoints.decide(known, "join")
    if isinstance(joining, Rejected):
        return _endpoint_refused(session, joining)
    outbox: tuple[OutboxEffect, ...] = ()
    previous = session.active_endpoint_id
    if previous is not None and is_handoff(session, known.endpoint_id):
        limit = event.max_handoffs_per_minute
        if limit:
            recent = recent_handoffs(session, now)
            wait = handoff_wait(recent, now, limit)
            if wait:
                return limit_exceeded(
                    session,
                    "handoffs_per_minute",
                    f"A session is handed to another device at most {limit} times a minute; "
                    f"try again in {wait} s.",
                    retry_after=wait,
                )
            session = replace(session, handoffs=(*recent, now)[-limit:])
        session, removal = hand_off(session, previous, now)
        outbox = (removal,)
    joined = replace(joining.state, joined_at=now, joined_epoch=session.epoch)
    session = replace(
        session,
        state=target,
        active_endpoint_id=joined.endpoint_id,
        endpoints=put(session.endpoints, joined),
    )
    return Accepted(session, outbox, token=join_token(session, joined))


def _participant_joined(
    session: Session, event: ParticipantJoined, target: SessionState, now: str
) -> Accepted[Session] | Rejected:
    if event.is_agent:
        if session.rotation is not None and event.identity == rotations.successor_identity(session):
            return rotations.hand_over(session, now, identity=event.identity, state="joined")
        job = session.agent_job
        if job is not None and job.identity not in ("", event.identity):
            return invalid(session, f"agent {event.identity} is not the agent of {job.job_id}")
        if session.rotation is not None and event.identity not in agent_identities(session):
            # an agent the session cannot tell from the successor yet: the successor's job
            # report or its own call names it
            return invalid(session, f"agent {event.identity} is not known yet")
        agent = "joined" if session.agent_state in _NOT_IN_ROOM else session.agent_state
        # whatever happened to its operations while it was away (or before it first joined)
        joined = replace(session, agent_state=agent, agent_identity=event.identity)
        return Accepted(rotations.planned(joined, now), updates_on_join(joined, event.identity))
    if awaits_active(session) and is_active(session, event.identity, event.epoch):
        connected = moved(session.endpoints, "connected", (event.identity,))
        # the token it joined with may predate a grant or a revoke made while it was away:
        # the permission it gets now is the one its grants allow
        caps = next(e.capabilities for e in session.endpoints if e.endpoint_id == event.identity)
        permission = UpdatePermissions(
            session.room, event.identity, caps.audio_output, device_sources(session, caps)
        )
        return Accepted(replace(session, state=target, endpoints=connected), (permission,))
    if is_superseded(session, event.identity):
        # a superseded device that re-joins (with a token its removal could not revoke: LiveKit
        # records a revocation only for a participant in the room) is removed again, revoked
        removal = RemoveParticipant(session.room, event.identity, revoke_before=now)
        return Accepted(session, (removal,))
    return invalid(session, f"participant {event.identity} is not awaited in {session.state}")


def _participant_left(
    session: Session, event: ParticipantLeft, target: SessionState, now: str
) -> Accepted[Session] | Rejected:
    if event.is_agent:
        if session.rotation is not None and event.identity == rotations.successor_identity(session):
            return rotations.successor_failed(session, now, started=True)
        job = session.agent_job
        known = session.agent_identity or (job.identity if job is not None else None)
        if event.identity != known:
            return invalid(session, f"agent {event.identity} is not the session's agent")
        # the agent left a live session: it is lost (LiveKit ends its job too)
        return _agent_lost(session, "agent_left", now, started=True)
    if not is_active(session, event.identity, event.epoch):
        return invalid(session, f"participant {event.identity} is not the active endpoint")
    disconnected = moved(session.endpoints, "disconnected", (event.identity,))
    return Accepted(
        replace(session, state=target, endpoints=disconnected, disconnects=session.disconnects + 1)
    )


def _endpoint_refused(session: Session, refused: Rejected) -> Rejected:
    """The endpoint's own state refuses: report that state and the endpoint events it allows."""
    return replace(refused, current_epoch=session.epoch)
