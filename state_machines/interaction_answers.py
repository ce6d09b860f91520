"""Answers to operations (profile §8, §10): operation.confirm / operation.cancel /
media.decide, ContinueTask and the requirement's expiry timer all arrive as `Resolve`.

An operation is resolved once: whichever answer commits first wins and the others meet a
resolved operation. The agent hears of every resolution (one `operation.update` data message)
while it is in the room, and of the current state of each answered operation when it joins
(`updates_on_join`), so an answer given before it joined reaches it too.
"""

from __future__ import annotations

from typing import Final, assert_never

import msgspec

from state_machines import operation as operations
from state_machines._base import Accepted, Rejected, RejectReason
from state_machines.effects import OutboxEffect, SendData
from state_machines.interaction_media import settled_media, with_media
from state_machines.interaction_model import Resolve, agent_in_room, find_operation, to_agent
from state_machines.operation import Operation
from state_machines.session_model import Session, replace
from state_machines.task import INPUT_REQUIRED

# the states an operation starts in: nothing has happened to it the agent does not know
_UNANSWERED: Final[frozenset[operations.OperationState]] = frozenset(
    {operations.PENDING, operations.AWAITING_CONFIRMATION}
)


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
        outbox = (operation_update(changed, agent, event.command_id, done),)
    step = with_media(changed, sources)
    return Accepted(step.state, (*outbox, *step.outbox), history=history)


def operation_update(session: Session, agent: str, command_id: str, op: Operation) -> SendData:
    """The `operation.update` data message telling `agent` the state `op` is in now."""
    payload: dict[str, object] = {"operationId": op.operation_id, "state": op.state}
    return SendData(
        session.room, (agent,), to_agent(session, "operation.update", command_id, payload)
    )


def sync_command_id(op: Operation) -> str:
    """The commandId of the on-join update of `op`: `sync:<operationId>:<state>`. An operation
    enters each state at most once, so the id names one fact: a redelivered webhook or a rejoin
    sends the same ids again, and the agent de-duplicates them like any other."""
    return f"sync:{op.operation_id}:{op.state}"


def updates_on_join(session: Session, agent: str) -> tuple[SendData, ...]:
    """What the agent joining the room as `agent` is told: one `operation.update` per operation
    past its question (running or over; not one still pending or awaiting confirmation),
    oldest first. An answer given while the agent was not in the room reached no one."""
    return tuple(
        operation_update(session, agent, sync_command_id(op), op)
        for op in session.operations
        if op.state not in _UNANSWERED
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
