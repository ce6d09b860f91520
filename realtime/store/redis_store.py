"""The only module that talks to Redis (redis-py asyncio, or fakeredis as the embedded store).

Atomicity: the owner-side step of SendMessage (claim the message id, index the task) is one Lua
script on the owner's slot; the task itself is one SET on the task's slot. The index is written
first and read tolerantly (an id whose task is missing is skipped), so a crash between the two
steps leaves nothing a retry of the same message does not repair.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any, Final, NamedTuple

import redis.asyncio as aioredis
import redis.exceptions
from redis.asyncio.cluster import RedisCluster
from redis.crc import key_slot
from redis.maint_notifications import MaintNotificationsConfig

from realtime.errors import RpcError
from realtime.store import keys
from realtime.store.records import (
    EFFECT_DECODER,
    OUTCOME_DECODER,
    SESSION_DECODER,
    SESSION_ENCODER,
    TASK_DECODER,
    TASK_ENCODER,
    CommandOutcome,
    PendingEffect,
    SessionRecord,
    TaskRecord,
)
from realtime.store.scripts import Scripts

log = logging.getLogger(__name__)

CONNECTION_ERRORS: Final = (
    redis.exceptions.ConnectionError,
    redis.exceptions.TimeoutError,
    redis.exceptions.ClusterDownError,
    redis.exceptions.ReadOnlyError,  # a failover left us on a replica
    redis.exceptions.BusyLoadingError,
    redis.exceptions.TryAgainError,
    OSError,
)


def redis_unavailable() -> RpcError:
    return RpcError(
        "UpstreamUnavailable",
        "The state store (Redis) is unreachable; nothing was changed. Retry the request.",
        metadata={"service": "redis", "retryable": True},
    )


@contextlib.asynccontextmanager
async def translated_errors() -> AsyncIterator[None]:
    """Connection failures become -31012 (retryable, nothing stored)."""
    try:
        yield
    except CONNECTION_ERRORS as exc:
        log.warning("redis unavailable: %s", type(exc).__name__)
        raise redis_unavailable() from exc


class RedisStore:
    """Task storage and the shared Redis client."""

    def __init__(self, client: Any, *, embedded: bool = False) -> None:
        self.client = client
        self.embedded = embedded
        self.cluster = isinstance(client, RedisCluster)
        registered = Scripts.register(client)
        self._claim = registered.claim_message
        self._claim_create = registered.claim_create
        self._commit = registered.commit
        self._remember = registered.remember
        self._release = registered.release_lease
        self._renew = registered.renew_lease
        self._claim_timers = registered.claim_timers
        self._snapshot = registered.task_snapshot

    @property
    def can_block(self) -> bool:
        """Whether one blocking XREAD may cover many streams: not on Cluster (one slot per
        call) and not on the embedded store (it would only poll inside)."""
        return not (self.cluster or self.embedded)

    @classmethod
    def from_url(cls, url: str, *, cluster: bool = False, pool_size: int = 64) -> RedisStore:
        if cluster:
            return cls(RedisCluster.from_url(url, max_connections=pool_size))
        # maintenance notifications need RESP3, which we do not speak; left at redis-py's "auto",
        # the pool skips its check for connections the server closed (restart, idle timeout) and
        # hands them out, so each one failed a request with -31012 after Redis was back
        pool = aioredis.BlockingConnectionPool.from_url(
            url,
            max_connections=pool_size,
            timeout=5,
            maint_notifications_config=MaintNotificationsConfig(enabled=False),
        )
        return cls(aioredis.Redis.from_pool(pool))

    @classmethod
    def embedded_store(cls) -> RedisStore:
        """An in-process Redis-compatible store: neither durable nor shared between processes."""
        import fakeredis  # only loaded when no real Redis can be had

        return cls(fakeredis.FakeAsyncRedis(), embedded=True)

    async def aclose(self) -> None:
        await self.client.aclose()

    async def ping(self) -> bool:
        try:
            return bool(await self.client.ping())
        except CONNECTION_ERRORS:
            return False

    async def get_task(self, task_id: str) -> TaskRecord | None:
        async with translated_errors():
            raw = await self.client.get(keys.task_key(task_id))
        return None if raw is None else TASK_DECODER.decode(raw)

    async def claim_message(
        self, owner: str, message_id: str, task_id: str, *, score_ms: int, ttl_s: int
    ) -> str | None:
        """Bind `message_id` to `task_id` and index it; the earlier task id when already bound."""
        async with translated_errors():
            existing = await self._claim(
                keys=[keys.owner_message_key(owner, message_id), keys.owner_tasks_key(owner)],
                args=[task_id, ttl_s + keys.IDEMPOTENCY_GRACE_S, score_ms],
            )
        return None if existing is None else _text(existing)

    async def put_task(self, record: TaskRecord, *, ttl_s: int) -> None:
        """Write the task (its own slot), then refresh its place in the owner's index."""
        record.check_writable()
        pipe = self.client.pipeline(transaction=False)
        pipe.set(keys.task_key(record.task.id), TASK_ENCODER.encode(record), ex=ttl_s)
        pipe.zadd(keys.owner_tasks_key(record.owner), {record.task.id: record.status_ms})
        async with translated_errors():
            await pipe.execute()

    async def owner_tasks(self, owner: str, *, newer_than_ms: int) -> list[TaskRecord]:
        """Every live task of `owner` (index entries older than the retention are pruned)."""
        index = keys.owner_tasks_key(owner)
        async with translated_errors():
            await self.client.zremrangebyscore(index, "-inf", f"({newer_than_ms}")
            # the newest LIST_LIMIT by status time: bounds the memory and time of one ListTasks
            ids: Sequence[bytes] = await self.client.zrevrange(index, 0, keys.LIST_LIMIT - 1)
            if not ids:
                return []
            pipe = self.client.pipeline(transaction=False)
            for task_id in ids:
                pipe.get(keys.task_key(_text(task_id)))
            raws = await pipe.execute()
        records = [TASK_DECODER.decode(raw) for raw in raws if raw is not None]
        return [record for record in records if record.owner == owner]


class Loaded(NamedTuple):
    """A session read in one round trip, with the outcome of the command being retried."""

    record: SessionRecord | None
    version: int
    outcome: CommandOutcome | None
    task: TaskRecord | None
    outbox: list[PendingEffect] | None = None  # only when asked for (GetSession)


class Committed(NamedTuple):
    status: str  # "ok" | "replay" | "conflict"
    version: int
    outcome: CommandOutcome | None


class SessionStore:
    """Session snapshots, command outcomes, events and the outbox (one slot per session)."""

    def __init__(self, store: RedisStore) -> None:
        self.client = store.client
        self.cluster = store.cluster
        self._commit = store._commit
        self._renew = store._renew
        self._remember = store._remember
        self._claim_create = store._claim_create
        self._release = store._release
        self._claim_timers = store._claim_timers

    async def load(
        self, session_id: str, command_id: str | None = None, *, with_outbox: bool = False
    ) -> Loaded:
        """Snapshot, version, task and (when retrying) the stored outcome: one round trip."""
        pipe = self.client.pipeline(transaction=False)
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
        return Loaded(
            None if snapshot is None else SESSION_DECODER.decode(snapshot),
            int(version or 0),
            None if outcome is None else OUTCOME_DECODER.decode(outcome),
            None if task is None else TASK_DECODER.decode(task),
            outbox,
        )

    async def outcome(self, session_id: str, command_id: str) -> CommandOutcome | None:
        async with translated_errors():
            raw = await self.client.hget(keys.commands_key(session_id), command_id)
        return None if raw is None else OUTCOME_DECODER.decode(raw)

    async def remember(
        self, session_id: str, *, expected_version: int, command_id: str, outcome: bytes, ttl_s: int
    ) -> Committed:
        """Store the outcome of a command that changed nothing (no version bump, no event)."""
        async with translated_errors():
            reply = await self._remember(
                keys=[keys.session_key(session_id), keys.commands_key(session_id)],
                args=[command_id, expected_version, outcome, ttl_s],
            )
        status, value = _text(reply[0]), reply[1]
        if status == "replay":
            return Committed(status, 0, OUTCOME_DECODER.decode(value))
        return Committed(status, int(value), None)

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
    ) -> tuple[str, str | None]:
        """('ok'|'message'|'client'|'limit', what the earlier claim stored)."""
        async with translated_errors():
            reply = await self._claim_create(
                keys=[
                    keys.owner_message_key(owner, message_id),
                    keys.owner_client_session_key(owner, client_session_id),
                    keys.owner_live_sessions_key(owner),
                    keys.owner_tasks_key(owner),
                ],
                args=[
                    task_id,
                    session_id,
                    digest,
                    ttl_s + keys.IDEMPOTENCY_GRACE_S,
                    score_ms,
                    limit,
                ],
            )
        status = _text(reply[0])
        return status, (_text(reply[1]) if len(reply) > 1 else None)

    async def live_sessions(self, owner: str) -> list[str]:
        async with translated_errors():
            members = await self.client.zrange(keys.owner_live_sessions_key(owner), 0, -1)
        return [_text(member) for member in members]

    async def forget_live(self, owner: str, session_ids: Sequence[str]) -> None:
        if session_ids:
            async with translated_errors():
                await self.client.zrem(keys.owner_live_sessions_key(owner), *session_ids)

    async def commit(
        self,
        session_id: str,
        *,
        expected_version: int,
        record: SessionRecord,
        task: TaskRecord,
        command_id: str | None,
        outcome: bytes,
        events: Sequence[bytes],
        effects: Sequence[tuple[str, PendingEffect]],
        ttl_s: int,
        due_ms: int,
        timers: Mapping[str, int] | None = None,
    ) -> Committed:
        """One atomic script on the session's slot; the cross-slot outbox index rides along in
        the same round trip (written idempotently: an index entry without effects is harmless)."""
        record.check_writable()
        args: list[Any] = [
            expected_version,
            SESSION_ENCODER.encode(record),
            TASK_ENCODER.encode(task),
            command_id or "",
            outcome,
            ttl_s,
            keys.EVENTS_MAXLEN,
            len(events),
            *events,
        ]
        for effect_id, effect in effects:
            args.extend((effect_id, SESSION_ENCODER.encode(effect)))
        script_keys = [
            keys.session_key(session_id),
            keys.session_task_key(session_id),
            keys.commands_key(session_id),
            keys.events_key(session_id),
            keys.outbox_key(session_id),
        ]
        if self.cluster:
            # redis-py's cluster pipeline refuses scripts: the due entries, the commit, then the
            # owner index (idempotent; a later commit of the task refreshes it)
            async with translated_errors():
                await self._arm(session_id, effects, due_ms, timers, self.client)
                reply = await self._commit(keys=script_keys, args=args)
                await self.client.zadd(
                    keys.owner_tasks_key(record.owner), {task.task.id: task.status_ms}
                )
        else:
            # `async with`: a pipeline with scripts checks them (SCRIPT EXISTS) before the
            # try/finally in which redis-py gives its connection back, so a connection lost right
            # there would leak a pooled connection for good; leaving the block always resets it
            async with self.client.pipeline(transaction=False) as pipe:
                await self._arm(session_id, effects, due_ms, timers, pipe)
                await self._commit(keys=script_keys, args=args, client=pipe)
                pipe.zadd(keys.owner_tasks_key(record.owner), {task.task.id: task.status_ms})
                async with translated_errors():
                    replies = await pipe.execute()
                reply = replies[-2]
        status, value = _text(reply[0]), reply[1]
        if status == "replay":
            return Committed(status, 0, OUTCOME_DECODER.decode(value))
        return Committed(status, int(value), None)

    @staticmethod
    async def _arm(
        session_id: str,
        effects: Sequence[tuple[str, PendingEffect]],
        due_ms: int,
        timers: Mapping[str, int] | None,
        target: Any,
    ) -> None:
        """The cross-slot due entries of a commit, written *before* it: if the commit then fails
        or conflicts they are harmless (an empty outbox is dropped from the index, a stale timer
        is refused), while a commit whose indexes were lost could never be found again."""
        for write in (
            target.zadd(keys.outbox_due_key(), {session_id: due_ms}) if effects else None,
            target.zadd(keys.timers_due_key(), dict(timers)) if timers else None,
        ):
            if write is not None and asyncio.iscoroutine(write):
                await write

    async def pending(self, session_id: str) -> list[tuple[str, PendingEffect]]:
        """The session's outbox in creation order (effect ids sort by commit)."""
        async with translated_errors():
            entries = await self.client.hgetall(keys.outbox_key(session_id))
        return sorted(
            (_text(effect_id), EFFECT_DECODER.decode(raw)) for effect_id, raw in entries.items()
        )

    async def done(self, session_id: str, effect_id: str) -> None:
        async with translated_errors():
            await self.client.hdel(keys.outbox_key(session_id), effect_id)

    async def retry_later(self, session_id: str, effect_id: str, effect: PendingEffect) -> None:
        async with translated_errors():
            await self.client.hset(
                keys.outbox_key(session_id), effect_id, SESSION_ENCODER.encode(effect)
            )

    async def schedule(self, session_id: str, due_ms: int | None) -> None:
        """Look at the session's outbox again at `due_ms` (None: nothing left to do)."""
        async with translated_errors():
            if due_ms is None:
                await self.client.zrem(keys.outbox_due_key(), session_id)
            else:
                await self.client.zadd(keys.outbox_due_key(), {session_id: due_ms})

    async def lease(self, session_id: str, token: str, ttl_ms: int) -> bool:
        """Take the session's runner lease unless another runner holds it."""
        async with translated_errors():
            return bool(
                await self.client.set(keys.runner_lease_key(session_id), token, nx=True, px=ttl_ms)
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

    async def claim_timers(self, now_ms: int, lease_ms: int, limit: int = 50) -> list[str]:
        """Due timers, each now leased to the caller until `now_ms + lease_ms`."""
        async with translated_errors():
            members = await self._claim_timers(
                keys=[keys.timers_due_key()], args=[now_ms, now_ms + lease_ms, limit]
            )
        return [_text(member) for member in members]

    async def timer_members(self, limit: int) -> list[str]:
        """Up to `limit` armed timers, in no order (ZSCAN: a timer armed for the whole scan is
        seen, whatever the others do meanwhile)."""
        found: list[str] = []
        async with translated_errors():
            async for member, _ in self.client.zscan_iter(keys.timers_due_key(), count=500):
                found.append(_text(member))
                if len(found) >= limit:
                    break
        return found

    async def timer_done(self, member: str) -> None:
        async with translated_errors():
            await self.client.zrem(keys.timers_due_key(), member)

    async def due(self, now_ms: int, limit: int = 50) -> list[str]:
        async with translated_errors():
            members = await self.client.zrangebyscore(
                keys.outbox_due_key(), "-inf", now_ms, start=0, num=limit
            )
        return [_text(member) for member in members]


class DutyLease:
    """A lease on one duty that a single worker of all replicas carries out (the reconciler):
    SET NX PX with the holder's token; renewed and released only while the token is ours, like
    the runner's per-session lease."""

    def __init__(self, sessions: SessionStore, key: str) -> None:
        self.client, self.key = sessions.client, key
        self._renew, self._release = sessions._renew, sessions._release

    async def hold(self, token: str, ttl_ms: int) -> bool:
        """Renew the lease if `token` holds it, else take it if nobody does."""
        async with translated_errors():
            if await self._renew(keys=[self.key], args=[token, ttl_ms]):
                return True
            return bool(await self.client.set(self.key, token, nx=True, px=ttl_ms))

    async def release(self, token: str) -> None:
        async with translated_errors():
            await self._release(keys=[self.key], args=[token])


Entry = tuple[str, bytes]  # (stream entry id, the entry's `e` field: the event JSON)


class Snapshot(NamedTuple):
    """A task with the ids of the newest and oldest entries of its event stream, read at once."""

    task: TaskRecord | None
    newest: str | None
    oldest: Entry | None


class EventStore:
    """Reads of the per-session event streams (written only by the commit script)."""

    def __init__(self, store: RedisStore) -> None:
        self.client = store.client
        self.cluster = store.cluster
        self.can_block = store.can_block
        self._snapshot = store._snapshot

    async def snapshot(self, task_id: str) -> Snapshot:
        """The task and its stream's newest and oldest entry ids, atomically (one slot)."""
        tag = keys.tag_for_task(task_id)
        async with translated_errors():
            task, newest, oldest, event = await self._snapshot(
                keys=[keys.task_key(task_id), keys.events_key(tag)], args=[]
            )
        return Snapshot(
            None if task is None else TASK_DECODER.decode(task),
            None if newest is None else _text(newest),
            None if oldest is None else (_text(oldest), bytes(event)),
        )

    async def after(
        self, stream: str, after_id: str, *, until: str = "+", count: int = 1000
    ) -> list[Entry]:
        """Entries of `stream` after `after_id` (exclusive) up to `until` (inclusive)."""
        async with translated_errors():
            entries = await self.client.xrange(stream, _next_id(after_id), until, count=count)
        return [_entry(entry) for entry in entries]

    async def entry(self, stream: str, entry_id: str) -> Entry | None:
        async with translated_errors():
            entries = await self.client.xrange(stream, entry_id, entry_id, count=1)
        return _entry(entries[0]) if entries else None

    async def read(
        self, cursors: Mapping[str, str], *, block_ms: int | None, count: int
    ) -> list[tuple[str, list[Entry]]]:
        """New entries of each stream after its cursor. One XREAD for all of them (blocking up
        to `block_ms` until one has news) on a single Redis; on Cluster one non-blocking XREAD
        per slot, since a call may not span slots (`block_ms` is ignored there)."""
        if not cursors:
            return []
        async with translated_errors():
            if not self.cluster:
                replies = await self.client.xread(dict(cursors), count=count, block=block_ms)
            else:
                groups = await asyncio.gather(
                    *(
                        self.client.xread({s: cursors[s] for s in group}, count=count)
                        for group in slot_groups(list(cursors))
                    )
                )
                replies = [reply for group in groups for reply in group or ()]
        return [
            (_text(stream), [_entry(entry) for entry in entries])
            for stream, entries in replies or ()
        ]


def slot_groups(streams: Sequence[str]) -> list[list[str]]:
    """Streams grouped by Cluster slot (what one XREAD may cover on Cluster)."""
    groups: dict[int, list[str]] = {}
    for stream in streams:
        groups.setdefault(key_slot(stream.encode()), []).append(stream)
    return list(groups.values())


def _entry(entry: Any) -> Entry:
    entry_id, fields = entry
    return _text(entry_id), bytes(fields.get(b"e") or b"")


def _next_id(entry_id: str) -> str:
    """The smallest stream id after `entry_id` (XRANGE's start is inclusive)."""
    ms, _, seq = entry_id.partition("-")
    return f"{ms}-{int(seq or 0) + 1}"


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value
