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
from typing import Any, Final

import httpx
import pytest

from realtime.http_server import LIVENESS_RESERVE, PROBE_WAIT_S
from tests.cli_processes import Service, serve_environ, serving
from tests.e2e.realtime_helpers import create_part
from tests.e2e.sse_helpers import create_message, stream

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

IDLE_S = 2.0
REQUEST_S = 1.0
# how much later than its timeout a close may come on a loaded machine
SLACK_S = 2.0
HEALTH = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
# idle and request timeouts of a second, an SSE heartbeat every half second
QUICK_IDLE: Final = {
    "AIM_HTTP_IDLE_TIMEOUT_S": "1",
    "AIM_HTTP_REQUEST_TIMEOUT_S": "1",
    "AIM_SSE_HEARTBEAT_S": "0.5",
}
READY = b"GET /readyz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory, redis_url: str | None) -> Iterator[Service]:
    with serving(
        tmp_path_factory.mktemp("connections"),
        ready=True,
        **serve_environ(
            redis_url,
            AIM_HTTP_IDLE_TIMEOUT_S=str(int(IDLE_S)),
            AIM_HTTP_REQUEST_TIMEOUT_S=str(int(REQUEST_S)),
        ),
    ) as svc:
        yield svc
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


def wait_for_a_place(svc: Service, failure: str) -> None:
    """Until a new connection is served again (a place is free once the server has seen a
    close), at most 5 s."""
    deadline = time.monotonic() + 5.0
    while True:
        with connect(svc) as again:
            again.sendall(READY)
            if read_response(again).startswith(b"HTTP/1.1 200"):
                return
        assert time.monotonic() < deadline, failure
        time.sleep(0.1)


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


def fill(svc: Service, held: contextlib.ExitStack, count: int) -> list[socket.socket]:
    """`count` connections to `svc` held open (closed with `held`), each served a /readyz."""
    conns = [held.enter_context(connect(svc)) for _ in range(count)]
    for conn in conns:
        conn.sendall(READY)
        assert read_response(conn).startswith(b"HTTP/1.1 200")
    return conns


def test_connections_over_the_limit_get_503_and_the_service_stays_up(
    tmp_path: Path, redis_url: str | None
) -> None:
    limit = 4
    with (
        serving(
            tmp_path,
            ready=True,
            **serve_environ(redis_url, AIM_HTTP_MAX_CONNECTIONS=str(limit)),
        ) as svc,
        contextlib.ExitStack() as held,
    ):
        conns = fill(svc, held, limit)

        with connect(svc) as extra:
            extra.sendall(READY)
            refused = read_response(extra)
            assert refused.startswith(b"HTTP/1.1 503"), refused
            assert b"connection: close" in refused.lower()
            assert b"retry-after: 1" in refused.lower()
            assert wait_closed(extra, 5.0)[1] is not None
        with connect(svc) as probe:  # the liveness probe is answered even when full
            probe.sendall(HEALTH)
            assert read_response(probe).startswith(b"HTTP/1.1 200")

        for conn in conns:  # the connections within the limit are still served
            conn.sendall(READY)
            assert read_response(conn).startswith(b"HTTP/1.1 200")
        conns[0].close()
        wait_for_a_place(svc, "no place came free")


async def test_an_sse_stream_outlives_the_idle_timeout(
    tmp_path: Path, redis_url: str | None, livekit: Any
) -> None:
    with serving(tmp_path, **serve_environ(redis_url, livekit, **QUICK_IDLE)) as svc:
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


# --- the request head (profile §19): 64 KiB and 100 header lines by default -----------------------


def rss_kib(svc: Service) -> int:
    status = Path(f"/proc/{svc.process.pid}/status").read_text()
    return int(next(line.split()[1] for line in status.splitlines() if line.startswith("VmRSS:")))


def send_until_closed(conn: socket.socket, chunks: Iterator[bytes]) -> None:
    """Send `chunks` until they run out or the server stops taking them."""
    with contextlib.suppress(BrokenPipeError, ConnectionResetError):
        for chunk in chunks:
            conn.sendall(chunk)


def answer_of(conn: socket.socket) -> bytes:
    """What the server sent before it closed the connection."""
    received, closed_after = wait_closed(conn, 5.0)
    assert closed_after is not None, "the connection was left open"
    return received


def test_an_endless_header_line_is_answered_431_without_costing_memory(service: Service) -> None:
    before = rss_kib(service)
    with connect(service) as conn:
        conn.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Big: ")
        # 16 MiB of one header value, sent as it would trickle in; the server stops reading
        send_until_closed(conn, (b"a" * 65536 for _ in range(256)))
        answer = answer_of(conn)
    assert answer.startswith(b"HTTP/1.1 431 "), answer[:200]
    assert b"connection: close" in answer.lower()
    assert rss_kib(service) - before < 8 * 1024, "the header was buffered"


def test_three_unfinished_huge_heads_do_not_grow_the_server(service: Service) -> None:
    before = rss_kib(service)
    with contextlib.ExitStack() as held:
        conns = [held.enter_context(connect(service)) for _ in range(3)]
        for conn in conns:
            conn.sendall(b"POST /a2a HTTP/1.1\r\nHost: 127.0.0.1\r\n")
            send_until_closed(conn, (b"X-Pad-%d: %s\r\n" % (i, b"b" * 4000) for i in range(12000)))
        answers = [answer_of(conn) for conn in conns]
    assert all(answer.startswith(b"HTTP/1.1 431 ") for answer in answers), answers
    assert rss_kib(service) - before < 8 * 1024


def test_twenty_thousand_header_lines_are_answered_431(service: Service) -> None:
    with connect(service) as conn:
        lines = b"".join(b"X-H%d: 1\r\n" % i for i in range(20000))
        send_until_closed(conn, iter([b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n", lines]))
        answer = answer_of(conn)
    assert answer.startswith(b"HTTP/1.1 431 "), answer[:200]


def test_a_head_within_the_limits_is_served(service: Service) -> None:
    # 99 header lines (Host included) and about 60 KiB: just inside both limits
    headers = b"".join(b"X-H%d: %s\r\n" % (i, b"c" * 600) for i in range(98))
    with connect(service) as conn:
        conn.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n" + headers + b"\r\n")
        assert read_response(conn).startswith(b"HTTP/1.1 200")
        conn.sendall(HEALTH)  # and the connection is kept for the next request
        assert read_response(conn).startswith(b"HTTP/1.1 200")


def test_a_pipelined_head_with_too_many_headers_is_answered_431_after_the_first(
    service: Service,
) -> None:
    too_many = b"".join(b"X-H%d: 1\r\n" % i for i in range(150))
    with connect(service) as conn:
        conn.sendall(HEALTH + b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n" + too_many + b"\r\n")
        answer = answer_of(conn)
    first, _, rest = answer.partition(b"\r\n\r\n")
    assert first.startswith(b"HTTP/1.1 200"), answer[:300]
    assert b"HTTP/1.1 431 " in rest, answer[:600]


def test_the_header_limits_are_configurable(tmp_path: Path, redis_url: str | None) -> None:
    with serving(
        tmp_path,
        ready=True,
        **serve_environ(
            redis_url,
            AIM_HTTP_MAX_HEADER_BYTES="16384",
            AIM_HTTP_MAX_HEADERS="20",
        ),
    ) as svc:
        with connect(svc) as conn:  # 20 KiB: under the default, over this limit
            conn.sendall(
                b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: " + b"d" * 20000 + b"\r\n\r\n"
            )
            assert answer_of(conn).startswith(b"HTTP/1.1 431 ")
        with connect(svc) as conn:
            lines = b"".join(b"X-H%d: 1\r\n" % i for i in range(30))
            conn.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n" + lines + b"\r\n")
            assert answer_of(conn).startswith(b"HTTP/1.1 431 ")
        with connect(svc) as conn:
            conn.sendall(HEALTH)
            assert read_response(conn).startswith(b"HTTP/1.1 200")


# --- connections refused when they open -----------------------------------------------------------


def test_connections_far_over_the_limit_are_refused_when_they_open(
    tmp_path: Path, redis_url: str | None
) -> None:
    limit = 4
    with serving(
        tmp_path,
        ready=True,
        **serve_environ(redis_url, AIM_HTTP_MAX_CONNECTIONS=str(limit)),
    ) as svc:
        with contextlib.ExitStack() as held:
            fill(svc, held, limit)
            # the liveness reserve first: admitted, closed after PROBE_WAIT_S unless it asks
            reserve = [held.enter_context(connect(svc)) for _ in range(LIVENESS_RESERVE)]
            # 60 idle sockets over that: each answered 503 at once, without sending a byte
            started = time.monotonic()
            for _ in range(60):
                with connect(svc) as extra:
                    answer = answer_of(extra)
                    assert answer.startswith(b"HTTP/1.1 503 "), answer
                    assert b"retry-after: 1" in answer.lower()
            assert time.monotonic() - started < 30.0
            for conn in reserve:
                assert wait_closed(conn, PROBE_WAIT_S + SLACK_S)[1] is not None
        # once the held ones close, nothing the refused ones did is still holding places
        wait_for_a_place(svc, "the refused sockets still hold places")


def test_one_address_cannot_take_every_connection(tmp_path: Path, redis_url: str | None) -> None:
    with serving(
        tmp_path,
        ready=True,
        **serve_environ(redis_url, AIM_HTTP_MAX_CONNECTIONS_PER_PEER="3"),
    ) as svc:
        port = int(svc.base_url.rsplit(":", 1)[1])
        with contextlib.ExitStack() as held:
            for _ in range(3):
                held.enter_context(connect(svc))
            with connect(svc) as fourth:  # 127.0.0.1's fourth
                answer = answer_of(fourth)
                assert answer.startswith(b"HTTP/1.1 503 "), answer
                assert b"retry-after:" in answer.lower()
            # another client (another loopback address) is served meanwhile
            other = socket.create_connection(("127.0.0.1", port), 10.0, ("127.0.0.2", 0))
            with other:
                other.sendall(READY)
                assert read_response(other).startswith(b"HTTP/1.1 200")
