"""What one commit writes beside the session snapshot: the command's identity and stored
outcome, the event entry, the outbox entries and the task record (the engine's commit loop,
`engine/core.py`, puts them in one script)."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final, Protocol

import msgspec

from realtime.engine.presence import changes as presence_changes
from realtime.store.records import (
    EVENT_ENCODER,
    AgentMoved,
    Cause,
    CommandOutcome,
    EventEntry,
    OperationMoved,
    PendingEffect,
    Task,
    TaskRecord,
    WebhookRef,
)
from realtime.telemetry import trace_id_of
from realtime.timestamps import timestamp
from state_machines import Accepted, OutboxEffect, Session
from state_machines.effects import AppendHistory

_CANONICAL: Final = msgspec.json.Encoder(order="sorted")


def params_digest(method: str, params: Any) -> str:
    """sha256 of the canonical params (sorted keys, commandId left out; epoch included)."""
    body = msgspec.to_builtins(params)
    body.pop("commandId", None)
    return "sha256:" + hashlib.sha256(_CANONICAL.encode([method, body])).hexdigest()


@dataclass(frozen=True, slots=True)
class Command:
    """What identifies a client command for exactly-once handling."""

    method: str
    command_id: str
    digest: str


# causes of commits made by a call: each keeps the call's span as the session's `caller`
CALLS: Final = frozenset((Cause.CREATE, Cause.COMMAND, Cause.PROVIDER))
# causes whose spans link to the session's caller, as the request behind what LiveKit reports
# (timers and effects link to the span that armed or stored them, which they carry)
LINKED: Final = frozenset((Cause.WEBHOOK, Cause.RECONCILER))


@dataclass(frozen=True, slots=True)
class Note:
    """Why a commit happened, written into its event entry: the cause and what names it (the
    call's `method`, the webhook's `event` and `event_id`, the `timer`, the `effect`) or, for the
    reconciler, what it corrected (`kind`, the `room`, an `identity` ...). Never message text."""

    cause: Cause
    correction: Mapping[str, str] | None = None
    method: str | None = None
    event: str | None = None
    event_id: str | None = None
    timer: str | None = None
    effect: str | None = None
    generation: int = 0  # the agent generation of a provider call (0: not a provider call)


def cause_of(command: Command | None, note: Note | None) -> Cause | None:
    """What made a commit: the note's cause, or a command's when it carries none."""
    if note is not None:
        return note.cause
    return Cause.COMMAND if command is not None else None


def outcome_of(
    command: Command,
    session: Session,
    now_ms: int,
    result: bytes,
    claims: dict[str, Any] | None,
) -> CommandOutcome:
    """What is stored for an applied command: its identity, digest, its result as rendered by
    the method (token-free) and the claims of its join token, if it issued one."""
    return CommandOutcome(
        command_id=command.command_id,
        method=command.method,
        digest=command.digest,
        session_epoch=session.epoch,
        created_at=timestamp(now_ms),
        result=msgspec.Raw(result),
        token_claims=claims,
    )


def event_entry(
    old: Session | None,
    session: Session,
    version: int,
    now_ms: int,
    command: Command | None,
    task: Task,
    note: Note | None = None,
    span: str | None = None,
) -> bytes:
    """One entry of the session's event stream, the commit's move from `old` (None: created).
    It holds the status of `task` (as committed), so a subscriber renders the statusUpdate of
    any past event from the entry alone, and what an operator's timeline shows of the commit:
    its cause, the call or webhook behind it, operations that changed state and the trace id of
    the request (profile §17)."""
    return EVENT_ENCODER.encode(
        EventEntry(
            from_=old.state if old is not None else None,
            to=session.state,
            epoch=session.epoch,
            version=version,
            task_version=session.task_version,
            at=timestamp(now_ms),
            status=msgspec.to_builtins(task.status),
            command_id=command.command_id if command is not None else None,
            method=(note.method if note is not None else None)
            or (command.method if command is not None else None),
            cause=cause_of(command, note),
            webhook=WebhookRef(note.event, note.event_id) if note and note.event else None,
            timer=note.timer if note is not None else None,
            effect=note.effect if note is not None else None,
            generation=note.generation if note is not None else 0,
            correction=dict(note.correction) if note and note.correction is not None else None,
            operations=_operations_moved(old, session),
            trace_id=trace_id_of(span) if span is not None else None,  # the committing span
            agent=_agent_moved(old, session),
        )
    )


def _agent_moved(old: Session | None, new: Session) -> AgentMoved | None:
    """The agent's presence, when the commit changed it (its state or its dispatch)."""
    if old is None:
        return None
    found = presence_changes(old, new)
    if not found and (old.agent_state, old.agent_attempt, old.rotation) == (
        new.agent_state,
        new.agent_attempt,
        new.rotation,
    ):
        return None
    rotation = new.rotation
    return AgentMoved(
        from_=old.agent_state,
        to=new.agent_state,
        dispatch_attempt=new.agent_attempt,
        changes=found,
        generation=new.agent_generation,
        successor=rotation.generation if rotation is not None else 0,
        successor_attempt=rotation.attempt if rotation is not None else 0,
    )


def _operations_moved(old: Session | None, new: Session) -> tuple[OperationMoved, ...]:
    """The operations the commit created or moved to another state (ids, kinds and states
    only: an operation's action is the agent's text)."""
    if not new.operations:
        return ()
    before = {op.operation_id: op.state for op in old.operations} if old is not None else {}
    return tuple(
        OperationMoved(op.operation_id, op.state, op.kind)
        for op in new.operations
        if before.get(op.operation_id) != op.state
    )


def outbox_entries(
    version: int, epoch: int, effects: tuple[OutboxEffect, ...], traceparent: str | None
) -> list[tuple[str, PendingEffect]]:
    """Outbox entries; ids `<version>-<n>` sort in commit order. Each names `traceparent`, the
    span of the commit that stores it, so the span that carries it out links back (§13)."""
    return [
        (
            f"{version:012d}-{index:02d}",
            PendingEffect(effect=effect, epoch=epoch, cause=traceparent),
        )
        for index, effect in enumerate(effects)
    ]


class TaskProjection(Protocol):
    """The A2A task a session shows (`realtime.a2a.projection.follow`, handed to the engine by
    the composition root): `previous` (None: the first) as it follows `session`, restamped when
    it `changed`, with `history` appended."""

    def __call__(
        self,
        session: Session,
        previous: Task | None,
        *,
        changed: bool,
        now_ms: int,
        history: tuple[AppendHistory, ...],
    ) -> Task: ...


def task_record_for(
    project: TaskProjection,
    session: Session,
    owner: str,
    previous: TaskRecord | None,
    now_ms: int,
    history: tuple[AppendHistory, ...] = (),
) -> TaskRecord:
    """The session's task record as it follows the session (a new status time on every task
    change), with `history` appended. A task record always exists beside its session; a missing
    one is built again."""
    changed = previous is None or previous.version != session.task_version
    return TaskRecord(
        owner=owner,
        version=session.task_version,
        created_at=previous.created_at if previous is not None else session.created_at,
        status_ms=now_ms if changed or previous is None else previous.status_ms,
        task=project(
            session,
            previous.task if previous is not None else None,
            changed=changed,
            now_ms=now_ms,
            history=history,
        ),
    )


def without_known_history(
    decision: Accepted[Session], task: TaskRecord | None
) -> Accepted[Session]:
    """Appending a message the history already holds is a no-op (transcript items and
    messages are idempotent by id)."""
    if not decision.history or task is None or task.task.history is msgspec.UNSET:
        return decision
    known = {message.message_id for message in task.task.history}
    kept = tuple(entry for entry in decision.history if entry.message_id not in known)
    return msgspec.structs.replace(decision, history=kept)
