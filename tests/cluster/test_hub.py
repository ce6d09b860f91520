"""The event hub on Redis Cluster: no read may span slots, so the hub polls one XREAD per slot;
each poll must stay within the client's connections to each master (redis-py's cluster client
fails a command at once, `MaxConnectionsError`, instead of waiting for a free connection)."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from realtime.fanout import EventHub
from realtime.store import keys
from realtime.store.events import EventStore
from realtime.store.redis_client import RedisClient, slot_of
from tests.cluster import only_on_cluster
from tests.integration.event_hub_helpers import commit, drain

pytestmark = [pytest.mark.redis, only_on_cluster]

SESSIONS = 600  # ~200 slots on each master: far more than the 64 connections of its pool


async def connections_per_master(store: RedisClient) -> dict[str, int]:
    client = store.client
    return {
        node.name: len(await client.client_list(target_nodes=node))
        for node in client.get_primaries()
    }


async def test_sessions_on_hundreds_of_slots_are_followed_within_a_few_connections(
    store: RedisClient,
) -> None:
    hub = EventHub(EventStore(store), buffer=16)
    assert hub.blocking is False  # the service's choice on a Cluster
    try:
        before = await connections_per_master(store)
        sessions = [str(uuid.uuid4()) for _ in range(SESSIONS)]
        assert len({slot_of(keys.events_key(s)) for s in sessions}) > 3 * 150
        subscriptions = {s: await hub.subscribe(s, "0-0") for s in sessions}
        written = {s: await commit(store, s, 2) for s in sessions[::20]}
        await asyncio.sleep(0.3)  # several polls over every followed stream
        for session_id, ids in written.items():
            assert await drain(subscriptions[session_id], 2) == ids
        after = await connections_per_master(store)
        # each poll is one pipeline per master (plus this test's own commands)
        assert all(after[name] <= before[name] + 3 for name in before), (before, after)
        assert hub.streams == SESSIONS
    finally:
        await hub.close()
