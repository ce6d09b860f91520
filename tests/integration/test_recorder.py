"""The timeline recorder (profile §17): entries no commit carries, batched in memory and written
in one pipeline off the request path; bounded; a failed write costs entries, never a request."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator
from typing import Any

import httpx
import msgspec
import pytest

from realtime.app import create_app
from realtime.store import keys
from realtime.store.redis_client import RedisClient
from realtime.store.timeline import Recorder, TimelineStore, timeline_entry
from tests.conftest import livekit_settings, serving
from tests.e2e.operator_api_helpers import eventually, rpc_as, start_session, timeline_of
from tests.e2e.realtime_helpers import CAPS, new_id
from tests.tcp_proxy import dead_tcp_url, redis_proxy

pytestmark = pytest.mark.redis

SESSIONS = [new_id() for _ in range(3)]


def recorder(store: RedisClient, **options: Any) -> Recorder:
    return Recorder(TimelineStore(store), ttl_s=600, clock=time.time, **options)


async def stream(store: RedisClient, session_id: str) -> list[dict[str, Any]]:
    entries = await store.client.xrange(keys.timeline_key(session_id))
    return [msgspec.json.decode(fields[b"e"]) for _, fields in entries]


@contextlib.asynccontextmanager
async def running(rec: Recorder) -> AsyncIterator[Recorder]:
    task = asyncio.create_task(rec.run())
    try:
        yield rec
    finally:
        await rec.close()
        await asyncio.wait_for(task, 5)


async def read_events(store: RedisClient) -> int:
    info: dict[str, Any] = await store.client.info("stats")
    return int(info["total_reads_processed"])


async def test_many_entries_are_written_in_one_pipeline_after_the_interval(store):
    if store.embedded:
        pytest.skip("counts the read events of a real Redis")
    rec = recorder(store, interval_s=0.2)
    async with running(rec):
        before = await read_events(store)
        started = time.monotonic()
        for n in range(60):
            rec.command(SESSIONS[n % 3], method="m", command_id=str(n), outcome="replayed")
        assert rec.waiting == 60
        await eventually(lambda: _flushed(rec), within=2, every=0.01)
        elapsed = time.monotonic() - started
        after = await read_events(store)
    assert rec.flushes == 1
    assert rec.written == 60
    assert 0.15 <= elapsed < 1.0  # one interval after the first entry, not at once
    assert after - before - 1 == 1  # one pipeline (the second INFO is the other read)
    for index, session_id in enumerate(SESSIONS):
        entries = await stream(store, session_id)
        assert [e["commandId"] for e in entries] == [str(n) for n in range(index, 60, 3)]
        assert all(e["kind"] == "command" and e["outcome"] == "replayed" for e in entries)
        assert 0 < await store.client.ttl(keys.timeline_key(session_id)) <= 600


async def _flushed(rec: Recorder) -> bool:
    return rec.flushes > 0


async def test_a_full_batch_is_written_at_once(store):
    rec = recorder(store, interval_s=30, flush_at=10)
    async with running(rec):
        for n in range(10):
            rec.timer(SESSIONS[0], timer="idle", result=f"r{n}")
        await eventually(lambda: _flushed(rec), within=2, every=0.01)
    assert len(await stream(store, SESSIONS[0])) == 10


async def test_over_its_cap_the_recorder_drops_the_oldest_and_counts_them(store):
    rec = recorder(store, interval_s=30, capacity=5)
    for n in range(8):
        rec.webhook(SESSIONS[1], event="participant_joined", event_id=f"EV{n}", verdict="duplicate")
    assert (rec.waiting, rec.dropped) == (5, 3)
    assert await rec.flush() == 5
    assert [e["id"] for e in await stream(store, SESSIONS[1])] == [f"EV{n}" for n in range(3, 8)]


async def test_the_timeline_stream_is_capped_like_the_event_stream(store):
    rec = recorder(store, interval_s=30)
    for n in range(keys.TIMELINE_MAXLEN * 3):
        rec.timer(SESSIONS[2], timer="max", result=str(n))
    await rec.flush()
    length = await store.client.xlen(keys.timeline_key(SESSIONS[2]))
    assert keys.TIMELINE_MAXLEN <= length < keys.TIMELINE_MAXLEN * 2


async def test_closing_writes_what_waits(store):
    rec = recorder(store, interval_s=30)
    async with running(rec):
        rec.timer(SESSIONS[0], timer="grace", result="refused")
    assert [e["timer"] for e in await stream(store, SESSIONS[0])] == ["grace"]


async def test_a_failed_write_loses_its_batch_is_logged_once_and_the_loop_goes_on(caplog):
    dead = RedisClient.from_url(dead_tcp_url())
    rec = Recorder(TimelineStore(dead), ttl_s=600, clock=time.time, interval_s=0.05)
    try:
        with caplog.at_level(logging.WARNING, logger="realtime.store.timeline"):
            async with running(rec):
                for round_ in range(3):
                    rec.timer(SESSIONS[0], timer="idle", result=str(round_))
                    rec.timer(SESSIONS[1], timer="idle", result=str(round_))
                    await eventually(lambda r=round_: _failures(rec, r + 1), within=5)
    finally:
        await dead.aclose()
    assert (rec.failed_flushes, rec.lost, rec.written) == (3, 6, 0)
    warnings = [r for r in caplog.records if "operations timeline" in r.getMessage()]
    assert len(warnings) == 1


async def _failures(rec: Recorder, count: int) -> bool:
    return rec.failed_flushes >= count


def test_an_entry_holds_the_time_kind_and_fields_it_was_given():
    raw = timeline_entry("timer", 1_700_000_000_123, timer="grace", result="fired", code=None)
    assert msgspec.json.decode(raw) == {
        "at": "2023-11-14T22:13:20.123Z",
        "kind": "timer",
        "timer": "grace",
        "result": "fired",
    }


async def test_redis_lost_while_the_recorder_writes_fails_no_request(redis_url, store, livekit):
    if redis_url is None:
        pytest.skip("needs a real Redis (the embedded store has no socket to cut)")
    async with redis_proxy(redis_url) as (proxy, url):
        proxied = RedisClient.from_url(url, pool_size=8)
        try:
            app = create_app(livekit_settings(livekit), store=proxied, tracer_provider=None)
            async with (
                serving(app) as base_url,
                httpx.AsyncClient(base_url=base_url, timeout=30) as http,
            ):
                rec: Recorder = app.state.routes.commands.notes
                sid = await start_session(http)
                register = {"sessionId": sid, "sessionEpoch": 1, "commandId": new_id(),
                            "clientEndpointKey": "phone", "capabilities": CAPS}  # fmt: skip
                first = await rpc_as(http, "aim.realtime.RegisterEndpoint", register)
                # the replay's entry is written by the recorder: Redis goes away right then
                cut = proxy.arm(keys.timeline_key(sid).encode(), forward=False, refuse=False)
                replays = [await rpc_as(http, "aim.realtime.RegisterEndpoint", register)]
                await asyncio.wait_for(cut.wait(), 5)
                # requests go on; the next entries are written again
                replays.append(await rpc_as(http, "aim.realtime.RegisterEndpoint", register))
                entries = await eventually(lambda: _replays_in(http, sid))
        finally:
            await proxied.aclose()
    assert all(replay["result"] == first["result"] for replay in replays)
    assert rec.failed_flushes == 1
    assert rec.lost >= 1
    assert len(entries) == 1  # the first replay's entry was lost with its batch


async def _replays_in(http: httpx.AsyncClient, sid: str) -> list[dict[str, Any]] | None:
    entries = await timeline_of(http, sid)
    replays = [e for e in entries if e.get("outcome") == "replayed"]
    return replays or None
