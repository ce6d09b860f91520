"""Transcript retention (profile §7, §10, §13) at the storage layer: with
`retention.transcript: off` the words a user types or the agent speaks are in no key of Redis,
whatever its type; with `on` the same scan finds them (the positive control). What clients and
operators see is tested in tests/e2e/test_operation_retention.py."""

from __future__ import annotations

import pytest

from realtime.store.redis_client import RedisClient
from tests.e2e.agent_operation_helpers import quiet, type_and_speak

pytestmark = pytest.mark.redis


async def redis_values(store: RedisClient) -> list[tuple[str, bytes]]:
    """(key, value) for every value in every key of the test's Redis, whatever its type."""
    client = store.client
    found: list[tuple[str, bytes]] = []
    async for raw_key in client.scan_iter(count=500):
        key = raw_key.decode() if isinstance(raw_key, bytes) else raw_key
        kind = await client.type(raw_key)
        kind = kind.decode() if isinstance(kind, bytes) else kind
        values: list = [raw_key]
        if kind == "string":
            values.append(await client.get(raw_key))
        elif kind == "hash":
            for field, value in (await client.hgetall(raw_key)).items():
                values += [field, value]
        elif kind == "list":
            values += await client.lrange(raw_key, 0, -1)
        elif kind == "set":
            values += list(await client.smembers(raw_key))
        elif kind == "zset":
            values += [member for member, _ in await client.zrange(raw_key, 0, -1, withscores=True)]
        elif kind == "stream":
            for entry_id, fields in await client.xrange(raw_key):
                values.append(entry_id)
                for field, value in fields.items():
                    values += [field, value]
        else:
            raise AssertionError(f"unexpected Redis type {kind} of {key}")
        found += [(key, v if isinstance(v, bytes) else str(v).encode()) for v in values]
    return found


async def keys_holding(store: RedisClient, marker: str) -> list[str]:
    needle = marker.encode()
    return sorted({key for key, value in await redis_values(store) if needle in value})


async def test_with_retention_off_the_words_are_in_no_key(rt_client, livekit, store):
    words = await type_and_speak(rt_client, livekit, "off")
    await quiet()  # let the outbox finish its work before looking
    assert await keys_holding(store, words.typed) == []
    assert await keys_holding(store, words.spoken) == []


async def test_with_retention_on_the_same_scan_finds_the_words(rt_client, livekit, store):
    words = await type_and_speak(rt_client, livekit, "on")
    await quiet()
    assert await keys_holding(store, words.typed) != []
    assert await keys_holding(store, words.spoken) != []
