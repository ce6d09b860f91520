"""The HTTP server: uvicorn configured from Settings, in one place (profile §16 connections).

- Idle keep-alive connections, and new connections that have not sent a byte yet, are closed
  after `AIM_HTTP_IDLE_TIMEOUT_S` (uvicorn's keep-alive timeout). Idle means between requests:
  a request being answered, an SSE stream included, is never idle.
- A request has `AIM_HTTP_REQUEST_TIMEOUT_S` from its first byte to the end of its body; a
  late one is answered 408 and its connection closed (`GuardedProtocol`; uvicorn has no such
  timeout, so a client sending a byte now and then could hold a socket for ever).
- A connection opened while `AIM_HTTP_MAX_CONNECTIONS` others are open has its requests
  answered 503 and is closed, the liveness probe excepted; connections admitted earlier go on
  being served (uvicorn's own `limit_concurrency` would refuse them too, while it is full).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, ClassVar

import uvicorn
from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol

from realtime.settings import Settings

# open SSE streams never finish by themselves: on shutdown, give them this long, then close
# them (clients reconnect elsewhere with Last-Event-ID)
SHUTDOWN_GRACE_S = 10
_TIMEOUT_BODY = b"Request Timeout"
LIVENESS_PATH = b"/healthz"


class GuardedProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with a deadline per request (armed by its first byte,
    disarmed once its body is complete; a request that misses it is answered 408 when nothing
    else is owed on the connection, and the connection is closed either way) and a bound on
    the connections it admits."""

    request_timeout_s: ClassVar[float] = 30.0
    max_connections: ClassVar[int] = 2048
    _deadline: asyncio.TimerHandle | None = None
    _pending = False  # bytes of a request that is not complete yet have arrived
    _over_limit = False

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._over_limit = len(self.connections) > self.max_connections  # itself included
        # idle until its first byte, as between requests (uvicorn arms it only after a response)
        self.timeout_keep_alive_task = self.loop.call_later(
            self.timeout_keep_alive, self.timeout_keep_alive_handler
        )

    def data_received(self, data: bytes) -> None:
        self._pending = True  # any bytes begin a request or continue one
        super().data_received(data)
        # a request that arrived whole needs no timer (the usual case); one that did not, has
        # its deadline from its first bytes on, however slowly the rest comes
        if self._pending and self._deadline is None and not self.transport.is_closing():
            self._deadline = self.loop.call_later(self.request_timeout_s, self._timed_out)

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._pending = True  # also when it begins in the chunk that completed the previous one

    def on_headers_complete(self) -> None:
        # the liveness probe is answered even over the connection limit: a 503 there would
        # restart a pod that is only busy (the readiness probe does get 503, so the pod
        # leaves the Service while it is full)
        refused = self._over_limit and self.url.split(b"?", 1)[0] != LIVENESS_PATH
        # uvicorn answers 503 and closes when its limit is reached; 0 means reached
        self.limit_concurrency = 0 if refused else None
        super().on_headers_complete()

    def on_message_complete(self) -> None:
        self._pending = False
        self._disarm()
        super().on_message_complete()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _timed_out(self) -> None:
        self._deadline = None
        if self.transport.is_closing():
            return
        cycle = self.cycle
        # `self.scope` is the late request's; `cycle` exists for it once its headers are in
        if cycle is None or (cycle.response_complete and cycle.scope is not self.scope):
            self._send_408()  # its headers did not arrive; earlier responses are all sent
        elif cycle.scope is self.scope and not cycle.response_started and not self.pipeline:
            # its body did not arrive and the app has not answered: the app's receive() now
            # sees http.disconnect and whatever it sends is dropped
            cycle.disconnected = True
            cycle.message_event.set()
            self._send_408()
        # otherwise a response is being sent on this connection: closing it is all we can do
        self.transport.close()

    def _send_408(self) -> None:
        head = [STATUS_LINE[408]]
        for name, value in self.server_state.default_headers:
            head += [name, b": ", value, b"\r\n"]
        head.append(
            b"content-type: text/plain; charset=utf-8\r\ncontent-length: %d\r\n"
            b"connection: close\r\n\r\n" % len(_TIMEOUT_BODY)
        )
        self.transport.write(b"".join(head) + _TIMEOUT_BODY)


def guarded_protocol(settings: Settings) -> type[GuardedProtocol]:
    """`GuardedProtocol` with the limits of `settings` (uvicorn builds protocols from a class)."""

    class Configured(GuardedProtocol):
        request_timeout_s = float(settings.http_request_timeout_s)
        max_connections = settings.http_max_connections

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
