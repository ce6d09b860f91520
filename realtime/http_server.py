"""The HTTP server: uvicorn configured from Settings, in one place (profile §16, §19).

- Idle keep-alive connections, and new connections that have not sent a byte yet, are closed
  after `AIM_HTTP_IDLE_TIMEOUT_S` (uvicorn's keep-alive timeout). Idle means between requests:
  a request being answered, an SSE stream included, is never idle.
- A request has `AIM_HTTP_REQUEST_TIMEOUT_S` from its first byte to the end of its body; a
  late one is answered 408 and its connection closed (`GuardedProtocol`; uvicorn has no such
  timeout, so a client sending a byte now and then could hold a socket for ever).
- A request head (request line and header lines) longer than `AIM_HTTP_MAX_HEADER_BYTES`, or
  with more than `AIM_HTTP_MAX_HEADERS` header lines, is answered 431 and its connection
  closed. Bytes are counted as they arrive, before the parser sees them, so an endless header
  costs no more memory than the limit.
- Whether a connection is over `AIM_HTTP_MAX_CONNECTIONS` is decided when it opens;
  connections admitted earlier go on being served. A few over it (`LIVENESS_RESERVE`) get
  `PROBE_WAIT_S` to ask for the liveness probe, the only request they are answered (anything
  else: 503 with `Retry-After`); beyond those, and past `AIM_HTTP_MAX_CONNECTIONS_PER_PEER`
  from one address, a connection is answered 503 and closed the moment it opens, so refused
  sockets hold no descriptor.
- A response whose client takes none of its waiting bytes for `AIM_HTTP_WRITE_TIMEOUT_S` (a
  reader that stopped reading, an SSE stream's above all) has its connection aborted: the
  app sees the client gone and ends the stream, freeing its slot. The transport counts as
  waiting as soon as one byte stays unsent (not only past 64 KiB), so a close that would
  wait for ever behind unread bytes is bounded the same way.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Callable
from typing import Any, ClassVar

import uvicorn
from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol

from realtime.settings import Settings

# open SSE streams never finish by themselves: on shutdown, give them this long, then close
# them (clients reconnect elsewhere with Last-Event-ID)
SHUTDOWN_GRACE_S = 10
LIVENESS_PATH = b"/healthz"
# connections over the limit that may still ask for the liveness probe, and how long they have
# to send it: a kubelet sends its probe as soon as it connects
LIVENESS_RESERVE = 8
PROBE_WAIT_S = 2.0
RETRY_AFTER_S = 1  # what a refused client is told to wait before it connects again
_HEAD_END = b"\r\n\r\n"
_TIMEOUT_BODY = b"Request Timeout"
_TOO_LARGE_BODY = b"Request Header Fields Too Large"
_UNAVAILABLE_BODY = b"Service Unavailable"


class _HeadTooLargeError(Exception):
    """Raised in a parser callback to stop parsing a head over the limits (answered 431)."""


async def _unavailable(scope: Any, receive: Any, send: Any) -> None:
    """The answer to a request on a connection over the limit (an ASGI app)."""
    await send(
        {
            "type": "http.response.start",
            "status": 503,
            "headers": [
                (b"content-type", b"text/plain; charset=utf-8"),
                (b"content-length", b"%d" % len(_UNAVAILABLE_BODY)),
                (b"retry-after", b"%d" % RETRY_AFTER_S),
                (b"connection", b"close"),
            ],
        }
    )
    await send({"type": "http.response.body", "body": _UNAVAILABLE_BODY})


class GuardedProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with a deadline per request (armed by its first byte,
    disarmed once its body is complete; a request that misses it is answered 408 when nothing
    else is owed on the connection, and the connection is closed either way), bounds on the
    request head, and bounds on the connections it admits (in all, and from one address)."""

    request_timeout_s: ClassVar[float] = 30.0
    max_connections: ClassVar[int] = 2048
    max_per_peer: ClassVar[int] = 256  # 0: no per-address bound
    max_header_bytes: ClassVar[int] = 64 * 1024
    max_headers: ClassVar[int] = 100
    write_timeout_s: ClassVar[float] = 30.0
    peers: ClassVar[Counter[str]] = Counter()  # open connections by peer address
    _deadline: asyncio.TimerHandle | None = None
    _stall: asyncio.TimerHandle | None = None  # armed while bytes wait to be sent
    _unsent = 0  # bytes waiting when `_stall` was armed
    _pending = False  # bytes of a request that is not complete yet have arrived
    _over_limit = False  # admitted over the limit: only the liveness probe is answered
    _refused = False  # answered 503 when it opened, or its head was too large: not read
    _431_after_response = False  # a head too large arrived while an answer was being sent
    _peer: str | None = None  # counted in `peers` under this address
    _head_bytes: int | None = 0  # bytes of the head being received (None: in a body)
    _tail = b""  # the head's last bytes: its end may be split between two reads
    _head_lines = 0  # lines of the head being received, counted as they arrive
    _header_count = 0  # header lines the parser has handed over for the current request

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        # writing pauses (and the stall timer runs) whenever a byte is left unsent: the
        # kernel's buffers are the only ones, and a response's next write waits for them
        transport.set_write_buffer_limits(high=0)
        peer = self.client[0] if self.client else ""
        total = len(self.connections)  # itself included
        crowded = self.max_per_peer > 0 and self.peers[peer] >= self.max_per_peer
        if crowded or total > self.max_connections + LIVENESS_RESERVE:
            self._refused = True
            self._write_and_close(503, _UNAVAILABLE_BODY, b"retry-after: %d\r\n" % RETRY_AFTER_S)
            return
        self._peer = peer
        self.peers[peer] += 1
        self._over_limit = total > self.max_connections
        # idle until its first byte, as between requests (uvicorn arms it only after a response)
        wait = min(self.timeout_keep_alive, PROBE_WAIT_S) if self._over_limit else None
        self.timeout_keep_alive_task = self.loop.call_later(
            wait or self.timeout_keep_alive, self.timeout_keep_alive_handler
        )

    def data_received(self, data: bytes) -> None:
        if self._refused or self.transport.is_closing():
            return
        if self._head_bytes is not None and not self._count_head(data):
            return
        self._pending = True  # any bytes begin a request or continue one
        super().data_received(data)
        # a request that arrived whole needs no timer (the usual case); one that did not, has
        # its deadline from its first bytes on, however slowly the rest comes
        if self._pending and self._deadline is None and not self.transport.is_closing():
            self._deadline = self.loop.call_later(self.request_timeout_s, self._timed_out)

    def _count_head(self, data: bytes) -> bool:
        """Count the head's bytes in `data` (up to its end, when it ends there); False when
        the head is over the limit (answered 431: the parser never sees those bytes)."""
        seen = self._tail + data
        end = seen.find(_HEAD_END)
        counted = len(data) if end < 0 else end + len(_HEAD_END) - len(self._tail)
        self._head_bytes = (self._head_bytes or 0) + counted
        # every line ends with a LF: the request line, each header, the empty line at the end
        self._head_lines += data.count(b"\n", 0, counted)
        self._tail = seen[-3:] if end < 0 else b""
        if self._head_bytes > self.max_header_bytes or self._head_lines > self.max_headers + 2:
            self._head_too_large()
            return False
        return True

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._pending = True  # also when it begins in the chunk that completed the previous one
        self._header_count = 0

    def on_header(self, name: bytes, value: bytes) -> None:
        # a head pipelined behind another in one read is not counted as it arrives (the read
        # is bounded): its header lines are bounded here
        self._header_count += 1
        if self._header_count > self.max_headers:
            raise _HeadTooLargeError
        super().on_header(name, value)

    def on_headers_complete(self) -> None:
        self._head_bytes = None
        # the liveness probe is answered even over the connection limit: a 503 there would
        # restart a pod that is only busy (the readiness probe does get 503, so the pod
        # leaves the Service while it is full)
        if self._over_limit and self.url.split(b"?", 1)[0] != LIVENESS_PATH:
            self.app = _unavailable  # this connection's every request; it closes after one
        super().on_headers_complete()

    def on_message_complete(self) -> None:
        self._pending = False
        self._head_bytes, self._head_lines, self._tail = 0, 0, b""  # the next head begins
        self._disarm()
        super().on_message_complete()

    def send_400_response(self, msg: str) -> None:
        # uvicorn answers 400 to whatever stopped its parser, our own stop included
        if self._header_count > self.max_headers:
            self._head_too_large()
        else:
            super().send_400_response(msg)

    def pause_writing(self) -> None:
        super().pause_writing()
        self._watch_writes()

    def resume_writing(self) -> None:
        self._unwatch_writes()
        super().resume_writing()

    def _watch_writes(self) -> None:
        if self._stall is None:
            self._unsent = self.transport.get_write_buffer_size()
            self._stall = self.loop.call_later(self.write_timeout_s, self._check_writes)

    def _unwatch_writes(self) -> None:
        if self._stall is not None:
            self._stall.cancel()
            self._stall = None

    def _check_writes(self) -> None:
        """No new bytes are written while paused: fewer waiting means the client read some."""
        self._stall = None
        unsent = self.transport.get_write_buffer_size()
        if unsent == 0:
            return
        if unsent < self._unsent:  # a slow reader, but a reader: another period
            self._watch_writes()
            return
        self.transport.abort()  # connection_lost follows: the app sees the client gone

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        self._unwatch_writes()
        if self._peer is not None:
            self.peers[self._peer] -= 1
            if self.peers[self._peer] <= 0:
                del self.peers[self._peer]
            self._peer = None
        super().connection_lost(exc)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _head_too_large(self) -> None:
        self._refused = True  # nothing more is read from this connection
        cycle = self.cycle
        if cycle is None or cycle.response_complete:
            self._write_and_close(431, _TOO_LARGE_BODY)
        else:  # the request before it is being answered: the 431 follows that answer
            self._431_after_response = True
            self.transport.pause_reading()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if self._431_after_response and not self.transport.is_closing():
            self._write_and_close(431, _TOO_LARGE_BODY)

    def _timed_out(self) -> None:
        self._deadline = None
        if self.transport.is_closing():
            return
        cycle = self.cycle
        # `self.scope` is the late request's; `cycle` exists for it once its headers are in
        if cycle is None or (cycle.response_complete and cycle.scope is not self.scope):
            self._write_and_close(408, _TIMEOUT_BODY)  # its headers did not arrive
            return
        if cycle.scope is self.scope and not cycle.response_started and not self.pipeline:
            # its body did not arrive and the app has not answered: the app's receive() now
            # sees http.disconnect and whatever it sends is dropped
            cycle.disconnected = True
            cycle.message_event.set()
            self._write_and_close(408, _TIMEOUT_BODY)
            return
        # otherwise a response is being sent on this connection: closing it is all we can do
        self.transport.close()

    def _write_and_close(self, status: int, body: bytes, extra: bytes = b"") -> None:
        """Answer `status` outside any request cycle (nothing else is owed on the
        connection), then close it."""
        head = [STATUS_LINE[status]]
        for name, value in self.server_state.default_headers:
            head += [name, b": ", value, b"\r\n"]
        head.append(
            b"content-type: text/plain; charset=utf-8\r\ncontent-length: %d\r\n%s"
            b"connection: close\r\n\r\n" % (len(body), extra)
        )
        self.transport.write(b"".join(head) + body)
        self.transport.close()


def guarded_protocol(settings: Settings) -> type[GuardedProtocol]:
    """`GuardedProtocol` with the limits of `settings` (uvicorn builds protocols from a class)."""

    class Configured(GuardedProtocol):
        request_timeout_s = float(settings.http_request_timeout_s)
        max_connections = settings.http_max_connections
        max_per_peer = settings.http_max_connections_per_peer
        max_header_bytes = settings.http_max_header_bytes
        max_headers = settings.http_max_headers
        write_timeout_s = settings.http_write_timeout_s
        peers: ClassVar[Counter[str]] = Counter()  # this server's own

    return Configured


def server_config(
    app: Callable[..., Any],
    settings: Settings,
    *,
    host: str = "127.0.0.1",
    port: int = 8080,
    log_level: str = "info",
) -> uvicorn.Config:
    """How `serve` (and the tests, in-process) run the app."""
    return uvicorn.Config(
        app,
        host=host,
        port=port,
        http=guarded_protocol(settings),
        ws="none",  # the service has no WebSocket routes: upgrades are not offered
        lifespan="on",  # the app opens its store there: a failure must stop the server
        timeout_keep_alive=settings.http_idle_timeout_s,
        log_level=log_level,
        access_log=False,
        timeout_graceful_shutdown=SHUTDOWN_GRACE_S,
    )
