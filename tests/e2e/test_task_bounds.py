"""What one principal's messages may cost: the bytes of one message, the tasks a principal
holds, how long a refused message's task is kept, and a listing that reads only its page."""

from __future__ import annotations

import asyncio
import contextlib
import time
import tracemalloc
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from opentelemetry.sdk.trace import TracerProvider

from realtime.a2a.params import MAX_CONTEXT_ID_CHARS, MAX_MESSAGE_PART_BYTES
from realtime.app import create_app
from realtime.methods.tasks import EXCERPT_CHARS
from realtime.settings import Settings
from realtime.store.keys import task_key
from realtime.store.redis_client import RedisClient
from tests.conftest import TEST_SECRET, error_info, livekit_settings, rpc, serving
from tests.e2e.realtime_helpers import create_session, new_id

pytestmark = pytest.mark.e2e


class Clock:
    def __init__(self) -> None:
        self.now = time.time()

    def __call__(self) -> float:
        return self.now


def message(message_id: str, *parts: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {
        "messageId": message_id,
        "role": "ROLE_USER",
        "parts": list(parts) or [{"text": "hello"}],
        **extra,
    }


async def send(client: httpx.AsyncClient, msg: dict[str, Any], subject: str = "alice"):
    return await rpc(client, "SendMessage", {"message": msg}, subject=subject)


async def listed(client: httpx.AsyncClient, subject: str = "alice", **params: Any):
    body = await rpc(client, "ListTasks", params, subject=subject)
    return body["result"]


@contextlib.asynccontextmanager
async def app_client(
    store: RedisClient, tracer_provider: TracerProvider, settings: Settings, clock: Any = time.time
) -> AsyncIterator[httpx.AsyncClient]:
    app = create_app(settings, store=store, tracer_provider=tracer_provider, clock=clock)
    async with serving(app) as base_url, httpx.AsyncClient(base_url=base_url, timeout=30) as http:
        yield http


def bounded(**overrides: Any) -> Settings:
    return Settings(auth_hs256_secret=TEST_SECRET, rate_limit_rps=0, **overrides)


async def test_a_message_whose_parts_hold_more_than_the_bound_is_refused_and_nothing_kept(client):
    half = MAX_MESSAGE_PART_BYTES // 2 + 1
    body = await send(client, message("m-big", {"text": "a" * half}, {"data": {"x": "b" * half}}))

    assert body["error"]["code"] == -32602
    assert str(MAX_MESSAGE_PART_BYTES) in body["error"]["message"]
    assert "parts" in body["error"]["message"]
    assert (await listed(client))["totalSize"] == 0
    # the message id was not claimed: the same id with a message in bounds is served
    retried = await send(client, message("m-big", {"text": "small"}))
    assert retried["result"]["task"]["status"]["state"] == "TASK_STATE_REJECTED"


async def test_a_message_just_within_the_bound_is_served(client):
    body = await send(client, message("m-fits", {"text": "a" * MAX_MESSAGE_PART_BYTES}))

    assert body["result"]["task"]["status"]["state"] == "TASK_STATE_REJECTED"


async def test_a_context_id_longer_than_an_identifier_is_refused(client):
    body = await send(client, message("m-ctx", contextId="c" * (MAX_CONTEXT_ID_CHARS + 1)))

    assert body["error"]["code"] == -32602
    assert (await listed(client))["totalSize"] == 0


async def test_a_rejected_task_keeps_a_small_message_as_sent(client):
    sent = message("m-small", {"text": "hello"}, {"data": {"k": 1}}, metadata={"app": "x"})
    task = (await send(client, sent))["result"]["task"]

    kept = task["history"][0]
    assert kept["parts"] == [{"text": "hello"}, {"data": {"k": 1}}]
    assert kept["metadata"] == {"app": "x"}
    assert "not kept" not in task["status"]["message"]["parts"][0]["text"]


async def test_a_rejected_task_keeps_only_an_excerpt_of_a_large_message_and_says_so(client):
    text = "".join(chr(ord("a") + n % 26) for n in range(100_000))
    task = (await send(client, message("m-large", {"text": text}, {"data": {"k": "v" * 5000}})))[
        "result"
    ]["task"]

    kept = task["history"][0]
    assert kept["messageId"] == "m-large"
    assert kept["parts"] == [{"text": text[:EXCERPT_CHARS]}]
    said = task["status"]["message"]["parts"][0]["text"]
    assert "not kept" in said
    got = await rpc(client, "GetTask", {"id": task["id"]})
    assert got["result"] == task


async def test_a_principal_holds_a_bounded_number_of_tasks(store, tracer_provider):
    settings = bounded(max_tasks_per_principal=3)
    async with app_client(store, tracer_provider, settings) as client:
        first = (await send(client, message("m-0")))["result"]["task"]
        for n in range(1, 3):
            assert "result" in await send(client, message(f"m-{n}"))

        refused = await send(client, message("m-3"))

        assert refused["error"]["code"] == -31011
        info = error_info(refused)
        assert info["metadata"]["limit"] == "tasks_per_principal"
        # the oldest expires an hour on (AIM_REJECTED_TASK_TTL_S): that is when to try again
        assert 3500 <= int(info["metadata"]["retryAfterSeconds"]) <= 3600
        assert "3 tasks" in refused["error"]["message"]
        assert (await listed(client))["totalSize"] == 3
        # a retry of a message already served is answered, and another principal is not held
        again = await send(client, message("m-0"))
        assert again["result"]["task"] == first
        assert "result" in await send(client, message("m-3"), subject="bob")


async def test_a_rejected_task_expires_soon_and_frees_its_place(store, tracer_provider):
    clock = Clock()
    settings = bounded(max_tasks_per_principal=2, rejected_task_ttl_s=60)
    async with app_client(store, tracer_provider, settings, clock) as client:
        old = (await send(client, message("m-old")))["result"]["task"]
        clock.now += 30
        await send(client, message("m-mid"))
        assert (await send(client, message("m-new")))["error"]["code"] == -31011

        clock.now += 31  # the first is 61 s old, the second 31 s
        newest = (await send(client, message("m-new")))["result"]["task"]

        listing = await listed(client)
        assert listing["totalSize"] == 2
        assert listing["tasks"][0]["id"] == newest["id"]
        assert old["id"] not in {task["id"] for task in listing["tasks"]}
        assert 0 < await store.client.ttl(task_key(newest["id"])) <= 60


async def test_a_session_create_counts_towards_the_tasks_a_principal_holds(
    livekit, store, tracer_provider
):
    settings = livekit_settings(livekit, max_tasks_per_principal=1)
    async with app_client(store, tracer_provider, settings) as client:
        assert "result" in await send(client, message("m-plain"))

        refused = await create_session(client, message_id=new_id())

        assert refused["error"]["code"] == -31011
        assert error_info(refused)["metadata"]["limit"] == "tasks_per_principal"
        assert livekit.calls_to("CreateRoom") == []
        assert (await listed(client))["totalSize"] == 1


async def test_listing_filters_on_the_index_and_pages_in_order(client):
    for n in range(5):
        await send(client, message(f"m-{n}", contextId="even" if n % 2 == 0 else "odd"))
    evens = await listed(client, contextId="even", pageSize=2)
    assert evens["totalSize"] == 3
    assert len(evens["tasks"]) == 2
    rest = await listed(client, contextId="even", pageSize=2, pageToken=evens["nextPageToken"])
    assert len(rest["tasks"]) == 1
    assert rest["nextPageToken"] == ""
    ids = [task["id"] for task in evens["tasks"] + rest["tasks"]]
    assert len(set(ids)) == 3
    rejected = await listed(client, status="TASK_STATE_REJECTED")
    assert rejected["totalSize"] == 5
    assert (await listed(client, status="TASK_STATE_WORKING"))["totalSize"] == 0


async def test_a_thousand_large_messages_cost_little_and_a_listing_costs_its_page(
    store, tracer_provider
):
    """1,000 refused messages of 100 KB each: Redis keeps a small excerpt of each, and one
    ListTasks of one task reads one task and allocates little, however many there are."""
    settings = bounded(max_tasks_per_principal=1001)
    body = "x" * 100_000
    async with app_client(store, tracer_provider, settings) as client:
        await send(client, message("warm-up"))
        before = (await store.client.info("memory"))["used_memory"]
        for batch in range(50):
            sent = await asyncio.gather(
                *(send(client, message(f"m-{batch}-{n}", {"text": body})) for n in range(20))
            )
            assert all("result" in answer for answer in sent)
        grown = (await store.client.info("memory"))["used_memory"] - before
        # each task keeps its 256-character excerpt: about 2 KB a task with its index entry,
        # where keeping the messages would take 100 MB
        assert grown < 4 * 1024 * 1024, grown

        gets_before = (await store.client.info("commandstats"))["cmdstat_get"]["calls"]
        tracemalloc.start()
        started = time.perf_counter()
        page = await listed(client, pageSize=1)
        took = time.perf_counter() - started
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        gets = (await store.client.info("commandstats"))["cmdstat_get"]["calls"] - gets_before

        assert page["totalSize"] == 1001
        assert len(page["tasks"]) == 1
        assert gets == 1  # the page's one task, not the 1,001 the principal holds
        assert peak < 2 * 1024 * 1024, peak
        assert took < 1.0, took


async def test_a_task_indexed_before_the_index_carried_its_filters_is_still_listed(client, store):
    task = (await send(client, message("m-1", contextId="ctx")))["result"]["task"]
    owner_index = (await store.client.keys("aim:{o:*}:tasks:info"))[0]
    await store.client.delete(owner_index)  # as an earlier release left its index

    found = await listed(client, contextId="ctx", status="TASK_STATE_REJECTED")

    assert [listed_task["id"] for listed_task in found["tasks"]] == [task["id"]]
    assert (await listed(client, contextId="other"))["totalSize"] == 0
