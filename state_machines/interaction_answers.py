"""Answers to operations (profile §8, §10): operation.confirm / operation.cancel /
media.decide, ContinueTask and the requirement's expiry timer all arrive as `Resolve`.

An operation is resolved once: whichever answer commits first wins and the others meet a
resolved operation. The agent hears of every resolution (one `operation.update` data message).
"""

from __future__ import annotations

from typing import assert_never

import msgspec

from state_machines import operation as operations
from state_machines._base import Accepted, Rejected, RejectReason
from state_machines.effects import OutboxEffect, SendData
from state_machines.interaction_media import settled_media, with_media
from state_machines.interaction_model import Resolve, agent_in_room, find_operation, to_agent
from state_machines.operation import Operation
from state_machines.session_model import Session, replace
from state_machines.task import INPUT_REQUIRED


def resolve(session: Session, event: Resolve, now: str) -> Accepted[Session] | Rejected:
    """Answer the operation `event` names (the caller has checked the session's state)."""
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
