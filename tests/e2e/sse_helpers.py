"""Reading SSE responses of the streaming methods in tests."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import msgspec

from tests.conftest import headers as auth_headers


@dataclass
class Event:
    id: str | None = None
    event: str | None = None
    data: Any = None
    comments: list[str] = field(default_factory=list)

    @property
    def result(self) -> dict[str, Any]:
        result: dict[str, Any] = self.data["result"]
        return result


class SseReader:
    """Parses an SSE body into events; comment-only blocks come back as events too."""

    def __init__(self, response: httpx.Response) -> None:
        self.response = response
        self._lines = response.aiter_lines()
        self.closed = False

    async def next(self, within: float = 5.0) -> Event | None:
        """The next event (or comment block); None once the server closed the stream."""
        async with asyncio.timeout(within):
            event = Event()
            seen = False
            async for line in self._lines:
                if line == "":
                    if seen:
                        return event
                    continue
                seen = True
                name, _, value = line.partition(":")
                value = value.removeprefix(" ")
                if name == "":
                    event.comments.append(value)
                elif name == "id":
                    event.id = value
                elif name == "event":
                    event.event = value
                elif name == "data":
                    event.data = json.loads(value)
            self.closed = True
            return event if seen else None

    async def next_data(self, within: float = 5.0) -> Event | None:
        """The next event with data, skipping heartbeats; None at the end."""
        while True:
            event = await self.next(within)
            if event is None or event.data is not None:
                return event

    async def rest(self, within: float = 5.0) -> list[Event]:
        """Every data event until the server closes the stream."""
        events = []
        while (event := await self.next_data(within)) is not None:
            events.append(event)
        return events


@contextlib.asynccontextmanager
async def stream(
    client: httpx.AsyncClient,
    method: str,
    params: dict[str, Any],
    *,
    request_id: int | str = 7,
    subject: str = "alice",
    last_event_id: str | None = None,
    extra_headers: dict[str, str] | None = None,
    **header_options: Any,
) -> AsyncIterator[SseReader]:
    """POST a streaming call; the reader of its SSE body (or of a JSON error: check
    `reader.response.headers['content-type']`)."""
    sent = {"Content-Type": "application/json", **auth_headers(subject, **header_options)}
    if last_event_id is not None:
        sent["Last-Event-ID"] = last_event_id
    sent.update(extra_headers or {})
    body = msgspec.json.encode(
        {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}
    )
    async with client.stream("POST", "/a2a", content=body, headers=sent) as response:
        yield SseReader(response)


async def json_error(reader: SseReader) -> dict[str, Any]:
    """The plain JSON-RPC error a streaming call answered instead of a stream."""
    assert reader.response.headers["content-type"].startswith("application/json")
    body: dict[str, Any] = json.loads(await reader.response.aread())
    assert "error" in body, body
    return body


def create_message(part: dict[str, Any], message_id: str | None = None) -> dict[str, Any]:
    import uuid

    return {
        "message": {
            "messageId": message_id or str(uuid.uuid4()),
            "role": "ROLE_USER",
            "parts": [part],
        }
    }
