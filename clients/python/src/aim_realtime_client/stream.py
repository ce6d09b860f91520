"""Following a task: SubscribeToTask over SSE, resumed with `Last-Event-ID` when it breaks.

`SseParser` turns bytes, cut anywhere, into the events of the text/event-stream format (the
WHATWG rules: lines end in CRLF, LF or CR; `:` starts a comment; `data` lines join with LF; an
event is dispatched at a blank line; `id` persists). `TaskStream.frames()` yields the JSON-RPC
results of one task's stream until the task is terminal, reconnecting after a failure with the
last id it got: the service continues right after it, nothing lost or doubled. A stream the
service cut on purpose (its lifetime, or a reader that fell behind) ends with the comment
`: reconnect`: it is resumed at once, and is no failure.
"""

from __future__ import annotations

import codecs
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any, Final

import httpx

from aim_realtime_client.errors import (
    UNSUPPORTED_OPERATION,
    AimError,
    error_from_rpc,
    http_error,
    transport_error,
)
from aim_realtime_client.rpc import RetryPolicy, RpcCaller, answer_of, encode

TERMINAL_TASK_STATES: Final = frozenset(
    {
        "TASK_STATE_COMPLETED",
        "TASK_STATE_CANCELED",
        "TASK_STATE_FAILED",
        "TASK_STATE_REJECTED",
    }
)
STREAM_BACKOFF: Final = RetryPolicy(attempts=10, base_delay_ms=250, max_delay_ms=5000)
IDLE_TIMEOUT_S: Final = 45.0  # three missed 15 s heartbeats: the connection is dead
RECONNECT_COMMENT: Final = "reconnect"  # the service's last line of a stream it cut on purpose


@dataclass(frozen=True)
class SseEvent:
    """One dispatched event: `id` is the last event id in force (None if none was ever set)."""

    data: str
    event: str = "message"
    id: str | None = None


class SseParser:
    """Incremental text/event-stream parser: `feed(chunk)` returns the events it completed."""

    def __init__(self) -> None:
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._buffer = ""
        self._cr = False  # the last chunk ended in CR: a LF starting the next one is its pair
        self._data: list[str] = []
        self._event = ""
        self.last_id: str | None = None
        self.reconnect = False  # the service said it cuts the stream: resume at once

    def feed(self, chunk: bytes) -> list[SseEvent]:
        text = self._decoder.decode(chunk)
        if not text:
            return []
        if self._cr and text.startswith("\n"):
            text = text[1:]
        self._cr = text.endswith("\r")
        self._buffer += text
        events: list[SseEvent] = []
        lines = self._buffer.replace("\r\n", "\n").replace("\r", "\n").split("\n")
        self._buffer = lines.pop()  # an unterminated line waits for its end
        for line in lines:
            event = self._line(line)
            if event is not None:
                events.append(event)
        return events

    def _line(self, line: str) -> SseEvent | None:
        if line == "":
            return self._dispatch()
        if line.startswith(":"):  # a comment: `: keepalive`, or `: reconnect` before the end
            self.reconnect = self.reconnect or line[1:].strip() == RECONNECT_COMMENT
            return None
        name, colon, value = line.partition(":")
        if colon and value.startswith(" "):
            value = value[1:]
        if name == "data":
            self._data.append(value)
        elif name == "event":
            self._event = value
        elif name == "id" and "\0" not in value:
            self.last_id = value or None
        return None  # `retry` and unknown fields are ignored

    def _dispatch(self) -> SseEvent | None:
        data, event = self._data, self._event or "message"
        self._data, self._event = [], ""
        if not data:
            return None
        return SseEvent("\n".join(data), event, self.last_id)


@dataclass(frozen=True)
class Frame:
    """One StreamResponse of the task (`{"task": …}` or `{"statusUpdate": …}`) and its id."""

    event_id: str | None
    result: dict[str, Any]

    @property
    def body(self) -> dict[str, Any]:
        """The Task or the statusUpdate."""
        body = self.result.get("task") or self.result.get("statusUpdate") or {}
        return body if isinstance(body, dict) else {}

    @property
    def task_state(self) -> str:
        status = self.body.get("status")
        return str(status.get("state", "")) if isinstance(status, dict) else ""

    @property
    def terminal(self) -> bool:
        return self.task_state in TERMINAL_TASK_STATES


class _BrokenError(Exception):
    """This connection of the stream failed; reconnect (after a backoff)."""

    def __init__(self, error: AimError) -> None:
        self.error = error


class TaskStream:
    """SubscribeToTask `{id, historyLength: 0}` of one task, resumed until the task ends.

    `frames()` ends after the frame that makes the task terminal, or at once when the service
    answers -32004 (the task was terminal already: `refused_terminal` is then True, `refusal`
    that error). It raises the typed error when the stream cannot go on: an error other than a
    transient one, or `backoff.attempts` consecutive failures (a frame that arrives resets the
    count)."""

    def __init__(
        self,
        caller: RpcCaller,
        task_id: str,
        *,
        last_event_id: str | None = None,
        backoff: RetryPolicy = STREAM_BACKOFF,
        idle_timeout_s: float = IDLE_TIMEOUT_S,
    ) -> None:
        self.caller = caller
        self.task_id = task_id
        self.last_event_id = last_event_id
        self.backoff = backoff
        self.idle_timeout_s = idle_timeout_s
        self.refused_terminal = False
        self.refusal: AimError | None = None
        self.connections = 0
        self._cut = False  # the last connection ended with the service's `: reconnect`
        self._body = encode(
            caller.next_id(), "SubscribeToTask", {"id": task_id, "historyLength": 0}
        )

    async def frames(self) -> AsyncIterator[Frame]:
        failures = 0
        self.refused_terminal, self.refusal = False, None
        while True:
            try:
                async for frame in self._connection():
                    failures = 0
                    yield frame
                    if frame.terminal:
                        return
                if self.refused_terminal:
                    return
                if self._cut:  # cut on purpose (lifetime, fell behind): resume now
                    failures = 0
                    continue
                failure: AimError = transport_error(
                    "SubscribeToTask", EOFError("the stream closed")
                )
            except _BrokenError as broken:
                if self.refused_terminal:
                    return
                failure = broken.error
            failures += 1
            if failures >= self.backoff.attempts:
                raise failure
            await self.caller.sleep(self.backoff.backoff_ms(failures, self.caller.random()) / 1000)

    async def _connection(self) -> AsyncIterator[Frame]:
        extra = {"Accept": "text/event-stream"}
        if self.last_event_id:
            extra["Last-Event-ID"] = self.last_event_id
        timeout = httpx.Timeout(self.caller.timeout.connect, read=self.idle_timeout_s)
        self.connections += 1
        self._cut = False
        try:
            async with self.caller.http.stream(
                "POST",
                self.caller.url,
                content=self._body,
                headers=await self.caller.headers(**extra),
                timeout=timeout,
                follow_redirects=False,
            ) as response:
                kind = response.headers.get("content-type", "")
                if not kind.startswith("text/event-stream"):
                    await self._refused(response)
                    return
                parser = SseParser()
                async for chunk in response.aiter_bytes():
                    for event in parser.feed(chunk):
                        frame = self._frame(event)
                        if frame is not None:
                            yield frame
                self._cut = parser.reconnect
        except httpx.TransportError as exc:
            raise _BrokenError(transport_error("SubscribeToTask", exc)) from exc

    async def _refused(self, response: httpx.Response) -> None:
        """A JSON answer instead of a stream: an error (-32004: the task is terminal)."""
        content = await response.aread()
        retry_after = response.headers.get("retry-after")
        try:
            answer_of("SubscribeToTask", response.status_code, content, retry_after)
        except AimError as error:
            if error.code == UNSUPPORTED_OPERATION:
                self.refused_terminal, self.refusal = True, error
                return
            if error.retryable or self.caller.refreshes(error):  # reconnect (with a new token)
                raise _BrokenError(error) from error
            raise
        raise http_error("SubscribeToTask", response.status_code)  # a result, but not a stream

    def _frame(self, event: SseEvent) -> Frame | None:
        try:
            answer = json.loads(event.data)
        except ValueError:
            return None  # not JSON-RPC: nothing this client understands
        if not isinstance(answer, dict):
            return None
        error = answer.get("error")
        if event.event == "error" or isinstance(error, dict):
            failure = error_from_rpc(
                error if isinstance(error, dict) else {}, method="SubscribeToTask"
            )
            if failure.code == UNSUPPORTED_OPERATION:
                self.refused_terminal, self.refusal = True, failure
            raise _BrokenError(failure)
        result = answer.get("result")
        if not isinstance(result, dict):
            return None
        if event.id is not None:
            self.last_event_id = event.id
        return Frame(event.id, result)
