"""A small TCP proxy for fault tests: 127.0.0.1:<ephemeral> in front of a Redis (unix or TCP).

It forwards bytes both ways and can break the link at chosen moments:

* `arm(pattern, forward=...)`: the next client→server chunk containing `pattern` cuts every
  proxied connection. `forward=False`: the chunk is dropped, so the command never reaches the
  server (nothing applied). `forward=True`: the chunk is forwarded and the server's reply is
  awaited and swallowed before the cut (applied, reply lost).
* `refuse()`/`restore()`: new connections are accepted and closed at once (the server looks
  unreachable) / served again. `cut()` closes every proxied connection now.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from urllib.parse import parse_qs, urlsplit, urlunsplit

Connect = Callable[[], Awaitable[tuple[asyncio.StreamReader, asyncio.StreamWriter]]]

_CHUNK = 65536
REPLY_WAIT_S = 2.0


@dataclass
class _Trip:
    pattern: bytes
    forward: bool
    refuse: bool
    tripped: asyncio.Event = field(default_factory=asyncio.Event)


@dataclass(eq=False)
class _Link:
    client: asyncio.StreamWriter
    server: asyncio.StreamWriter
    swallow: bool = False
    replied: asyncio.Event = field(default_factory=asyncio.Event)
    held: bytes = b""  # what was read of a swallowed answer (`AnswerCuttingProxy`)

    def close(self) -> None:
        for writer in (self.client, self.server):
            with contextlib.suppress(Exception):
                writer.close()


class TcpProxy:
    """`async with TcpProxy(connect) as proxy:` listens on `proxy.port` until the block ends."""

    def __init__(self, connect: Connect) -> None:
        self._connect = connect
        self._server: asyncio.Server | None = None
        self._links: set[_Link] = set()
        self._handlers: set[asyncio.Task[None]] = set()
        self._trip: _Trip | None = None
        self.refusing = False
        self.accepted = 0
        self.port = 0

    @classmethod
    def to_redis(cls, url: str) -> TcpProxy:
        """A proxy to the Redis at `url` (`unix://path` or `redis://host:port`)."""
        parts = urlsplit(url)
        if parts.scheme == "unix":
            path = parts.path
            return cls(lambda: asyncio.open_unix_connection(path))
        host, port = parts.hostname or "127.0.0.1", parts.port or 6379
        return cls(lambda: asyncio.open_connection(host, port))

    @staticmethod
    def redis_url_through(url: str, port: int) -> str:
        """`url` with the proxy as its address (credentials and database kept)."""
        parts = urlsplit(url)
        if parts.scheme == "unix":
            db = parse_qs(parts.query).get("db", ["0"])[0]
            return f"redis://127.0.0.1:{port}/{db}"
        auth = parts.netloc.rpartition("@")[0]
        netloc = f"{auth}@127.0.0.1:{port}" if auth else f"127.0.0.1:{port}"
        return urlunsplit((parts.scheme, netloc, parts.path, parts.query, ""))

    async def start(self) -> TcpProxy:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        self.cut()
        if self._handlers:
            await asyncio.gather(*self._handlers, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()
            self._server = None

    async def __aenter__(self) -> TcpProxy:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    # ---- faults ----------------------------------------------------------------------------
    def arm(self, pattern: bytes, *, forward: bool, refuse: bool = True) -> asyncio.Event:
        """Cut every link when a client sends `pattern`; the event is set once that happened.
        `refuse`: also refuse new connections from then on (until `restore()`)."""
        self._trip = _Trip(pattern, forward, refuse)
        return self._trip.tripped

    def refuse(self) -> None:
        self.refusing = True
        self.cut()

    def restore(self) -> None:
        self.refusing = False

    @property
    def links(self) -> list[_Link]:
        """The proxied connections open now."""
        return list(self._links)

    def cut(self) -> None:
        for link in list(self._links):
            link.close()

    # ---- forwarding ------------------------------------------------------------------------
    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._handlers.add(task)
        try:
            await self._serve(reader, writer)
        finally:
            self._handlers.discard(task)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.accepted += 1
        if self.refusing:
            writer.close()
            return
        try:
            up_reader, up_writer = await self._connect()
        except OSError:
            writer.close()
            return
        link = _Link(writer, up_writer)
        self._links.add(link)
        try:
            await asyncio.gather(
                self._upstream(link, reader, up_writer),
                self._downstream(link, up_reader, writer),
                return_exceptions=True,
            )
        finally:
            self._links.discard(link)
            link.close()

    async def _upstream(
        self, link: _Link, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        tail = b""
        try:
            while data := await reader.read(_CHUNK):
                trip = self._trip
                if trip is not None:
                    window = tail + data
                    if trip.pattern in window:
                        await self._fire(trip, link, data)
                        return
                    tail = window[-(len(trip.pattern) - 1) :] if len(trip.pattern) > 1 else b""
                writer.write(data)
                await writer.drain()
        finally:
            link.close()

    async def _fire(self, trip: _Trip, link: _Link, data: bytes) -> None:
        self._trip = None
        if trip.forward:
            link.swallow = True  # the reply is read from the server and dropped
            link.server.write(data)
            await link.server.drain()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(REPLY_WAIT_S):
                    await link.replied.wait()
        if trip.refuse:
            self.refusing = True
        self.cut()
        trip.tripped.set()

    async def _downstream(
        self, link: _Link, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        try:
            while data := await reader.read(_CHUNK):
                await self._reply(link, data, writer)
        finally:
            link.close()

    async def _reply(self, link: _Link, data: bytes, writer: asyncio.StreamWriter) -> None:
        """A chunk of the server's answer: passed to the client, or dropped once a trip that
        forwards has fired."""
        if link.swallow:
            link.replied.set()
            return
        writer.write(data)
        await writer.drain()


@contextlib.asynccontextmanager
async def redis_proxy(url: str) -> AsyncIterator[tuple[TcpProxy, str]]:
    """A started proxy to the Redis at `url` and the `redis://` URL that goes through it."""
    async with TcpProxy.to_redis(url) as proxy:
        yield proxy, TcpProxy.redis_url_through(url, proxy.port)


def dead_tcp_url() -> str:
    """A loopback port nobody listens on (bound, then released)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return f"redis://127.0.0.1:{port}/0"
