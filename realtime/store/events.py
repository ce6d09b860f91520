"""Reads of the per-session event streams (`aim:{<sessionId>}:events`), which only the commit
script writes: a task with its stream's bounds at one instant, ranges of entries, and the
hub's reads of many streams at once."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any, Final, NamedTuple

from realtime.store import keys
from realtime.store.records import TaskRecord, decode_task
from realtime.store.redis_client import RedisClient, slot_of, text, translated_errors

Entry = tuple[str, bytes]  # (stream entry id, the entry's `e` field: the event JSON)

_ENTRY_ID: Final = re.compile(r"[0-9]{1,20}-[0-9]{1,20}")  # ASCII digits only
MAX_ID_PART: Final = 2**64 - 1  # Redis stream ids are two unsigned 64-bit numbers


def is_entry_id(value: str) -> bool:
    """Whether `value` is a stream entry id Redis accepts (`<ms>-<seq>`, each 64 bits)."""
    return _ENTRY_ID.fullmatch(value) is not None and all(
        int(part) <= MAX_ID_PART for part in value.split("-")
    )


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
        async with translated_errors():
            task, newest, oldest, event = await self._snapshot(
                keys=[keys.task_key(task_id), keys.events_key(tag)], args=[]
            )
        return Snapshot(
            None if task is None else decode_task(task),
            None if newest is None else text(newest),
            None if oldest is None else (text(oldest), bytes(event)),
        )

    async def after(
        self, stream: str, after_id: str, *, until: str = "+", count: int = 1000
    ) -> list[Entry]:
        """Entries of `stream` after `after_id` (exclusive) up to `until` (inclusive)."""
        async with translated_errors():
            entries = await self._client.xrange(stream, _next_id(after_id), until, count=count)
        return [_entry(entry) for entry in entries]

    async def entry(self, stream: str, entry_id: str) -> Entry | None:
        async with translated_errors():
            entries = await self._client.xrange(stream, entry_id, entry_id, count=1)
        return _entry(entries[0]) if entries else None

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
                    pipe.execute_command(
                        "XREAD", "COUNT", count, "STREAMS", *group, *(cursors[s] for s in group),
                        target_nodes=self._client.get_node_from_key(group[0]),
                    )  # fmt: skip
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


def _next_id(entry_id: str) -> str:
    """The smallest stream id after `entry_id` (XRANGE's start is inclusive)."""
    ms, _, seq = entry_id.partition("-")
    return f"{ms}-{int(seq or 0) + 1}"
