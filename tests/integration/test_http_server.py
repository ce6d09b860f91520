"""The request deadline of the HTTP server (profile §16) in-process, with a small ASGI app whose
routes put the connection in each state the deadline can meet: waiting for a body, answered
before its body arrived, streaming a response while the next request stalls."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest

from realtime.settings import Settings
from tests.conftest import serving

TIMEOUT_S = 1
LIMITS = Settings(http_idle_timeout_s=TIMEOUT_S, http_request_timeout_s=TIMEOUT_S)


class App:
    """`/read` reads its body, then answers; `/early` answers without reading; `/stream` sends a
    chunk every 0.1 s for 3 s."""

    def __init__(self) -> None:
        self.received: list[dict[str, Any]] = []

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            while (await receive())["type"] != "lifespan.shutdown":
                await send({"type": "lifespan.startup.complete"})
            await send({"type": "lifespan.shutdown.complete"})
            return
        if scope["path"] == "/read":
            while True:
                message = await receive()
                self.received.append(message)
                if message["type"] == "http.disconnect" or not message.get("more_body"):
                    break
        start = {"type": "http.response.start", "status": 200, "headers": []}
        if scope["path"] == "/stream":
            await send(start)
            for _ in range(30):
                await send({"type": "http.response.body", "body": b"tick\n", "more_body": True})
                await asyncio.sleep(0.1)
            await send({"type": "http.response.body", "body": b""})
            return
        await send({**start, "headers": [(b"content-length", b"2")]})
        await send({"type": "http.response.body", "body": b"ok"})


@pytest.fixture
async def app_url() -> AsyncIterator[tuple[App, int]]:
    app = App()
    async with serving(app, LIMITS) as base_url:
        yield app, int(base_url.rsplit(":", 1)[1])


async def exchange(port: int, sent: bytes, within: float = TIMEOUT_S + 3) -> tuple[bytes, float]:
    """Send `sent`, then read until the server closes the connection or `within` passes:
    (bytes, seconds)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    started = time.monotonic()
    writer.write(sent)
    received = b""
    try:
        async with asyncio.timeout(within):
            while chunk := await reader.read(65536):
                received += chunk
    except (ConnectionResetError, TimeoutError):
        pass
    finally:
        writer.close()
    return received, time.monotonic() - started


async def answered_then_closed_at_the_deadline(app_url: tuple[App, int], sent: bytes) -> bytes:
    """What the server sent for `sent`: a first answer 200, the connection closed when the
    request deadline passed."""
    _, port = app_url
    received, after = await exchange(port, sent)
    assert received.startswith(b"HTTP/1.1 200 OK\r\n")
    assert TIMEOUT_S - 0.2 <= after <= TIMEOUT_S + 2
    return received


async def test_an_app_waiting_for_a_body_that_never_comes_sees_a_disconnect(app_url) -> None:
    app, port = app_url
    received, after = await exchange(
        port, b"POST /read HTTP/1.1\r\nHost: t\r\nContent-Length: 100\r\n\r\n" + b"x" * 10
    )

    assert received.startswith(b"HTTP/1.1 408 Request Timeout\r\n")
    assert received.endswith(b"\r\n\r\nRequest Timeout")  # the app's own answer was dropped
    assert TIMEOUT_S - 0.2 <= after <= TIMEOUT_S + 2
    await asyncio.sleep(0.1)
    assert app.received[-1] == {"type": "http.disconnect"}


async def test_a_request_answered_before_its_body_arrived_gets_no_408_after_it(app_url) -> None:
    _, port = app_url
    received, after = await exchange(
        port, b"POST /early HTTP/1.1\r\nHost: t\r\nContent-Length: 100\r\n\r\n" + b"x" * 10
    )

    assert received.startswith(b"HTTP/1.1 200 OK\r\n")
    assert received.endswith(b"\r\n\r\nok")
    assert b"408" not in received
    assert after <= TIMEOUT_S + 2


async def test_a_request_stalled_behind_a_streaming_response_closes_it_without_a_408(
    app_url,
) -> None:
    received = await answered_then_closed_at_the_deadline(
        app_url, b"GET /stream HTTP/1.1\r\nHost: t\r\n\r\nGET /read HTTP/1.1\r\nHost:"
    )

    assert b"tick" in received
    assert b"408" not in received  # never written into the middle of another response


async def test_a_streaming_response_is_not_cut_by_the_request_deadline(app_url) -> None:
    _, port = app_url
    received, _ = await exchange(port, b"GET /stream HTTP/1.1\r\nHost: t\r\n\r\n", within=2.5)

    assert received.count(b"tick") >= 15  # still streaming after twice the deadline


async def test_a_complete_request_in_one_chunk_with_the_next_one_started_times_the_next_one(
    app_url,
) -> None:
    received = await answered_then_closed_at_the_deadline(
        app_url, b"GET /early HTTP/1.1\r\nHost: t\r\n\r\nGET /early HTTP/1.1\r\n"
    )

    assert received.count(b"HTTP/1.1 408 ") == 1


async def test_connections_admitted_before_the_limit_was_reached_are_still_served() -> None:
    async with serving(App(), Settings(http_max_connections=2)) as base_url:
        port = int(base_url.rsplit(":", 1)[1])
        request = b"GET /early HTTP/1.1\r\nHost: t\r\n\r\n"
        admitted = [await asyncio.open_connection("127.0.0.1", port) for _ in range(2)]
        try:
            for reader, writer in admitted:
                writer.write(request)
                assert (await reader.readuntil(b"ok")).startswith(b"HTTP/1.1 200 OK\r\n")

            refused, _ = await exchange(port, request)
            probed, _ = await exchange(port, b"GET /healthz HTTP/1.1\r\nConnection: close\r\n\r\n")
            # an over-limit connection still open does not count against the admitted ones
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            for admitted_reader, admitted_writer in admitted:
                admitted_writer.write(request)
                answer = await admitted_reader.readuntil(b"ok")
                assert answer.startswith(b"HTTP/1.1 200 OK\r\n")
            writer.close()
        finally:
            for _, admitted_writer in admitted:
                admitted_writer.close()

    assert refused.startswith(b"HTTP/1.1 503 Service Unavailable\r\n")
    assert b"connection: close" in refused
    assert probed.startswith(b"HTTP/1.1 200 OK\r\n")  # the liveness probe is answered
