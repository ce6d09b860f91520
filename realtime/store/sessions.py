"""Sessions: snapshots, command outcomes, the outbox, runner leases and timers; every key of one
session on its slot (`{<sessionId>}`), so each commit is one script that runs unchanged on Redis
Cluster. The cross-slot indexes (due effects, due timers, an owner's tasks and live sessions) are
written idempotently next to a commit, never inside it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import Any, Final, Literal, NamedTuple, cast

import msgspec

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
from state_machines.session_model import ENDING, LIVE_STATES

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


# a census considers at most this many sessions (one bound on its memory and round trips, as a
# reconciler sweep's); reads are pipelined this many commands at a time
CENSUS_LIMIT: Final = 10_000
CENSUS_BATCH: Final = 500


class Census(NamedTuple):
    """The deployment's live state as the indexes show it (the gauges of profile §17)."""

    states: dict[str, int]  # every state short of ended/failed → sessions in it (0 included)
    outbox_pending: int  # effects queued in the outboxes of the sessions in `aim:outbox:due`
    oldest_timer_ms: int | None  # the lowest score in `aim:timers:due`; None: no timer armed
    truncated: bool  # more sessions than CENSUS_LIMIT: the counts stop there


class _State(msgspec.Struct):
    state: str = ""


class _StateOf(msgspec.Struct):
    """The one field of a stored snapshot a census reads (msgspec skips the rest unparsed)."""

    session: _State


_STATE_DECODER: Final = msgspec.json.Decoder(_StateOf)


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
        if self._cluster:
            # redis-py's cluster pipeline refuses scripts: the due entries, the commit, then the
            # owner index (idempotent; a later commit of the task refreshes it)
            async with translated_errors():
                await self._arm(session_id, effects, due_ms, timers, self._client)
                reply = await self._commit(keys=script_keys, args=args)
                await self._client.zadd(
                    keys.owner_tasks_key(record.owner), {task.task.id: task.status_ms}
                )
        else:
            # one round trip: the due entries, the commit, the owner index (all idempotent but
            # the commit, which a NOSCRIPT answer shows did not run)
            commands: list[tuple[Any, ...]] = []
            if effects:
                commands.append(("ZADD", keys.outbox_due_key(), due_ms, session_id))
            if timers:
                commands.append(("ZADD", keys.timers_due_key(), *_score_pairs(timers)))
            commands.append(("EVALSHA", self._commit.sha, len(script_keys), *script_keys, *args))
            commands.append(
                ("ZADD", keys.owner_tasks_key(record.owner), task.status_ms, task.task.id)
            )
            reply = (await self._store.pipelined(commands))[-2]
        return _committed(reply)

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
            entries = await self._client.hgetall(keys.outbox_key(session_id))
        return sorted(
            (text(effect_id), EFFECT_DECODER.decode(raw)) for effect_id, raw in entries.items()
        )

    async def done(self, session_id: str, effect_id: str) -> None:
        async with translated_errors():
            await self._client.hdel(keys.outbox_key(session_id), effect_id)

    async def retry_later(self, session_id: str, effect_id: str, effect: PendingEffect) -> None:
        async with translated_errors():
            await self._client.hset(
                keys.outbox_key(session_id), effect_id, SESSION_ENCODER.encode(effect)
            )

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
        async with translated_errors():
            await self._client.zrem(keys.timers_due_key(), member)

    async def census(self, limit: int = CENSUS_LIMIT) -> Census:
        """Sessions by state, queued effects and the earliest timer, read from the indexes the
        workers already keep: every live session has its max-duration timer in `aim:timers:due`
        and an `ending` one its DeleteRoom in `aim:outbox:due` (decision 90). One ZRANGE, one
        ZRANGE of the due outboxes, a ZSCAN of the timers, then pipelined HLEN and HGET of the
        snapshots, CENSUS_BATCH at a time: about N/250 round trips for N live sessions."""
        async with translated_errors():
            oldest = await self._client.zrange(keys.timers_due_key(), 0, 0, withscores=True)
            outboxes = [
                text(member)
                for member in await self._client.zrange(keys.outbox_due_key(), 0, limit - 1)
            ]
        timers = await self.timer_members(limit * 4)
        ids = dict.fromkeys(outboxes)
        for member in timers:
            ids.setdefault(member.partition("|")[0])
        truncated = len(outboxes) >= limit or len(timers) >= limit * 4 or len(ids) > limit
        session_ids = list(ids)[:limit]  # the due outboxes first: batch n holds outboxes[n]
        states: dict[str, int] = dict.fromkeys((*LIVE_STATES, ENDING), 0)
        pending = 0
        async with translated_errors():
            for start in range(0, len(session_ids), CENSUS_BATCH):
                batch = session_ids[start : start + CENSUS_BATCH]
                pipe = self._client.pipeline(transaction=False)
                for session_id in batch:
                    pipe.hget(keys.session_key(session_id), "s")
                for session_id in outboxes[start : start + CENSUS_BATCH]:
                    pipe.hlen(keys.outbox_key(session_id))
                replies = await pipe.execute()
                for raw in replies[: len(batch)]:
                    state = None if raw is None else _STATE_DECODER.decode(raw).session.state
                    if state in states:
                        states[state] += 1
                pending += sum(replies[len(batch) :])
        return Census(states, pending, int(oldest[0][1]) if oldest else None, truncated)

    async def due(self, now_ms: int, limit: int = 50) -> list[str]:
        async with translated_errors():
            members = await self._client.zrangebyscore(
                keys.outbox_due_key(), "-inf", now_ms, start=0, num=limit
            )
        return [text(member) for member in members]


def _committed(reply: Any) -> Committed:
    status = cast(CommitStatus, text(reply[0]))
    if status == "replay":
        return Committed(status, 0, OUTCOME_DECODER.decode(reply[1]))
    return Committed(status, int(reply[1]), None)
