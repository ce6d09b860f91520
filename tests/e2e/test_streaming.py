"""SSE for SendStreamingMessage and SubscribeToTask (profile §1, §3; A2A notes §2)."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest

from realtime.app import create_app
from realtime.store import keys
from tests.conftest import REALTIME, error_info, livekit_settings, rpc, serving
from tests.e2e.realtime_helpers import call, create_part, create_session, new_id
from tests.e2e.sse_helpers import SseReader, create_message, json_error, stream
from tests.e2e.streaming_helpers import (
    JOURNEY,
    condensed,
    drive_to_active,
    end,
    journey_to_the_end,
    session_state,
    wait_for_state,
)
from tests.e2e.webhook_helpers import deliver, room, webhook_event

pytestmark = pytest.mark.e2e


def task_state(result: dict[str, Any]) -> str:
    body = result.get("task") or result["statusUpdate"]
    state: str = body["status"]["state"]
    return state


async def stream_ids(store: Any, session_id: str) -> list[str]:
    entries = await store.client.xrange(keys.events_key(session_id))
    return [entry_id.decode() for entry_id, _ in entries]


async def test_a_whole_journey_streams_every_event_in_order_and_closes_at_the_end(rt_client, store):
    async with stream(
        rt_client, "SendStreamingMessage", create_message(create_part()), realtime=True
    ) as reader:
        response = reader.response
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        assert response.headers["a2a-extensions"] == REALTIME
        first = await reader.next_data()
        assert first is not None
        assert first.data["jsonrpc"] == "2.0"
        assert first.data["id"] == 7
        task = first.result["task"]
        assert task["status"]["state"] == "TASK_STATE_WORKING"
        assert task["metadata"][REALTIME]["sessionState"] == "provisioning"
        session_id = task["metadata"][REALTIME]["sessionId"]
        seen = await journey_to_the_end(rt_client, reader, first, session_id)
        assert reader.closed

    results = [event.result for event in seen]
    assert all("statusUpdate" in result for result in results[1:])
    for result in results[1:]:
        update = result["statusUpdate"]
        assert update["taskId"] == task["id"]
        assert update["contextId"] == task["contextId"]
        assert update["metadata"][REALTIME]["sessionId"] == session_id
        assert "final" not in update  # removed in A2A 1.0: the stream's end says it
    assert condensed([session_state(result) for result in results]) == JOURNEY
    assert [task_state(result) for result in results[:-1]] == ["TASK_STATE_WORKING"] * (
        len(results) - 1
    )
    assert task_state(results[-1]) == "TASK_STATE_COMPLETED"
    # one SSE event per stream entry, in order, up to the terminal one (`ended` comes later)
    ids = await stream_ids(store, session_id)
    assert [event.id for event in seen] == ids[: len(seen)]
    assert seen[-1].data["id"] == 7


async def test_subscribe_sends_the_current_task_first_then_the_updates(rt_client, store):
    task = (await create_session(rt_client))["result"]["task"]
    session_id = task["metadata"][REALTIME]["sessionId"]
    async with stream(rt_client, "SubscribeToTask", {"id": task["id"]}) as reader:
        first = await reader.next_data()
        assert first is not None
        assert first.result["task"]["id"] == task["id"]
        assert first.result["task"]["metadata"][REALTIME]["sessionState"] == "ready"
        assert first.id == (await stream_ids(store, session_id))[-1]
        await drive_to_active(rt_client, session_id)
        seen: list[Any] = []
        await wait_for_state(reader, "active", seen)
        assert condensed([session_state(e.result) for e in seen]) == ["ready", "joining", "active"]
        await end(rt_client, session_id)
        rest = await reader.rest()
        assert session_state(rest[-1].result) == "ending"
        assert reader.closed


async def test_subscribe_to_a_terminal_task_is_unsupported(rt_client):
    task = (await create_session(rt_client))["result"]["task"]
    await end(rt_client, task["metadata"][REALTIME]["sessionId"])
    async with stream(rt_client, "SubscribeToTask", {"id": task["id"]}) as reader:
        body = await json_error(reader)
    assert body["error"]["code"] == -32004
    assert body["id"] == 7
    assert error_info(body)["reason"] == "UNSUPPORTED_OPERATION"


async def test_subscribe_to_an_unknown_or_foreign_task_is_not_found(rt_client):
    task = (await create_session(rt_client))["result"]["task"]
    for task_id, subject in ((new_id(), "alice"), (task["id"], "mallory")):
        async with stream(rt_client, "SubscribeToTask", {"id": task_id}, subject=subject) as reader:
            body = await json_error(reader)
        assert body["error"]["code"] == -32001
        assert error_info(body)["metadata"] == {"taskId": task_id}


async def test_streaming_errors_before_the_stream_are_plain_json_rpc(rt_client):
    message = create_message(create_part())
    checks = [
        ({"version": None}, -32009),  # 1.0 method without A2A-Version
        ({"realtime": False}, -32008),  # session.create without the extension
        ({"scopes": ("a2a.tasks.read",), "realtime": True}, -31403),
    ]
    for options, code in checks:
        async with stream(rt_client, "SendStreamingMessage", message, **options) as reader:
            body = await json_error(reader)
        assert body["error"]["code"] == code, body
    async with stream(rt_client, "SubscribeToTask", {"id": "not-a-uuid"}) as reader:
        body = await json_error(reader)
    assert body["error"]["code"] == -32602


async def test_a_message_without_session_create_streams_the_rejected_task_and_closes(rt_client):
    text = {"message": {"messageId": new_id(), "role": "ROLE_USER", "parts": [{"text": "hi"}]}}
    async with stream(rt_client, "SendStreamingMessage", text) as reader:
        events = await reader.rest()
    assert "a2a-extensions" not in reader.response.headers
    (only,) = events
    task = only.result["task"]
    assert task["status"]["state"] == "TASK_STATE_REJECTED"
    assert task["status"]["message"]["parts"][1]["data"] == {"reason": "realtime_only"}
    got = await rpc(rt_client, "GetTask", {"id": task["id"]})
    assert got["result"]["status"]["state"] == "TASK_STATE_REJECTED"


# --- resumption -----------------------------------------------------------------------------------


async def finished_journey(client: Any) -> tuple[dict[str, Any], list[Any]]:
    """A session driven from creation to its end over SendStreamingMessage: (task, events)."""
    async with stream(
        client, "SendStreamingMessage", create_message(create_part()), realtime=True
    ) as reader:
        first = await reader.next_data()
        assert first is not None
        task = first.result["task"]
        session_id = task["metadata"][REALTIME]["sessionId"]
        seen = await journey_to_the_end(client, reader, first, session_id)
    return task, seen


async def test_resuming_with_last_event_id_loses_and_repeats_nothing(rt_client):
    task, seen = await finished_journey(rt_client)
    assert len(seen) >= 5
    for cut in (0, 1, len(seen) // 2, len(seen) - 2):
        async with stream(
            rt_client, "SubscribeToTask", {"id": task["id"]}, last_event_id=seen[cut].id
        ) as reader:
            replayed = await reader.rest()
        # the task was terminal after these events: they are replayed up to the terminal one
        assert [e.id for e in replayed] == [e.id for e in seen[cut + 1 :]], cut
        assert [e.result for e in replayed] == [e.result for e in seen[cut + 1 :]]
    async with stream(
        rt_client, "SubscribeToTask", {"id": task["id"]}, last_event_id=seen[-1].id
    ) as reader:
        body = await json_error(reader)  # nothing after the terminal event
    assert body["error"]["code"] == -32004


async def test_resuming_a_live_stream_continues_after_the_last_event(rt_client):
    task = (await create_session(rt_client))["result"]["task"]
    session_id = task["metadata"][REALTIME]["sessionId"]
    async with stream(rt_client, "SubscribeToTask", {"id": task["id"]}) as reader:
        first = await reader.next_data()
        assert first is not None
    await drive_to_active(rt_client, session_id)  # happens while disconnected
    async with stream(
        rt_client, "SubscribeToTask", {"id": task["id"]}, last_event_id=first.id
    ) as reader:
        seen: list[Any] = []
        await wait_for_state(reader, "active", seen)
        assert "statusUpdate" in seen[0].result  # no Task snapshot again: it continues
        assert condensed([session_state(e.result) for e in seen]) == ["ready", "joining", "active"]
        await end(rt_client, session_id)
        assert session_state((await reader.rest())[-1].result) == "ending"


async def test_a_trimmed_last_event_id_gets_the_task_first_flagged(rt_client, store):
    task = (await create_session(rt_client))["result"]["task"]
    session_id = task["metadata"][REALTIME]["sessionId"]
    stream_key = keys.events_key(session_id)
    first_id = (await stream_ids(store, session_id))[0]
    await drive_to_active(rt_client, session_id)
    await store.client.xtrim(
        stream_key, maxlen=1, approximate=False
    )  # what the ~1000 cap does to old entries
    async with stream(
        rt_client, "SubscribeToTask", {"id": task["id"]}, last_event_id=first_id
    ) as reader:
        head = await reader.next_data()
        assert head is not None
        snapshot = head.result["task"]
        assert snapshot["metadata"][REALTIME]["eventsTrimmed"] is True
        assert snapshot["metadata"][REALTIME]["sessionState"] == "active"
        assert head.id == (await stream_ids(store, session_id))[-1]
        await end(rt_client, session_id)
        assert session_state((await reader.rest())[-1].result) == "ending"


async def refused_resumption(client: httpx.AsyncClient, last_event_id: str) -> dict[str, Any]:
    """The error a new session's SubscribeToTask resumed from `last_event_id` answers."""
    task = (await create_session(client))["result"]["task"]
    params = {"id": task["id"]}
    async with stream(client, "SubscribeToTask", params, last_event_id=last_event_id) as reader:
        return await json_error(reader)


async def test_a_malformed_last_event_id_is_invalid_params(rt_client):
    body = await refused_resumption(rt_client, "yesterday")
    assert body["error"]["code"] == -32602


# --- many subscribers, heartbeats -----------------------------------------------------------------


async def test_fifty_concurrent_subscribers_get_identical_sequences(
    livekit, store, tracer_provider
):
    import httpx

    settings = livekit_settings(livekit, sse_max_streams_per_principal=50,
                                sse_max_streams_per_task=50)  # fmt: skip
    app = create_app(settings, store=store, tracer_provider=tracer_provider)
    async with serving(app) as base_url, httpx.AsyncClient(base_url=base_url, timeout=30) as client:
        task = (await create_session(client))["result"]["task"]
        session_id = task["metadata"][REALTIME]["sessionId"]
        ready = asyncio.Event()
        started = 0

        async def subscriber() -> list[tuple[str | None, Any]]:
            nonlocal started
            async with stream(client, "SubscribeToTask", {"id": task["id"]}) as reader:
                first = await reader.next_data()
                assert first is not None
                started += 1
                if started == 50:
                    ready.set()
                rest = await reader.rest(within=10)
            return [(first.id, first.result)] + [(e.id, e.result) for e in rest]

        subscribers = [asyncio.create_task(subscriber()) for _ in range(50)]
        await asyncio.wait_for(ready.wait(), 10)
        await drive_to_active(client, session_id)
        await end(client, session_id)
        sequences = await asyncio.gather(*subscribers)
    assert all(sequence == sequences[0] for sequence in sequences)
    assert condensed([session_state(result) for _, result in sequences[0]]) == JOURNEY[1:]


async def test_an_idle_stream_sends_heartbeats(livekit, store, tracer_provider):
    app = create_app(
        livekit_settings(livekit, sse_heartbeat_s=0.05),
        store=store,
        tracer_provider=tracer_provider,
    )
    async with serving(app) as base_url:
        import httpx

        async with httpx.AsyncClient(base_url=base_url, timeout=10) as client:
            task = (await create_session(client))["result"]["task"]
            async with stream(client, "SubscribeToTask", {"id": task["id"]}) as reader:
                assert await reader.next_data() is not None
                beats = [await reader.next(within=2) for _ in range(3)]
                assert all(b is not None and b.comments == ["keepalive"] for b in beats)
                assert all(b is not None and b.data is None and b.id is None for b in beats)


async def test_a_stalled_subscriber_delays_no_command_and_is_dropped(
    livekit, store, tracer_provider
):
    """A client that stops reading (a tiny receive window, never read) while hundreds of events
    are committed: commands answer as fast as ever, and the hub frees the subscription."""
    import socket
    import time

    import httpx
    import msgspec

    from tests.conftest import headers

    app = create_app(
        livekit_settings(livekit, sse_buffer_events=4), store=store, tracer_provider=tracer_provider
    )
    async with serving(app) as base_url:
        hub = app.state.dispatcher.methods.streams.hub
        async with httpx.AsyncClient(base_url=base_url, timeout=10) as client:
            task = (await create_session(client))["result"]["task"]
            session_id = task["metadata"][REALTIME]["sessionId"]
            endpoint = await drive_to_active(client, session_id)

            host, port = base_url.removeprefix("http://").split(":")
            raw = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            raw.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 2048)
            raw.setblocking(False)
            loop = asyncio.get_running_loop()
            await loop.sock_connect(raw, (host, int(port)))
            body = msgspec.json.encode({"jsonrpc": "2.0", "id": 1, "method": "SubscribeToTask",
                                        "params": {"id": task["id"]}})  # fmt: skip
            head = "".join(f"{k}: {v}\r\n" for k, v in headers().items())
            request = (f"POST /a2a HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
                       f"{head}Content-Length: {len(body)}\r\n\r\n").encode() + body  # fmt: skip
            await loop.sock_sendall(raw, request)
            first = await asyncio.wait_for(loop.sock_recv(raw, 1024), 5)
            assert first.startswith(b"HTTP/1.1 200")
            deadline = time.monotonic() + 5
            while hub.subscribers != 1:
                assert time.monotonic() < deadline
                await asyncio.sleep(0.01)
            # from here on the client reads nothing. Real commits (webhooks) alternate with
            # bursts of entries like theirs, appended directly so that megabytes of events
            # pile up quickly in front of the stalled client
            stream_key = keys.events_key(session_id)
            ((_, fields),) = await store.client.xrevrange(stream_key, count=1)
            slowest = 0.0
            for i in range(40):
                kind = "participant_left" if i % 2 == 0 else "participant_joined"
                event = webhook_event(kind, room(session_id), identity=endpoint, epoch=1)
                started = time.monotonic()
                assert await deliver(client, event) == "applied"
                assert "result" in await call(client, "GetSession", sessionId=session_id)
                slowest = max(slowest, time.monotonic() - started)
                if hub.subscribers == 0:
                    break
                pipe = store.client.pipeline(transaction=False)
                for _ in range(250):
                    pipe.xadd(stream_key, fields)
                await pipe.execute()
                await asyncio.sleep(0.01)
            assert hub.subscribers == 0, "the stalled subscriber was never dropped"
            assert slowest < 1.0  # loosely: a commit and a read take milliseconds
            got = await rpc(client, "GetTask", {"id": task["id"]})
            assert got["result"]["status"]["state"] == "TASK_STATE_WORKING"
            raw.close()


async def test_send_streaming_message_again_resumes_or_streams_the_same_session(rt_client, store):
    message = create_message(create_part())
    async with stream(rt_client, "SendStreamingMessage", message, realtime=True) as reader:
        first = await reader.next_data()
        assert first is not None
        seen: list[Any] = [first]
        await wait_for_state(reader, "ready", seen)
    task = first.result["task"]
    session_id = task["metadata"][REALTIME]["sessionId"]
    await drive_to_active(rt_client, session_id)
    # the same message again, reconnecting after `ready`: the same session, no Task first
    async with stream(
        rt_client, "SendStreamingMessage", message, realtime=True, last_event_id=seen[-1].id
    ) as reader:
        resumed: list[Any] = []
        await wait_for_state(reader, "active", resumed)
        assert all("statusUpdate" in e.result for e in resumed)
        assert condensed([session_state(e.result) for e in resumed]) == [
            "ready",
            "joining",
            "active",
        ]
        ids = await stream_ids(store, session_id)
        assert [e.id for e in seen + resumed] == ids[: len(seen) + len(resumed)]
    await end(rt_client, session_id)
    # once the creation entry is trimmed away, the same message restarts from a flagged snapshot
    await store.client.xtrim(keys.events_key(session_id), maxlen=1, approximate=False)
    async with stream(rt_client, "SendStreamingMessage", message, realtime=True) as reader:
        (only,) = await reader.rest()
    assert only.result["task"]["metadata"][REALTIME]["eventsTrimmed"] is True
    assert only.result["task"]["status"]["state"] == "TASK_STATE_COMPLETED"


async def test_a_requirement_and_its_resolution_are_streamed(rt_client, livekit):
    """The agent asks (INPUT_REQUIRED with the requirement in the status message), the user
    answers with ContinueTask (WORKING again): both reach a subscriber as statusUpdates."""
    from tests.e2e.agent_operation_helpers import continue_params, open_session, request_action

    live = await open_session(rt_client, livekit)
    async with stream(rt_client, "SubscribeToTask", {"id": live.task_id}) as reader:
        first = await reader.next_data()
        assert first is not None
        assert first.result["task"]["status"]["state"] == "TASK_STATE_WORKING"
        operation = await request_action(rt_client, live)
        waiting = await reader.next_data()
        assert waiting is not None
        status = waiting.result["statusUpdate"]["status"]
        assert status["state"] == "TASK_STATE_INPUT_REQUIRED"
        data = status["message"]["parts"][1]["data"]
        assert data["operationId"] == operation["operationId"]
        answered = await rpc(
            rt_client, "ContinueTask", continue_params(live.task_id, data, "approve")
        )
        assert answered["result"]["task"]["status"]["state"] == "TASK_STATE_WORKING"
        resolved = await reader.next_data()
        assert resolved is not None
        assert resolved.result["statusUpdate"]["status"]["state"] == "TASK_STATE_WORKING"
        assert "message" not in resolved.result["statusUpdate"]["status"]


async def test_text_with_unicode_line_separators_stays_one_data_line(rt_client):
    """U+2028, U+2029 and NEL are legal raw in JSON but split lines for many readers (httpx's
    aiter_lines among them): they are sent escaped, and the text reads back unchanged."""
    import json

    text = "one\u2028two\u2029three\x85four"
    message = create_message({"text": text})
    async with stream(rt_client, "SendStreamingMessage", message) as reader:
        lines = [line async for line in reader.response.aiter_lines()]
    data = [line for line in lines if line.startswith("data:")]
    assert len(data) == 1
    task = json.loads(data[0][5:])["result"]["task"]
    assert task["status"]["state"] == "TASK_STATE_REJECTED"
    assert task["history"][0]["parts"][0]["text"] == text


# --- resuming far behind, and ids the stream never had ---------------------------------------


async def read_ids(reader: SseReader, count: int) -> list[str]:
    got = []
    for _ in range(count):
        event = await reader.next_data()
        assert event is not None, f"the stream closed after {len(got)} of {count} events"
        got.append(event.id)
    return got


async def test_a_resume_further_behind_than_the_buffer_gets_every_event(
    livekit, store, tracer_provider
):
    """A client more events behind than its buffer holds catches up at its own pace (it used
    to be dropped before its first event, and again on every reconnect)."""
    import httpx

    app = create_app(
        livekit_settings(livekit, sse_buffer_events=3), store=store, tracer_provider=tracer_provider
    )
    async with serving(app) as base_url, httpx.AsyncClient(base_url=base_url, timeout=10) as client:
        task = (await create_session(client))["result"]["task"]
        session_id = task["metadata"][REALTIME]["sessionId"]
        await drive_to_active(client, session_id)
        ids = await stream_ids(store, session_id)
        assert len(ids) > 4
        async with stream(client, "SubscribeToTask", {"id": task["id"]}, last_event_id=ids[0]) as r:
            assert await read_ids(r, len(ids) - 1) == ids[1:]
            await end(client, session_id)
            rest = await r.rest()
        assert [session_state(e.result) for e in rest][-1] == "ending"


async def test_a_backlog_longer_than_one_read_is_paged_through(rt_client, store):
    task = (await create_session(rt_client))["result"]["task"]
    session_id = task["metadata"][REALTIME]["sessionId"]
    stream_key = keys.events_key(session_id)
    ((first_id, fields),) = await store.client.xrange(stream_key, count=1)
    pipe = store.client.pipeline(transaction=False)
    for _ in range(1050):  # entries like the last one, more than any single read returns
        pipe.xadd(stream_key, fields)
    await pipe.execute()
    ids = await stream_ids(store, session_id)
    start = ids.index(first_id.decode())
    async with stream(
        rt_client, "SubscribeToTask", {"id": task["id"]}, last_event_id=ids[start]
    ) as reader:
        assert await read_ids(reader, len(ids) - start - 1) == ids[start + 1 :]


async def test_an_event_id_beyond_the_64_bit_range_is_invalid_and_harms_no_one(rt_client):
    body = await refused_resumption(rt_client, "99999999999999999999-0")
    assert body["error"]["code"] == -32602


async def test_an_id_ahead_of_the_stream_starts_over_with_the_task(rt_client, store):
    task = (await create_session(rt_client))["result"]["task"]
    session_id = task["metadata"][REALTIME]["sessionId"]
    newest = (await stream_ids(store, session_id))[-1]
    async with stream(
        rt_client, "SubscribeToTask", {"id": task["id"]}, last_event_id="18446744073709551615-0"
    ) as reader:
        first = await reader.next_data()
        assert first is not None
        assert first.id == newest
        assert first.result["task"]["id"] == task["id"]


async def test_a_bad_last_event_id_on_send_streaming_message_creates_nothing(rt_client):
    async with stream(
        rt_client,
        "SendStreamingMessage",
        create_message(create_part()),
        realtime=True,
        last_event_id="not-an-id",
    ) as reader:
        body = await json_error(reader)
    assert body["error"]["code"] == -32602
    listed = await rpc(rt_client, "ListTasks", {})
    assert listed["result"]["tasks"] == []


async def test_send_streaming_message_resumed_after_the_end_is_unsupported(rt_client, store):
    message = create_message(create_part())
    async with stream(rt_client, "SendStreamingMessage", message, realtime=True) as reader:
        first = await reader.next_data()
        assert first is not None
    session_id = first.result["task"]["metadata"][REALTIME]["sessionId"]
    await end(rt_client, session_id)
    terminal = (await stream_ids(store, session_id))[-1]
    async with stream(
        rt_client, "SendStreamingMessage", message, realtime=True, last_event_id=terminal
    ) as reader:
        body = await json_error(reader)
    assert body["error"]["code"] == -32004
