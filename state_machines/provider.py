"""What the agent (provider) asks of a session (realtime-profile §8, §10): operations, updates
to them, its own state and transcript lines.

Invariants:
- a provider call is fenced by room: it must come from the agent of the session's current room,
  with a `sessionEpoch` issued since that room was provisioned (a handoff keeps the room and the
  agent; a rebind replaces both), and the session must be live past provisioning;
- an operation that needs confirmation waits in `awaiting_confirmation` with its requirement and
  puts the task in INPUT_REQUIRED; a media request always waits for the user's decision, and
  asks for a source the session requested (and, for the user's side, the active device offers);
- the provider drives running operations to `succeeded` or `failed`; it cannot run an operation
  the user has not confirmed;
- transcript lines are kept only when the session retains transcripts (else capability
  unavailable, nothing kept); they change nothing but the task history.
"""

from __future__ import annotations

import json
from typing import Final, Literal, assert_never

import msgspec

from state_machines import media
from state_machines import operation as operations
from state_machines import rotation as rotations
from state_machines._base import Accepted, Rejected, RejectReason
from state_machines.effects import AppendHistory
from state_machines.interaction_media import settled_media, with_media
from state_machines.interaction_model import (
    ANSWERABLE_STATES,
    MAX_OPERATIONS,
    capability_missing,
    find_operation,
    replace_state,
    too_many_operations,
)
from state_machines.operation import Requirement
from state_machines.session_model import (
    Deadline,
    DeadlineReason,
    SavedContext,
    Session,
    SessionState,
    agent_started,
    by_id,
    replace,
)

ReportedState = Literal["joined", "listening", "thinking", "speaking", "left"]
ProviderEventName = Literal[
    "request_operation",
    "update_operation",
    "report_agent_state",
    "append_transcript",
    "report_deadline",
    "save_context",
    "ack_interactions",
]


class RequestOperation(msgspec.Struct, frozen=True, tag=True):
    """The agent asks for an action or a media source. With `requirement` the user must
    confirm (always for media); without, the operation runs at once."""

    epoch: int
    room_epoch: int
    operation_id: str
    kind: operations.OperationKind
    action_json: str
    requirement: Requirement | None = None
    media_side: media.MediaSide | None = None
    media_source: media.MediaSource | None = None
    generation: int = 1


class UpdateOperation(msgspec.Struct, frozen=True, tag=True):
    """The agent reports progress of a running operation."""

    room_epoch: int
    operation_id: str
    state: Literal["running", "succeeded", "failed"]
    result_json: str = "null"
    error_json: str = "null"
    generation: int = 1


class ReportAgentState(msgspec.Struct, frozen=True, tag=True):
    """The agent's own state, last writer wins."""

    epoch: int
    room_epoch: int
    state: ReportedState
    generation: int = 1


class AppendTranscript(msgspec.Struct, frozen=True, tag=True):
    """A stable transcript line; `item_id` makes it idempotent (the shell skips known ids)."""

    epoch: int
    room_epoch: int
    item_id: str
    role: Literal["user", "agent"]
    text: str
    generation: int = 1


class ReportDeadline(msgspec.Struct, frozen=True, tag=True):
    """The serving agent's connection ends at `deadline` (RFC 3339) for `reason` (profile §23)."""

    epoch: int
    room_epoch: int
    generation: int
    deadline: str
    reason: DeadlineReason


class SaveContext(msgspec.Struct, frozen=True, tag=True):
    """The serving agent saved a context of `size` bytes for its successor (the bytes travel
    beside the event, into the commit, never into an event or a log)."""

    epoch: int
    room_epoch: int
    generation: int
    size: int


class AckInteractions(msgspec.Struct, frozen=True, tag=True):
    """The serving agent has the interactions `command_ids`."""

    epoch: int
    room_epoch: int
    generation: int
    command_ids: tuple[str, ...]


ProviderEvent = (
    RequestOperation
    | UpdateOperation
    | ReportAgentState
    | AppendTranscript
    | ReportDeadline
    | SaveContext
    | AckInteractions
)
# the calls the successor of a rotation may make before the handover: its report is the handover
_SUCCESSOR_CALLS: Final[tuple[type, ...]] = (ReportAgentState,)

# The session states each call applies in (after the room fence); none moves the session's state.
ALLOWED: Final[dict[ProviderEventName, tuple[SessionState, ...]]] = {
    "request_operation": ANSWERABLE_STATES,
    "update_operation": ANSWERABLE_STATES,
    "report_agent_state": ANSWERABLE_STATES,
    "append_transcript": ANSWERABLE_STATES,
    "report_deadline": ANSWERABLE_STATES,
    "save_context": ANSWERABLE_STATES,
    "ack_interactions": ANSWERABLE_STATES,
}

NOTES: Final[dict[ProviderEventName, str]] = {
    "request_operation": f"at most {MAX_OPERATIONS} operations; a media request asks for a "
    "requested (and, for the user, offered) source; with a requirement the operation awaits "
    "confirmation (task INPUT_REQUIRED), without it runs at once",
    "update_operation": "the operation → running, succeeded or failed (running again changes "
    "nothing); a media request settles its source (UpdatePermissions when that changes what may be "
    "published)",
    "report_agent_state": "last writer wins (the agent counts as started); after a replacement, "
    "only once the new agent started (its job reported, or it joined); the same state again "
    "changes nothing",
    "append_transcript": "only when transcripts are kept (else capability unavailable); the "
    "line joins the history, idempotent by itemId",
    "report_deadline": "a deadline after now; replaces the last; while a successor is under "
    "way only an earlier one counts (one rotation at a time)",
    "save_context": "the serving agent's context for its successor, replacing the last",
    "ack_interactions": "the interactions named are not given to a successor (unknown ids "
    "change nothing)",
}
GENERATION_NOTE: Final = (
    "every call is fenced by generation: an agent a later generation took over from may read "
    "but not write; a rotation's successor may only report its state before the handover "
    "(that report is the handover)"
)


def event_name(event: ProviderEvent) -> ProviderEventName:
    """The name under which `event` appears in ALLOWED."""
    match event:
        case RequestOperation():
            return "request_operation"
        case UpdateOperation():
            return "update_operation"
        case ReportAgentState():
            return "report_agent_state"
        case AppendTranscript():
            return "append_transcript"
        case ReportDeadline():
            return "report_deadline"
        case SaveContext():
            return "save_context"
        case AckInteractions():
            return "ack_interactions"
        case _:
            assert_never(event)


def apply(session: Session, event: ProviderEvent, *, now: str) -> Accepted[Session] | Rejected:
    """The rules for a provider call (settled afterwards by `state_machines.decide`, the entry
    to call)."""
    refused = _fenced(session, event)
    if refused is not None:
        return refused
    decided = _rule(session, event, now)
    if not isinstance(decided, Accepted) or decided.state == session:
        return decided
    rotation = decided.state.rotation
    if rotation is not None and event.generation == decided.state.agent_generation:
        # the serving agent spoke during the rotation: the seam is measured from its last word
        spoke = replace(rotation, last_word_at=now)
        return replace(decided, state=replace(decided.state, rotation=spoke))
    return decided


def _rule(session: Session, event: ProviderEvent, now: str) -> Accepted[Session] | Rejected:
    match event:
        case RequestOperation():
            return _request(session, event, now)
        case UpdateOperation():
            return _update(session, event, now)
        case ReportAgentState():
            if _is_successor(session, event.generation):
                if event.state == "left":
                    return Accepted(session)  # it leaves before serving: its job ending says so
                # the successor speaks with its own token: it is in the room, it serves now
                return rotations.hand_over(session, now, identity=None, state=event.state)
            if event.state == session.agent_state or not _reporter_known(session):
                # nothing new; or an agent was replaced in this room and its successor has not
                # started yet, so the report may be the replaced one's: no commit
                return Accepted(session)
            return Accepted(replace(session, agent_state=event.state))
        case AppendTranscript():
            return _transcript(session, event)
        case ReportDeadline():
            return rotations.report_deadline(session, Deadline(event.deadline, event.reason), now)
        case SaveContext():
            saved = SavedContext(size=event.size, generation=event.generation, saved_at=now)
            return Accepted(replace(session, agent_context=saved))
        case AckInteractions():
            return rotations.acknowledge(session, event.command_ids)
        case _:
            assert_never(event)


def _reporter_known(session: Session) -> bool:
    """A state report comes from the session's agent: the current dispatch's agent started,
    or it is the room's first (no agent was replaced, whose token would be the same)."""
    return agent_started(session) or session.agent_attempt == 1


def _fenced(session: Session, event: ProviderEvent) -> Rejected | None:
    """The agent of an older room, an epoch from outside the current room, a session that is
    not live, an agent a later generation took over from, a successor before its handover:
    refused before anything else."""
    epoch = getattr(event, "epoch", session.epoch)
    refused = fence(session, event.room_epoch, epoch, ALLOWED[event_name(event)])
    if refused is not None:
        return refused
    return generation_fence(
        session, event.generation, successor_may=isinstance(event, _SUCCESSOR_CALLS)
    )


def _is_successor(session: Session, generation: int) -> bool:
    rotation = session.rotation
    return rotation is not None and rotation.attempt != 0 and generation == rotation.generation


def generation_fence(session: Session, generation: int, *, successor_may: bool) -> Rejected | None:
    """A write of the serving agent's generation passes; the successor's only if
    `successor_may`; any other generation's is refused (replaced, or unknown)."""
    serving = session.agent_generation
    if generation == serving or (successor_may and _is_successor(session, generation)):
        return None
    if _is_successor(session, generation):
        return Rejected(
            reason=RejectReason.INVALID_STATE,
            state=session.state,
            current_epoch=session.epoch,
            detail=f"generation {generation} takes over once it reports its state "
            "(aim.provider.ReportAgentState); until then the serving agent writes",
        )
    return Rejected(
        reason=RejectReason.AGENT_REPLACED,
        state=session.state,
        current_epoch=session.epoch,
        current_version=serving,
        detail=(
            f"agent generation {generation} was taken over by generation {serving}"
            if generation < serving
            else f"agent generation {generation} is not an agent of this session"
        ),
    )


def read_refused(session: Session, room_epoch: int) -> Rejected | None:
    """A read of the agent's (ListOperations, GetOperation) is fenced as its calls are: by the
    agent of the current room, while the session is live (a rejection; None: it may read)."""
    return fence(session, room_epoch, room_epoch, ANSWERABLE_STATES)


def fence(
    session: Session, room_epoch: int, epoch: int, allowed: tuple[SessionState, ...]
) -> Rejected | None:
    """The room fence of every provider call: `room_epoch` (the provider token's) is the
    current room's, `epoch` lies between that room's and the session's, the state is one of
    `allowed`."""
    if room_epoch != session.room_epoch or not (session.room_epoch <= epoch <= session.epoch):
        why = "ahead" if epoch > session.epoch else "rebound"
        if session.state in ("ending", "ended", "failed"):
            why = "ended"
        return Rejected(
            reason=RejectReason.STALE_EPOCH,
            state=session.state,
            current_epoch=session.epoch,
            epoch_reason=why,
            detail=f"the call belongs to room epoch {room_epoch}, not the current room",
        )
    if session.state not in allowed:
        return Rejected(
            reason=RejectReason.INVALID_STATE,
            state=session.state,
            current_epoch=session.epoch,
            detail="the session is not live",
        )
    return None


def _request(session: Session, event: RequestOperation, now: str) -> Accepted[Session] | Rejected:
    if len(session.operations) >= MAX_OPERATIONS:
        return too_many_operations(session)
    sources = session.media
    if event.kind == "media.request":
        side, source = event.media_side or "user", event.media_source or "camera"
        refused = _media_refused(session, side, source)
        if refused is not None:
            return refused
        asked = media.decide(sources, side, source, "request")
        if isinstance(asked, Rejected):
            return replace_state(asked, session)
        sources = asked.state
    opened = operations.new_operation(
        operation_id=event.operation_id,
        kind=event.kind,
        created_by="provider",
        now=now,
        requirement=event.requirement,
        action_json=event.action_json,
        media_side=event.media_side,
        media_source=event.media_source,
    )
    if event.requirement is None:
        opened = replace(opened, state=operations.RUNNING)
    return Accepted(replace(session, operations=(*session.operations, opened), media=sources))


def _media_refused(
    session: Session, side: media.MediaSide, source: media.MediaSource
) -> Rejected | None:
    if side == "agent":
        return (
            None if source in session.requested.agent_video_sources else capability_missing(source)
        )
    if source not in session.requested.user_video_sources:
        return capability_missing(source)
    endpoint = by_id(session, session.active_endpoint_id or "")
    if endpoint is not None:
        caps = endpoint.capabilities
        if not (caps.camera if source == "camera" else caps.screen):
            return capability_missing(source)
    return None


def _update(session: Session, event: UpdateOperation, now: str) -> Accepted[Session] | Rejected:
    op = find_operation(session, event.operation_id)
    if op is None:
        return Rejected(
            reason=RejectReason.OPERATION_NOT_FOUND,
            state=session.state,
            detail=f"no operation {event.operation_id} in this session",
        )
    change: operations.OperationEvent
    match event.state:
        case "running":
            change = operations.Update()
        case "succeeded":
            change = operations.Succeed(event.result_json)
        case "failed":
            change = operations.Fail(event.error_json)
        case _:
            assert_never(event.state)
    moved = operations.decide(op, change, now=now)
    if isinstance(moved, Rejected):
        return msgspec.structs.replace(moved, current_epoch=session.epoch)
    if moved.state == op:
        return Accepted(session)
    done = moved.state
    changed = replace(
        session, operations=tuple(done if item is op else item for item in session.operations)
    )
    return with_media(changed, settled_media(changed, done))


def _transcript(session: Session, event: AppendTranscript) -> Accepted[Session] | Rejected:
    if session.transcript != "on":
        return capability_missing("transcript")
    parts = json.dumps([{"text": event.text}], separators=(",", ":"))
    return Accepted(session, history=(AppendHistory(event.item_id, event.role, parts),))
