"""What one commit writes beside the session snapshot: the command's identity and stored
outcome, the event entry, the outbox entries and the task record (the engine's commit loop,
`engine/core.py`, puts them in one script)."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Final, Protocol

import msgspec

from realtime.store.records import CommandOutcome, PendingEffect, Task, TaskRecord
from realtime.timestamps import timestamp
from state_machines import OutboxEffect, Session
from state_machines.effects import AppendHistory

_CANONICAL: Final = msgspec.json.Encoder(order="sorted")
_EVENT_ENCODER: Final = msgspec.json.Encoder()


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


class Cause(StrEnum):
    """Who made a change that no client command, webhook or timer asked for (an event entry's
    `cause`; profile §17)."""

    RECONCILER = "reconciler"


@dataclass(frozen=True, slots=True)
class Note:
    """What an event entry says about a change the service made on its own: why, and what it
    corrected (`kind`, the `room`, an `identity` ...)."""

    cause: Cause
    correction: Mapping[str, str]


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
    from_state: str | None,
    session: Session,
    version: int,
    now_ms: int,
    command_id: str | None,
    task: Task,
    note: Note | None = None,
) -> bytes:
    """One entry of the session's event stream. It holds the status of `task` (as committed), so
    a subscriber renders the statusUpdate of any past event from the entry alone."""
    entry: dict[str, Any] = {
        "from": from_state,
        "to": session.state,
        "epoch": session.epoch,
        "version": version,
        "taskVersion": session.task_version,
        "at": timestamp(now_ms),
        "status": task.status,
    }
    if command_id:
        entry["commandId"] = command_id
    if note is not None:
        entry["cause"] = note.cause
        entry["correction"] = dict(note.correction)
    return _EVENT_ENCODER.encode(entry)


def outbox_entries(
    version: int, epoch: int, effects: tuple[OutboxEffect, ...]
) -> list[tuple[str, PendingEffect]]:
    """Outbox entries; ids `<version>-<n>` sort in commit order."""
    return [
        (f"{version:012d}-{index:02d}", PendingEffect(effect=effect, epoch=epoch))
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
