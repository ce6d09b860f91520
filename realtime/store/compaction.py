"""Compaction of ended sessions (profile §20): `AIM_COMPACT_AFTER_S` after a session ended, a
timer (armed by the commit that ended it, fired by a worker) rewrites it to what GetTask,
GetSession and the operations listing still show: the final summary (`records.summary`) and
the task, both compressed, with the session's armed timers gone. What the replay window keeps
is kept, smaller: each command outcome compressed in place, the event stream and the timeline
as one archive of compressed entries (`keys.archive_key`), which their readers read with the
streams (`store/events.py`, `store/operator_reads.py`); all of them go by their TTL when the window
ends."""

from __future__ import annotations

from typing import Final, Literal, NamedTuple, cast

from realtime.store import keys
from realtime.store.events import Entry, stream_entries
from realtime.store.records import (
    SESSION_ENCODER,
    TASK_ENCODER,
    pack,
    pack_entries,
    summary,
    unpack_entries,
)
from realtime.store.redis_client import RedisClient, text, translated_errors
from realtime.store.sessions import SessionStore
from realtime.store.tenants import TenantStore
from state_machines.session import TERMINAL_STATES

# done (or nothing left to do: the session is gone); `moved`: a commit kept landing in between;
# `busy`: its outbox still holds LiveKit work, so it is compacted once that is carried out
Compacted = Literal["done", "missing", "moved", "busy"]

ATTEMPTS: Final = 3  # a commit between the read and the script: read again, this many times
REPACK_BATCH: Final = 100  # command outcomes compressed per round trip
MAX_BATCHES: Final = 10_000  # a bound on the loop; HSCAN ends long before on any real hash


class Streams(NamedTuple):
    """A session's entries of both streams (archived ones first), and the newest id of each
    stream as read (the script checks that neither moved)."""

    events: list[Entry]
    timeline: list[Entry]
    events_newest: str
    timeline_newest: str


class Compactor:
    """Rewrites an ended session to its summary, at the version it read."""

    def __init__(
        self,
        redis: RedisClient,
        sessions: SessionStore,
        tenants: TenantStore,
        *,
        usage_ttl_s: int,
    ) -> None:
        self._client = redis.client
        self._tenants = tenants
        self._usage_ttl_s = usage_ttl_s
        self._script = redis.scripts.compact
        self._repack_script = redis.scripts.repack
        self._sessions = sessions

    async def compact(self, session_id: str) -> Compacted:
        for _ in range(ATTEMPTS):
            loaded = await self._sessions.load(session_id)
            record, task = loaded.record, loaded.task
            if record is None or task is None:
                return "missing"
            if record.session.state not in TERMINAL_STATES:  # never armed for a live one
                return "done"
            # the release that followed the commit that ended it, once more: a process that
            # died between the two left the session's place taken and its usage uncounted
            ended_ms = await self._sessions.ended_ms(session_id)
            await self._tenants.release_ended(record, session_id, ended_ms, self._usage_ttl_s)
            kept = await self._streams(session_id)
            events, timeline = kept.events, kept.timeline
            async with translated_errors():
                reply = await self._script(
                    keys=[
                        keys.session_key(session_id),
                        keys.session_task_key(session_id),
                        keys.outbox_key(session_id),
                        keys.session_timers_key(session_id),
                        keys.timer_causes_key(session_id),
                        keys.events_key(session_id),
                        keys.timeline_key(session_id),
                        keys.archive_key(session_id),
                    ],
                    args=[
                        loaded.version,
                        pack(SESSION_ENCODER.encode(summary(record))),
                        pack(TASK_ENCODER.encode(task)),
                        kept.events_newest,
                        kept.timeline_newest,
                        *(
                            (
                                pack_entries(events),
                                pack_entries(timeline),
                                events[-1][0],
                                events[0][0],
                                events[0][1],
                            )
                            if events
                            else ("", "", "", "", "")
                        ),
                    ],
                )
            status = cast(Literal["ok", "moved", "busy"], text(reply[0]))
            if status == "busy":
                return "busy"
            if status == "ok":
                # this process's copy is the whole snapshot: read the summary when it is needed
                self._sessions.cache.drop(session_id)
                armed = [text(member) for member in reply[1:]]
                if armed:  # refused if they fired; out of the due index so they never do
                    async with translated_errors():
                        await self._client.zrem(keys.timers_due_key(), *armed)
                await self._repack(session_id)
                return "done"
        return "moved"

    async def _streams(self, session_id: str) -> Streams:
        """The event stream and the timeline, each with what an earlier compaction archived of
        it first (both streams are capped at about 1,000 entries, so this is bounded)."""
        pipe = self._client.pipeline(transaction=False)
        pipe.hmget(keys.archive_key(session_id), "events", "timeline")
        pipe.xrange(keys.events_key(session_id), "-", "+")
        pipe.xrange(keys.timeline_key(session_id), "-", "+")
        async with translated_errors():
            (archived_events, archived_timeline), events, timeline = await pipe.execute()
        new_events, new_timeline = stream_entries(events), stream_entries(timeline)
        return Streams(
            unpack_entries(archived_events or b"") + new_events,
            unpack_entries(archived_timeline or b"") + new_timeline,
            new_events[-1][0] if new_events else "",
            new_timeline[-1][0] if new_timeline else "",
        )

    async def _repack(self, session_id: str) -> None:
        """Every command outcome compressed in place, REPACK_BATCH at a time (a long session
        holds many)."""
        key = keys.commands_key(session_id)
        cursor = 0
        for _ in range(MAX_BATCHES):
            async with translated_errors():
                cursor, found = await self._client.hscan(key, cursor, count=REPACK_BATCH)
            pairs = [
                item
                for field, raw in found.items()
                if raw[:1] == b"{"
                for item in (field, pack(raw))
            ]
            if pairs:
                async with translated_errors():
                    await self._repack_script(keys=[key], args=pairs)
            if cursor == 0:
                return
