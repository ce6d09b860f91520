"""Opening and holding SSE streams in the tests of the stream limits (`test_stream_limits.py`)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from typing import Any

import httpx

from tests.conftest import error_info
from tests.e2e.sse_helpers import SseReader, json_error, stream


@contextlib.asynccontextmanager
async def held(
    client: httpx.AsyncClient, task_id: str, *, subject: str = "alice"
) -> AsyncIterator[SseReader]:
    """A SubscribeToTask stream kept open (its first event read) until the block ends."""
    async with stream(client, "SubscribeToTask", {"id": task_id}, subject=subject) as reader:
        assert reader.response.headers["content-type"].startswith("text/event-stream")
        assert await reader.next_data() is not None
        yield reader


async def refusal(
    client: httpx.AsyncClient, method: str, params: dict[str, Any], **options: Any
) -> tuple[dict[str, Any], httpx.Headers]:
    """The plain JSON-RPC error a streaming call is answered instead of a stream, and the
    answer's header fields."""
    async with stream(client, method, params, **options) as reader:
        return await json_error(reader), reader.response.headers


def limit_of(body: dict[str, Any]) -> str:
    """The `limit` a -31011 names (ErrorInfo metadata)."""
    assert body["error"]["code"] == -31011, body
    info = error_info(body)
    assert info["reason"] == "LIMIT_EXCEEDED"
    limit: str = info["metadata"]["limit"]
    return limit


async def opens(
    client: httpx.AsyncClient, task_id: str, *, subject: str = "alice", within: float = 5.0
) -> None:
    """A new stream on `task_id` opens within `within` seconds (tried every 50 ms while the
    service answers -31011: a slot is freed once the service has seen a stream end)."""
    deadline = time.monotonic() + within
    while True:
        async with stream(client, "SubscribeToTask", {"id": task_id}, subject=subject) as reader:
            if reader.response.headers["content-type"].startswith("text/event-stream"):
                assert await reader.next_data() is not None
                return
            body = await json_error(reader)
        limit_of(body)
        assert time.monotonic() < deadline, f"no slot came free within {within} s: {body}"
        await asyncio.sleep(0.05)
