"""A scripted service for the device client's unit tests (an httpx mock transport): each
JSON-RPC method answered by a function of the test's, every method called recorded, and the
task's stream (SubscribeToTask) as a feed the test writes frames into."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx

from aim_realtime_client import AimClient
from aim_realtime_client.rpc import REALTIME

Answer = Callable[[dict[str, Any]], httpx.Response]
WAIT_S = 5.0


def result(value: object) -> httpx.Response:
    return httpx.Response(200, json={"jsonrpc": "2.0", "id": 1, "result": value})


def failure(code: int, **metadata: str) -> httpx.Response:
    error: dict[str, Any] = {"code": code, "message": "m"}
    if metadata:
        error["data"] = [{"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": "R",
                          "domain": "d", "metadata": metadata}]  # fmt: skip
    return httpx.Response(200, json={"jsonrpc": "2.0", "id": 1, "error": error})


def task(
    state: str, session_state: str, *, epoch: int = 1, version: int = 1, **status: Any
) -> dict[str, Any]:
    meta = {"sessionId": "s1", "sessionEpoch": epoch, "sessionState": session_state,
            "taskVersion": version}  # fmt: skip
    return {"id": "t1", "contextId": "c1", "status": {"state": state, **status},
            "metadata": {REALTIME: meta}}  # fmt: skip


def session_object(state: str, *, epoch: int = 1, version: int = 1, **more: Any) -> dict[str, Any]:
    return {"sessionId": "s1", "taskId": "t1", "sessionEpoch": epoch, "state": state,
            "version": version, "endpoints": [], **more}  # fmt: skip


class Feed(httpx.AsyncByteStream):
    """One connection of the task's stream: the frames the test sends, until it ends it."""

    def __init__(self) -> None:
        self.chunks: asyncio.Queue[bytes | None] = asyncio.Queue()

    async def __aiter__(self) -> AsyncIterator[bytes]:
        while (chunk := await self.chunks.get()) is not None:
            yield chunk

    def send(self, frame: dict[str, Any], event_id: str) -> None:
        """A StreamResponse (`{"task": …}` or `{"statusUpdate": …}`) with its SSE id."""
        answer = json.dumps({"jsonrpc": "2.0", "id": 1, "result": frame})
        self.chunks.put_nowait(f"id: {event_id}\ndata: {answer}\n\n".encode())

    def end(self) -> None:
        self.chunks.put_nowait(None)


class Service:
    """Answers each JSON-RPC method with `answers[method]`; records the methods called.
    SubscribeToTask, unless answered otherwise, opens a `Feed` (in `feeds`)."""

    def __init__(self, answers: dict[str, Answer]) -> None:
        self.answers = answers
        self.methods: list[str] = []
        self.params: list[tuple[str, dict[str, Any]]] = []
        self.feeds: list[Feed] = []

    def handle(self, request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        self.methods.append(body["method"])
        self.params.append((body["method"], body["params"]))
        answer = self.answers.get(body["method"])
        if answer is None and body["method"] == "SubscribeToTask":
            feed = Feed()
            self.feeds.append(feed)
            return httpx.Response(200, headers={"content-type": "text/event-stream"}, stream=feed)
        return answer(body["params"]) if answer else failure(-32601)

    def of(self, method: str) -> list[dict[str, Any]]:
        """The params of every call of `method`, in order."""
        return [params for name, params in self.params if name == method]

    async def feed(self, number: int = 1) -> Feed:
        """The `number`-th connection of the stream, once it is open."""
        await until(lambda: len(self.feeds) >= number)
        return self.feeds[number - 1]

    def client(self, **options: Any) -> AimClient:
        async def no_wait(_: float) -> None:
            await asyncio.sleep(0)

        options.setdefault("sleep", no_wait)
        return AimClient("http://aim.test", token="t", transport=httpx.MockTransport(self.handle),
                         **options)  # fmt: skip


async def until(check: Callable[[], object], within: float = WAIT_S) -> None:
    """Until `check()` is true (the event loop turning meanwhile); fails after `within` s."""
    deadline = time.monotonic() + within
    while not check():
        assert time.monotonic() < deadline, "still not so after waiting"
        await asyncio.sleep(0.001)
