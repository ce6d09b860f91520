"""Compaction of ended sessions (profile §20): `AIM_COMPACT_AFTER_S` after a session ended, a
timer (armed by the commit that ended it, fired by a worker) rewrites it to what GetTask,
GetSession and the operations listing still show: the final summary (`records.summary`) and
the task, both compressed, with the session's armed timers gone. Its command outcomes, event
stream and timeline are not touched: they go by their TTL when the replay window ends."""

from __future__ import annotations

from typing import Final, Literal, cast

from realtime.store import keys
from realtime.store.records import SESSION_ENCODER, TASK_ENCODER, pack, summary
from realtime.store.redis_client import RedisClient, text, translated_errors
from realtime.store.sessions import SessionStore
from state_machines.session import TERMINAL_STATES

# done (or nothing left to do: the session is gone); `moved`: a commit kept landing in between;
# `busy`: its outbox still holds LiveKit work, so it is compacted once that is carried out
Compacted = Literal["done", "missing", "moved", "busy"]

ATTEMPTS: Final = 3  # a commit between the read and the script: read again, this many times


class Compactor:
    """Rewrites an ended session to its summary, at the version it read."""

    def __init__(self, redis: RedisClient, sessions: SessionStore) -> None:
        self._client = redis.client
        self._script = redis.scripts.compact
        self._sessions = sessions

    async def compact(self, session_id: str) -> Compacted:
        for _ in range(ATTEMPTS):
            loaded = await self._sessions.load(session_id)
            record, task = loaded.record, loaded.task
            if record is None or task is None:
                return "missing"
            if record.session.state not in TERMINAL_STATES:  # never armed for a live one
                return "done"
            async with translated_errors():
                reply = await self._script(
                    keys=[
                        keys.session_key(session_id),
                        keys.session_task_key(session_id),
                        keys.outbox_key(session_id),
                        keys.session_timers_key(session_id),
                        keys.timer_causes_key(session_id),
                    ],
                    args=[
                        loaded.version,
                        pack(SESSION_ENCODER.encode(summary(record))),
                        pack(TASK_ENCODER.encode(task)),
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
                return "done"
        return "moved"
