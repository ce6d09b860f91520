"""Sessions: snapshots, command outcomes, the outbox and runner leases (their timers are
`store/timers.py`'s); every key of one session on its slot (`{<sessionId>}`), so each commit
is one script that runs unchanged on Redis Cluster. The cross-slot indexes (due effects, due
timers, an owner's tasks and live sessions) are written idempotently next to a commit, never
inside it.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, NamedTuple, cast

from realtime.store import keys
from realtime.store.cache import SessionCache
from realtime.store.indexes import due_entries, listings, task_listing
from realtime.store.records import (
    EFFECT_DECODER,
    SESSION_ENCODER,
    TASK_ENCODER,
    CommandOutcome,
    Loaded,
    PendingEffect,
    SessionRecord,
    TaskRecord,
    decode_outcome,
    decode_session,
    decode_task,
)
from realtime.store.redis_client import RedisClient, text, translated_errors
from realtime.telemetry import Telemetry

log = logging.getLogger(__name__)

# what the commit and remember scripts answer (`lua/commit.lua`, `lua/remember.lua`)
CommitStatus = Literal["ok", "replay", "conflict"]
# what the create claim answers (`lua/claim_create.lua`): claimed now, or refused because the
# messageId or the clientSessionId was claimed before, or the owner is at the live-session limit
ClaimStatus = Literal["ok", "message", "client", "limit", "tasks"]


class Committed(NamedTuple):
    """What a commit (or remember) did: `ok` at the new version; `conflict` with the current
    version (nothing written); `replay` with the command's stored outcome (nothing written).
    `ended_ms`: for the commit that ended the session, the Redis time it stored as its end."""

    status: CommitStatus
    version: int
    outcome: CommandOutcome | None
    ended_ms: int | None = None


@dataclass(frozen=True, slots=True)
class Deliveries:
    """A commit's session events for the app's backend (profile §21): (seq, body) pairs, at
    most `kept` of them held per session, for `ttl_s`; none unless they are configured. The
    seqs in `lasting` are always kept (lifecycle and terminal events: decision 162)."""

    items: Sequence[tuple[int, bytes]] = ()
    kept: int = 0
    ttl_s: int = 0
    lasting: frozenset[int] = frozenset()


@dataclass(frozen=True, slots=True)
class Commit:
    """Everything one commit writes (`engine/entries.py` computes it): the snapshot at
    `expected_version + 1`, the task, a command's id and stored outcome, the event entries, the
    outbox entries with the time their retry is due, the timers it arms, and `traceparent`,
    the span of the committing call (the armed timers name it). TTLs (profile §20): `ttl_s`
    the snapshot, task and outbox; `window_s` the outcomes, event stream and timeline."""

    session_id: str
    expected_version: int
    record: SessionRecord
    task: TaskRecord
    events: Sequence[bytes]
    ttl_s: int
    window_s: int
    now_ms: int
    command_id: str | None = None
    outcome: bytes = b""
    effects: Sequence[tuple[str, PendingEffect]] = ()
    due_ms: int = 0
    timers: Mapping[str, int] | None = None
    traceparent: str | None = None
    # False: a command that applied without a change; only its outcome is stored (no version
    # bump, no event), so a retry replays it
    changes: bool = True
    context: bytes | None = None  # the agent's saved context, written beside the snapshot
    ends: bool = False  # the session is over from this commit: its end's Redis time is stored
    deliveries: Deliveries = field(default_factory=Deliveries)


class Claimed(NamedTuple):
    """What a create claim did; `earlier` is what the earlier claim stored (`message`: its
    taskId, `client`: "taskId digest"), or for `tasks` (the owner holds as many tasks as it
    may) when the first of them expires, in ms ("" when none will)."""

    status: ClaimStatus
    earlier: str | None


class SessionStore:
    """Session snapshots, command outcomes, events and the outbox (one slot per session)."""

    def __init__(
        self, redis: RedisClient, telemetry: Telemetry | None = None, *, cache_entries: int = 0
    ) -> None:
        self._telemetry = telemetry or Telemetry(None)  # a client span per commit script
        self.cache = SessionCache(cache_entries)
        self._store, self._client = redis, redis.client
        self._cluster = redis.cluster
        scripts = redis.scripts
        self._commit = scripts.commit
        self._renew = scripts.renew_lease
        self._remember = scripts.remember
        self._claim_create = scripts.claim_create
        self._unclaim_create = scripts.unclaim_create
        self._release = scripts.release_lease

    @property
    def redis(self) -> RedisClient:
        return self._store

    def recent(self, session_id: str, command_id: str | None = None) -> Loaded | None:
        """The session as this process last read or committed it, if it kept it (no round
        trip; possibly stale: decide on it only what a version-checked commit writes). None
        too for a command this process committed or replayed lately: a retry, which a read
        answers with its outcome."""
        if command_id is not None and self.cache.seen(session_id, command_id):
            return None
        found = self.cache.get(session_id)
        if found is None:
            return None
        return Loaded(found.record, found.version, None, found.task, cached=True)

    async def load(
        self, session_id: str, command_id: str | None = None, *, with_outbox: bool = False
    ) -> Loaded:
        """Snapshot, version, task and (when retrying) the stored outcome: one round trip."""
        pipe = self._client.pipeline(transaction=False)
        pipe.hmget(keys.session_key(session_id), "v", "s")
        pipe.get(keys.session_task_key(session_id))
        if command_id is not None:
            pipe.hget(keys.commands_key(session_id), command_id)
        if with_outbox:
            pipe.hvals(keys.outbox_key(session_id))
        async with translated_errors():
            replies = await pipe.execute()
        (version, snapshot), task = replies[0], replies[1]
        outcome = replies[2] if command_id is not None else None
        outbox = [EFFECT_DECODER.decode(raw) for raw in replies[-1]] if with_outbox else None
        loaded = Loaded(
            None if snapshot is None else decode_session(snapshot),
            int(version or 0),
            None if outcome is None else decode_outcome(outcome),
            None if task is None else decode_task(task),
            outbox,
        )
        self.cache.keep(session_id, loaded.record, loaded.version, loaded.task)
        return loaded

    async def saved_context(self, session_id: str) -> bytes | None:
        """The context the session's agent saved for its successor (profile §23), if any."""
        async with translated_errors():
            raw = await self._client.hget(keys.session_key(session_id), "x")
        return None if raw is None else bytes(raw)

    async def ended_ms(self, session_id: str) -> int | None:
        """The Redis time the session's end was committed at (None: not over, or it ended
        before this was stored)."""
        async with translated_errors():
            raw = await self._client.hget(keys.session_key(session_id), "e")
        return None if raw is None else int(raw)

    async def outcome(self, session_id: str, command_id: str) -> CommandOutcome | None:
        async with translated_errors():
            raw = await self._client.hget(keys.commands_key(session_id), command_id)
        return None if raw is None else decode_outcome(raw)

    async def claim_create(
        self,
        owner: str,
        *,
        message_id: str,
        client_session_id: str,
        task_id: str,
        session_id: str,
        digest: str,
        score_ms: int,
        ttl_s: int,
        limit: int,
        task_limit: int,
    ) -> Claimed:
        """Claim the create once per messageId and per clientSessionId, within `limit` live
        sessions and `task_limit` held tasks."""
        async with translated_errors():
            reply = await self._claim_create(
                keys=[
                    keys.owner_message_key(owner, message_id),
                    keys.owner_client_session_key(owner, client_session_id),
                    keys.owner_live_sessions_key(owner),
                    *keys.owner_task_index_keys(owner),
                ],
                args=[
                    task_id,
                    session_id,
                    digest,
                    ttl_s + keys.IDEMPOTENCY_GRACE_S,
                    score_ms,
                    limit,
                    score_ms,
                    ttl_s * 1000,
                    task_limit,
                ],
            )
        status = cast(ClaimStatus, text(reply[0]))
        return Claimed(status, text(reply[1]) if len(reply) > 1 else None)

    async def unclaim_create(
        self, owner: str, *, message_id: str, client_session_id: str, task_id: str, session_id: str
    ) -> None:
        """Take back a create's claim (`lua/unclaim_create.lua`)."""
        async with translated_errors():
            await self._unclaim_create(
                keys=[
                    keys.owner_message_key(owner, message_id),
                    keys.owner_client_session_key(owner, client_session_id),
                    keys.owner_live_sessions_key(owner),
                    keys.owner_tasks_key(owner),
                    keys.owner_task_info_key(owner),
                ],
                args=[task_id, session_id],
            )

    async def live_sessions(self, owner: str) -> list[str]:
        async with translated_errors():
            members = await self._client.zrange(keys.owner_live_sessions_key(owner), 0, -1)
        return [text(member) for member in members]

    async def forget_live(self, owner: str, session_ids: Sequence[str]) -> None:
        if session_ids:
            async with translated_errors():
                await self._client.zrem(keys.owner_live_sessions_key(owner), *session_ids)

    async def commit(self, commit: Commit) -> Committed:
        """One atomic script on the session's slot; the cross-slot indexes (due effects and
        timers, the owner's tasks, every session by its last commit) ride along in the same
        round trip, written idempotently: an index entry whose commit lost its version race is
        harmless (an empty outbox is dropped, a stale timer refused, a session listed by the
        time it was last touched)."""
        c = commit
        if not c.changes:  # a command that applied as a no-op: its outcome alone, one script
            with self._telemetry.redis_span("remember", c.session_id):
                async with translated_errors():
                    reply = await self._remember(
                        keys=[keys.session_key(c.session_id), keys.commands_key(c.session_id)],
                        args=[c.command_id, c.expected_version, c.outcome, c.window_s],
                    )
            remembered = _committed(reply)
            if remembered.status == "conflict":
                self.cache.drop(c.session_id)  # its answer has no snapshot: read it again
            elif c.command_id is not None:
                self.cache.saw(c.session_id, c.command_id)
            return remembered
        c.record.check_writable()
        args: list[Any] = [
            c.expected_version,
            SESSION_ENCODER.encode(c.record),
            TASK_ENCODER.encode(c.task),
            c.command_id or "",
            c.outcome,
            c.ttl_s,
            keys.EVENTS_MAXLEN,
            c.window_s,
            len(c.events),
            len(c.deliveries.items),
            c.deliveries.kept,
            c.deliveries.ttl_s,
            c.context if c.context is not None else b"",
            "1" if c.ends else "0",
            *c.events,
        ]
        for seq, body in c.deliveries.items:
            args.extend((seq, body, "1" if seq in c.deliveries.lasting else "0"))
        for effect_id, effect in c.effects:
            args.extend((effect_id, SESSION_ENCODER.encode(effect)))
        script_keys = [
            keys.session_key(c.session_id),
            keys.session_task_key(c.session_id),
            keys.commands_key(c.session_id),
            keys.events_key(c.session_id),
            keys.outbox_key(c.session_id),
            keys.timeline_key(c.session_id),
            keys.deliveries_key(c.session_id),
            keys.delivery_state_key(c.session_id),
        ]
        sends = c.now_ms if c.deliveries.items else None  # session events: due now
        armed = due_entries(
            c.session_id,
            c.effects,
            c.due_ms,
            c.timers,
            c.ttl_s,
            c.traceparent,
            deliveries_due_ms=sends,
        )
        owned = task_listing(c.record.owner, c.task)
        listed = listings(
            c.record,
            c.session_id,
            c.now_ms,
            c.ttl_s,
            deliveries_due_ms=sends,
        )
        with self._telemetry.redis_span("commit", c.session_id):
            reply = await self._send(armed, script_keys, args, [*owned, *listed])
        committed = _committed(reply)
        if committed.status == "ok" and int(reply[2]):
            log.warning(
                "session %s: %s session events not kept: a session keeps %d at most "
                "(AIM_EVENTS_MAX_PER_SESSION); the oldest waiting went, its lifecycle events "
                "stay",
                c.session_id,
                reply[2],
                c.deliveries.kept,
            )
        if c.command_id is not None and committed.status != "conflict":
            self.cache.saw(c.session_id, c.command_id)
        if committed.status == "ok":
            self.cache.keep(c.session_id, c.record, committed.version, c.task)
        elif committed.status == "conflict":  # the session as it is now: decide again on it
            record, task = reply[2], reply[3]
            self.cache.keep(
                c.session_id,
                decode_session(record) if record else None,
                committed.version,
                decode_task(task) if task else None,
            )
        return committed

    async def _send(
        self, armed: list[Any], script_keys: list[str], args: list[Any], indexes: list[Any]
    ) -> Any:
        """The commit script's reply; the due entries before it, the indexes after it."""
        if self._cluster:
            # redis-py's cluster pipeline refuses scripts: the due entries, the commit, then the
            # owner and operations indexes (idempotent; a later commit refreshes them). The due
            # entries go *before* the commit: if it then fails or conflicts they are harmless (an
            # empty outbox is dropped from the index, a stale timer is refused), while a commit
            # whose indexes were lost could never be found again.
            async with translated_errors():
                for command in armed:
                    await self._client.execute_command(*command)
                reply = await self._commit(keys=script_keys, args=args)
                for command in indexes:
                    await self._client.execute_command(*command)
            return reply
        # one round trip: the due entries, the commit, the indexes (all idempotent but the
        # commit, which a NOSCRIPT answer shows did not run)
        commands = [
            *armed,
            ("EVALSHA", self._commit.sha, len(script_keys), *script_keys, *args),
            *indexes,
        ]
        return (await self._store.pipelined(commands))[len(armed)]

    async def pending(self, session_id: str) -> list[tuple[str, PendingEffect]]:
        """The session's outbox in creation order (effect ids sort by commit)."""
        async with translated_errors():
            entries = await self._client.hgetall(keys.outbox_key(session_id))
        return sorted(
            (text(effect_id), EFFECT_DECODER.decode(raw)) for effect_id, raw in entries.items()
        )

    async def done(
        self, session_id: str, effect_id: str, noted: bytes | None = None, ttl_s: int = 0
    ) -> None:
        """Forget a carried-out effect; `noted` (a timeline entry: the LiveKit call's result)
        is written with it, on the session's slot, in the same round trip."""
        write = ("HDEL", keys.outbox_key(session_id), effect_id)
        await self._outbox_write(session_id, write, noted, ttl_s)

    async def retry_later(
        self,
        session_id: str,
        effect_id: str,
        effect: PendingEffect,
        noted: bytes | None = None,
        ttl_s: int = 0,
    ) -> None:
        """Keep a failed effect for a retry; `noted` as for `done`."""
        write = ("HSET", keys.outbox_key(session_id), effect_id, SESSION_ENCODER.encode(effect))
        await self._outbox_write(session_id, write, noted, ttl_s)

    async def _outbox_write(
        self, session_id: str, write: tuple[Any, ...], noted: bytes | None, ttl_s: int
    ) -> None:
        async with translated_errors():
            if noted is None:
                await self._client.execute_command(*write)
                return
            pipe = self._client.pipeline(transaction=False)
            pipe.execute_command(*write)
            stream = keys.timeline_key(session_id)
            pipe.xadd(stream, {"e": noted}, maxlen=keys.TIMELINE_MAXLEN, approximate=True)
            pipe.expire(stream, ttl_s, nx=True)  # as `TimelineStore.append` does
            await pipe.execute()

    async def schedule(self, session_id: str, due_ms: int | None) -> None:
        """Look at the session's outbox again at `due_ms` (None: nothing left to do)."""
        async with translated_errors():
            if due_ms is None:
                await self._client.zrem(keys.outbox_due_key(), session_id)
            else:
                await self._client.zadd(keys.outbox_due_key(), {session_id: due_ms})

    async def lease(self, session_id: str, token: str, ttl_ms: int) -> bool:
        """Take the session's runner lease unless another runner holds it."""
        async with translated_errors():
            return bool(
                await self._client.set(keys.runner_lease_key(session_id), token, nx=True, px=ttl_ms)
            )

    async def renew(self, session_id: str, token: str, ttl_ms: int) -> bool:
        """Extend our lease; False when it ran out and another runner may hold it."""
        async with translated_errors():
            return bool(
                await self._renew(keys=[keys.runner_lease_key(session_id)], args=[token, ttl_ms])
            )

    async def release(self, session_id: str, token: str) -> None:
        async with translated_errors():
            await self._release(keys=[keys.runner_lease_key(session_id)], args=[token])

    async def due(self, now_ms: int, limit: int = 50) -> list[str]:
        async with translated_errors():
            members = await self._client.zrangebyscore(
                keys.outbox_due_key(), "-inf", now_ms, start=0, num=limit
            )
        return [text(member) for member in members]


def _committed(reply: Any) -> Committed:
    status = cast(CommitStatus, text(reply[0]))
    if status == "replay":
        return Committed(status, 0, decode_outcome(reply[1]))
    ended = reply[3] if status == "ok" and len(reply) > 3 else None  # remember: no end
    return Committed(status, int(reply[1]), None, int(ended) if ended else None)
