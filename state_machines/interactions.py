"""What a user does inside a live session (profile §7, §8): messages for the agent, consent to
media, and the answers to the agent's requests (operations). Track webhooks move a granted source
to `live` and back to `stopped`.

None of these events moves the session's state: ALLOWED names the states each one applies in
(anywhere else it is rejected with invalid state), NOTES its guards and effects. This module
checks them and delivers messages; the other rules live by family in `interaction_media`
(sources and tracks) and `interaction_answers` (operations answered), the events and what the
families share in `interaction_model`.

Invariants:
- only the active endpoint of a live session past provisioning can interact (else invalid state);
- a class (text, pointer, confirmation) must be both requested by the session and offered by the
  endpoint, a source requested (and for the user's side offered), else capability unavailable;
- the endpoint's publish permission always equals what its grants allow: every change to a user
  source that changes `publish_sources` carries an UpdatePermissions with the full set;
- an operation is resolved once: SendInteraction, ContinueTask and the expiry timer all go
  through `Resolve`, so whichever commits first wins and the others meet a resolved operation;
- the agent hears of every resolution of an operation (one `operation.update` data message);
  one made while it was not in the room reaches it when it joins (`updates_on_join`).
"""

from __future__ import annotations

import json
from typing import Final, assert_never

from state_machines import rotation as rotations
from state_machines._base import Accepted, Rejected, RejectReason
from state_machines.effects import AppendHistory, SendData
from state_machines.interaction_answers import resolve
from state_machines.interaction_media import agent_media, track, user_media
from state_machines.interaction_model import (
    ANSWERABLE_STATES,
    INTERACTIVE_STATES,
    MAX_OPERATIONS,
    AgentMedia,
    Decision,
    Deliver,
    DeliveredKind,
    InteractionEvent,
    InteractionEventName,
    MediaAction,
    Resolve,
    ResolvedVia,
    TrackChanged,
    UserMedia,
    agent_absent,
    agent_in_room,
    capability_missing,
    event_name,
    find_operation,
)
from state_machines.session import stale_epoch
from state_machines.session_model import LIVE_STATES, SESSION_STATES, Session, SessionState, by_id

__all__ = [
    "ALLOWED",
    "ANSWERABLE_STATES",
    "CLASS_OF",
    "CONFIRMATION",
    "INTERACTIVE_STATES",
    "MAX_OPERATIONS",
    "NOTES",
    "AgentMedia",
    "Decision",
    "Deliver",
    "DeliveredKind",
    "InteractionEvent",
    "InteractionEventName",
    "MediaAction",
    "Resolve",
    "ResolvedVia",
    "TrackChanged",
    "UserMedia",
    "apply",
    "event_name",
    "find_operation",
]

# the interaction class a delivered kind needs (None: always allowed)
CLASS_OF: Final[dict[str, str | None]] = {
    "input.text": "text",
    "visual.select": "pointer",
    "response.interrupt": None,
}
CONFIRMATION: Final = "confirmation"

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


def apply(session: Session, event: InteractionEvent, *, now: str) -> Accepted[Session] | Rejected:
    """The rules for an interaction, an answer to an operation or a track change (settled
    afterwards by `state_machines.decide`, the entry to call)."""
    name = event_name(event)
    match event:
        case Deliver():
            return _interactive(session, event.epoch, name) or _deliver(session, event)
        case UserMedia():
            return _interactive(session, event.epoch, name) or user_media(session, event)
        case AgentMedia():
            return _interactive(session, event.epoch, name) or agent_media(session, event, now)
        case Resolve() if event.via == "interaction":
            return (
                _interactive(session, event.epoch, name)
                or _confirmation_offered(session)
                or resolve(session, event, now)
            )
        case Resolve():
            return _live(session, name) or resolve(session, event, now)
        case TrackChanged():
            return track(session, event)
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


def _confirmation_offered(session: Session) -> Rejected | None:
    endpoint = by_id(session, session.active_endpoint_id or "")
    offered = endpoint.capabilities.interactions if endpoint else ()
    if CONFIRMATION in session.requested.interactions and CONFIRMATION in offered:
        return None
    return capability_missing(CONFIRMATION)


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
        return agent_absent(session)
    history: tuple[AppendHistory, ...] = ()
    if event.kind == "input.text" and session.transcript == "on":
        text = json.loads(event.payload_json)["text"]
        parts = json.dumps([{"text": text}], separators=(",", ":"))
        history = (AppendHistory(event.command_id, "user", parts),)
    outbox = (SendData(session.room, (agent,), body),)
    return Accepted(rotations.sent(session, event.command_id, body), outbox, history=history)
