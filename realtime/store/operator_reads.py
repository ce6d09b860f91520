"""Reads of the operator API (profile §17): the sessions index, one session with its outbox
and armed timers, and a session's two timeline streams (the second, once the session is
compacted, partly from its archive). Read-only; each read is one pipelined
round trip (a listing page two: the index, then the snapshots).

The index `aim:{ops}:sessions` (every session scored by its last commit) is written by the
commit pipeline (`SessionStore.commit`); here it is read newest first and pruned of entries older
than the task TTL, like an owner's task index.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Sequence
from typing import Final, NamedTuple

from realtime.errors import BadRequest
from realtime.store import keys
from realtime.store.events import Entry, next_id, parse_id, stream_entries
from realtime.store.records import (
    EFFECT_DECODER,
    PendingEffect,
    SessionRecord,
    decode_session,
    unpack_entries,
)
from realtime.store.redis_client import REFUSED_ERRORS, RedisClient, text, translated_errors


@contextlib.asynccontextmanager
async def _read() -> AsyncIterator[None]:
    """A read of the operator API: connection failures are -31012, and a command Redis
    refuses (what an operator's query made it read) is a bad request, never a 500."""
    try:
        async with translated_errors():
            yield
    except REFUSED_ERRORS as exc:
        raise BadRequest(f"Redis refused this read ({exc}); check the query parameters") from None


# whose sessions a listing reads: a tenant's (its own index), or every session's
EVERY: Final = None
Tenant = str | None


def _index(tenant: Tenant) -> str:
    return (
        keys.operator_sessions_key()
        if tenant is None
        else keys.operator_tenant_sessions_key(tenant)
    )


Position = tuple[int, str]  # (score: last commit in ms, session id) of an index entry


class Listed(NamedTuple):
    """A session of the index with its snapshot (None: its keys have expired)."""

    session_id: str
    score: int
    record: SessionRecord | None
    version: int


class Detail(NamedTuple):
    record: SessionRecord | None
    version: int
    outbox: list[tuple[str, PendingEffect]]  # in commit order
    timers: dict[str, int]  # armed timer member → due (ms)


class Timeline(NamedTuple):
    record: SessionRecord | None
    events: list[Entry]  # commits (the event stream), after the cursor
    noted: list[Entry]  # timeline stream entries, after the cursor


class OperatorReads:
    """The operator API's door to storage."""

    def __init__(self, redis: RedisClient) -> None:
        self._client = redis.client

    async def usage(self, tenant: str | None, days: Sequence[str]) -> list[list[bytes]]:
        """The usage entries (JSON) of `tenant`'s sessions that ended on each of `days`: one
        round trip (a tenant's days share a slot)."""
        pipe = self._client.pipeline(transaction=False)
        for day in days:
            pipe.hvals(keys.usage_key(tenant, day))
        async with translated_errors():
            found: list[list[bytes]] = await pipe.execute()
        return found

    async def recent(
        self, tenant: Tenant, *, after: Position | None, count: int, prune_before_ms: int
    ) -> list[tuple[str, int]]:
        """Up to `count` entries (session id, score) of the index of `tenant`'s sessions
        (EVERY: of all sessions), newest first, after `after` (exclusive; None: from the
        newest, pruning entries scored before `prune_before_ms`)."""
        index = _index(tenant)
        pipe = self._client.pipeline(transaction=False)
        if after is None:
            pipe.zremrangebyscore(index, "-inf", f"({prune_before_ms}")
            pipe.zrevrangebyscore(index, "+inf", "-inf", start=0, num=count, withscores=True)
        else:
            score, _ = after
            # entries of the same millisecond sort by member, descending: those below its member
            pipe.zrevrangebyscore(index, score, score, withscores=True)
            pipe.zrevrangebyscore(index, f"({score}", "-inf", start=0, num=count, withscores=True)
        async with _read():
            ties, older = await pipe.execute()
        if after is None:
            ties = []
        found = [
            (text(member), int(score))
            for member, score in ties
            if after is not None and text(member) < after[1]
        ]
        found += [(text(member), int(score)) for member, score in older]
        return found[:count]

    async def listed(self, entries: Sequence[tuple[str, int]]) -> list[Listed]:
        """The snapshots of index entries, in one pipeline."""
        if not entries:
            return []
        pipe = self._client.pipeline(transaction=False)
        for session_id, _ in entries:
            pipe.hmget(keys.session_key(session_id), "v", "s")
        async with _read():
            replies = await pipe.execute()
        return [
            Listed(session_id, score, _record(snapshot), int(version or 0))
            for (session_id, score), (version, snapshot) in zip(entries, replies, strict=True)
        ]

    async def forget(self, tenant: Tenant, session_ids: Sequence[str]) -> None:
        """Drop entries of the index of `tenant`'s sessions whose session has expired."""
        if session_ids:
            async with _read():
                await self._client.zrem(_index(tenant), *session_ids)

    async def detail(self, session_id: str) -> Detail:
        """Snapshot, outbox and armed timers of one session (one slot, one round trip)."""
        pipe = self._client.pipeline(transaction=False)
        pipe.hmget(keys.session_key(session_id), "v", "s")
        pipe.hgetall(keys.outbox_key(session_id))
        pipe.hgetall(keys.session_timers_key(session_id))
        async with _read():
            (version, snapshot), outbox, timers = await pipe.execute()
        return Detail(
            _record(snapshot),
            int(version or 0),
            sorted((text(key), EFFECT_DECODER.decode(raw)) for key, raw in outbox.items()),
            {text(member): int(due) for member, due in timers.items()},
        )

    async def timeline(
        self, session_id: str, *, events_after: str, noted_after: str, count: int
    ) -> Timeline:
        """The session's snapshot and up to `count` entries of each stream after its cursor
        (exclusive), oldest first (one slot, one round trip)."""
        pipe = self._client.pipeline(transaction=False)
        pipe.hget(keys.session_key(session_id), "s")
        pipe.hmget(keys.archive_key(session_id), "events", "timeline")
        reads = []
        for stream, after in ((keys.events_key, events_after), (keys.timeline_key, noted_after)):
            start = next_id(after)
            if start is not None:  # else nothing can come after it
                pipe.xrange(stream(session_id), start, "+", count=count)
            reads.append(start is not None)
        async with _read():
            replies = iter(await pipe.execute())
        snapshot, (archived_events, archived_noted) = next(replies), next(replies)
        events, noted = (stream_entries(next(replies)) if read else [] for read in reads)
        # a compacted session: each stream's entries up to the compaction, then the stream's
        events = _with_archive(archived_events, events, events_after, count)
        noted = _with_archive(archived_noted, noted, noted_after, count)
        return Timeline(_record(snapshot), events, noted)


def _record(snapshot: bytes | None) -> SessionRecord | None:
    return None if snapshot is None else decode_session(snapshot)


def _with_archive(
    archive: bytes | None, entries: list[Entry], after: str, count: int
) -> list[Entry]:
    """The archived entries after `after`, then `entries` (all newer), `count` at most."""
    if not archive:
        return entries
    position = parse_id(after)
    older = [entry for entry in unpack_entries(archive) if parse_id(entry[0]) > position]
    return (older + entries)[:count]
