"""Redis round trips of the hot paths, counted at the server's socket (profile §11): an applied
command on a session this process has seen is one commit, a replay one, GetTask and GetSession
one read each; with no session cache, an applied command is one read and one commit.

Redis counts every read event of a client socket (`total_reads_processed`); a pipeline is sent
in one write, so it is one read event, like a lone command. The service runs without its worker
loop, so nothing else talks to Redis while a request is measured."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from realtime.app import create_app
from realtime.store import keys
from realtime.store.redis_client import RedisClient
from tests.conftest import livekit_settings, rpc, serving
from tests.e2e.agent_operation_helpers import provider_call
from tests.e2e.realtime_helpers import call, create_session, new_id, register, session_of
from tests.event_receivers import SECRET as EVENTS_SECRET

pytestmark = pytest.mark.redis


class Reads:
    """Read events Redis processed, from another connection (its own INFO is one of them)."""

    def __init__(self, store: RedisClient) -> None:
        self.store = store

    async def now(self) -> int:
        info: dict[str, Any] = await self.store.client.info("stats")
        return int(info["total_reads_processed"])

    async def of(self, work: Any) -> int:
        await asyncio.sleep(0.05)  # whatever the last request left running has finished
        before = await self.now()
        await work()
        return await self.now() - before - 1


@pytest.fixture
async def service(livekit: Any, store: RedisClient) -> AsyncIterator[httpx.AsyncClient]:
    if store.embedded:
        pytest.skip("counts the read events of a real Redis")
    app = create_app(livekit_settings(livekit), store=store, run_worker=False)
    async with serving(app) as base_url, httpx.AsyncClient(base_url=base_url, timeout=30) as http:
        yield http


async def ready_and_joined(http: httpx.AsyncClient) -> tuple[str, str, str]:
    task = (await create_session(http))["result"]["task"]
    session_id = session_of(task)["sessionId"]
    for _ in range(200):
        got = await call(http, "GetSession", sessionId=session_id)
        if got["result"]["session"]["state"] == "ready":
            break
        await asyncio.sleep(0.02)
    endpoint = (await register(http, session_id, 1, "phone"))["result"]["endpoint"]["endpointId"]
    joined = await call(
        http, "JoinSession", sessionId=session_id, sessionEpoch=1, endpointId=endpoint,
        commandId=new_id(),
    )  # fmt: skip
    assert joined["result"]["session"]["state"] == "joining"  # until LiveKit says it joined
    return session_id, endpoint, task["id"]


def rejoin(http: httpx.AsyncClient, session_id: str, endpoint: str) -> Any:
    """The same re-join each time it is called: one commandId."""
    command_id = new_id()

    async def join() -> None:
        got = await call(
            http, "JoinSession", sessionId=session_id, sessionEpoch=1, endpointId=endpoint,
            commandId=command_id,
        )  # fmt: skip
        assert got["result"]["media"]["token"]

    return join


async def test_an_applied_command_is_one_round_trip_and_a_replay_one(service, store):
    session_id, endpoint, _ = await ready_and_joined(service)
    reads = Reads(store)
    join = rejoin(service, session_id, endpoint)
    # decided on the session as this process committed it: the commit with its indexes alone
    assert await reads.of(join) == 1
    assert await reads.of(join) == 1  # the same commandId: the commit script finds the outcome


async def test_without_the_session_cache_a_command_is_a_read_and_a_commit(livekit, store):
    if store.embedded:
        pytest.skip("counts the read events of a real Redis")
    settings = livekit_settings(livekit, session_cache_entries=0)
    app = create_app(settings, store=store, run_worker=False)
    async with serving(app) as base_url, httpx.AsyncClient(base_url=base_url, timeout=30) as http:
        session_id, endpoint, _ = await ready_and_joined(http)
        reads = Reads(store)
        join = rejoin(http, session_id, endpoint)
        assert await reads.of(join) == 2  # the load, then the commit with its indexes
        assert await reads.of(join) == 1  # the same commandId: the load finds the outcome


async def test_reads_are_one_round_trip(service, store):
    session_id, _, task_id = await ready_and_joined(service)
    reads = Reads(store)

    async def get_session() -> None:
        got = await call(service, "GetSession", sessionId=session_id)
        assert got["result"]["session"]["sessionId"] == session_id

    async def get_task() -> None:
        got = await rpc(service, "GetTask", {"id": task_id})
        assert got["result"]["id"] == task_id

    assert await reads.of(get_session) == 1
    assert await reads.of(get_task) == 1


async def test_a_commit_after_a_script_flush_loads_the_scripts_and_applies_once(service, store):
    session_id, endpoint, _ = await ready_and_joined(service)
    await store.client.script_flush()
    before = await call(service, "GetSession", sessionId=session_id)
    joined = await call(
        service, "JoinSession", sessionId=session_id, sessionEpoch=1, endpointId=endpoint,
        commandId=new_id(),
    )  # fmt: skip
    after = joined["result"]["session"]
    assert after["version"] == before["result"]["session"]["version"] + 1
    assert await store.client.script_exists(store.scripts.commit.sha) == [True]


async def test_a_command_that_writes_a_session_event_is_still_one_round_trip(livekit, store):
    """The session event is part of the commit script (profile §21): the agent's request for a
    confirmation, which writes `operation.requested`, costs the one round trip of any command."""
    if store.embedded:
        pytest.skip("counts the read events of a real Redis")
    settings = livekit_settings(
        livekit, events_url="http://127.0.0.1:9/events", events_secret=EVENTS_SECRET
    )
    app = create_app(settings, store=store, run_worker=False)
    async with serving(app) as base_url, httpx.AsyncClient(base_url=base_url, timeout=30) as http:
        session_id, _, _ = await ready_and_joined(http)
        room = f"aim-{session_id}-e1"
        agent_token = json.loads(livekit.dispatches_in(room)[-1].metadata)["providerToken"]
        kept = await store.client.hlen(keys.deliveries_key(session_id))

        async def ask() -> None:
            status, body, _ = await provider_call(
                http, agent_token, "RequestOperation", sessionId=session_id, sessionEpoch=1,
                requestId=new_id(), kind="action", action={"title": "Book a table"},
                confirmation="required",
            )  # fmt: skip
            assert status == 200, body

        assert await Reads(store).of(ask) == 1
        assert await store.client.hlen(keys.deliveries_key(session_id)) == kept + 1
