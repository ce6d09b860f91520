"""SSE streams are bounded per principal, per task and in time, over real loopback sockets: a
stream past a cap is refused -31011 with Retry-After before it starts (SendStreamingMessage
creates nothing then), a slot comes free whichever way a stream ends, a stream is closed after
its lifetime once a whole event is out and resumed from there, a reader that stops reading is
cut, and the Python client resumes a stream the service cut without the app noticing."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import msgspec
import pytest

from aim_realtime_client import AimClient, RetryPolicy, StateChanged
from realtime.app import create_app
from realtime.settings import Settings
from realtime.store import keys
from tests.cli_processes import serve_environ
from tests.cli_processes import serving as serving_process
from tests.conftest import (
    REALTIME,
    headers,
    livekit_settings,
    rpc,
    serving,
    token,
)
from tests.e2e.client_helpers import Events, Wire, proxied_service, server_event_ids, stream_id
from tests.e2e.realtime_helpers import create_part, create_session
from tests.e2e.sse_helpers import create_message, stream
from tests.e2e.stream_limit_helpers import held, limit_of, opens, refusal
from tests.e2e.streaming_helpers import drive_to_active, end
from tests.e2e.webhook_helpers import room, send_webhook

pytestmark = [pytest.mark.e2e, pytest.mark.redis]

LIFETIME_S = 0.5


@contextlib.asynccontextmanager
async def service(settings: Settings, store: Any) -> AsyncIterator[httpx.AsyncClient]:
    app = create_app(settings, store=store, tracer_provider=None)
    async with (
        serving(app, settings) as base_url,
        httpx.AsyncClient(base_url=base_url, timeout=10) as client,
    ):
        yield client


async def new_task(client: httpx.AsyncClient, subject: str = "alice") -> dict[str, Any]:
    created = await create_session(client, subject=subject)
    task: dict[str, Any] = created["result"]["task"]
    return task


async def test_streams_past_the_task_or_the_principal_cap_are_refused_until_one_ends(
    livekit, store
):
    settings = livekit_settings(livekit, sse_max_streams_per_principal=3,
                                sse_max_streams_per_task=2)  # fmt: skip
    async with service(settings, store) as client, contextlib.AsyncExitStack() as streams:
        one, two, three = [await new_task(client) for _ in range(3)]
        first = await streams.enter_async_context(held(client, one["id"]))
        await streams.enter_async_context(held(client, one["id"]))

        # a third on the same task: refused before any stream starts, saying when to retry
        body, answer = await refusal(client, "SubscribeToTask", {"id": one["id"]})
        assert limit_of(body) == "streams_per_task"
        assert answer["retry-after"] == "5"
        assert body["error"]["data"][0]["metadata"]["retryAfterSeconds"] == "5"
        assert one["id"] in body["error"]["message"]

        # another task of the same caller: its third stream; a fourth is one too many
        await streams.enter_async_context(held(client, two["id"]))
        body, answer = await refusal(client, "SubscribeToTask", {"id": three["id"]})
        assert limit_of(body) == "streams_per_principal"
        assert answer["retry-after"] == "5"

        # another caller is not counted against alice
        bobs = await new_task(client, "bob")
        async with held(client, bobs["id"], subject="bob"):
            pass

        # a client that leaves frees its slot
        await first.response.aclose()
        await opens(client, three["id"])

        # so does a stream the service ends (its task became terminal)
        await streams.aclose()
        async with held(client, one["id"]) as reader:
            await end(client, one["metadata"][REALTIME]["sessionId"])
            assert await reader.rest() != []
            assert reader.closed
        async with contextlib.AsyncExitStack() as again:
            for task in (two, two, three):
                await again.enter_async_context(held(client, task["id"]))


async def test_send_streaming_message_past_the_cap_is_refused_and_creates_nothing(livekit, store):
    settings = livekit_settings(livekit, sse_max_streams_per_principal=1)
    async with service(settings, store) as client:
        task = await new_task(client)
        before = (await rpc(client, "ListTasks", {}))["result"]["tasks"]
        async with held(client, task["id"]):
            message = create_message(create_part())
            body, answer = await refusal(client, "SendStreamingMessage", message, realtime=True)
            assert limit_of(body) == "streams_per_principal"
            assert answer["retry-after"] == "5"
        after = (await rpc(client, "ListTasks", {}))["result"]["tasks"]
        assert [t["id"] for t in after] == [t["id"] for t in before]
        # the same message once a slot is free: created and streamed
        async with stream(client, "SendStreamingMessage", message, realtime=True) as reader:
            first = await reader.next_data()
            assert first is not None
            assert first.result["task"]["id"] not in {t["id"] for t in before}


async def test_a_stream_is_closed_cleanly_after_its_lifetime_and_resumes_where_it_stopped(
    livekit, store
):
    settings = livekit_settings(livekit, sse_max_lifetime_s=LIFETIME_S, sse_heartbeat_s=0.1,
                                sse_max_streams_per_principal=1)  # fmt: skip
    async with service(settings, store) as client:
        task = await new_task(client)
        session_id = task["metadata"][REALTIME]["sessionId"]
        started = time.monotonic()
        async with stream(client, "SubscribeToTask", {"id": task["id"]}) as reader:
            body = await asyncio.wait_for(reader.response.aread(), 10)
        lived = time.monotonic() - started
        assert LIFETIME_S <= lived < LIFETIME_S + 5
        # whole events only: the Task, heartbeats, then the comment that says to reconnect
        blocks = body.decode().split("\n\n")
        assert blocks[-2:] == [": reconnect", ""]
        assert blocks[0].startswith("id: ")
        assert set(blocks[1:-2]) <= {": keepalive"}
        lines = blocks[0].split("\n")
        task_id = lines[0].removeprefix("id: ")
        data = msgspec.json.decode(lines[1].removeprefix("data: "))
        assert data["result"]["task"]["id"] == task["id"]

        # the slot is free at once; the session moves on; a resume gets exactly what followed
        await drive_to_active(client, session_id)
        async with stream(
            client, "SubscribeToTask", {"id": task["id"]}, last_event_id=task_id
        ) as reader:
            resumed = await reader.rest(within=10)
        ids = await server_event_ids(store, session_id)
        assert [event.id for event in resumed] == ids[ids.index(task_id) + 1 :]
        assert all("statusUpdate" in event.result for event in resumed)


@pytest.mark.slow
async def test_a_reader_that_stops_reading_is_cut_and_its_slot_freed(
    tmp_path: Path, redis_url: str | None, livekit: Any, store: Any
) -> None:
    """A client that reads nothing more (a tiny receive window) while events pile up: its
    connection is aborted once no byte went out for AIM_HTTP_WRITE_TIMEOUT_S, and its stream's
    slot is free for the next one. `serve` as an operator runs it."""
    with serving_process(
        tmp_path,
        **serve_environ(
            redis_url,
            livekit,
            AIM_RATE_LIMIT_RPS="0",
            AIM_SSE_MAX_STREAMS_PER_PRINCIPAL="1",
            AIM_HTTP_WRITE_TIMEOUT_S="1",
        ),
    ) as svc:
        await asyncio.to_thread(svc.wait_until_ready)
        async with httpx.AsyncClient(base_url=svc.base_url, timeout=10) as client:
            stalled, other = await new_task(client), await new_task(client)
            loop = asyncio.get_running_loop()
            raw = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            raw.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 2048)
            raw.setblocking(False)
            port = int(svc.base_url.rsplit(":", 1)[1])
            await loop.sock_connect(raw, ("127.0.0.1", port))
            body = msgspec.json.encode({"jsonrpc": "2.0", "id": 1, "method": "SubscribeToTask",
                                        "params": {"id": stalled["id"]}})  # fmt: skip
            head = "".join(f"{k}: {v}\r\n" for k, v in headers().items())
            request = (f"POST /a2a HTTP/1.1\r\nHost: 127.0.0.1\r\n{head}"
                       "Content-Type: application/json\r\n"
                       f"Content-Length: {len(body)}\r\n\r\n").encode() + body  # fmt: skip
            await loop.sock_sendall(raw, request)
            first = await asyncio.wait_for(loop.sock_recv(raw, 1024), 5)
            assert first.startswith(b"HTTP/1.1 200")
            refused, _ = await refusal(client, "SubscribeToTask", {"id": other["id"]})
            assert limit_of(refused) == "streams_per_principal"

            # from here on the client reads nothing, while entries like the session's own
            # pile up in its event stream
            events_key = keys.events_key(stalled["metadata"][REALTIME]["sessionId"])
            ((_, fields),) = await store.client.xrevrange(events_key, count=1)
            deadline = time.monotonic() + 30
            while True:
                pipe = store.client.pipeline(transaction=False)
                for _ in range(250):
                    pipe.xadd(events_key, fields)
                await pipe.execute()
                async with stream(client, "SubscribeToTask", {"id": other["id"]}) as reader:
                    if reader.response.headers["content-type"].startswith("text/event-stream"):
                        break
                assert time.monotonic() < deadline, "the stalled stream kept its slot"
                await asyncio.sleep(0.2)

            # the stalled connection was closed by the service (reset, or what it had sent
            # and then its end; a connection still open fails here after 5 s of silence)
            with contextlib.suppress(ConnectionResetError):
                for _ in range(100_000):
                    if not await asyncio.wait_for(loop.sock_recv(raw, 65536), 5):
                        break
            raw.close()
        await asyncio.to_thread(svc.terminate)


async def test_the_python_client_resumes_streams_the_service_cuts_without_the_app_noticing(
    livekit, store
):
    """Streams cut at their lifetime again and again, most with no event in between: the
    client resumes each at once after the last event it got; the app sees every event once,
    in order, and no error (two failed reconnects in a row would be one)."""
    wire = Wire()
    backoff = RetryPolicy(attempts=2, base_delay_ms=50, max_delay_ms=50)
    async with (
        proxied_service(livekit, store, sse_max_lifetime_s=0.3, sse_heartbeat_s=0.1) as served,
        wire.client() as http,
        AimClient(
            served.device_url, token=token("alice"), http=http, stream_backoff=backoff
        ) as client,
    ):
        phone = await client.create_session("phone")
        sid = phone.session_id
        events = Events(phone)
        await events.until(lambda e: isinstance(e, StateChanged))

        async def cut(times: int) -> None:
            wanted = len(wire.of("SubscribeToTask")) + times
            deadline = time.monotonic() + 10
            while len(wire.of("SubscribeToTask")) < wanted:
                assert time.monotonic() < deadline, [e.name for e in events.seen]
                await asyncio.sleep(0.05)

        await cut(4)  # quiet: nothing but heartbeats between the cuts
        await phone.join()
        joined = await send_webhook(served.http, "participant_joined", room(sid),
                                    str(phone.endpoint_id))  # fmt: skip
        assert joined == "applied"
        await events.until(lambda e: isinstance(e, StateChanged) and e.state == "active")
        await cut(3)
        await phone.end("bye")
        ended = await events.until(lambda e: e.name == "ended")
        assert ended.task_state == "TASK_STATE_COMPLETED"
        await events.done()

        assert events.named("error") == []
        subscribes = wire.of("SubscribeToTask")
        assert all("last-event-id" in s.headers for s in subscribes[1:])
        ids = [update.event_id for update in events.named("update")]
        first, last = stream_id(ids[0]), stream_id(ids[-1])
        kept = [i for i in await server_event_ids(store, sid) if first < stream_id(i) <= last]
        assert ids[1:] == kept
