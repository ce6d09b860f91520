"""The service as the Python client meets it: served on a loopback port with the LiveKit
stand-in, behind two TCP proxies that tests can cut — one on the device's way to the service,
one on the agent's (the `providerUrl` of the dispatch metadata points there).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

import httpx

from aim_realtime_client import AnyEvent, Session
from realtime.app import create_app
from realtime.store import keys
from realtime.store.redis_client import RedisClient
from tests.conftest import livekit_settings, serving
from tests.tcp_proxy import TcpProxy

WAIT_S = 10.0


@dataclass
class Served:
    base_url: str  # the service itself
    http: httpx.AsyncClient  # a plain client of the service (webhooks, checks)
    device_proxy: TcpProxy
    agent_proxy: TcpProxy

    @property
    def device_url(self) -> str:
        return f"http://127.0.0.1:{self.device_proxy.port}"


@contextlib.asynccontextmanager
async def proxied_service(
    livekit: Any, store: RedisClient, **settings: Any
) -> AsyncIterator[Served]:
    port: list[int] = []

    async def connect() -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        return await asyncio.open_connection("127.0.0.1", port[0])

    async with TcpProxy(connect) as device_proxy, TcpProxy(connect) as agent_proxy:
        overrides = {"provider_base_url": f"http://127.0.0.1:{agent_proxy.port}", **settings}
        app = create_app(livekit_settings(livekit, **overrides), store=store, tracer_provider=None)
        async with (
            serving(app) as base_url,
            httpx.AsyncClient(base_url=base_url, timeout=30) as http,
        ):
            port.append(int(base_url.rsplit(":", 1)[1]))
            yield Served(base_url, http, device_proxy, agent_proxy)


@dataclass
class Sent:
    """One request the client sent: its JSON-RPC method, body and headers."""

    method: str
    body: bytes
    headers: dict[str, str]


@dataclass
class Wire:
    """What went over an httpx client: every request, and the JSON-RPC answers' codes."""

    requests: list[Sent] = field(default_factory=list)
    codes: list[int | None] = field(default_factory=list)

    def of(self, method: str) -> list[Sent]:
        return [sent for sent in self.requests if sent.method == method]

    def client(self, transport: httpx.AsyncBaseTransport | None = None) -> httpx.AsyncClient:
        async def on_request(request: httpx.Request) -> None:
            body = request.content
            method = json.loads(body).get("method", "") if body else ""
            self.requests.append(Sent(method, body, dict(request.headers)))

        async def on_response(response: httpx.Response) -> None:
            if response.headers.get("content-type", "").startswith("application/json"):
                await response.aread()
                error = response.json().get("error")
                self.codes.append(error.get("code") if error else None)

        hooks = {"request": [on_request], "response": [on_response]}
        return httpx.AsyncClient(transport=transport, event_hooks=hooks)


class Gate(httpx.AsyncBaseTransport):
    """The network under one client, with two knobs per JSON-RPC method: a method in `fail` is
    answered HTTP 500 without a JSON-RPC body (an error the client does not retry) and never
    reaches the service; `hold(method)` lets its requests through and keeps their answers
    until `release(method)` (the event it returns is set once an answer is held)."""

    def __init__(self) -> None:
        self.inner = httpx.AsyncHTTPTransport()
        self.fail: set[str] = set()
        self._gates: dict[str, asyncio.Event] = {}
        self._holding: dict[str, asyncio.Event] = {}

    def hold(self, method: str) -> asyncio.Event:
        self._gates[method] = asyncio.Event()
        self._holding[method] = asyncio.Event()
        return self._holding[method]

    def release(self, method: str) -> None:
        self._gates.pop(method).set()

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        body = request.content
        method = json.loads(body).get("method", "") if body else ""
        if method in self.fail:
            return httpx.Response(500, text="unavailable", request=request)
        response = await self.inner.handle_async_request(request)
        gate = self._gates.get(method)
        if gate is None:
            return response
        raw = b"".join([chunk async for chunk in response.aiter_raw()])
        await response.aclose()
        self._holding[method].set()
        await gate.wait()
        return httpx.Response(response.status_code, headers=response.headers, content=raw,
                              request=request)  # fmt: skip

    async def aclose(self) -> None:
        await self.inner.aclose()


class Events:
    """Collects a session's events (with the raw updates) in the background."""

    def __init__(self, session: Session) -> None:
        self.session = session
        self.seen: list[AnyEvent] = []
        self._changed = asyncio.Event()
        self._task = asyncio.create_task(self._collect())

    async def _collect(self) -> None:
        async for event in self.session.events(updates=True):
            self.seen.append(event)
            self._changed.set()

    def named(self, name: str) -> list[Any]:
        return [event for event in self.seen if event.name == name]

    async def until(self, check: Callable[[Any], bool], within: float = WAIT_S) -> Any:
        deadline = time.monotonic() + within
        while True:
            for event in self.seen:
                if check(event):
                    return event
            left = deadline - time.monotonic()
            assert left > 0, f"no such event within {within} s: {[e.name for e in self.seen]}"
            self._changed.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(), left)

    async def done(self, within: float = WAIT_S) -> None:
        await asyncio.wait_for(self._task, within)

    async def stop(self) -> None:
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task


def stream_id(value: str) -> tuple[int, int]:
    ms, _, seq = value.partition("-")
    return int(ms), int(seq)


async def server_event_ids(store: RedisClient, session_id: str) -> list[str]:
    """The ids of the session's event stream, as the service keeps it (its SSE ids)."""
    entries = await store.client.xrange(keys.events_key(session_id))
    return [
        entry_id.decode() if isinstance(entry_id, bytes) else entry_id for entry_id, _ in entries
    ]
