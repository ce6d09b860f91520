"""The JSON-RPC endpoints as plain ASGI: read the body, run the endpoint's pipeline, write the
bytes (JSON, or SSE framing with the client's disconnect watched).

`RpcFront` is the ASGI app the HTTP server runs. A POST to a JSON-RPC path without an `Origin`
header (a server, a device, an agent: the calls that carry the load) is answered here at once;
everything else goes to Litestar: the cards, the operator API, metrics, probes, webhooks, and
the JSON-RPC calls of browsers, whose CORS Litestar answers (its routes for those paths hand
the call back to an `RpcExchange`, so both ways run the same code).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, MutableMapping
from typing import Any, Final, Protocol

from realtime.rpc.dispatch import Reply, SseEvent
from realtime.rpc.headers import combined

# ASGI's shapes, as loosely as Litestar's and uvicorn's types both fit them
Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Any]]
Send = Callable[[Any], Awaitable[None]]

JSON: Final = b"application/json"
EVENT_STREAM: Final = b"text/event-stream; charset=utf-8"
# no caching, and no buffering by proxies (nginx honours X-Accel-Buffering)
SSE_HEADERS: Final = ((b"cache-control", b"no-cache"), (b"x-accel-buffering", b"no"))

# path → the name of its endpoint in the app's state (set at start-up, `app.lifespan`)
RPC_PATHS: Final[Mapping[str, str]] = {
    "/a2a": "dispatcher",
    "/a2a/": "dispatcher",
    "/a2a/v0.1": "v01",
    "/a2a/v0.1/": "v01",
    "/provider": "provider",
}


class Endpoint(Protocol):
    """What an exchange needs of a JSON-RPC endpoint (`rpc/dispatch.Endpoint`)."""

    @property
    def max_body_bytes(self) -> int: ...

    async def handle(
        self, body: bytes, headers: Mapping[str, str], *, too_large: bool = False
    ) -> Reply: ...


async def read_body(receive: Receive, limit: int, declared: str | None) -> tuple[bytes, bool]:
    """The request's body, or (b"", True) once it exceeds `limit` bytes (or its `declared`
    Content-Length does); never buffers more than that. A client that went away is a body
    that never ends: (b"", True) as well, and nothing is called for it."""
    if declared is not None and declared.isdigit() and int(declared) > limit:
        return b"", True
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] != "http.request":  # http.disconnect
            return b"", True
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            return b"", True
        chunks.append(chunk)
        if not message.get("more_body", False):
            return chunks[0] if len(chunks) == 1 else b"".join(chunks), False


# characters JSON may carry raw inside strings that many line readers (Python's splitlines,
# httpx's aiter_lines, JavaScript's U+2028 handling in older engines) take for a line break;
# escaped, the JSON means the same and a `data:` line stays one line for every reader
_LINE_BREAKERS: Final = (
    (b"\xe2\x80\xa8", b"\\u2028"),
    (b"\xe2\x80\xa9", b"\\u2029"),
    (b"\xc2\x85", b"\\u0085"),
)


def one_line(data: bytes) -> bytes:
    """`data` (compact JSON, so no raw newlines) with every other line breaker escaped."""
    for raw, escaped in _LINE_BREAKERS:
        data = data.replace(raw, escaped)
    return data


def sse_frame(event: SseEvent) -> bytes:
    """SSE framing: `id:`, `event:` and one `data:` line (compact JSON has no newlines); a
    heartbeat (and the `reconnect` that ends a stream the server cut) is a comment line."""
    if event.data is None:
        return f": {event.comment}\n\n".encode()
    frame = b""
    if event.id is not None:
        frame += b"id: " + event.id.encode() + b"\n"
    if event.event is not None:
        frame += b"event: " + event.event.encode() + b"\n"
    return frame + b"data: " + one_line(event.data) + b"\n\n"


def _headers(reply: Reply) -> list[tuple[bytes, bytes]]:
    return [
        (name.lower().encode("latin-1"), value.encode("latin-1"))
        for name, value in reply.headers.items()
    ]


class RpcExchange:
    """One JSON-RPC call over HTTP, as an ASGI app: the body (bounded), the endpoint's reply,
    its bytes (with `extra` header fields)."""

    __slots__ = ("endpoint", "extra")

    def __init__(self, endpoint: Endpoint, extra: tuple[tuple[bytes, bytes], ...] = ()) -> None:
        self.endpoint = endpoint
        self.extra = extra

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        reply = await self._reply(scope, receive)
        if reply.stream is not None:  # the request's body and fields are let go of by now
            await _stream(reply, reply.stream, self.extra, receive, send)
            return
        headers = _headers(reply)
        headers += [(b"content-type", JSON), (b"content-length", str(len(reply.body)).encode())]
        headers += self.extra
        await send({"type": "http.response.start", "status": reply.status, "headers": headers})
        await send({"type": "http.response.body", "body": reply.body})

    async def _reply(self, scope: Scope, receive: Receive) -> Reply:
        fields = combined(scope["headers"])
        body, too_large = await read_body(
            receive, self.endpoint.max_body_bytes, fields.get("content-length")
        )
        return await self.endpoint.handle(body, fields, too_large=too_large)


async def _stream(
    reply: Reply,
    events: AsyncIterator[SseEvent],
    extra: tuple[tuple[bytes, bytes], ...],
    receive: Receive,
    send: Send,
) -> None:
    """The SSE response: written until the stream ends or the client goes away, whichever
    comes first; the stream is closed either way (its subscription is released). The writing
    is this task's; one more task waits for the client to leave and then cancels it."""
    headers = [*_headers(reply), *SSE_HEADERS, (b"content-type", EVENT_STREAM), *extra]
    writer = asyncio.current_task()
    left = streaming = False

    async def gone() -> None:
        nonlocal left
        while (await receive())["type"] != "http.disconnect":
            pass
        left = True
        # only while the writer is in the loop below: it is then suspended inside the `try`,
        # where the cancellation is delivered and taken back
        if streaming and writer is not None:
            writer.cancel()

    watching = asyncio.ensure_future(gone())
    try:
        streaming = True
        await send({"type": "http.response.start", "status": reply.status, "headers": headers})
        async for event in events:
            frame = sse_frame(event)
            del event  # not held while the next one is awaited
            await send({"type": "http.response.body", "body": frame, "more_body": True})
            del frame
        streaming = False
        await send({"type": "http.response.body", "body": b""})
    except asyncio.CancelledError:
        if not left:
            raise  # the server's own cancellation (shutdown)
        if writer is not None:
            writer.uncancel()  # the client left: the stream is over, nothing failed
    except OSError:  # a send to a client that left
        pass
    finally:
        streaming = False
        watching.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await watching
        aclose = getattr(events, "aclose", None)
        if aclose is not None:
            await aclose()


class RpcFront:
    """The service's ASGI app: JSON-RPC POSTs without an Origin answered here, the rest by
    `app` (Litestar). `state` is the app's (what start-up stores there). `vary_origin`: the
    answers say `Vary: Origin`, as Litestar's do when CORS allows a list of origins (the same
    URL is answered differently to a browser's request, so a cache must tell them apart)."""

    def __init__(self, app: Any, *, vary_origin: bool = False) -> None:
        self.app = app
        self.extra = ((b"vary", b"Origin"),) if vary_origin else ()

    @property
    def state(self) -> Any:
        return self.app.state

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] == "POST":
            name = RPC_PATHS.get(scope["path"])
            if name is not None and not any(key == b"origin" for key, _ in scope["headers"]):
                await RpcExchange(getattr(self.app.state, name), self.extra)(scope, receive, send)
                return
        await self.app(scope, receive, send)
