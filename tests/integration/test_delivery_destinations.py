"""Session events to several receivers (profile §21) against a real Redis, on the worker's own
clock: a failing destination is paused by its breaker without holding a slot, its sessions put
back for when it may go, then tried one at a time; due sessions are started in turns between
destinations; a receiver that takes no connection fails within the connect timeout, not the
whole attempt's."""

from __future__ import annotations

import asyncio
import json
import socket
import time
from collections.abc import Iterator

import httpx
import pytest

from realtime.settings import Settings
from realtime.store import keys
from realtime.store.deliveries import DeliveryStore
from realtime.store.redis_client import RedisClient
from realtime.timestamps import timestamp
from realtime.worker.deliverer import BREAKER_FAILURES, BREAKER_PAUSE_S, Deliverer
from tests.event_receivers import SECRET

pytestmark = pytest.mark.redis

NOW_MS = 1_796_000_000_000
ACME = "https://acme.example/aim"
GLOBEX = "https://globex.example/aim"


def sid(n: int) -> str:
    return f"6410da40-7d39-5c99-b5c9-{n:012d}"


async def seed(store: RedisClient, session_id: str, tenant: str | None) -> None:
    """One session.created of a session of `tenant`, stored and indexed as a commit does."""
    body = json.dumps(
        {
            "type": "session.created",
            "sessionId": session_id,
            "seq": 1,
            "occurredAt": timestamp(NOW_MS),
            "principal": {"tenant": tenant, "sub": "a"},
        }
    )
    await store.client.hset(keys.deliveries_key(session_id), mapping={"1": body})
    await store.client.expire(keys.deliveries_key(session_id), 3600)
    await store.client.zadd(keys.deliveries_due_key(), {session_id: NOW_MS})


class Clock:
    def __init__(self) -> None:
        self.ms = NOW_MS

    def __call__(self) -> float:
        return self.ms / 1000


async def sweep(sender: Deliverer) -> int:
    """One sweep of the worker, waiting for what it started; how many sessions it started."""
    sending: dict[str, asyncio.Task[None]] = {}
    await sender.sweep(sending)
    started = len(sending)
    await asyncio.gather(*sending.values())
    return started


async def test_a_failing_destination_is_paused_and_tried_again_one_session_at_a_time(
    store: RedisClient,
) -> None:
    failing = [sid(n) for n in range(BREAKER_FAILURES)]
    for session_id in failing:
        await seed(store, session_id, None)
    await seed(store, sid(99), "globex")
    answers = {ACME: 503, GLOBEX: 200}
    asked: list[str] = []

    async def handle(request: httpx.Request) -> httpx.Response:
        url = str(request.url)
        asked.append(url)
        return httpx.Response(answers[url])

    clock = Clock()
    settings = Settings(
        events_url=ACME, events_secret=SECRET, events_tenant_urls=(("globex", GLOBEX),)
    )
    sender = Deliverer(
        settings, DeliveryStore(store), clock=clock, transport=httpx.MockTransport(handle)
    )
    deliveries = DeliveryStore(store)

    await sweep(sender)
    assert asked.count(ACME) == len(failing)  # within its share: each tried once
    assert asked.count(GLOBEX) == 1
    assert sender.destination(ACME).paused(clock.ms)
    resumes_ms = NOW_MS + int(BREAKER_PAUSE_S * 1000)

    clock.ms += 2_000  # each session's own retry is due, its destination is paused
    assert set(await deliveries.due(clock.ms)) == set(failing)
    assert await sweep(sender) == 0  # none started: no slot held
    assert asked.count(ACME) == len(failing)
    assert await deliveries.due(clock.ms) == []
    scores = await store.client.zmscore(keys.deliveries_due_key(), failing)
    assert set(scores) == {resumes_ms}  # put back for the pause's end, not polled meanwhile

    clock.ms = resumes_ms
    assert await sweep(sender) == 1  # one trial; it fails: paused again, twice as long
    assert asked.count(ACME) == len(failing) + 1
    assert sender.destination(ACME).paused_until_ms == resumes_ms + 2 * 5_000

    answers[ACME] = 200  # the receiver is back
    clock.ms = resumes_ms + 10_000
    await sweep(sender)  # the trial succeeds: the destination is closed again
    assert not sender.destination(ACME).pauses
    clock.ms += int(settings.events_timeout_s * 1000)
    await sweep(sender)
    listed = [(await deliveries.listing(session_id)).deliveries for session_id in failing]
    assert [kept[0].state.status for kept in listed] == ["delivered"] * len(failing)
    await sender.aclose()


async def test_due_sessions_are_started_in_turns_between_destinations(store: RedisClient) -> None:
    """More sessions due than slots: the one session of the second destination is not left
    behind the first destination's forty, though all of theirs came due before it."""
    crowd = [sid(n) for n in range(40)]
    for session_id in crowd:
        await seed(store, session_id, None)
    await seed(store, sid(99), "globex")
    asked: list[str] = []
    gate = asyncio.Event()
    answers = {ACME: 400, GLOBEX: 400}  # a refusal each: retried, no breaker

    tried: set[str] = set()

    async def handle(request: httpx.Request) -> httpx.Response:
        url = str(request.url)
        asked.append(url)
        tried.add(json.loads(request.content)["sessionId"])
        if url == ACME and answers[url] == 200:
            await gate.wait()  # the crowd's receiver is slow: its sessions hold their slots
        return httpx.Response(answers[url])

    clock = Clock()
    settings = Settings(
        events_url=ACME,
        events_secret=SECRET,
        events_tenant_urls=(("globex", GLOBEX),),
        events_max_per_destination=32,
    )
    sender = Deliverer(
        settings, DeliveryStore(store), clock=clock, transport=httpx.MockTransport(handle)
    )
    for _ in range(5):  # each session tried: the worker knows where each one goes
        await sweep(sender)
        clock.ms += 2_000
    assert tried == {*crowd, sid(99)}
    clock.ms += 10_000
    due = dict.fromkeys(crowd, clock.ms - 1000) | {sid(99): clock.ms}
    await store.client.zadd(keys.deliveries_due_key(), due)  # the crowd's first, all due
    answers.update({ACME: 200, GLOBEX: 200})
    asked.clear()

    sending: dict[str, asyncio.Task[None]] = {}
    await sender.sweep(sending)
    assert len(sending) == 32  # every slot
    for _ in range(500):  # bounded: 5 s, until every slot's request has reached its receiver
        if len(asked) == 32:
            break
        await asyncio.sleep(0.01)
    assert asked.count(GLOBEX) == 1  # its turn came among the first
    assert asked.count(ACME) == 31
    gate.set()
    await asyncio.gather(*sending.values())
    await sender.aclose()


@pytest.fixture
def no_connection() -> Iterator[str]:
    """A loopback port whose accept queue is full: a connection to it is never completed."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(0)
    filler = socket.create_connection(listener.getsockname(), timeout=5)
    host, port = listener.getsockname()
    try:
        yield f"http://{host}:{port}/events"
    finally:
        filler.close()
        listener.close()


async def test_a_receiver_that_takes_no_connection_fails_within_the_connect_timeout(
    store: RedisClient, no_connection: str
) -> None:
    await seed(store, sid(1), None)
    settings = Settings(
        events_url=no_connection,
        events_secret=SECRET,
        events_timeout_s=5.0,
        events_connect_timeout_s=0.2,
    )
    sender = Deliverer(settings, DeliveryStore(store), clock=Clock())
    started = time.monotonic()
    await sender.send(sid(1))
    took = time.monotonic() - started
    (kept,) = (await DeliveryStore(store).listing(sid(1))).deliveries
    assert kept.state.status == "retrying"
    assert kept.state.last_error == "no connection within 0.2 s"
    assert took < 2.0  # not the attempt's 5 s: the slot is free again at once
    await sender.aclose()
