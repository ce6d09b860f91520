"""The census behind the Redis gauges (profile §17: live sessions by state, queued effects, the
earliest timer), read from the indexes the workers keep anyway (decision 90)."""

from __future__ import annotations

from typing import Final, NamedTuple

import msgspec

from realtime.store import keys
from realtime.store.redis_client import RedisClient, text, translated_errors
from realtime.store.timers import TimerStore
from state_machines.session_model import ENDING, LIVE_STATES

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


class CensusStore:
    """Reads the deployment's live state from the due indexes and the snapshots."""

    def __init__(self, redis: RedisClient, timers: TimerStore) -> None:
        self._client = redis.client
        self._timers = timers  # the ZSCAN of the timers' due index

    async def read(self, limit: int = CENSUS_LIMIT) -> Census:
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
        timers = await self._timers.members(limit * 4)
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
