"""The session lifecycle (realtime-profile §5, §6): provisioning, joins and handoffs, rebinds, end.

Invariants:
- `epoch` never decreases; it grows by one on a handoff or a rebind, and every bump is recorded in
  `bumps`, so a stale command learns why its epoch ended (superseded | rebound | ended | ahead);
- at most one endpoint is joining or connected, and it is the active one;
- the task follows the session: task_state == derive_task_state(session), and task_version grows
  by one exactly when task_state changes; ending, ended and failed never go back to live;
- ended and failed absorb: the only event they accept is the idempotent `end`, which changes
  nothing;
- a rejection is a value and changes nothing; events of an older room or epoch are fenced;
- the agent's presence (profile §22): `agent_attempt` never decreases within a room; events of
  an older dispatch (its job's start or end, its start timer) and the joins and leaves of
  agents already replaced are fenced; a dispatch whose job never started is replaced at most
  until MAX_AGENT_MISSES dispatches in a row started nothing, a room gets at most
  MAX_AGENT_DISPATCHES dispatches, then the session fails with `agent_unavailable`.

This module holds the table, the guards and the fences; `session_rules` what each event does.
"""

from __future__ import annotations

from typing import Final, Literal, assert_never

from state_machines import endpoint as endpoints
from state_machines import task
from state_machines._base import Accepted, Rejected, RejectReason
from state_machines.effects import CreateRoom
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
    ACTIVE,
    ENDED,
    ENDING,
    FAILED,
    JOINING,
    LIVE_STATES,
    PROVISIONING,
    READY,
    RECONNECTING,
    TERMINAL_STATES,
    EpochBump,
    Requested,
    RoomName,
    Session,
    SessionState,
    advance_task,
    derive_task_state,
    next_attempt,
    parse_room_name,
    room_name,
)
from state_machines.task import TaskCore

__all__ = [
    "FALLBACK",
    "GUARDS",
    "IDEMPOTENT",
    "LIVE_STATES",
    "MAX_AGENT_DISPATCHES",
    "MAX_AGENT_MISSES",
    "MAX_REBINDS",
    "TERMINAL_STATES",
    "TRANSITIONS",
    "AgentDeadline",
    "AgentDispatched",
    "AgentJobEnded",
    "AgentJobStarted",
    "AgentStartTimeout",
    "Cancel",
    "End",
    "EpochBump",
    "GraceExpired",
    "IdleTimeout",
    "Join",
    "LeaveGrace",
    "MaxDuration",
    "ParticipantJoined",
    "ParticipantLeft",
    "Provisioned",
    "ProvisioningFailed",
    "ProvisioningTimeout",
    "RegisterEndpoint",
    "Requested",
    "RoomDeleted",
    "RoomLost",
    "RoomName",
    "RotationDue",
    "Session",
    "SessionEvent",
    "SessionEventName",
    "SessionState",
    "allowed_events",
    "derive_task_state",
    "event_name",
    "new_session",
    "parse_room_name",
    "room_name",
]

_JOINABLE: Final[tuple[SessionState, ...]] = (READY, JOINING, ACTIVE, RECONNECTING)

# a lost room is re-provisioned at most this often; the next loss fails the session
MAX_REBINDS: Final = 3
# dispatches in a row whose job never started (silently dropped, no worker free): the last
# one's start timer fails the session with `agent_unavailable` instead of dispatching again
MAX_AGENT_MISSES: Final = 3
# dispatches into one room, lost agents' replacements included: an agent that keeps dying is
# not replaced for ever
MAX_AGENT_DISPATCHES: Final = 10

# ending an ending or finished session answers it unchanged, without effects (EndSession)
IDEMPOTENT: Final[tuple[tuple[SessionState, SessionEventName], ...]] = (
    (ENDING, "end"),
    (ENDED, "end"),
    (FAILED, "end"),
)

# The target when the event's guard holds. Where a guard can send the event elsewhere, GUARDS says
# so and FALLBACK names the other target; a target equal to the source changes no state.
TRANSITIONS: Final[dict[tuple[SessionState, SessionEventName], SessionState]] = {
    (PROVISIONING, "provisioned"): READY,
    (PROVISIONING, "provisioning_failed"): FAILED,
    (PROVISIONING, "provisioning_timeout"): FAILED,
    **{(state, "register_endpoint"): state for state in LIVE_STATES},
    **{(state, "join"): JOINING for state in _JOINABLE},
    (JOINING, "participant_joined"): ACTIVE,
    (RECONNECTING, "participant_joined"): ACTIVE,
    (READY, "participant_joined"): READY,
    (ACTIVE, "participant_joined"): ACTIVE,
    (ACTIVE, "participant_left"): RECONNECTING,
    **{(state, "agent_joined"): state for state in LIVE_STATES},
    **{(state, "agent_left"): state for state in LIVE_STATES},
    (RECONNECTING, "grace_expired"): READY,
    (READY, "idle_timeout"): ENDING,
    **{(state, "max_duration"): ENDING for state in LIVE_STATES},
    **{(state, "room_lost"): PROVISIONING for state in LIVE_STATES},
    **{(state, "end"): ENDING for state in LIVE_STATES},
    **{(state, "cancel"): ENDING for state in LIVE_STATES},
    **{pair: pair[0] for pair in IDEMPOTENT},
    (ENDING, "room_deleted"): ENDED,
    **{(state, "agent_dispatched"): state for state in LIVE_STATES},
    **{(state, "agent_job_started"): state for state in LIVE_STATES},
    **{(state, "agent_job_ended"): state for state in LIVE_STATES},
    **{(state, "agent_start_timeout"): state for state in LIVE_STATES},
    **{(state, "rotation_due"): state for state in LIVE_STATES},
    **{(state, "agent_deadline"): state for state in LIVE_STATES},
    **{(state, "leave_grace"): state for state in LIVE_STATES},
}

# an agent lost (or never started) when no dispatch is left fails the session
_AGENT_LOST: Final[tuple[SessionEventName, ...]] = (
    "agent_left",
    "agent_job_ended",
    "agent_start_timeout",
    "agent_deadline",
)
FALLBACK: Final[dict[tuple[SessionState, SessionEventName], SessionState]] = {
    **{(state, "room_lost"): FAILED for state in LIVE_STATES},
    **{(state, name): FAILED for state in LIVE_STATES for name in _AGENT_LOST},
}

GUARDS: Final[dict[SessionEventName, str]] = {
    "provisioned": "epoch = the room's epoch; agent dispatched",
    "provisioning_failed": "epoch = the room's epoch; task FAILED",
    "provisioning_timeout": "epoch = the room's epoch; task FAILED",
    "register_endpoint": "client epoch current; same clientEndpointKey → same endpoint; "
    "at most max_endpoints",
    "join": "client epoch current; endpoint registered (not superseded/removed); another active "
    "endpoint → handoff (at most max_handoffs_per_minute in any minute): epoch + 1, it is "
    "superseded and removed, its tokens revoked; token minted",
    "participant_joined": "the active endpoint at the current epoch → active; a superseded "
    "endpoint → RemoveParticipant with its tokens revoked, state unchanged; else rejected",
    "participant_left": "the active endpoint at the current epoch; the shell arms the grace timer",
    "agent_joined": "epoch = the room's epoch, not an agent already replaced, the current job's "
    "agent if a job started; agent joined (the job counts as started); SendData "
    "`operation.update` (commandId `sync:<operationId>:<state>`) for each operation running or "
    "over",
    "agent_left": "epoch = the room's epoch, the agent (or its job's): lost; fewer than "
    f"{MAX_AGENT_DISPATCHES} dispatches into the room so far: DeleteDispatch of its dispatch, "
    "DispatchAgent of the next (same room and epoch), the count of dispatches that started "
    "nothing begins again; with none left, endReason agent_unavailable, every device removed, "
    "DeleteRoom",
    "grace_expired": "epoch current, endpoint still the active one; it stays disconnected",
    "idle_timeout": "no active endpoint, idle ever since the timer was armed; endReason "
    "idle_timeout",
    "max_duration": "endReason max_duration",
    "room_lost": f"the current room, fewer than {MAX_REBINDS} rebinds so far: epoch + 1, "
    "new room (CreateRoom with the agent's dispatch)",
    "end": "endReason given; every device with a token removed, its tokens revoked; DeleteRoom; "
    "task COMPLETED",
    "cancel": "every device with a token removed, its tokens revoked; DeleteRoom; task CANCELED",
    "room_deleted": "epoch = the room's epoch; endpoints removed",
    "agent_dispatched": "epoch = the room's epoch, attempt = the current dispatch; its id "
    "recorded, agent dispatched",
    "agent_job_started": "epoch = the room's epoch, attempt = the current dispatch; its job "
    "recorded (a repeat changes nothing, another job of it is refused), agent started unless it "
    "already joined",
    "agent_job_ended": "epoch = the room's epoch, attempt = the current dispatch, its job (or "
    "none heard yet: it ended before its start was heard): lost, as on `agent_left`",
    "agent_start_timeout": "epoch = the room's epoch, attempt = the current dispatch, its job "
    f"not started; fewer than {MAX_AGENT_MISSES} dispatches in a row started nothing: "
    "DeleteDispatch of the stale dispatch, DispatchAgent of the next (same room and epoch); "
    "with none left, endReason agent_unavailable, every device removed, DeleteRoom; "
    "the successor's dispatch (a rotation): DeleteDispatch of it alone, DispatchAgent of "
    "another while the deadline allows, else the serving agent is kept until its deadline",
    "rotation_due": "epoch = the room's epoch, the serving agent's generation, started, no "
    "rotation under way, the deadline the session holds (or a planned one): DispatchAgent of "
    "the successor (the next generation, same room and epoch)",
    "agent_deadline": "epoch = the room's epoch, the serving agent's generation and deadline: "
    "a successor dispatched takes over (the predecessor removed, its dispatch deleted); with "
    "none, lost, as on `agent_left`",
    "leave_grace": "epoch = the room's epoch, the agent told to leave at the last handover: "
    "RemoveParticipant of it (tokens revoked), DeleteDispatch of dispatches older than the "
    "serving agent's",
}


def allowed_events(state: SessionState) -> tuple[SessionEventName, ...]:
    """The events `state` accepts, in table order."""
    return tuple(event for (source, event) in TRANSITIONS if source == state)


def new_session(
    *,
    session_id: str,
    task_id: str,
    context_id: str,
    client_session_id: str,
    requested: Requested,
    required_capabilities: tuple[str, ...],
    transcript: Literal["off", "on"],
    now: str,
    rotate_after_s: int = 0,
    max_s: int = 0,
) -> Accepted[Session]:
    """A session in provisioning at epoch 1, its task WORKING, and the provisioning effects;
    with `rotate_after_s`, each of its agents gets a deadline that long after it joins; it
    lasts `max_s` seconds at most (the shell arms the timer)."""
    started = advance_task(TaskCore(state=task.SUBMITTED), "start")
    room = room_name(session_id, 1)
    session = Session(
        session_id=session_id,
        task_id=task_id,
        context_id=context_id,
        client_session_id=client_session_id,
        requested=requested,
        required_capabilities=required_capabilities,
        transcript=transcript,
        created_at=now,
        updated_at=now,
        task_state=started.state,
        task_version=started.version,
        room=room,
        rotate_after_s=rotate_after_s,
        max_s=max_s,
    )
    return Accepted(session, (CreateRoom(room, 1, with_agent=True),))


# --- guards -------------------------------------------------------------------------------------


def fence(session: Session, event: SessionEvent) -> Rejected | None:
    """Epoch checks come before the state machine: stale commands and old-room events."""
    match event:
        case RegisterEndpoint() | Join():
            return stale_epoch(session, event.epoch)
        case Provisioned() | ProvisioningFailed() | ProvisioningTimeout() | RoomDeleted():
            current = event.epoch == session.room_epoch
        case ParticipantJoined() | ParticipantLeft() if event.is_agent:
            # an agent replaced in this room (its dispatch deleted) is not the session's agent
            current = (
                event.epoch == session.room_epoch and event.identity not in session.agents_replaced
            )
        case AgentDispatched() | AgentJobStarted() | AgentJobEnded() | AgentStartTimeout():
            # an older dispatch's job, answer or timer: that dispatch was replaced (the
            # successor's of a rotation under way is current too)
            rotation = session.rotation
            current = event.epoch == session.room_epoch and (
                event.attempt == session.agent_attempt
                or (
                    rotation is not None
                    and rotation.attempt != 0
                    and event.attempt == rotation.attempt
                )
            )
        case RotationDue() | AgentDeadline() | LeaveGrace():
            current = event.epoch == session.room_epoch
        case ParticipantJoined() | ParticipantLeft():
            # a token of any epoch since the room was provisioned can be in this room
            current = session.room_epoch <= event.epoch <= session.epoch
        case GraceExpired():
            # a timer of an earlier drop (the device came back and dropped again) is stale
            current = event.epoch == session.epoch and event.disconnect in (
                -1,
                session.disconnects,
            )
        case RoomLost():
            current = event.room == session.room
        case IdleTimeout() | MaxDuration() | End() | Cancel():
            current = True
        case _:
            assert_never(event)
    return None if current else invalid(session, f"fenced: `{event_name(event)}` is not current")


def stale_epoch(session: Session, epoch: int) -> Rejected | None:
    if epoch == session.epoch:
        return None
    if epoch > session.epoch:
        why = "ahead"
    elif session.state in (ENDING, ENDED, FAILED):
        why = "ended"
    else:
        why = next((bump.reason for bump in session.bumps if bump.epoch > epoch), "superseded")
    return Rejected(
        reason=RejectReason.STALE_EPOCH,
        state=session.state,
        current_epoch=session.epoch,
        epoch_reason=why,
        detail=f"sessionEpoch {epoch} is not the current epoch {session.epoch} ({why})",
    )


def is_active(session: Session, identity: str, epoch: int) -> bool:
    return identity == session.active_endpoint_id and epoch == session.epoch


def awaits_active(session: Session) -> bool:
    """Joining or reconnecting: the active endpoint's participant is expected in the room."""
    return session.state in (JOINING, RECONNECTING)


def is_superseded(session: Session, identity: str) -> bool:
    return any(
        item.endpoint_id == identity and item.state == endpoints.SUPERSEDED
        for item in session.endpoints
    )


def rebinds_exhausted(session: Session) -> bool:
    return session.rebinds >= MAX_REBINDS


def agent_dispatches_exhausted(session: Session, *, started: bool) -> bool:
    """No dispatch left to replace the agent with: the room had its last one, or the current
    one, which never `started`, was the last of those in a row that may start nothing."""
    if dispatches_spent(session) >= MAX_AGENT_DISPATCHES:
        return True
    return not started and session.agent_misses + 1 >= MAX_AGENT_MISSES


def dispatches_spent(session: Session) -> int:
    """The dispatches into the current room that count against MAX_AGENT_DISPATCHES: every one
    made so far but those a rotation handed the session to (a session that rotates on schedule
    is not running out of agents)."""
    return next_attempt(session) - 1 - session.agent_handovers


def is_handoff(session: Session, endpoint_id: str) -> bool:
    """Another endpoint is active, joining or reconnecting: this join supersedes it."""
    return session.active_endpoint_id not in (None, endpoint_id)


def invalid(session: Session, detail: str) -> Rejected:
    return Rejected(
        reason=RejectReason.INVALID_STATE,
        state=session.state,
        allowed=allowed_events(session.state),
        current_epoch=session.epoch,
        detail=detail,
    )
