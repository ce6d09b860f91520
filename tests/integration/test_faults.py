"""Faults on the way to LiveKit and Redis (profile §6, §9, §11, §12): nothing half-applied, retries
converge, and the caller learns what to do (-31012 with the service and `retryable`)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from typing import Any

import httpx
import msgspec
import pytest

from realtime.app import create_app
from realtime.methods import sessions as session_methods
from realtime.store import keys
from realtime.store.redis_client import RedisClient
from realtime.store.sessions import SessionStore
from realtime.store.tasks import TaskStore
from tests.conftest import error_info, livekit_settings, rpc, serving
from tests.e2e.realtime_helpers import call, create_part, create_session, new_id, register
from tests.tcp_proxy import TcpProxy, redis_proxy

pytestmark = [pytest.mark.redis, pytest.mark.e2e]

AGENT = "aim-realtime-agent"
UNAVAILABLE = -31012


def meta(task: dict[str, Any]) -> dict[str, Any]:
    found: dict[str, Any] = task["metadata"]["urn:aim:a2a:realtime:v1"]
    return found


def assert_unavailable(body: dict[str, Any], service: str) -> None:
    assert body["_status"] == 200, body
    assert body["error"]["code"] == UNAVAILABLE, body
    metadata = error_info(body)["metadata"]
    assert metadata["service"] == service
    assert metadata["retryable"] == "true"


async def get_session(client: httpx.AsyncClient, session_id: str) -> dict[str, Any]:
    body = await call(client, "GetSession", sessionId=session_id)
    assert "result" in body, body
    session: dict[str, Any] = body["result"]["session"]
    return session


async def wait_for_state(
    client: httpx.AsyncClient, session_id: str, state: str, within: float
) -> dict[str, Any]:
    deadline = time.monotonic() + within
    while True:
        session = await get_session(client, session_id)
        if session["state"] == state or time.monotonic() > deadline:
            assert session["state"] == state, f"still {session['state']} after {within} s"
            return session
        await asyncio.sleep(0.1)


def assert_provisioned_once(livekit: Any, session_id: str) -> None:
    """One room for the session and exactly one dispatch of our agent in it."""
    room = f"aim-{session_id}-e1"
    assert [name for name in livekit.rooms if session_id in name] == [room]
    assert len(livekit.dispatches_in(room, AGENT)) == 1
    created = [
        c
        for c in livekit.calls_to("CreateDispatch", code="ok")
        if c.request is not None and c.request.room == room
    ]
    assert len(created) <= 1


# --- LiveKit -------------------------------------------------------------------------------------


async def test_livekit_down_during_provisioning(rt_client, livekit, monkeypatch):
    # the blocking create waits ≤ 5 s for the worker; a shorter wait keeps the test short
    monkeypatch.setattr(session_methods, "PROVISIONING_WAIT_S", 1.0)
    await livekit.set_down(True)

    created = await create_session(rt_client, returnImmediately=True)
    task = created["result"]["task"]
    assert task["status"]["state"] == "TASK_STATE_WORKING"
    assert meta(task)["sessionState"] == "provisioning"
    first = meta(task)["sessionId"]
    assert (await get_session(rt_client, first))["state"] == "provisioning"

    # a blocking create cannot finish while LiveKit is unreachable: -31012, service livekit
    part, message_id = create_part(), new_id()
    blocked = await create_session(rt_client, part=part, message_id=message_id)
    assert_unavailable(blocked, "livekit")
    # the same request again answers with the session's task (not a second session)
    again = await create_session(rt_client, part=part, message_id=message_id)
    second_task = again["result"]["task"]
    second = meta(second_task)["sessionId"]
    assert second != first
    assert second_task["status"]["state"] == "TASK_STATE_WORKING"

    await asyncio.sleep(0.5)  # the worker keeps retrying; the sessions stay provisioning
    for session_id in (first, second):
        assert (await get_session(rt_client, session_id))["state"] == "provisioning"
    assert not livekit.rooms
    assert livekit.down

    # a short outage (~2 s) keeps the worker's next backoff step (0.5 s doubling) near
    await livekit.set_down(False)
    for session_id in (first, second):
        await wait_for_state(rt_client, session_id, "ready", within=15)
        assert_provisioned_once(livekit, session_id)

    # a later retry of the same request returns the same task, now ready; no new session
    later = await create_session(rt_client, part=part, message_id=message_id)
    assert later["result"]["task"]["id"] == second_task["id"]
    listed = await rpc(rt_client, "ListTasks", {})
    assert sorted(t["id"] for t in listed["result"]["tasks"]) == sorted(
        [task["id"], second_task["id"]]
    )
    for listed_task in listed["result"]["tasks"]:
        assert meta(listed_task)["sessionState"] == "ready"


@pytest.mark.parametrize("reply_lost", [False, True], ids=["refused", "reply-lost"])
async def test_provisioning_fails_once_with_503(rt_client, livekit, reply_lost):
    """A failed CreateRoom, which carries the agent's dispatch, is retried without a second
    dispatch: LiveKit dispatches a room's agents only when it creates the room, and the retry
    lists the room's dispatches before it would create one (reply-lost: the first one did
    happen)."""
    livekit.fail_next(1, status=503, method="CreateRoom", effect_first=reply_lost)
    created = await create_session(rt_client)  # blocking: the worker's retry lands within 5 s
    task = created["result"]["task"]
    session_id = meta(task)["sessionId"]
    assert meta(task)["sessionState"] == "ready"
    assert (await get_session(rt_client, session_id))["state"] == "ready"
    assert_provisioned_once(livekit, session_id)
    attempts = livekit.calls_to("CreateRoom")  # an injected fault is answered undecoded
    assert [c.code for c in attempts] == ["unavailable", "ok"]
    assert len(livekit.calls_to("ListDispatch")) == 1  # the retry looks; the first call did not
    assert livekit.calls_to("CreateDispatch") == []  # the room brought its dispatch


# --- Redis ---------------------------------------------------------------------------------------


@pytest.fixture
async def redis_link(
    redis_url: str | None, store: RedisClient
) -> AsyncIterator[tuple[TcpProxy, str]]:
    """A TCP proxy in front of the test Redis (after `store` has flushed it)."""
    if redis_url is None:
        pytest.skip("needs a real Redis (the embedded store has no socket to cut)")
    async with redis_proxy(redis_url) as link:
        yield link


@contextlib.asynccontextmanager
async def service_via(
    url: str, livekit: Any, *, pool_size: int = 64
) -> AsyncIterator[httpx.AsyncClient]:
    """The service on its own Redis client through `url` (the proxy)."""
    proxied = RedisClient.from_url(url, pool_size=pool_size)
    try:
        app = create_app(livekit_settings(livekit), store=proxied)
        async with (
            serving(app) as base_url,
            httpx.AsyncClient(base_url=base_url, timeout=30) as http,
        ):
            yield http
    finally:
        await proxied.aclose()


class Snapshot:
    """What the commit writes for one session, read directly (not through the proxy)."""

    def __init__(self, version: int, events: int, outcome: bytes | None, state: str | None):
        self.version, self.events, self.outcome, self.state = version, events, outcome, state

    @classmethod
    async def read(cls, store: RedisClient, session_id: str, command_id: str) -> Snapshot:
        loaded = await SessionStore(store).load(session_id)
        return cls(
            loaded.version,
            await store.client.xlen(keys.events_key(session_id)),
            await store.client.hget(keys.commands_key(session_id), command_id),
            loaded.record.session.state if loaded.record else None,
        )


async def events_of(store: RedisClient, session_id: str) -> list[dict[str, Any]]:
    entries = await store.client.xrange(keys.events_key(session_id))
    return [msgspec.json.decode(fields[b"e"]) for _, fields in entries]


def evalsha(store: RedisClient) -> bytes:
    """The commit script's EVALSHA as it goes over the wire (RESP)."""
    return b"$7\r\nEVALSHA\r\n$40\r\n" + store.scripts.commit.sha.encode()


def script_load(store: RedisClient) -> bytes:
    """The scripts loaded after a commit met NOSCRIPT (Redis lost its script cache)."""
    return b"$6\r\nSCRIPT\r\n$4\r\nLOAD\r\n"


COMMIT_CUTS = {
    "lost-before-redis": (evalsha, False),
    "reply-lost": (evalsha, True),
    "lost-at-script-load": (script_load, False),
}


@pytest.mark.parametrize("cut_at", list(COMMIT_CUTS))
async def test_redis_dropped_during_the_commit(redis_link, store, livekit, cut_at):
    proxy, url = redis_link
    pattern, forwarded = COMMIT_CUTS[cut_at]
    async with service_via(url, livekit) as client:
        created = await create_session(client)
        task = created["result"]["task"]
        session_id = meta(task)["sessionId"]
        assert meta(task)["sessionState"] == "ready"
        phone = (await register(client, session_id, 1, "phone"))["result"]["endpoint"]
        join_id = new_id()
        params = {
            "sessionId": session_id,
            "sessionEpoch": 1,
            "endpointId": phone["endpointId"],
            "commandId": join_id,
        }
        before = await Snapshot.read(store, session_id, join_id)
        assert before.state == "ready"
        if pattern is script_load:
            await store.client.script_flush()  # the commit meets NOSCRIPT and loads the scripts

        # every link is cut when the commit script goes out; new connections are refused
        tripped = proxy.arm(pattern(store), forward=forwarded)
        first = await call(client, "JoinSession", **params)
        assert tripped.is_set()
        if "error" in first:
            assert_unavailable(first, "redis")
        cut = await Snapshot.read(store, session_id, join_id)
        if forwarded:  # applied, only the reply was lost
            assert (cut.version, cut.events) == (before.version + 1, before.events + 1)
            assert cut.outcome is not None
        else:  # never reached Redis: nothing applied, nothing stored
            assert (cut.version, cut.events, cut.outcome) == (before.version, before.events, None)
        # still unreachable: reads fail the same way, and nothing changes
        assert_unavailable(await call(client, "GetSession", sessionId=session_id), "redis")
        assert_unavailable(await call(client, "JoinSession", **params), "redis")

        proxy.restore()
        retried = await call(client, "JoinSession", **params)
        assert "result" in retried, retried
        assert retried["result"]["session"]["state"] == "joining"
        if "result" in first:
            assert first["result"] == retried["result"]
        replayed = await call(client, "JoinSession", **params)
        assert replayed["result"] == retried["result"]  # byte-identical outcome, token included

        # applied exactly once in total
        after = await Snapshot.read(store, session_id, join_id)
        assert (after.version, after.events) == (before.version + 1, before.events + 1)
        assert after.state == "joining"
        applied = [e for e in await events_of(store, session_id) if e.get("commandId") == join_id]
        assert [(e["from"], e["to"], e["version"]) for e in applied] == [
            ("ready", "joining", before.version + 1)
        ]
        command = await call(client, "GetCommand", sessionId=session_id, commandId=join_id)
        assert command["result"]["command"]["status"] == "applied"
        assert command["result"]["command"]["result"] == retried["result"]

        # the task record agrees with the session
        session = await get_session(client, session_id)
        assert session["version"] == after.version
        got = await rpc(client, "GetTask", {"id": task["id"]})
        task_meta = meta(got["result"])
        assert task_meta["sessionState"] == session["state"] == "joining"
        assert task_meta["sessionEpoch"] == session["sessionEpoch"]
        record = await TaskStore(store).get(task["id"])
        assert record is not None
        assert record.version == task_meta["taskVersion"]


@pytest.mark.parametrize("forwarded", [False, True], ids=["lost-before-redis", "reply-lost"])
async def test_redis_dropped_while_creating(redis_link, store, livekit, forwarded):
    """The commit of a new session is cut: the retried SendMessage converges on one session,
    provisioned once."""
    proxy, url = redis_link
    async with service_via(url, livekit) as client:
        part, message_id = create_part(), new_id()
        tripped = proxy.arm(evalsha(store), forward=forwarded)
        first = await create_session(client, part=part, message_id=message_id)
        assert tripped.is_set()
        assert_unavailable(first, "redis")
        proxy.restore()
        retried = await create_session(client, part=part, message_id=message_id)
        task = retried["result"]["task"]
        session_id = meta(task)["sessionId"]
        if not forwarded:
            # the retry committed the session itself, so it provisions it and waits, like a
            # first attempt; after a lost reply the worker provisions it (≤ 5 s grace)
            assert meta(task)["sessionState"] == "ready"
        again = await create_session(client, part=part, message_id=message_id)
        assert again["result"]["task"]["id"] == task["id"]
        await wait_for_state(client, session_id, "ready", within=12)
        assert_provisioned_once(livekit, session_id)
        listed = await rpc(client, "ListTasks", {})
        assert [t["id"] for t in listed["result"]["tasks"]] == [task["id"]]
        loaded = await SessionStore(store).load(session_id)
        assert loaded.task is not None
        assert loaded.record is not None
        assert meta(msgspec.to_builtins(loaded.task.task))["sessionState"] == "ready"
        assert loaded.task.version == loaded.record.session.task_version


async def test_cuts_at_the_script_load_do_not_exhaust_the_pool(redis_link, store, livekit):
    """A connection lost while a commit that met NOSCRIPT loads the scripts must still give the
    pooled connection back: a pool of 2 survives 3 such cuts."""
    proxy, url = redis_link
    async with service_via(url, livekit, pool_size=2) as client:
        created = await create_session(client)
        session_id = meta(created["result"]["task"])["sessionId"]
        for device in ("a", "b", "c"):
            await store.client.script_flush()
            tripped = proxy.arm(script_load(store), forward=False, refuse=False)
            assert_unavailable(await register(client, session_id, 1, device), "redis")
            assert tripped.is_set()
        async with asyncio.timeout(3):  # a leaked pool would wait 5 s for a connection
            registered = await register(client, session_id, 1, "last")
        assert "result" in registered, registered
        session = await get_session(client, session_id)
        assert [e["clientEndpointKey"] for e in session["endpoints"]] == ["last"]


async def test_connections_closed_by_redis_are_not_reused(redis_link, store, livekit):
    """Redis closes idle connections (restart, `timeout`): the next requests reconnect instead
    of failing on the dead pooled connections."""
    proxy, url = redis_link
    async with service_via(url, livekit) as client:
        created = await create_session(client)
        session_id = meta(created["result"]["task"])["sessionId"]
        await asyncio.gather(*(get_session(client, session_id) for _ in range(6)))
        assert proxy.links  # pooled connections, idle now
        proxy.cut()
        await asyncio.sleep(0.1)
        sessions = await asyncio.gather(*(get_session(client, session_id) for _ in range(6)))
        assert {s["state"] for s in sessions} == {"ready"}


async def test_readyz_follows_redis(redis_link, livekit):
    proxy, url = redis_link
    async with service_via(url, livekit) as client:
        assert (await client.get("/readyz")).status_code == 200
        proxy.refuse()
        down = await client.get("/readyz")
        assert down.status_code == 503
        assert down.json()["redis"] == "unreachable"
        assert (await client.get("/healthz")).status_code == 200  # the process is alive
        proxy.restore()
        assert (await client.get("/readyz")).status_code == 200


async def test_a_hanging_livekit_makes_a_blocking_create_unavailable_within_its_wait(
    rt_client, livekit
):
    """LiveKit that accepts the connection but never answers: the call times out (4 s) inside
    the create's 5 s wait, so the caller hears -31012 instead of a session stuck provisioning."""
    livekit.delay(8.0, method="CreateRoom")
    started = time.monotonic()
    blocked = await create_session(rt_client)
    waited = time.monotonic() - started
    assert blocked["error"]["code"] == -31012
    assert error_info(blocked)["metadata"]["service"] == "livekit"
    assert waited < 7.0
