"""Retention windows and compaction (profile §20) against a real Redis, with the windows at their
smallest (1 s) and the worker firing timers every 0.25 s: a live session keeps its command
outcomes, event stream and timeline for as long as it may still live plus the replay window;
once it ended they go when the window ends (GetCommand then answers -31005), and
`AIM_COMPACT_AFTER_S` after the end the session is compacted to what GetTask, GetSession and
the operations listing show, which answer as before."""

from __future__ import annotations

import asyncio
import datetime
import json
import time
from typing import Any

import httpx
import pytest

from realtime.settings import Settings, SettingsError
from realtime.store import keys
from realtime.store.compaction import Compactor
from realtime.store.redis_client import RedisClient
from realtime.store.sessions import SessionStore
from realtime.store.tenants import TenantStore
from tests.conftest import error_info, rpc, service
from tests.e2e.operator_api_helpers import operator_json
from tests.e2e.realtime_helpers import call, new_id
from tests.e2e.sse_helpers import stream
from tests.e2e.webhook_helpers import active_session, get, wait_until

pytestmark = pytest.mark.redis

WINDOW_S = 1
MAX_SESSION_S = 600
REPLAYS = ("cmd", "events", "timeline")  # the keys the replay window keeps


def replay_keys(session_id: str) -> dict[str, str]:
    return {
        "cmd": keys.commands_key(session_id),
        "events": keys.events_key(session_id),
        "timeline": keys.timeline_key(session_id),
    }


async def ttls(store: RedisClient, session_id: str) -> dict[str, int]:
    return {name: await store.client.ttl(key) for name, key in replay_keys(session_id).items()}


async def until(check: Any, within: float = 10.0) -> None:
    deadline = time.monotonic() + within
    while not await check():
        assert time.monotonic() < deadline, "not within the deadline"
        await asyncio.sleep(0.05)


def seen_by_client(session: dict[str, Any]) -> dict[str, Any]:
    return {name: value for name, value in session.items() if name != "effects"}


@pytest.fixture
async def short_windows(livekit, store, tracer_provider):
    if store.embedded:
        pytest.skip("reads TTLs and encodings of a real Redis")
    async with service(
        livekit,
        store,
        tracer_provider,
        command_ttl_s=WINDOW_S,
        compact_after_s=WINDOW_S,
        max_session_s=MAX_SESSION_S,
    ) as http:
        yield http


async def end_after_a_command(http: httpx.AsyncClient) -> tuple[str, str, str]:
    """(sessionId, taskId, commandId of an EndSession) of a session that went active and ended."""
    session_id, _ = await active_session(http)
    command_id = new_id()
    ended = await call(http, "EndSession", sessionId=session_id, commandId=command_id, reason="x")
    assert ended["result"]["session"]["state"] == "ending"
    final = await wait_until(http, session_id, lambda s: s["state"] == "ended")
    return session_id, final["taskId"], command_id


async def test_a_live_sessions_outcomes_outlive_its_longest_life_and_the_window(
    short_windows, store
):
    session_id, _ = await active_session(short_windows)

    live = await ttls(store, session_id)

    # kept as long as the session may still live, then the replay window
    assert live["cmd"] > MAX_SESSION_S - 5
    assert live["events"] > MAX_SESSION_S - 5
    assert all(ttl <= MAX_SESSION_S + WINDOW_S for ttl in live.values() if ttl > 0)
    # the task and the snapshot live the task TTL as before
    assert await store.client.ttl(keys.session_key(session_id)) > MAX_SESSION_S + WINDOW_S


async def test_an_ended_sessions_outcomes_go_when_the_window_ends(short_windows, store):
    http = short_windows
    session_id, _, command_id = await end_after_a_command(http)
    within = await call(http, "GetCommand", sessionId=session_id, commandId=command_id)
    assert within["result"]["command"]["status"] == "applied"
    assert all(ttl <= WINDOW_S for ttl in (await ttls(store, session_id)).values())

    async def gone() -> bool:
        return not await store.client.exists(*replay_keys(session_id).values())

    await until(gone)

    after = await call(http, "GetCommand", sessionId=session_id, commandId=command_id)
    assert after["error"]["code"] == -31005
    assert error_info(after)["reason"] == "COMMAND_NOT_FOUND"
    assert f"{WINDOW_S} s after it ended" in after["error"]["message"]
    # the session and its task are still there
    assert (await get(http, session_id))["state"] == "ended"


async def whole_timeline(
    http: httpx.AsyncClient, session_id: str, limit: int | None = None
) -> list[Any]:
    entries: list[Any] = []
    cursor = None
    for _ in range(100):
        path = f"/ops/api/sessions/{session_id}/timeline"
        page = await operator_json(http, path, cursor=cursor, limit=limit)
        entries += page["entries"]
        cursor = page["nextCursor"]
        if cursor is None:
            return entries
    raise AssertionError("the timeline did not end")


async def resumed(http: httpx.AsyncClient, task_id: str, last: str) -> Any:
    """What SubscribeToTask answers with Last-Event-ID `last`: the events, or the error."""
    async with stream(http, "SubscribeToTask", {"id": task_id}, last_event_id=last) as reader:
        if reader.response.headers["content-type"].startswith("application/json"):
            return (await reader.response.aread()).decode()
        return [(event.id, event.data) for event in await reader.rest()]


async def test_an_ended_session_is_compacted_and_answers_as_before(livekit, store, tracer_provider):
    if store.embedded:
        pytest.skip("reads TTLs and encodings of a real Redis")
    # outcomes kept past the compaction, to compare what GetCommand and the timeline answer
    async with service(
        livekit, store, tracer_provider, command_ttl_s=60, compact_after_s=WINDOW_S
    ) as http:
        await compacted_answers_as_before(http, store)


async def compacted_answers_as_before(http: httpx.AsyncClient, store: RedisClient) -> None:
    session_id, task_id, command_id = await end_after_a_command(http)
    session_key, task_key = keys.session_key(session_id), keys.session_task_key(session_id)
    events_key = keys.events_key(session_id)

    async def settled() -> bool:
        return (await get(http, session_id))["effects"]["pending"] == 0

    await until(settled)
    session_before = seen_by_client(await get(http, session_id))
    task_before = (await rpc(http, "GetTask", {"id": task_id}))["result"]
    listed_before = await operator_json(http, "/ops/api/sessions")
    command_before = await call(http, "GetCommand", sessionId=session_id, commandId=command_id)
    timeline_before = await whole_timeline(http, session_id)
    assert await whole_timeline(http, session_id, limit=2) == timeline_before  # paged
    assert any(entry["kind"] == "effect" for entry in timeline_before)  # LiveKit calls
    outcomes_before = await store.client.hgetall(keys.commands_key(session_id))
    event_ids = [entry_id for entry_id, _ in await store.client.xrange(events_key)]
    assert len(event_ids) >= 4
    # a device that missed the end, one that missed more, one that saw it all
    resumptions = {last: await resumed(http, task_id, last) for last in event_ids[-3:]}
    assert isinstance(resumptions[event_ids[-3]], list)
    assert "-32004" in resumptions[event_ids[-1]]
    stored_before = len(await store.client.hget(session_key, "s"))
    task_bytes_before = len(await store.client.get(task_key))
    ttl_before = await store.client.ttl(task_key)

    async def compacted() -> bool:
        stored = await store.client.hget(session_key, "s")
        return stored is not None and stored[:1] != b"{"

    await until(compacted)

    # what a client and an operator read is unchanged
    assert seen_by_client(await get(http, session_id)) == session_before
    assert (await rpc(http, "GetTask", {"id": task_id}))["result"] == task_before
    listed = await operator_json(http, "/ops/api/sessions")
    assert listed["sessions"] == listed_before["sessions"]
    again = await call(http, "GetCommand", sessionId=session_id, commandId=command_id)
    assert again == command_before
    assert await whole_timeline(http, session_id) == timeline_before
    assert await whole_timeline(http, session_id, limit=2) == timeline_before
    for last, answer in resumptions.items():
        assert await resumed(http, task_id, last) == answer
    # both streams are one archive now; each outcome is compressed in place
    assert not await store.client.exists(events_key, keys.timeline_key(session_id))
    assert 0 < await store.client.pttl(keys.archive_key(session_id)) <= 60_000
    outcomes = await store.client.hgetall(keys.commands_key(session_id))
    assert outcomes.keys() == outcomes_before.keys()
    assert all(raw[:1] != b"{" for raw in outcomes.values())
    assert sum(map(len, outcomes.values())) < sum(map(len, outcomes_before.values())) / 2

    # a replay after the compaction: its timeline entry starts a new stream, read after the
    # archive
    replay = await call(http, "EndSession", sessionId=session_id, commandId=command_id, reason="x")
    assert replay["result"] == command_before["result"]["command"]["result"]  # as first answered

    async def noted() -> bool:
        return len(await whole_timeline(http, session_id)) > len(timeline_before)

    await until(noted)
    after_replay = await whole_timeline(http, session_id)
    assert after_replay[: len(timeline_before)] == timeline_before
    assert [entry["kind"] for entry in after_replay[len(timeline_before) :]] == ["command"]
    # what Redis holds is smaller, its TTL kept, and no timer of the session is left armed
    assert len(await store.client.hget(session_key, "s")) < stored_before / 1.5
    assert len(await store.client.get(task_key)) < task_bytes_before / 1.3
    assert 0 < await store.client.ttl(task_key) <= ttl_before
    assert not await store.client.exists(keys.session_timers_key(session_id))
    armed = await store.client.zrange(keys.timers_due_key(), 0, -1)
    assert not [member for member in armed if member.decode().startswith(session_id)]


async def test_compaction_waits_for_the_outbox_and_keeps_the_version(
    livekit, store, tracer_provider
):
    if store.embedded:
        pytest.skip("reads the encodings of a real Redis")
    # the timer is not due during the test: the compactor is called here
    async with service(livekit, store, tracer_provider, compact_after_s=3600) as http:
        session_id, _, _ = await end_after_a_command(http)
        sessions = SessionStore(store)
        compactor = Compactor(store, sessions, TenantStore(store), usage_ttl_s=86400)
        session_key = keys.session_key(session_id)
        version = await store.client.hget(session_key, "v")
        outbox = keys.outbox_key(session_id)
        await store.client.hset(outbox, "9", b"{}")  # LiveKit work still to carry out

        assert await compactor.compact(session_id) == "busy"
        assert (await store.client.hget(session_key, "s"))[:1] == b"{"

        await store.client.delete(outbox)
        before = seen_by_client(await get(http, session_id))
        assert await compactor.compact(session_id) == "done"
        assert (await store.client.hget(session_key, "s"))[:1] != b"{"
        assert await store.client.hget(session_key, "v") == version
        assert seen_by_client(await get(http, session_id)) == before
        # a second compaction (a timer fired twice) finds it compacted and changes nothing
        assert await compactor.compact(session_id) == "done"
        assert seen_by_client(await get(http, session_id)) == before
        assert await compactor.compact(new_id()) == "missing"


def test_both_windows_accept_a_second_and_refuse_less():
    env = {"AIM_COMMAND_TTL_S": "1", "AIM_COMPACT_AFTER_S": "1"}
    settings = Settings.from_env(env)
    assert (settings.command_ttl_s, settings.compact_after_s) == (1, 1)
    for name in env:
        with pytest.raises(SettingsError, match=name):
            Settings.from_env({**env, name: "0"})


async def test_an_ended_sessions_usage_is_kept_in_its_day_and_written_again_at_compaction(
    livekit, store, tracer_provider
):
    """Profile §24: the usage goes into the tenant's day (no tenant claim: the one of no
    tenant) by the Redis time the commit that ended the session stored, for
    AIM_USAGE_RETENTION_DAYS plus its day; a process that died before that write leaves the
    compaction to write it."""
    if store.embedded:
        pytest.skip("reads TTLs of a real Redis")
    async with service(livekit, store, tracer_provider, usage_retention_days=30) as http:
        session_id, _, _ = await end_after_a_command(http)
        ended_ms = int(await store.client.hget(keys.session_key(session_id), "e"))
        day = datetime.datetime.fromtimestamp(ended_ms / 1000, datetime.UTC).date()
        key = keys.usage_key(None, day.isoformat())
        for _ in range(200):  # written by the release that follows the ending commit
            if (written := await store.client.hget(key, session_id)) is not None:
                break
            await asyncio.sleep(0.025)
        assert written is not None
        usage = json.loads(written)
        assert set(usage) == {"sessionMs", "connectedMs", "agentMs", "handoffs", "rotations"}
        assert 0 <= usage["connectedMs"] <= usage["sessionMs"]
        assert 30 * 86400 < await store.client.ttl(key) <= 31 * 86400

        await store.client.delete(key)  # as if the process died between the commit and it
        settings_ttl = (30 + 1) * 86400
        compactor = Compactor(
            store, SessionStore(store), TenantStore(store), usage_ttl_s=settings_ttl
        )
        assert await compactor.compact(session_id) == "done"
        assert json.loads(await store.client.hget(key, session_id)) == usage
