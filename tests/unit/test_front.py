"""The JSON-RPC exchange as ASGI (`realtime/front.py`), driven by hand: a body read within its
limit and never past it, a client gone before its body ended calls nothing, an SSE answer
stops when the client goes and closes its stream, and the front leaves browsers (an Origin)
and every other route to Litestar."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping
from typing import Any

from realtime.front import RpcExchange, RpcFront
from realtime.rpc.dispatch import Reply, SseEvent


class Endpoint:
    max_body_bytes = 10

    def __init__(self, stream: AsyncIterator[SseEvent] | None = None) -> None:
        self.calls: list[tuple[bytes, bool]] = []
        self.stream = stream

    async def handle(
        self, body: bytes, headers: Mapping[str, str], *, too_large: bool = False
    ) -> Reply:
        self.calls.append((body, too_large))
        return Reply(200, b'{"ok":1}', {"A2A-Extensions": "x"}, stream=self.stream)


def scope(path: str = "/a2a", headers: list[tuple[bytes, bytes]] | None = None) -> dict[str, Any]:
    return {"type": "http", "method": "POST", "path": path, "headers": headers or []}


class Client:
    """What the server hands the app: the body in `chunks`, then (optionally) a disconnect."""

    def __init__(self, *chunks: bytes, then_gone: bool = False) -> None:
        self.messages: list[dict[str, Any]] = [
            {"type": "http.request", "body": chunk, "more_body": i < len(chunks) - 1}
            for i, chunk in enumerate(chunks)
        ]
        if then_gone:
            self.messages.append({"type": "http.disconnect"})
        self.sent: list[dict[str, Any]] = []
        self.idle = asyncio.Event()
        self.more = asyncio.Event()

    async def receive(self) -> dict[str, Any]:
        if self.messages:
            return self.messages.pop(0)
        await self.idle.wait()  # the client is still there
        return {"type": "http.disconnect"}

    async def send(self, message: dict[str, Any]) -> None:
        self.sent.append(message)
        self.more.set()
        await asyncio.sleep(0)

    async def sent_at_least(self, count: int) -> None:
        while len(self.sent) < count:
            self.more.clear()
            await self.more.wait()


async def test_a_body_in_chunks_is_read_whole_and_answered_as_json():
    endpoint, client = Endpoint(), Client(b'{"a":', b"1}")
    await RpcExchange(endpoint)(scope(), client.receive, client.send)
    assert endpoint.calls == [(b'{"a":1}', False)]
    start, body = client.sent
    assert start["status"] == 200
    assert (b"content-type", b"application/json") in start["headers"]
    assert (b"content-length", b"8") in start["headers"]
    assert (b"a2a-extensions", b"x") in start["headers"]
    assert body == {"type": "http.response.body", "body": b'{"ok":1}'}


async def test_a_body_over_the_limit_is_not_read_past_it():
    endpoint = Endpoint()
    declared = Client(b"x")
    headers = [(b"content-length", b"11")]
    await RpcExchange(endpoint)(scope(headers=headers), declared.receive, declared.send)
    assert declared.messages  # the declared length alone refused it: nothing was read
    growing = Client(b"123456", b"789012", b"more")
    await RpcExchange(endpoint)(scope(), growing.receive, growing.send)
    assert growing.messages == [{"type": "http.request", "body": b"more", "more_body": False}]
    assert endpoint.calls == [(b"", True), (b"", True)]  # answered as too large (413)


async def test_a_client_gone_before_its_body_ended_is_answered_as_too_large_not_called():
    endpoint, client = Endpoint(), Client(b'{"a":', then_gone=True)
    client.messages[0]["more_body"] = True
    await RpcExchange(endpoint)(scope(), client.receive, client.send)
    assert endpoint.calls == [(b"", True)]


async def test_an_sse_answer_stops_when_the_client_goes_and_closes_its_stream():
    closed = asyncio.Event()

    async def events() -> AsyncIterator[SseEvent]:
        try:
            yield SseEvent(b'{"n":1}', "1-0")
            yield SseEvent(None)
            await asyncio.sleep(3600)  # nothing more for an hour
            yield SseEvent(b'{"n":2}')
        finally:
            closed.set()

    endpoint, client = Endpoint(events()), Client(b"{}")
    exchange = asyncio.create_task(RpcExchange(endpoint)(scope(), client.receive, client.send))
    await asyncio.wait_for(client.sent_at_least(3), 5)
    client.idle.set()  # the client goes away
    await asyncio.wait_for(exchange, 5)
    assert closed.is_set()
    start, first, beat = client.sent
    assert (b"content-type", b"text/event-stream; charset=utf-8") in start["headers"]
    assert first["body"] == b'id: 1-0\ndata: {"n":1}\n\n'
    assert beat["body"] == b": keepalive\n\n"


async def test_a_line_separator_inside_json_stays_on_its_data_line():
    async def events() -> AsyncIterator[SseEvent]:
        yield SseEvent('{"t":"a\u2028b"}'.encode())

    endpoint, client = Endpoint(events()), Client(b"{}")
    await RpcExchange(endpoint)(scope(), client.receive, client.send)
    assert client.sent[1]["body"] == b'data: {"t":"a\\u2028b"}\n\n'
    assert client.sent[-1] == {"type": "http.response.body", "body": b""}


async def test_the_front_leaves_browsers_and_other_routes_to_the_app():
    seen: list[str] = []

    class App:
        class state:  # noqa: N801 - what start-up stores on Litestar's state
            dispatcher = Endpoint()

        async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
            seen.append(scope["path"])

    app = App()
    front = RpcFront(app, vary_origin=True)
    browser = [(b"origin", b"https://app.example")]
    for request in (scope(headers=browser), scope("/healthz"), {**scope(), "method": "GET"}):
        client = Client(b"{}")
        await front(request, client.receive, client.send)
    assert seen == ["/a2a", "/healthz", "/a2a"]

    client = Client(b"{}")
    await front(scope("/a2a/"), client.receive, client.send)
    assert seen == ["/a2a", "/healthz", "/a2a"]  # answered by the front itself
    assert App.state.dispatcher.calls == [(b"{}", False)]
    assert (b"vary", b"Origin") in client.sent[0]["headers"]
    assert front.state is App.state
