"""Sending one session's events (profile §21) against a real Redis, the receiver an in-process
transport that answers as each test needs: a redelivery never lets a later event overtake an
earlier one, an attempt under way never absorbs a redelivery, a redelivered old event gets the
whole retry bound again."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from typing import Any

import httpx
import pytest

from realtime.settings import Settings
from realtime.store import keys
from realtime.store.deliveries import DeliveryStore
from realtime.store.redis_client import RedisClient
from realtime.timestamps import timestamp
from realtime.worker.deliverer import Deliverer
from tests.event_receivers import SECRET

pytestmark = pytest.mark.redis

SID = "6410da40-7d39-5c99-b5c9-8d9050454e4b"
NOW_MS = 1_796_000_000_000
Answer = Callable[[int], Awaitable[int]]


async def seed(
    store: RedisClient, count: int, *, occurred_ms: int = NOW_MS, sid: str = SID
) -> None:
    """`count` events of one session, stored and indexed as a commit stores them."""
    bodies = {
        str(seq): json.dumps(
            {
                "type": "session.created",
                "sessionId": sid,
                "seq": seq,
                "occurredAt": timestamp(occurred_ms),
                "principal": {"tenant": None, "sub": "a"},
            }
        )
        for seq in range(1, count + 1)
    }
    await store.client.hset(keys.deliveries_key(sid), mapping=bodies)
    await store.client.expire(keys.deliveries_key(sid), 3600)
    await store.client.zadd(keys.deliveries_due_key(), {sid: NOW_MS})


def deliverer(store: RedisClient, answer: Answer, seen: list[int], **settings: Any) -> Deliverer:
    async def handle(request: httpx.Request) -> httpx.Response:
        sent = json.loads(request.content)
        seen.append(sent["seq"] if sent["sessionId"] == SID else -sent["seq"])
        return httpx.Response(await answer(sent["seq"]))

    configured = Settings(
        events_url="https://backend.example/aim", events_secret=SECRET, **settings
    )
    return Deliverer(
        configured, DeliveryStore(store), clock=lambda: NOW_MS / 1000,
        transport=httpx.MockTransport(handle),
    )  # fmt: skip


async def test_a_redelivery_from_a_later_seq_keeps_the_earlier_ones_first(store) -> None:
    await seed(store, 5)
    seen: list[int] = []

    async def first_two(seq: int) -> int:
        return 200 if seq <= 2 else 500

    sender = deliverer(store, first_two, seen)
    await sender.send(SID)
    assert seen == [1, 2, 3]  # 3 failed: 4 and 5 wait behind it
    deliveries = DeliveryStore(store)
    assert await deliveries.redeliver(SID, 5, NOW_MS) == 3
    assert (await deliveries.head(SID)).seq == 3  # not 5: 3 and 4 are still to be sent
    await sender.aclose()


async def test_an_attempt_under_way_does_not_absorb_a_redelivery(store) -> None:
    await seed(store, 2)
    seen: list[int] = []
    deliveries = DeliveryStore(store)

    async def redelivered_meanwhile(seq: int) -> int:
        if seen == [1]:  # the operator asks for a redelivery of 1 while 1 is being sent
            assert await deliveries.redeliver(SID, 1, NOW_MS) == 2
        return 200

    sender = deliverer(store, redelivered_meanwhile, seen)
    await sender.send(SID)
    assert seen == [1, 1, 2]  # sent again as asked, then the next one
    listed = (await deliveries.listing(SID)).deliveries
    assert [d.state.status for d in listed] == ["delivered", "delivered"]
    assert [d.state.attempts for d in listed] == [1, 1]
    await sender.aclose()


async def test_a_redelivered_old_event_is_retried_for_the_whole_bound_again(store) -> None:
    await seed(store, 1, occurred_ms=NOW_MS - 10_000)  # older than the bound below
    seen: list[int] = []

    async def refuse(seq: int) -> int:
        return 503

    sender = deliverer(store, refuse, seen, events_retry_s=5)
    deliveries = DeliveryStore(store)
    await sender.send(SID)
    assert [d.state.status for d in (await deliveries.listing(SID)).deliveries] == [
        "failed"
    ]  # given up
    await deliveries.redeliver(SID, 1, NOW_MS)
    await sender.send(SID)
    (again,) = (await deliveries.listing(SID)).deliveries
    assert again.state.status == "retrying"  # the bound counts from the redelivery
    assert again.state.attempts == 1
    assert seen == [1, 1]
    await sender.aclose()


async def test_a_slow_receiver_holds_up_its_own_session_only(store) -> None:
    other = "0b5f3d7e-8a41-4c2b-9e6f-a1d2c3b4e501"
    await seed(store, 1)
    stalled = asyncio.Event()
    seen: list[int] = []

    async def slow_for_the_first(seq: int) -> int:
        if seen[-1] > 0:  # the first session's: its receiver takes long to answer
            stalled.set()
            await asyncio.sleep(2.5)
        return 200

    sender = deliverer(store, slow_for_the_first, seen, events_timeout_s=4.0)
    stop = asyncio.Event()
    running = asyncio.create_task(sender.loop(stop))
    await asyncio.wait_for(stalled.wait(), 5)
    await seed(store, 2, sid=other)  # due while the first one's answer is awaited
    for _ in range(40):  # bounded: 2 s
        if seen.count(-1) + seen.count(-2) == 2:
            break
        await asyncio.sleep(0.05)
    assert seen == [1, -1, -2]  # the other session's events went out meanwhile, in order
    stop.set()
    await running


async def test_a_stopping_worker_finishes_the_attempt_under_way_and_leaves_the_rest(store) -> None:
    await seed(store, 5)
    seen: list[int] = []
    asked = asyncio.Event()

    async def slowly(seq: int) -> int:
        asked.set()
        await asyncio.sleep(0.5)
        return 200

    sender = deliverer(store, slowly, seen)
    stop = asyncio.Event()
    running = asyncio.create_task(sender.loop(stop))
    await asyncio.wait_for(asked.wait(), 5)
    stop.set()
    await asyncio.wait_for(running, 2)  # not the 2.5 s of sending all five
    deliveries = DeliveryStore(store)
    assert seen == [1]
    assert (await deliveries.head(SID)).seq == 2  # the rest waits for the next worker
    assert await deliveries.due(NOW_MS) == [SID]


async def test_a_worker_forgets_an_event_another_worker_delivered(store) -> None:
    """The gauge of the oldest undelivered event: worker A failed the session's event, worker B
    delivered it; A's next sweep no longer counts it as waiting."""
    await seed(store, 1)
    seen: list[int] = []

    async def refuse(seq: int) -> int:
        return 503

    async def take(seq: int) -> int:
        return 200

    first, second = deliverer(store, refuse, seen), deliverer(store, take, seen)
    await first.send(SID)
    assert first._oldest_undelivered_s() >= 0
    assert SID in first.waiting_since
    await DeliveryStore(store).wait_until(SID, NOW_MS)  # due again at once, for B
    await second.send(SID)
    await first._forget_delivered()
    assert first.waiting_since == {}
    assert first._oldest_undelivered_s() == 0.0
    await first.aclose()
    await second.aclose()
