"""The interaction events and what the rules for them and for provider calls share: who is
the agent, the data messages it gets, the limits and the refusals every family gives.

Frozen, tagged values (`{"type": "Deliver", ...}`), so the shell can store or log one
`InteractionEvent` union. Import the public names from `state_machines.interactions`.
"""

from __future__ import annotations

import json
from typing import Final, Literal, assert_never

import msgspec

from state_machines import media
from state_machines._base import Rejected, RejectReason
from state_machines.effects import AppendHistory
from state_machines.operation import Operation
from state_machines.session_model import (
    ACTIVE,
    JOINING,
    READY,
    RECONNECTING,
    Session,
    SessionState,
    limit_exceeded,
)

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

# a session keeps at most this many operations (resolved ones included, for GetOperation)
MAX_OPERATIONS: Final = 100
INTERACTIVE_STATES: Final[tuple[SessionState, ...]] = (JOINING, ACTIVE, RECONNECTING)
# live past provisioning: the agent may ask, and ContinueTask or a timer may answer
ANSWERABLE_STATES: Final[tuple[SessionState, ...]] = (READY, *INTERACTIVE_STATES)


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


def capability_missing(missing: str) -> Rejected:
    return Rejected(
        reason=RejectReason.CAPABILITY_UNAVAILABLE,
        state="",
        missing=(missing,),
        detail=f"{missing} was not requested for this session or is not offered by the device",
    )


def agent_in_room(session: Session) -> str | None:
    """The agent's identity while LiveKit says it is in the room (data messages can reach it);
    what the agent reports about itself does not change this."""
    return session.agent_identity


def agent_absent(session: Session) -> Rejected:
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


def too_many_operations(session: Session) -> Rejected:
    return limit_exceeded(
        session, "operations_per_session", f"a session keeps at most {MAX_OPERATIONS} operations"
    )


def find_operation(session: Session, operation_id: str) -> Operation | None:
    return next((op for op in session.operations if op.operation_id == operation_id), None)


def replace_state(rejected: Rejected, session: Session) -> Rejected:
    """A media rejection as seen from the session (its epoch filled in)."""
    return msgspec.structs.replace(rejected, current_epoch=session.epoch)
