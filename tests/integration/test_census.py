"""`CensusStore.read`: the live sessions by state, the queued effects and the earliest timer,
read from the indexes the workers keep (the gauges of `GET /metrics`)."""

from __future__ import annotations

import uuid

import pytest

from realtime.store import census as census_module
from realtime.store import keys
from realtime.store.census import CensusStore
from realtime.store.redis_client import RedisClient
from realtime.store.timers import TimerStore

pytestmark = pytest.mark.redis


async def seed(store: RedisClient, state: str | None, *, timer_ms: int | None, effects: int = 0):
    session_id = str(uuid.uuid4())
    if state is not None:  # only the field a census reads; the rest of a snapshot is skipped
        snapshot = f'{{"owner":"o","session":{{"sessionId":"{session_id}","state":"{state}"}}}}'
        await store.client.hset(keys.session_key(session_id), mapping={"v": 3, "s": snapshot})
    if timer_ms is not None:
        await store.client.zadd(keys.timers_due_key(), {f"{session_id}|max|1|1|": timer_ms})
    if effects:
        outbox = keys.outbox_key(session_id)
        await store.client.hset(outbox, mapping={f"3-{n}": b"{}" for n in range(effects)})
        await store.client.zadd(keys.outbox_due_key(), {session_id: 0})
    return session_id


async def test_an_empty_store_counts_every_live_state_as_zero(store):
    census = await CensusStore(store, TimerStore(store)).read()
    assert census.states == dict.fromkeys(
        ("provisioning", "ready", "joining", "active", "reconnecting", "ending"), 0
    )
    assert (census.outbox_pending, census.oldest_timer_ms, census.truncated) == (0, None, False)


async def test_sessions_are_found_through_both_due_indexes(store, monkeypatch):
    monkeypatch.setattr(census_module, "CENSUS_BATCH", 2)  # several pipelines
    await seed(store, "active", timer_ms=5_000)
    await seed(store, "active", timer_ms=9_000)
    await seed(store, "ready", timer_ms=7_000, effects=1)
    await seed(store, "ending", timer_ms=None, effects=2)  # its max timer fired: the outbox
    await seed(store, "ended", timer_ms=8_000)  # its max timer has not come due
    await seed(store, None, timer_ms=6_000)  # expired keys
    census = await CensusStore(store, TimerStore(store)).read()
    assert {state: n for state, n in census.states.items() if n} == {
        "active": 2,
        "ready": 1,
        "ending": 1,
    }
    assert census.outbox_pending == 3
    assert census.oldest_timer_ms == 5_000
    assert not census.truncated


async def test_a_census_stops_at_its_limit_and_says_so(store):
    for _ in range(3):
        await seed(store, "ready", timer_ms=None, effects=1)
    census = await CensusStore(store, TimerStore(store)).read(limit=2)
    assert census.truncated
    assert census.states["ready"] == 2
    assert census.outbox_pending == 2
