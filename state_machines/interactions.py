"""What a user does inside a live session (profile §7, §8): messages for the agent, consent to
media, and the answers to the agent's requests (operations). Track webhooks move a granted source
to `live` and back to `stopped`.

None of these events moves the session's state: ALLOWED names the states each one applies in
(anywhere else it is rejected with invalid state), NOTES its guards and effects.

Invariants:
- only the active endpoint of a live session past provisioning can interact (else invalid state);
- a class (text, pointer, confirmation) must be both requested by the session and offered by the
  endpoint, a source requested (and for the user's side offered), else capability unavailable;
- the endpoint's publish permission always equals what its grants allow: every change to a user
  source that changes `publish_sources` carries an UpdatePermissions with the full set;
- an operation is resolved once: SendInteraction, ContinueTask and the expiry timer all go
  through `Resolve`, so whichever commits first wins and the others meet a resolved operation;
- the agent hears of every resolution of an operation (one `operation.update` data message).
"""

from __future__ import annotations

import json
from typing import Final, Literal, assert_never

import msgspec

from state_machines import media
from state_machines import operation as operations
from state_machines._base import Accepted, Rejected, RejectReason
from state_machines.effects import AppendHistory, OutboxEffect, SendData, UpdatePermissions
from state_machines.operation import Operation
from state_machines.session import stale_epoch
from state_machines.session_model import (
    ACTIVE,
    JOINING,
    LIVE_STATES,
    READY,
    RECONNECTING,
    SESSION_STATES,
    Session,
    SessionState,
    by_id,
    device_sources,
    replace,
)
from state_machines.task import INPUT_REQUIRED

DeliveredKind = Literal["input.text", "visual.select", "response.interrupt"]
MediaAction = Literal["request", "prepare", "stop", "revoke"]
Decision = Literal["confirm", "deny", "allow", "cancel", "expire"]
ResolvedVia = Literal["interaction", "continue", "timer"]
InteractionEventName = Literal[
    "deliver",
    "user_media",
    "agent_media",
    "resolve",
    "continue_task",
    "requirement_expired",
    "track_changed",
]

# the interaction class a delivered kind needs (None: always allowed)
CLASS_OF: Final[dict[str, str | None]] = {
    "input.text": "text",
    "visual.select": "pointer",
    "response.interrupt": None,
}
CONFIRMATION: Final = "confirmation"
# a session keeps at most this many operations (resolved ones included, for GetOperation)
MAX_OPERATIONS: Final = 100
INTERACTIVE_STATES: Final[tuple[SessionState, ...]] = (JOINING, ACTIVE, RECONNECTING)
# live past provisioning: the agent may ask, and ContinueTask or a timer may answer
ANSWERABLE_STATES: Final[tuple[SessionState, ...]] = (READY, *INTERACTIVE_STATES)
TRACK_SOURCES: Final[dict[str, media.MediaSource]] = {
    "camera": "camera",
    "screen_share": "screen",
}


class Deliver(msgspec.Struct, frozen=True, tag=True):
    """input.text / visual.select / response.interrupt: a data message for the agent."""

    epoch: int
    command_id: str
    kind: DeliveredKind
    payload_json: str


class UserMedia(msgspec.Struct, frozen=True, tag=True):
    """media.request / prepare / stop / revoke for a source of the user's side."""

    epoch: int
    command_id: str
    source: media.MediaSource
    action: MediaAction


class AgentMedia(msgspec.Struct, frozen=True, tag=True):
    """media.request / prepare / stop / revoke for a source of the agent's side. A request
    opens operation `operation_id` (running: the agent answers with UpdateOperation)."""

    epoch: int
    command_id: str
    source: media.MediaSource
    action: MediaAction
    operation_id: str


class Resolve(msgspec.Struct, frozen=True, tag=True):
    """An answer to an operation: operation.confirm / operation.cancel / media.decide
    (`via` interaction, naming `operation_id`), ContinueTask (`via` continue, naming the
    requirement, with the task version the client saw) or the requirement's expiry timer."""

    command_id: str
    decision: Decision
    via: ResolvedVia
    epoch: int = 0
    operation_id: str | None = None
    requirement_id: str | None = None
    action_digest: str | None = None
    expected_version: int | None = None
    history: AppendHistory | None = None


class TrackChanged(msgspec.Struct, frozen=True, tag=True):
    """Webhook track_published / track_unpublished (LiveKit source name); `is_agent` when the
    participant is the agent (its epoch is then the room's)."""

    epoch: int
    identity: str
    source: str
    published: bool
    is_agent: bool = False


InteractionEvent = Deliver | UserMedia | AgentMedia | Resolve | TrackChanged

# The session states each event applies in; it keeps the session's state either way.
ALLOWED: Final[dict[InteractionEventName, tuple[SessionState, ...]]] = {
    "deliver": INTERACTIVE_STATES,
    "user_media": INTERACTIVE_STATES,
    "agent_media": INTERACTIVE_STATES,
    "resolve": INTERACTIVE_STATES,
    "continue_task": ANSWERABLE_STATES,
    "requirement_expired": LIVE_STATES,
    # a track webhook is fenced by its participant and epoch instead of the session's state
    "track_changed": SESSION_STATES,
}

NOTES: Final[dict[InteractionEventName, str]] = {
    "deliver": "input.text, visual.select, response.interrupt; client epoch current, an active "
    "endpoint; the class requested and offered; the agent in the room → SendData to it (a user "
    "text also joins the history when transcripts are kept)",
    "user_media": "media request/prepare/stop/revoke of a user source; client epoch current, an "
    "active endpoint; the source requested and offered (a request is granted at once); "
    "UpdatePermissions when what may be published changes",
    "agent_media": "media request/prepare/stop/revoke of an agent source; client epoch current, "
    "an active endpoint; the source requested; the agent in the room → SendData to it (a "
    f"request opens a running operation, at most {MAX_OPERATIONS})",
    "resolve": "operation.confirm / operation.cancel / media.decide; client epoch current, an "
    "active endpoint, confirmation requested and offered; the operation moves (an answer after "
    "expiresAt is refused); the agent hears `operation.update`; the task follows",
    "continue_task": "ContinueTask; the task INPUT_REQUIRED, the requirement open, "
    "expectedVersion the task's; as `resolve`, and the message joins the history",
    "requirement_expired": "the requirement's timer; the operation expires; as `resolve`",
    "track_changed": "track published/unpublished of the active endpoint (current epoch) or "
    "the agent (the room's epoch), camera or screen share → the source live/stopped",
}


def event_name(event: InteractionEvent) -> InteractionEventName:
    """The name under which `event` appears in ALLOWED (an answer is named by where it came
    from)."""
    match event:
        case Deliver():
            return "deliver"
        case UserMedia():
            return "user_media"
        case AgentMedia():
            return "agent_media"
        case Resolve():
            match event.via:
                case "interaction":
                    return "resolve"
                case "continue":
                    return "continue_task"
                case "timer":
                    return "requirement_expired"
                case _:
                    assert_never(event.via)
        case TrackChanged():
            return "track_changed"
        case _:
            assert_never(event)


def apply(session: Session, event: InteractionEvent, *, now: str) -> Accepted[Session] | Rejected:
    """The rules for an interaction, an answer to an operation or a track change (settled
    afterwards by `state_machines.decide`, the entry to call)."""
    name = event_name(event)
    match event:
        case Deliver():
            return _interactive(session, event.epoch, name) or _deliver(session, event)
        case UserMedia():
            return _interactive(session, event.epoch, name) or _user_media(session, event)
        case AgentMedia():
            return _interactive(session, event.epoch, name) or _agent_media(session, event, now)
        case Resolve() if event.via == "interaction":
            return (
                _interactive(session, event.epoch, name)
                or _confirmation_offered(session)
                or _resolve(session, event, now)
            )
        case Resolve():
            return _live(session, name) or _resolve(session, event, now)
        case TrackChanged():
            return _track(session, event)
        case _:
            assert_never(event)


def _interactive(session: Session, epoch: int, name: InteractionEventName) -> Rejected | None:
    """A command of the active endpoint: the client's epoch first, then the table's states."""
    stale = stale_epoch(session, epoch)
    if stale is not None:
        return stale
    if session.state in ALLOWED[name] and session.active_endpoint_id is not None:
        return None
    return Rejected(
        reason=RejectReason.INVALID_STATE,
        state=session.state,
        allowed=(),
        current_epoch=session.epoch,
        detail="interactions need a live session with an active endpoint: join it first",
    )


def _live(session: Session, name: InteractionEventName) -> Rejected | None:
    """An answer from ContinueTask or a timer: the table's states."""
    if session.state in ALLOWED[name]:
        return None
    return Rejected(
        reason=RejectReason.INVALID_STATE,
        state=session.state,
        current_epoch=session.epoch,
        detail="the session is not live",
    )


def capability_missing(missing: str) -> Rejected:
    return Rejected(
        reason=RejectReason.CAPABILITY_UNAVAILABLE,
        state="",
        missing=(missing,),
        detail=f"{missing} was not requested for this session or is not offered by the device",
    )


def _deliver(session: Session, event: Deliver) -> Accepted[Session] | Rejected:
    needed = CLASS_OF[event.kind]
    endpoint = by_id(session, session.active_endpoint_id or "")
    offered = endpoint.capabilities.interactions if endpoint else ()
    if needed is not None and (
        needed not in session.requested.interactions or needed not in offered
    ):
        return capability_missing(needed)
    body = json.dumps(
        {
            "type": event.kind,
            "commandId": event.command_id,
            "sessionEpoch": session.epoch,
            "payload": json.loads(event.payload_json),
        },
        separators=(",", ":"),
    )
    agent = agent_in_room(session)
    if agent is None:
        return _agent_absent(session)
    history: tuple[AppendHistory, ...] = ()
    if event.kind == "input.text" and session.transcript == "on":
        text = json.loads(event.payload_json)["text"]
        parts = json.dumps([{"text": text}], separators=(",", ":"))
        history = (AppendHistory(event.command_id, "user", parts),)
    outbox = (SendData(session.room, (agent,), body),)
    return Accepted(session, outbox, history=history)


def agent_in_room(session: Session) -> str | None:
    """The agent's identity while LiveKit says it is in the room (data messages can reach it);
    what the agent reports about itself does not change this."""
    return session.agent_identity


def _agent_absent(session: Session) -> Rejected:
    return Rejected(
        reason=RejectReason.INVALID_STATE,
        state=session.state,
        current_epoch=session.epoch,
        detail="the agent is not in the room (not joined yet, or left); send it again once "
        "session.agent.state shows it back",
    )


def to_agent(session: Session, kind: str, command_id: str, payload: dict[str, object]) -> str:
    """The body of a data message for the agent (profile §7)."""
    return json.dumps(
        {"type": kind, "commandId": command_id, "sessionEpoch": session.epoch, "payload": payload},
        separators=(",", ":"),
    )


def _confirmation_offered(session: Session) -> Rejected | None:
    endpoint = by_id(session, session.active_endpoint_id or "")
    offered = endpoint.capabilities.interactions if endpoint else ()
    if CONFIRMATION in session.requested.interactions and CONFIRMATION in offered:
        return None
    return capability_missing(CONFIRMATION)


def _agent_media(session: Session, event: AgentMedia, now: str) -> Accepted[Session] | Rejected:
    if event.source not in session.requested.agent_video_sources:
        return capability_missing(event.source)
    agent = agent_in_room(session)
    if agent is None:
        return _agent_absent(session)
    outcome = media.decide(session.media, "agent", event.source, event.action)
    if isinstance(outcome, Rejected):
        return replace_state(outcome, session)
    payload: dict[str, object] = {"side": "agent", "source": event.source}
    changed = replace(session, media=outcome.state)
    if event.action == "request":
        if len(session.operations) >= MAX_OPERATIONS:
            return too_many_operations(session)
        opened = operations.new_operation(
            operation_id=event.operation_id,
            kind="media.request",
            created_by="client",
            now=now,
            requirement=None,
            media_side="agent",
            media_source=event.source,
        )
        running = replace(opened, state=operations.RUNNING)
        changed = replace(changed, operations=(*session.operations, running))
        payload["operationId"] = event.operation_id
    body = to_agent(session, f"media.{event.action}", event.command_id, payload)
    return Accepted(changed, (SendData(session.room, (agent,), body),))


def too_many_operations(session: Session) -> Rejected:
    return Rejected(
        reason=RejectReason.LIMIT_EXCEEDED,
        state=session.state,
        current_epoch=session.epoch,
        limit="operations_per_session",
        detail=f"a session keeps at most {MAX_OPERATIONS} operations",
    )


def find_operation(session: Session, operation_id: str) -> Operation | None:
    return next((op for op in session.operations if op.operation_id == operation_id), None)


def _by_requirement(session: Session, requirement_id: str | None) -> Operation | None:
    return next(
        (
            op
            for op in session.operations
            if op.state == operations.AWAITING_CONFIRMATION
            and op.requirement is not None
            and op.requirement.requirement_id == requirement_id
        ),
        None,
    )


def _target(session: Session, event: Resolve) -> Operation | Rejected:
    """The operation `event` answers, or why it cannot answer one."""
    if event.via == "continue":
        if session.task_state != INPUT_REQUIRED:
            return Rejected(
                reason=RejectReason.INVALID_STATE,
                state=session.task_state,
                current_epoch=session.epoch,
                detail="the task is not waiting for input",
            )
        waiting = _by_requirement(session, event.requirement_id)
        if waiting is None:
            return Rejected(
                reason=RejectReason.REQUIREMENT_MISMATCH,
                state=session.task_state,
                missing=(event.requirement_id or "",),
                detail=f"requirement {event.requirement_id} is not open",
            )
        return waiting
    found = find_operation(session, event.operation_id or "")
    if found is None:
        return Rejected(
            reason=RejectReason.OPERATION_NOT_FOUND,
            state=session.state,
            detail=f"no operation {event.operation_id} in this session",
        )
    if event.decision in ("allow", "deny") and (
        found.kind != "media.request" or found.created_by != "provider"
    ):
        return Rejected(
            reason=RejectReason.INVALID_STATE,
            state=found.state,
            detail="media.decide answers only a media request of the agent",
        )
    return found


def _answered_too_late(op: Operation, event: Resolve, now: str) -> bool:
    """An approval or refusal after `expiresAt` (its timer may not have fired yet). Times are
    the shell's RFC 3339 UTC strings of one format, so they compare as strings."""
    asked = op.requirement
    return (
        event.decision in ("confirm", "allow", "deny")
        and op.state == operations.AWAITING_CONFIRMATION
        and asked is not None
        and now >= asked.expires_at
    )


def _operation_event(op: Operation, event: Resolve) -> operations.OperationEvent:
    asked = op.requirement
    requirement_id = event.requirement_id or (asked.requirement_id if asked else "")
    digest = event.action_digest or (asked.action_digest if asked else "")
    match event.decision:
        case "confirm" | "allow":
            return operations.Confirm(requirement_id, digest)
        case "deny":
            return operations.Deny(requirement_id, digest)
        case "expire":
            return operations.Expire(requirement_id)
        case "cancel":
            return operations.Cancel()
        case _:
            assert_never(event.decision)


def _resolve(session: Session, event: Resolve, now: str) -> Accepted[Session] | Rejected:
    target = _target(session, event)
    if isinstance(target, Rejected):
        return target
    if _answered_too_late(target, event, now):
        return Rejected(
            reason=RejectReason.INVALID_STATE,
            state=target.state,
            current_epoch=session.epoch,
            detail="the requirement has expired; the agent may ask again",
        )
    moved = operations.decide(target, _operation_event(target, event), now=now)
    if isinstance(moved, Rejected):
        return msgspec.structs.replace(moved, current_epoch=session.epoch)
    if (
        event.via == "continue"
        and event.expected_version is not None
        and event.expected_version != session.task_version
    ):
        return Rejected(
            reason=RejectReason.VERSION_MISMATCH,
            state=session.task_state,
            current_version=session.task_version,
            detail=f"the task is at version {session.task_version}",
        )
    done = moved.state
    changed = replace(
        session, operations=tuple(done if op is target else op for op in session.operations)
    )
    sources = settled_media(changed, done)
    history = () if event.history is None else (event.history,)
    outbox: tuple[OutboxEffect, ...] = ()
    agent = agent_in_room(session)
    if agent is not None:
        payload: dict[str, object] = {"operationId": done.operation_id, "state": done.state}
        body = to_agent(changed, "operation.update", event.command_id, payload)
        outbox = (SendData(session.room, (agent,), body),)
    step = with_media(changed, sources)
    return Accepted(step.state, (*outbox, *step.outbox), history=history)


def settled_media(session: Session, op: Operation) -> media.MediaSources:
    """What an operation's new state means for the source it asked for: the user allowing the
    agent's request, or the agent carrying out the user's, grants it; a request that ends
    unanswered, refused or failed leaves it `off`. Only the newest request for a source settles
    it: an older operation finishing late never touches a source asked for again since.
    (`op` has just changed state; a request of the user starts running and changes state next
    when the agent reports.)"""
    sources = session.media
    side, source = op.media_side, op.media_source
    if op.kind != "media.request" or side is None or source is None:
        return sources
    newest = [
        item.operation_id
        for item in session.operations
        if item.kind == "media.request" and (item.media_side, item.media_source) == (side, source)
    ][-1]
    if newest != op.operation_id:
        return sources
    allowed = op.state == operations.SUCCEEDED or (
        op.state == operations.RUNNING and op.created_by == "provider"
    )
    step: media.MediaEvent = "grant" if allowed else "deny"
    outcome = media.decide(sources, side, source, step)
    return sources if isinstance(outcome, Rejected) else outcome.state


def _user_media(session: Session, event: UserMedia) -> Accepted[Session] | Rejected:
    endpoint = by_id(session, session.active_endpoint_id or "")
    caps = endpoint.capabilities if endpoint else None
    offered = bool(caps and (caps.camera if event.source == "camera" else caps.screen))
    if event.source not in session.requested.user_video_sources or not offered:
        return capability_missing(event.source)
    steps: tuple[media.MediaEvent, ...] = (
        ("request", "grant") if event.action == "request" else (event.action,)
    )
    sources = session.media
    for step in steps:
        outcome = media.decide(sources, "user", event.source, step)
        if isinstance(outcome, Rejected):
            return replace_state(outcome, session)
        sources = outcome.state
    return with_media(session, sources)


def _track(session: Session, event: TrackChanged) -> Accepted[Session] | Rejected:
    source = TRACK_SOURCES.get(event.source)
    if event.is_agent:
        current = event.identity == session.agent_identity and event.epoch == session.room_epoch
    else:
        current = event.identity == session.active_endpoint_id and event.epoch == session.epoch
    if source is None or not current:
        return Rejected(
            reason=RejectReason.INVALID_STATE,
            state=session.state,
            current_epoch=session.epoch,
            detail="fenced: not a video track of the agent or the active endpoint in this epoch",
        )
    side: media.MediaSide = "agent" if event.is_agent else "user"
    outcome = media.decide(
        session.media, side, source, "published" if event.published else "unpublished"
    )
    if isinstance(outcome, Rejected):
        return replace_state(outcome, session)
    return with_media(session, outcome.state)


def with_media(session: Session, sources: media.MediaSources) -> Accepted[Session]:
    """The session with new source states; a permission update when what may be published
    changed (LiveKit replaces every flag it is sent, so the full set goes)."""
    endpoint = by_id(session, session.active_endpoint_id or "")
    updated = replace(session, media=sources)
    if endpoint is None:
        return Accepted(updated)
    caps = endpoint.capabilities
    before = device_sources(session, caps)
    after = device_sources(replace(session, media=sources), caps)
    if before == after:
        return Accepted(updated)
    permission = UpdatePermissions(
        session.room, endpoint.endpoint_id, endpoint.capabilities.audio_output, after
    )
    return Accepted(updated, (permission,))


def replace_state(rejected: Rejected, session: Session) -> Rejected:
    """A media rejection as seen from the session (its epoch filled in)."""
    return msgspec.structs.replace(rejected, current_epoch=session.epoch)
