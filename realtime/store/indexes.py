"""The cross-slot index entries of a commit (`SessionStore.commit` sends them beside its
script, idempotently): the due entries written before it, the listings written after it."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final, NamedTuple

import msgspec

from realtime.store import keys
from realtime.store.records import PendingEffect, SessionRecord, TaskRecord


class TaskInfo(msgspec.Struct, array_like=True, frozen=True):
    """What ListTasks filters a task on, kept in the owner's task index beside its status time
    (`keys.owner_task_info_key`): a listing reads these, never the tasks it does not return."""

    state: str
    context_id: str


class Indexed(NamedTuple):
    """One task of an owner's index: its id, status time (ms) and what ListTasks filters on."""

    task_id: str
    status_ms: int
    info: TaskInfo


_INFO_ENCODER: Final = msgspec.json.Encoder()
_INFO_DECODER: Final = msgspec.json.Decoder(TaskInfo)


USAGE_ENCODER: Final = msgspec.json.Encoder()


def encode_task_info(info: TaskInfo) -> bytes:
    return _INFO_ENCODER.encode(info)


def decode_task_info(raw: bytes) -> TaskInfo:
    return _INFO_DECODER.decode(raw)


def task_listing(owner: str, record: TaskRecord) -> list[tuple[Any, ...]]:
    """The owner's task index entries of a session's task, written after each of its commits:
    its status time (the order) and its info (the filters)."""
    task = record.task
    task_id = task.id
    info = TaskInfo(task.status.state, task.context_id)
    return [
        ("ZADD", keys.owner_tasks_key(owner), record.status_ms, task_id),
        ("HSET", keys.owner_task_info_key(owner), task_id, encode_task_info(info)),
    ]


def score_pairs(members: Mapping[str, int]) -> list[Any]:
    """ZADD's arguments for `members` (member → score): score, member, score, member …"""
    return [item for member, score in members.items() for item in (score, member)]


def listings(
    record: SessionRecord,
    session_id: str,
    now_ms: int,
    ttl_s: int,
    *,
    deliveries_due_ms: int | None = None,
) -> list[Any]:
    """The index entries written after a commit: the operations index (every session's, and
    its tenant's), and the deliveries index once more when the commit stored session events: a
    worker that found nothing to send and left the index between the entry written before the
    commit and the commit itself finds the session again."""
    listed: list[Any] = [("ZADD", keys.operator_sessions_key(), "GT", now_ms, session_id)]
    if record.tenant is not None:
        index = keys.operator_tenant_sessions_key(record.tenant)
        listed += [("ZADD", index, "GT", now_ms, session_id), ("EXPIRE", index, ttl_s)]
    if deliveries_due_ms is not None:
        listed.append(_deliveries_due(session_id, deliveries_due_ms))
    return listed


def _deliveries_due(session_id: str, due_ms: int) -> tuple[Any, ...]:
    """NX: a session that already waits keeps its retry time."""
    return ("ZADD", keys.deliveries_due_key(), "NX", due_ms, session_id)


def due_entries(
    session_id: str,
    effects: Sequence[tuple[str, PendingEffect]],
    due_ms: int,
    timers: Mapping[str, int] | None,
    ttl_s: int,
    cause: str | None = None,
    *,
    deliveries_due_ms: int | None = None,
) -> list[tuple[Any, ...]]:
    """The due entries of a commit: the session in the outbox index when it stores effects;
    its timers in the timers index and in the session's own list (what an operator reads),
    and the span that armed them; the session in the deliveries index when it stores session
    events (NX: a session that already waits keeps its retry time)."""
    commands: list[tuple[Any, ...]] = []
    if effects:
        commands.append(("ZADD", keys.outbox_due_key(), due_ms, session_id))
    if deliveries_due_ms is not None:
        commands.append(_deliveries_due(session_id, deliveries_due_ms))
    if timers:
        commands.append(("ZADD", keys.timers_due_key(), *score_pairs(timers)))
        armed = keys.session_timers_key(session_id)
        commands.append(("HSET", armed, *(item for pair in timers.items() for item in pair)))
        commands.append(("EXPIRE", armed, ttl_s))
        if cause:
            causes = keys.timer_causes_key(session_id)
            pairs = (item for member in timers for item in (member, cause))
            commands.append(("HSET", causes, *pairs))
            commands.append(("EXPIRE", causes, ttl_s))
    return commands
