"""The per-process event hub against the real Redis (and the embedded store): order, fan-out,
catch-up, slow subscribers, and one connection for many subscriptions."""

from __future__ import annotations

import asyncio
import logging
import time
import uuid

import pytest
from redis.crc import key_slot

from realtime.fanout import RETRY_S, EventHub, LaggedError
from realtime.store import keys
from realtime.store.events import EventStore, parse_id, slot_groups
from realtime.store.redis_client import SOCKET_TIMEOUT_S, RedisClient
from tests.integration.event_hub_helpers import commit, drain

pytestmark = pytest.mark.redis


@pytest.fixture(params=["blocking", "polling"])
async def hub(request, store):
    hub = EventHub(EventStore(store), buffer=16, blocking=request.param == "blocking")
    yield hub
    await hub.close()


async def test_every_subscriber_gets_every_entry_in_order(hub, store):
    session_id = str(uuid.uuid4())
    subscribers = [await hub.subscribe(session_id, "0-0") for _ in range(5)]
    ids = await commit(store, session_id, 12)
    for subscription in subscribers:
        assert await drain(subscription, 12) == ids
    assert hub.subscribers == 5
    for subscription in subscribers:
        hub.unsubscribe(subscription)
    assert (hub.subscribers, hub.streams) == (0, 0)


async def test_a_late_subscriber_catches_up_from_its_own_position(hub, store):
    session_id = str(uuid.uuid4())
    early = await hub.subscribe(session_id, "0-0")
    ids = await commit(store, session_id, 6)
    assert await drain(early, 6) == ids
    late = await hub.subscribe(session_id, ids[1])  # resumes after the second entry
    more = await commit(store, session_id, 3)
    assert await drain(late, 7) == ids[2:] + more
    assert await drain(early, 3) == more


async def test_a_subscriber_that_does_not_read_is_dropped_without_slowing_anything(hub, store):
    session_id = str(uuid.uuid4())
    stalled = await hub.subscribe(session_id, "0-0")
    reader = await hub.subscribe(session_id, "0-0")
    started = time.monotonic()
    ids = []
    for _ in range(10):
        ids += await commit(store, session_id, 10)
        assert await drain(reader, 10) == ids[-10:]
    assert time.monotonic() - started < 5  # loosely: nothing waited for the stalled one
    assert hub.subscribers == 1  # the stalled one overflowed its 16 entries and was freed
    with pytest.raises(LaggedError):
        await stalled.next(0.1)


async def test_many_subscriptions_share_one_redis_connection(store, redis_url):
    if redis_url is None:
        pytest.skip("counts connections of a real Redis")
    hub = EventHub(EventStore(store), buffer=16, blocking=True)
    try:
        before = len(await store.client.client_list())
        sessions = [str(uuid.uuid4()) for _ in range(200)]
        subscriptions = [await hub.subscribe(session_id, "0-0") for session_id in sessions]
        ids = await commit(store, sessions[-1], 1)
        assert await drain(subscriptions[-1], 1) == ids
        await asyncio.sleep(0.05)
        # the reader's blocking XREAD plus this test's own commands
        assert len(await store.client.client_list()) <= before + 2
        assert hub.streams == 200
    finally:
        await hub.close()


async def test_the_embedded_store_is_followed_by_polling():
    store = RedisClient.in_process()
    hub = EventHub(EventStore(store), buffer=16)
    assert hub.blocking is False
    try:
        session_id = str(uuid.uuid4())
        subscription = await hub.subscribe(session_id, "0-0")
        ids = await commit(store, session_id, 4)
        assert await drain(subscription, 4) == ids
    finally:
        await hub.close()
        await store.aclose()


def test_cluster_reads_group_streams_by_slot():
    streams = [keys.events_key(str(uuid.uuid4())) for _ in range(50)]
    groups = slot_groups(streams)
    assert sorted(s for group in groups for s in group) == sorted(streams)
    for group in groups:
        assert len({key_slot(stream.encode()) for stream in group}) == 1
    # all keys of one session share its slot, so one session's stream is never split
    session_id = str(uuid.uuid4())
    assert key_slot(keys.events_key(session_id).encode()) == key_slot(
        keys.session_key(session_id).encode()
    )


def test_stream_ids_compare_numerically():
    assert parse_id("10-0") > parse_id("9-99")
    assert parse_id("5-10") > parse_id("5-9")
    with pytest.raises(ValueError, match="not a stream entry id"):
        parse_id("abc")


@pytest.mark.slow
async def test_an_idle_blocking_read_is_no_outage(store, caplog):
    # a subscriber waits longer than the client's socket timeout with nothing to read: the
    # reader's blocking XREAD must return before it, not be taken for a lost connection
    if not store.can_block:
        pytest.skip("the embedded store and Cluster are followed by polling")
    hub = EventHub(EventStore(store), buffer=16)
    session_id = str(uuid.uuid4())
    subscription = await hub.subscribe(session_id, "0-0")
    try:
        with caplog.at_level(logging.WARNING):
            await asyncio.sleep(SOCKET_TIMEOUT_S + 1.5)
            started = time.monotonic()
            ids = await commit(store, session_id, 1)
            assert await drain(subscription, 1) == ids
            waited = time.monotonic() - started
        assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == []
        assert waited < RETRY_S  # delivered at once, not after a reconnect's pause
    finally:
        await hub.close()
