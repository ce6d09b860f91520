"""Session event streams written as commits write them, and read back through an event hub
subscription."""

from __future__ import annotations

import time

from realtime.fanout import Subscription
from realtime.store import keys
from realtime.store.redis_client import RedisClient


async def commit(store: RedisClient, session_id: str, n: int) -> list[str]:
    """What commits do to the stream: XADD entries `e=<json>`; their ids."""
    ids = []
    for i in range(n):
        entry_id = await store.client.xadd(keys.events_key(session_id), {"e": f'{{"n":{i}}}'})
        ids.append(entry_id.decode())
    return ids


async def drain(subscription: Subscription, count: int, within: float = 5.0) -> list[str]:
    got: list[str] = []
    deadline = time.monotonic() + within
    while len(got) < count:
        assert time.monotonic() < deadline, f"only {len(got)} of {count}"
        entries = await subscription.next(0.5)
        got.extend(entry_id for entry_id, _ in entries or ())
    return got
