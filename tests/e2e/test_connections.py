"""Connection limits of `aim-realtime serve` (profile §16), over real loopback sockets: idle
keep-alive connections are closed, requests whose headers or body do not arrive in time are
answered 408 and closed, connections over the limit get 503, and SSE streams outlive the idle
timeout."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import LIVEKIT_KEY, LIVEKIT_SECRET, TEST_SECRET
from tests.e2e.realtime_helpers import create_part
from tests.e2e.sse_helpers import create_message, stream
from tests.e2e.test_cli import Service, needs, serving

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

IDLE_S = 2.0
REQUEST_S = 1.0
# how much later than its timeout a close may come on a loaded machine
SLACK_S = 2.0
HEALTH = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
READY = b"GET /readyz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory, redis_url: str | None) -> Iterator[Service]:
    with serving(
        tmp_path_factory.mktemp("connections"),
        AIM_REDIS_URL=needs(redis_url),
        AIM_AUTH_HS256_SECRET=TEST_SECRET,
        AIM_HTTP_IDLE_TIMEOUT_S=str(int(IDLE_S)),
        AIM_HTTP_REQUEST_TIMEOUT_S=str(int(REQUEST_S)),
    ) as svc:
        svc.wait_until_ready()
        yield svc
        svc.terminate()
    assert "Traceback" not in svc.output()


def connect(svc: Service) -> socket.socket:
    port = int(svc.base_url.rsplit(":", 1)[1])
    return socket.create_connection(("127.0.0.1", port), timeout=10.0)


def read_response(conn: socket.socket) -> bytes:
    """One complete response with a Content-Length body."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = conn.recv(65536)
        assert chunk, f"closed before a response: {data!r}"
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = next(
        int(line.split(b":", 1)[1])
        for line in head.split(b"\r\n")
        if line.lower().startswith(b"content-length:")
    )
    while len(body) < length:
        chunk = conn.recv(65536)
        assert chunk, "closed in the middle of a body"
        body += chunk
    return head + b"\r\n\r\n" + body


def wait_closed(conn: socket.socket, within: float) -> tuple[bytes, float | None]:
    """What the server sends until it closes the connection, and after how long (None when it
    is still open after `within` seconds)."""
    started = time.monotonic()
    conn.settimeout(0.1)
    received = b""
    while time.monotonic() - started < within:
        try:
            chunk = conn.recv(65536)
        except TimeoutError:
            continue
        except ConnectionResetError:
            return received, time.monotonic() - started
        if not chunk:
            return received, time.monotonic() - started
        received += chunk
    return received, None


def test_an_idle_keep_alive_connection_is_closed_after_the_idle_timeout(service: Service) -> None:
    with connect(service) as conn:
        conn.sendall(HEALTH)
        assert read_response(conn).startswith(b"HTTP/1.1 200")
        conn.sendall(HEALTH)  # still open for another request right after the first
        assert read_response(conn).startswith(b"HTTP/1.1 200")

        received, closed_after = wait_closed(conn, IDLE_S + SLACK_S)

    assert received == b""
    assert closed_after is not None, "the idle connection was never closed"
    assert IDLE_S - 0.3 <= closed_after <= IDLE_S + SLACK_S


def test_a_connection_that_never_sends_anything_is_closed_as_idle(service: Service) -> None:
    with connect(service) as conn:
        received, closed_after = wait_closed(conn, IDLE_S + SLACK_S)

    assert received == b""
    assert closed_after is not None
    assert IDLE_S - 0.3 <= closed_after <= IDLE_S + SLACK_S


def test_half_sent_headers_are_answered_408_and_closed(service: Service) -> None:
    with connect(service) as conn:
        conn.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow:")
        received, closed_after = wait_closed(conn, REQUEST_S + SLACK_S)

    assert received.startswith(b"HTTP/1.1 408 "), received
    assert b"connection: close" in received.lower()
    assert closed_after is not None
    assert REQUEST_S - 0.3 <= closed_after <= REQUEST_S + SLACK_S


def test_headers_sent_a_byte_at_a_time_do_not_extend_the_deadline(service: Service) -> None:
    request = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Padding: " + b"x" * 100
    started = time.monotonic()
    closed_after = None
    with connect(service) as conn:
        for byte in request:
            try:
                conn.sendall(bytes([byte]))
            except (BrokenPipeError, ConnectionResetError):
                closed_after = time.monotonic() - started
                break
            _, closed = wait_closed(conn, 0.2)
            if closed is not None:
                closed_after = time.monotonic() - started
                break

    assert closed_after is not None, "dribbling headers kept the connection open"
    assert closed_after <= REQUEST_S + SLACK_S


def test_a_body_that_stops_short_of_its_length_is_answered_408_and_closed(
    service: Service,
) -> None:
    with connect(service) as conn:
        conn.sendall(
            b"POST /a2a HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            b"Content-Length: 100\r\n\r\n" + b'{"jsonrpc"'
        )
        received, closed_after = wait_closed(conn, REQUEST_S + SLACK_S)

    assert received.startswith(b"HTTP/1.1 408 "), received
    assert closed_after is not None
    assert REQUEST_S - 0.3 <= closed_after <= REQUEST_S + SLACK_S
    # the service is fine afterwards, and logged no traceback for it
    assert httpx.get(f"{service.base_url}/healthz", timeout=5.0).status_code == 200
    assert "Traceback" not in service.output()


def test_a_slow_request_is_timed_from_its_first_byte_not_from_the_last_response(
    service: Service,
) -> None:
    with connect(service) as conn:
        conn.sendall(HEALTH)
        assert read_response(conn).startswith(b"HTTP/1.1 200")
        time.sleep(IDLE_S / 2)  # idle, within the idle timeout
        conn.sendall(b"GET /healthz HTTP/1.1\r\n")
        received, closed_after = wait_closed(conn, REQUEST_S + SLACK_S)

    assert received.startswith(b"HTTP/1.1 408 "), received
    assert closed_after is not None
    assert REQUEST_S - 0.3 <= closed_after <= REQUEST_S + SLACK_S


def test_connections_over_the_limit_get_503_and_the_service_stays_up(
    tmp_path: Path, redis_url: str | None
) -> None:
    limit = 4
    with serving(
        tmp_path,
        AIM_REDIS_URL=needs(redis_url),
        AIM_AUTH_HS256_SECRET=TEST_SECRET,
        AIM_HTTP_MAX_CONNECTIONS=str(limit),
    ) as svc:
        svc.wait_until_ready()
        with contextlib.ExitStack() as held:
            conns = [held.enter_context(connect(svc)) for _ in range(limit)]
            for conn in conns:
                conn.sendall(READY)
                assert read_response(conn).startswith(b"HTTP/1.1 200")

            with connect(svc) as extra:
                extra.sendall(READY)
                refused = read_response(extra)
                assert refused.startswith(b"HTTP/1.1 503"), refused
                assert b"connection: close" in refused.lower()
                assert wait_closed(extra, 5.0)[1] is not None
            with connect(svc) as probe:  # the liveness probe is answered even when full
                probe.sendall(HEALTH)
                assert read_response(probe).startswith(b"HTTP/1.1 200")

            for conn in conns:  # the connections within the limit are still served
                conn.sendall(READY)
                assert read_response(conn).startswith(b"HTTP/1.1 200")
            conns[0].close()
            deadline = time.monotonic() + 5.0
            while True:  # a place is free again once the server has seen the close
                with connect(svc) as again:
                    again.sendall(READY)
                    if read_response(again).startswith(b"HTTP/1.1 200"):
                        break
                assert time.monotonic() < deadline, "no place came free"
                time.sleep(0.1)
        svc.terminate()


async def test_an_sse_stream_outlives_the_idle_timeout(
    tmp_path: Path, redis_url: str | None, livekit: Any
) -> None:
    with serving(
        tmp_path,
        AIM_REDIS_URL=needs(redis_url),
        AIM_AUTH_HS256_SECRET=TEST_SECRET,
        AIM_LIVEKIT_URL=livekit.ws_url,
        AIM_LIVEKIT_API_KEY=LIVEKIT_KEY,
        AIM_LIVEKIT_API_SECRET=LIVEKIT_SECRET,
        AIM_HTTP_IDLE_TIMEOUT_S="1",
        AIM_HTTP_REQUEST_TIMEOUT_S="1",
        AIM_SSE_HEARTBEAT_S="0.5",
    ) as svc:
        await asyncio.to_thread(svc.wait_until_ready)
        async with (
            httpx.AsyncClient(base_url=svc.base_url, timeout=10.0) as client,
            stream(
                client, "SendStreamingMessage", create_message(create_part()), realtime=True
            ) as reader,
        ):
            first = await reader.next_data()
            assert first is not None
            assert "task" in first.result
            started = time.monotonic()
            heartbeats = 0
            while time.monotonic() - started < 4.0:  # four idle timeouts
                event = await reader.next(within=2.0)
                assert event is not None, "the stream was closed"
                heartbeats += event.data is None
            assert heartbeats >= 4
            assert not reader.closed
        await asyncio.to_thread(svc.terminate)
