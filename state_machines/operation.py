"""The operation lifecycle: a confirmable action or a media request (realtime-profile §5, §8, §10).

`pending → awaiting_confirmation → running → succeeded | failed`, and `canceled` from any
non-terminal state; `expired` when the open requirement of an `awaiting_confirmation` operation
runs out. The shell stores the action itself; the core only compares its requirement id and digest.

Invariants:
- terminal states (succeeded, failed, canceled, expired) absorb: every event is rejected with
  `invalid_state` and no allowed events;
- `confirm`, `deny` and `expire` must name the open requirement (`confirm`/`deny` also its
  digest), else `requirement_mismatch` — so the two paths (SendInteraction and ContinueTask)
  converge on one transition and the second gets a clear error;
- `update` of a running operation changes nothing (the provider may repeat it);
- a rejection changes nothing; an accepted change sets `updated_at` to the shell's `now`.
"""

from __future__ import annotations

from typing import Final, Literal, assert_never

import msgspec

from state_machines._base import Accepted, Rejected, RejectReason
from state_machines.media import MediaSide, MediaSource

OperationState = Literal[
    "pending",
    "awaiting_confirmation",
    "running",
    "succeeded",
    "failed",
    "canceled",
    "expired",
]
OperationKind = Literal["action", "media.request"]
OperationCreator = Literal["client", "provider"]
OperationEventName = Literal[
    "start",
    "ask_confirmation",
    "confirm",
    "deny",
    "cancel",
    "expire",
    "succeed",
    "fail",
    "update",
]

PENDING: Final = "pending"
AWAITING_CONFIRMATION: Final = "awaiting_confirmation"
RUNNING: Final = "running"
SUCCEEDED: Final = "succeeded"
FAILED: Final = "failed"
CANCELED: Final = "canceled"
EXPIRED: Final = "expired"

TERMINAL: Final[frozenset[OperationState]] = frozenset({SUCCEEDED, FAILED, CANCELED, EXPIRED})

TRANSITIONS: Final[dict[tuple[OperationState, OperationEventName], OperationState]] = {
    (PENDING, "start"): RUNNING,
    (PENDING, "ask_confirmation"): AWAITING_CONFIRMATION,
    (PENDING, "update"): RUNNING,
    (PENDING, "cancel"): CANCELED,
    (AWAITING_CONFIRMATION, "confirm"): RUNNING,
    (AWAITING_CONFIRMATION, "deny"): CANCELED,
    (AWAITING_CONFIRMATION, "expire"): EXPIRED,
    (AWAITING_CONFIRMATION, "cancel"): CANCELED,
    (RUNNING, "update"): RUNNING,
    (RUNNING, "succeed"): SUCCEEDED,
    (RUNNING, "fail"): FAILED,
    (RUNNING, "cancel"): CANCELED,
}

# accepted, but the operation comes back unchanged (not even `updated_at`)
IDEMPOTENT: Final[tuple[tuple[OperationState, OperationEventName], ...]] = ((RUNNING, "update"),)

# guards and data changes on top of the table, for docs/state-machines.md
NOTES: Final[dict[OperationEventName, str]] = {
    "ask_confirmation": "opens the requirement",
    "confirm": "requirementId and actionDigest must be the open requirement's",
    "deny": "requirementId and actionDigest must be the open requirement's",
    "expire": "requirementId must be the open requirement's",
    "succeed": "keeps the result",
    "fail": "keeps the error",
}


class Requirement(msgspec.Struct, frozen=True, kw_only=True):
    """The open question of an operation; the action itself is stored by the shell."""

    requirement_id: str
    action_digest: str
    expires_at: str


class Operation(msgspec.Struct, frozen=True, kw_only=True):
    """One operation of a session; ids and timestamps come from the shell.

    `action_json` is the action (canonical JSON) the requirement's digest covers; a media request
    names its `media_side` and `media_source`."""

    operation_id: str
    kind: OperationKind
    created_by: OperationCreator
    state: OperationState
    created_at: str
    updated_at: str
    requirement: Requirement | None = None
    result_json: str | None = None
    error_json: str | None = None
    action_json: str | None = None
    media_side: MediaSide | None = None
    media_source: MediaSource | None = None


class Start(msgspec.Struct, frozen=True, tag="start"):
    """Run a pending operation that needs no confirmation."""


class AskConfirmation(msgspec.Struct, frozen=True, tag="ask_confirmation"):
    """A pending operation needs the user's confirmation of `requirement`."""

    requirement: Requirement


class Confirm(msgspec.Struct, frozen=True, tag="confirm"):
    """operation.confirm / ContinueTask approve."""

    requirement_id: str
    action_digest: str


class Deny(msgspec.Struct, frozen=True, tag="deny"):
    """ContinueTask deny (or media.decide deny)."""

    requirement_id: str
    action_digest: str


class Cancel(msgspec.Struct, frozen=True, tag="cancel"):
    """operation.cancel, or the session is over."""


class Expire(msgspec.Struct, frozen=True, tag="expire"):
    """The expiry timer of requirement `requirement_id` fired."""

    requirement_id: str


class Succeed(msgspec.Struct, frozen=True, tag="succeed"):
    """UpdateOperation state succeeded; `result_json` is the provider's result as JSON text."""

    result_json: str


class Fail(msgspec.Struct, frozen=True, tag="fail"):
    """UpdateOperation state failed; `error_json` is the provider's error as JSON text."""

    error_json: str


class Update(msgspec.Struct, frozen=True, tag="update"):
    """UpdateOperation state running."""

    state: Literal["running"] = "running"


OperationEvent = (
    Start | AskConfirmation | Confirm | Deny | Cancel | Expire | Succeed | Fail | Update
)


def event_name(event: OperationEvent) -> OperationEventName:
    """The name under which `event` appears in TRANSITIONS (also its wire tag)."""
    match event:
        case Start():
            return "start"
        case AskConfirmation():
            return "ask_confirmation"
        case Confirm():
            return "confirm"
        case Deny():
            return "deny"
        case Cancel():
            return "cancel"
        case Expire():
            return "expire"
        case Succeed():
            return "succeed"
        case Fail():
            return "fail"
        case Update():
            return "update"
        case _:
            assert_never(event)


def allowed_events(state: OperationState) -> tuple[OperationEventName, ...]:
    """The events `state` accepts, in table order (none for a terminal state)."""
    return tuple(event for (source, event) in TRANSITIONS if source == state)


def is_terminal(state: OperationState) -> bool:
    return state in TERMINAL


def new_operation(
    *,
    operation_id: str,
    kind: OperationKind,
    created_by: OperationCreator,
    now: str,
    requirement: Requirement | None,
    action_json: str | None = None,
    media_side: MediaSide | None = None,
    media_source: MediaSource | None = None,
) -> Operation:
    """A new operation: `awaiting_confirmation` with a requirement, else `pending`."""
    return Operation(
        operation_id=operation_id,
        kind=kind,
        created_by=created_by,
        state=PENDING if requirement is None else AWAITING_CONFIRMATION,
        created_at=now,
        updated_at=now,
        requirement=requirement,
        action_json=action_json,
        media_side=media_side,
        media_source=media_source,
    )


def _mismatch(op: Operation, requirement_id: str, action_digest: str | None) -> str | None:
    """Why the event does not answer the open requirement, or None when it does."""
    open_requirement = op.requirement
    if open_requirement is None:
        return f"operation {op.operation_id} has no open requirement"
    if requirement_id != open_requirement.requirement_id:
        return (
            f"requirementId `{requirement_id}` is not the open requirement of operation "
            f"{op.operation_id}"
        )
    if action_digest is not None and action_digest != open_requirement.action_digest:
        return (
            f"actionDigest does not match requirement {requirement_id}: the action was "
            "changed or the digest was computed wrongly"
        )
    return None


def _requirement_check(op: Operation, event: OperationEvent) -> str | None:
    match event:
        case Confirm() | Deny():
            return _mismatch(op, event.requirement_id, event.action_digest)
        case Expire():
            return _mismatch(op, event.requirement_id, None)
        case Start() | AskConfirmation() | Cancel() | Succeed() | Fail() | Update():
            return None
        case _:
            assert_never(event)


def decide(op: Operation, event: OperationEvent, *, now: str) -> Accepted[Operation] | Rejected:
    """Apply `event` to `op`: the operation in its next state, or a rejection."""
    name = event_name(event)
    target = TRANSITIONS.get((op.state, name))
    if target is None:
        return Rejected(
            reason=RejectReason.INVALID_STATE,
            state=op.state,
            allowed=allowed_events(op.state),
            detail=f"operation {op.operation_id} is {op.state}: `{name}` does not apply",
        )
    mismatch = _requirement_check(op, event)
    if mismatch is not None:
        return Rejected(
            reason=RejectReason.REQUIREMENT_MISMATCH,
            state=op.state,
            allowed=allowed_events(op.state),
            detail=mismatch,
        )
    if (op.state, name) in IDEMPOTENT:
        return Accepted(op)
    changed = msgspec.structs.replace(op, state=target, updated_at=now)
    match event:
        case AskConfirmation():
            changed = msgspec.structs.replace(changed, requirement=event.requirement)
        case Succeed():
            changed = msgspec.structs.replace(changed, result_json=event.result_json)
        case Fail():
            changed = msgspec.structs.replace(changed, error_json=event.error_json)
        case Start() | Confirm() | Deny() | Cancel() | Expire() | Update():
            pass
        case _:
            assert_never(event)
    return Accepted(changed)
