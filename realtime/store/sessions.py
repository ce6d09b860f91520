"""Sessions: snapshots, command outcomes, the outbox, runner leases and timers; every key of one
session on its slot (`{<sessionId>}`), so each commit is one script that runs unchanged on Redis
Cluster. The cross-slot indexes (due effects, due timers, an owner's tasks and live sessions) are
written idempotently next to a commit, never inside it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal, NamedTuple, cast

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
from realtime.store.redis_client import RedisClient, text, translated_errors

# what the commit and remember scripts answer (`lua/commit.lua`, `lua/remember.lua`)
CommitStatus = Literal["ok", "replay", "conflict"]
# what the create claim answers (`lua/claim_create.lua`): claimed now, or refused because the
# messageId or the clientSessionId was claimed before, or the owner is at the live-session limit
ClaimStatus = Literal["ok", "message", "client", "limit"]


class Loaded(NamedTuple):
    """A session read in one round trip, with the outcome of the command being retried."""

    record: SessionRecord | None
    version: int
    outcome: CommandOutcome | None
    task: TaskRecord | None
    outbox: list[PendingEffect] | None = None  # only when asked for (GetSession)


class Committed(NamedTuple):
    """What a commit (or remember) did: `ok` at the new version; `conflict` with the current
    version (nothing written); `replay` with the command's stored outcome (nothing written)."""

    status: CommitStatus
    version: int
    outcome: CommandOutcome | None


class Claimed(NamedTuple):
    """What a create claim did; `earlier` is what the earlier claim stored (`message`: its
    taskId, `client`: "taskId digest")."""

    status: ClaimStatus
    earlier: str | None


def _score_pairs(members: Mapping[str, int]) -> list[Any]:
    """ZADD's arguments for `members` (member → score): score, member, score, member …"""
    return [item for member, score in members.items() for item in (score, member)]


class SessionStore:
    """Session snapshots, command outcomes, events and the outbox (one slot per session)."""

    def __init__(self, redis: RedisClient) -> None:
        self._store = redis
        self._client = redis.client
        self._cluster = redis.cluster
        scripts = redis.scripts
        self._commit = scripts.commit
        self._renew = scripts.renew_lease
        self._remember = scripts.remember
        self._claim_create = scripts.claim_create
        self._release = scripts.release_lease
        self._claim_timers = scripts.claim_timers

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
        return Loaded(
            None if snapshot is None else SESSION_DECODER.decode(snapshot),
            int(version or 0),
            None if outcome is None else OUTCOME_DECODER.decode(outcome),
            None if task is None else TASK_DECODER.decode(task),
            outbox,
        )

    async def outcome(self, session_id: str, command_id: str) -> CommandOutcome | None:
        async with translated_errors():
            raw = await self._client.hget(keys.commands_key(session_id), command_id)
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
        return _committed(reply)

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
    ) -> Claimed:
        """Claim the create once per messageId and per clientSessionId, within `limit`."""
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
        status = cast(ClaimStatus, text(reply[0]))
        return Claimed(status, text(reply[1]) if len(reply) > 1 else None)

    async def live_sessions(self, owner: str) -> list[str]:
        async with translated_errors():
            members = await self._client.zrange(keys.owner_live_sessions_key(owner), 0, -1)
        return [text(member) for member in members]

    async def forget_live(self, owner: str, session_ids: Sequence[str]) -> None:
        if session_ids:
            async with translated_errors():
                await self._client.zrem(keys.owner_live_sessions_key(owner), *session_ids)

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
        now_ms: int = 0,
        cause: str | None = None,
    ) -> Committed:
        """One atomic script on the session's slot; the cross-slot indexes (due effects and
        timers, the owner's tasks, every session by its last commit at `now_ms`) ride along in
        the same round trip, written idempotently: an index entry whose commit lost its version
        race is harmless (an empty outbox is dropped, a stale timer refused, a session listed
        by the time it was last touched). `cause` names the committing span for the timers it
        arms."""
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
        if self._cluster:
            # redis-py's cluster pipeline refuses scripts: the due entries, the commit, then the
            # owner and operations indexes (idempotent; a later commit refreshes them). The due
            # entries go *before* the commit: if it then fails or conflicts they are harmless (an
            # empty outbox is dropped from the index, a stale timer is refused), while a commit
            # whose indexes were lost could never be found again.
            async with translated_errors():
                for command in _armed(session_id, effects, due_ms, timers, ttl_s, cause):
                    await self._client.execute_command(*command)
                reply = await self._commit(keys=script_keys, args=args)
                await self._client.zadd(
                    keys.owner_tasks_key(record.owner), {task.task.id: task.status_ms}
                )
                for command in _listed(record, session_id, now_ms, ttl_s):
                    await self._client.execute_command(*command)
        else:
            # one round trip: the due entries, the commit, the indexes (all idempotent but the
            # commit, which a NOSCRIPT answer shows did not run)
            commands = _armed(session_id, effects, due_ms, timers, ttl_s, cause)
            commit_at = len(commands)
            commands.append(("EVALSHA", self._commit.sha, len(script_keys), *script_keys, *args))
            commands.append(
                ("ZADD", keys.owner_tasks_key(record.owner), task.status_ms, task.task.id)
            )
            commands.extend(_listed(record, session_id, now_ms, ttl_s))
            reply = (await self._store.pipelined(commands))[commit_at]
        return _committed(reply)

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
            pipe.expire(stream, ttl_s)
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

    async def claim_timers(self, now_ms: int, lease_ms: int, limit: int = 50) -> list[str]:
        """Due timers, each now leased to the caller until `now_ms + lease_ms`."""
        async with translated_errors():
            members = await self._claim_timers(
                keys=[keys.timers_due_key()], args=[now_ms, now_ms + lease_ms, limit]
            )
        return [text(member) for member in members]

    async def timer_members(self, limit: int) -> list[str]:
        """Up to `limit` armed timers, in no order (ZSCAN: a timer armed for the whole scan is
        seen, whatever the others do meanwhile)."""
        found: list[str] = []
        async with translated_errors():
            async for member, _ in self._client.zscan_iter(keys.timers_due_key(), count=500):
                found.append(text(member))
                if len(found) >= limit:
                    break
        return found

    async def timer_done(self, member: str) -> None:
        """A timer fired (or was refused): out of the due index and its session's list."""
        session_id = member.partition("|")[0]
        async with translated_errors():
            if self._cluster:  # two slots: two commands
                await self._client.zrem(keys.timers_due_key(), member)
                await self._client.hdel(keys.session_timers_key(session_id), member)
                await self._client.hdel(keys.timer_causes_key(session_id), member)
                return
            pipe = self._client.pipeline(transaction=False)
            pipe.zrem(keys.timers_due_key(), member)
            pipe.hdel(keys.session_timers_key(session_id), member)
            pipe.hdel(keys.timer_causes_key(session_id), member)
            await pipe.execute()

    async def timer_cause(self, member: str) -> str | None:
        """The span that armed a timer (a traceparent), when its commit was traced."""
        async with translated_errors():
            cause = await self._client.hget(keys.timer_causes_key(member.partition("|")[0]), member)
        return text(cause) if cause is not None else None

    async def due(self, now_ms: int, limit: int = 50) -> list[str]:
        async with translated_errors():
            members = await self._client.zrangebyscore(
                keys.outbox_due_key(), "-inf", now_ms, start=0, num=limit
            )
        return [text(member) for member in members]


def _listed(record: SessionRecord, session_id: str, now_ms: int, ttl_s: int) -> list[Any]:
    """The operations index entries of a commit: every session's, and its tenant's."""
    listed: list[Any] = [("ZADD", keys.ops_sessions_key(), "GT", now_ms, session_id)]
    if record.tenant is not None:
        index = keys.ops_tenant_sessions_key(record.tenant)
        listed += [("ZADD", index, "GT", now_ms, session_id), ("EXPIRE", index, ttl_s)]
    return listed


def _armed(
    session_id: str,
    effects: Sequence[tuple[str, PendingEffect]],
    due_ms: int,
    timers: Mapping[str, int] | None,
    ttl_s: int,
    cause: str | None = None,
) -> list[tuple[Any, ...]]:
    """The due entries of a commit: the session in the outbox index when it stores effects;
    its timers in the timers index and in the session's own list (what an operator reads),
    and the span that armed them."""
    commands: list[tuple[Any, ...]] = []
    if effects:
        commands.append(("ZADD", keys.outbox_due_key(), due_ms, session_id))
    if timers:
        commands.append(("ZADD", keys.timers_due_key(), *_score_pairs(timers)))
        armed = keys.session_timers_key(session_id)
        commands.append(("HSET", armed, *(item for pair in timers.items() for item in pair)))
        commands.append(("EXPIRE", armed, ttl_s))
        if cause:
            causes = keys.timer_causes_key(session_id)
            pairs = (item for member in timers for item in (member, cause))
            commands.append(("HSET", causes, *pairs))
            commands.append(("EXPIRE", causes, ttl_s))
    return commands


def _committed(reply: Any) -> Committed:
    status = cast(CommitStatus, text(reply[0]))
    if status == "replay":
        return Committed(status, 0, OUTCOME_DECODER.decode(reply[1]))
    return Committed(status, int(reply[1]), None)
