"""The cross-slot index entries of a commit (`SessionStore.commit` sends them beside its
script, idempotently): the due entries written before it, the listings written after it."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from realtime.store import keys
from realtime.store.records import PendingEffect, SessionRecord


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
    listed: list[Any] = [("ZADD", keys.ops_sessions_key(), "GT", now_ms, session_id)]
    if record.tenant is not None:
        index = keys.ops_tenant_sessions_key(record.tenant)
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
