"""Reads of the per-session event streams (`aim:{<sessionId>}:events`), which only the commit
script writes: a task with its stream's bounds at one instant, ranges of entries, and the
hub's reads of many streams at once."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any, Final, NamedTuple

from realtime.store import keys
from realtime.store.records import TaskRecord, decode_task, unpack_entries
from realtime.store.redis_client import RedisClient, slot_of, text, translated_errors

Entry = tuple[str, bytes]  # (stream entry id, the entry's `e` field: the event JSON)

_ENTRY_ID: Final = re.compile(r"[0-9]{1,20}-[0-9]{1,20}")  # ASCII digits only
MAX_ID_PART: Final = 2**64 - 1  # Redis stream ids are two unsigned 64-bit numbers


def is_entry_id(value: str) -> bool:
    """Whether `value` is a stream entry id Redis accepts (`<ms>-<seq>`, each 64 bits)."""
    return _ENTRY_ID.fullmatch(value) is not None and all(
        int(part) <= MAX_ID_PART for part in value.split("-")
    )


def parse_id(entry_id: str) -> tuple[int, int]:
    """A stream entry id `<ms>-<seq>` as a comparable pair; ValueError if it is not one."""
    ms, sep, seq = entry_id.partition("-")
    if not (ms.isdigit() and (not sep or seq.isdigit())):
        raise ValueError(f"not a stream entry id: {entry_id!r}")
    return int(ms), int(seq or 0)


def next_id(entry_id: str) -> str | None:
    """The smallest stream id after `entry_id` (XRANGE's start is inclusive); None when it is
    the largest id there is."""
    ms, _, seq = entry_id.partition("-")
    if int(seq or 0) < MAX_ID_PART:
        return f"{ms}-{int(seq or 0) + 1}"
    return f"{int(ms) + 1}-0" if int(ms) < MAX_ID_PART else None


class Snapshot(NamedTuple):
    """A task with the ids of the newest and oldest entries of its event stream, read at once."""

    task: TaskRecord | None
    newest: str | None
    oldest: Entry | None


class EventStore:
    """Reads of the per-session event streams (written only by the commit script)."""

    def __init__(self, redis: RedisClient) -> None:
        self._client = redis.client
        self._cluster = redis.cluster
        self.can_block = redis.can_block
        self._snapshot = redis.scripts.task_snapshot

    async def snapshot(self, task_id: str) -> Snapshot:
        """The task and its stream's newest and oldest entry ids, atomically (one slot)."""
        tag = keys.tag_for_task(task_id)
        script_keys = [keys.task_key(task_id), keys.events_key(tag), keys.archive_key(tag)]
        async with translated_errors():
            task, newest, oldest, event = await self._snapshot(keys=script_keys, args=[])
        return Snapshot(
            None if task is None else decode_task(task),
            None if newest is None else text(newest),
            None if oldest is None else (text(oldest), bytes(event)),
        )

    async def after(
        self, session_id: str, after_id: str, *, until: str = "+", count: int = 1000
    ) -> list[Entry]:
        """Entries of the session's stream after `after_id` (exclusive) up to `until`
        (inclusive)."""
        return await self._range(session_id, _next_id(after_id), until, count)

    async def entry(self, session_id: str, entry_id: str) -> Entry | None:
        """The entry `entry_id` of the session's stream."""
        found = await self._range(session_id, entry_id, entry_id, 1)
        return found[0] if found else None

    async def _range(self, session_id: str, start: str, until: str, count: int) -> list[Entry]:
        """Up to `count` entries from `start` to `until` (both inclusive; `+`: the newest);
        once the session is compacted, its archive's first (one round trip either way)."""
        pipe = self._client.pipeline(transaction=False)
        pipe.hget(keys.archive_key(session_id), "events")
        pipe.xrange(keys.events_key(session_id), start, until, count=count)
        async with translated_errors():
            archive, entries = await pipe.execute()
        found = stream_entries(entries)
        if archive:
            low, high = parse_id(start), None if until == "+" else parse_id(until)
            older = [
                entry
                for entry in unpack_entries(archive)
                if parse_id(entry[0]) >= low and (high is None or parse_id(entry[0]) <= high)
            ]
            found = (older + found)[:count]
        return found

    async def read(
        self, cursors: Mapping[str, str], *, block_ms: int | None, count: int
    ) -> list[tuple[str, list[Entry]]]:
        """New entries of each stream after its cursor. One XREAD for all of them (blocking up
        to `block_ms` until one has news) on a single Redis; on Cluster one non-blocking XREAD
        per slot, since a call may not span slots (`block_ms` is ignored there), all in one
        pipeline: one round trip and one connection per master. Each XREAD names its master:
        redis-py would ask a node `COMMAND GETKEYS` for every XREAD to find its slot, and its
        cluster client fails a command at once when a master's connections are all in use."""
        if not cursors:
            return []
        blocking_s = (block_ms or 0) / 1000 if not self._cluster else 0.0
        async with translated_errors(blocking_s):
            if not self._cluster:
                replies = await self._client.xread(dict(cursors), count=count, block=block_ms)
            else:
                pipe = self._client.pipeline(transaction=False)
                for group in slot_groups(list(cursors)):
                    streams = [*group, *(cursors[s] for s in group)]
                    node = self._client.get_node_from_key(group[0])
                    pipe.execute_command(
                        "XREAD", "COUNT", count, "STREAMS", *streams, target_nodes=node
                    )
                groups = await pipe.execute()
                replies = [reply for group in groups for reply in group or ()]
        return [
            (text(stream), [_entry(entry) for entry in entries])
            for stream, entries in replies or ()
        ]


def slot_groups(streams: Sequence[str]) -> list[list[str]]:
    """Streams grouped by Cluster slot (what one XREAD may cover on Cluster)."""
    groups: dict[int, list[str]] = {}
    for stream in streams:
        groups.setdefault(slot_of(stream), []).append(stream)
    return list(groups.values())


def _entry(entry: Any) -> Entry:
    entry_id, fields = entry
    return text(entry_id), bytes(fields.get(b"e") or b"")


def stream_entries(replies: Any) -> list[Entry]:
    """An XRANGE reply as entries."""
    return [_entry(entry) for entry in replies]


def _next_id(entry_id: str) -> str:
    """The smallest stream id after `entry_id` (XRANGE's start is inclusive)."""
    ms, _, seq = entry_id.partition("-")
    return f"{ms}-{int(seq or 0) + 1}"
