"""SendStreamingMessage and SubscribeToTask: a Task, then a statusUpdate per session event.

Everything that can fail with a JSON-RPC error (ownership, terminal task, a bad Last-Event-ID)
is decided before the handler returns, so such errors are answered as plain JSON. The returned
`TaskStream` yields frames `(sse id, StreamResponse)` or None for a heartbeat; it closes after
the event that makes the task terminal. SSE ids are the ids of the session's event stream
entries (`aim:{sid}:events`), so a reconnect with Last-Event-ID resumes right after the last
event the client got. The Task frame sent first carries the id of the entry it reflects.

A stream holds a slot of the process's `StreamSlots` (its principal's and its task's) from the
moment its handler admits it to its end, whatever the path: a stream past a cap is refused
before it starts, and before SendStreamingMessage stores anything. It lives at most
`AIM_SSE_MAX_LIFETIME_S`: then, after a complete event, it sends the comment `: reconnect`
and closes, as it does when it fell too far behind; the client resumes with Last-Event-ID.
"""

from __future__ import annotations

import contextlib
import enum
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Any, Final

import msgspec

from realtime.a2a import params as p
from realtime.a2a import types as wire
from realtime.a2a.projection import realtime_metadata, shown_agent_state
from realtime.errors import (
    TaskNotFound,
    UnsupportedOperation,
    invalid_params,
    method_name,
    task_ref,
    task_state,
)
from realtime.fanout import LaggedError, StreamSlot
from realtime.methods import messages, tasks
from realtime.methods.context import Call, StreamDeps
from realtime.store import keys
from realtime.store.events import Entry, Snapshot, is_entry_id, parse_id
from realtime.store.records import EVENT_DECODER, EventEntry, TaskRecord

Frame = tuple[str | None, dict[str, Any]]

# the member of the first Task's realtime metadata that says events were trimmed away
EVENTS_TRIMMED: Final = "eventsTrimmed"
START: Final = "0-0"
# a resumed stream first reads what it missed in pages, at the client's own pace, and joins the
# hub (whose per-subscriber buffers are sized for what is new) only once it has caught up
CATCH_UP_PAGE: Final = 100


class Comment(enum.Enum):
    """An SSE comment line of a stream: no event, but the client may act on it."""

    KEEPALIVE = "keepalive"  # an idle stream's heartbeat
    RECONNECT = "reconnect"  # the last line of a stream the server cut: resume at once


class TaskStream:
    """What a streaming method returns: the first frames, then the session's events."""

    def __init__(
        self,
        deps: StreamDeps,
        task: wire.Task,
        first: list[Frame],
        *,
        follow_after: str | None,
    ) -> None:
        self.deps = deps
        # what each statusUpdate names (the task itself is not held: a stream may be open for
        # hours, a thousand of them at once)
        self.task_id, self.context_id = task.id, task.context_id
        self.first = first
        self.follow_after = follow_after  # None: the stream ends after `first`
        self.deadline = deps.clock() + deps.settings.sse_max_lifetime_s
        self.slot: StreamSlot | None = None

    def admit(self, slot: StreamSlot) -> TaskStream:
        """The stream holds `slot` until it is closed."""
        self.slot = slot
        return self

    def close(self) -> None:
        """Free the stream's slot (also when its frames were never read)."""
        if self.slot is not None:
            self.slot.release()
            self.slot = None

    def _expired(self) -> bool:
        return self.deps.clock() >= self.deadline

    async def frames(self) -> AsyncIterator[Frame | Comment]:
        try:
            first, self.first = self.first, []  # each frame let go of once it is sent
            while first:
                yield first.pop(0)
            if self.follow_after is None:
                return
            after = self.follow_after
            session_id = keys.tag_for_task(self.task_id)
            events = self.deps.events
            while True:
                page = await events.after(session_id, after, count=CATCH_UP_PAGE)
                for entry_id, raw in page:
                    event = EVENT_DECODER.decode(raw)
                    yield entry_id, status_update(self.task_id, self.context_id, event)
                    if event.status.get("state") in wire.TERMINAL_STATES:
                        return
                    after = entry_id
                    if self._expired():
                        yield Comment.RECONNECT
                        return
                if len(page) < CATCH_UP_PAGE:
                    break
            async with contextlib.aclosing(self._live(session_id, after)) as live:
                async for frame in live:
                    yield frame
        finally:
            self.close()

    async def _live(self, session_id: str, after: str) -> AsyncGenerator[Frame | Comment]:
        """The events after `after` as the hub hands them over, until the terminal one, the
        stream's lifetime, or the subscriber falling behind (then `RECONNECT`)."""
        hub = self.deps.hub
        heartbeat = self.deps.settings.sse_heartbeat_s
        subscription = await hub.subscribe(session_id, after)
        try:
            while (left := self.deadline - self.deps.clock()) > 0:
                entries = await subscription.next(min(heartbeat, left))
                if entries is None:
                    if not self._expired():
                        yield Comment.KEEPALIVE
                    continue
                for entry_id, raw in entries:
                    event = EVENT_DECODER.decode(raw)
                    yield entry_id, status_update(self.task_id, self.context_id, event)
                    if event.status.get("state") in wire.TERMINAL_STATES:
                        return
        except LaggedError:
            pass  # it fell behind: the client resumes with the Last-Event-ID it got
        finally:
            hub.unsubscribe(subscription)
        yield Comment.RECONNECT


def event_metadata(session_id: str, event: EventEntry) -> dict[str, Any]:
    """The task's metadata as it was when `event` was committed (the agent's state when the
    commit moved the agent)."""
    agent = event.agent
    if agent is None:
        return realtime_metadata(session_id, event.epoch, event.to, event.task_version)
    shown = shown_agent_state(agent.to, rotating=bool(agent.successor))
    return realtime_metadata(
        session_id,
        event.epoch,
        event.to,
        event.task_version,
        shown,
        generation=agent.generation,
        successor=agent.successor,
    )


def status_update(task_id: str, context_id: str, event: EventEntry) -> dict[str, Any]:
    return {
        "statusUpdate": {
            "taskId": task_id,
            "contextId": context_id,
            "status": event.status,
            "metadata": event_metadata(keys.tag_for_task(task_id), event),
        }
    }


def task_frame(task: wire.Task, *, trimmed: bool = False) -> dict[str, Any]:
    body: dict[str, Any] = msgspec.to_builtins(task)
    if trimmed:
        metadata = body.setdefault("metadata", {})
        metadata.setdefault(wire.REALTIME_EXTENSION, {})[EVENTS_TRIMMED] = True
    return {"task": body}


def task_at(task: wire.Task, entry: Entry) -> wire.Task:
    """The task as it was when `entry` was committed (status and session metadata)."""
    event = EVENT_DECODER.decode(entry[1])
    status = msgspec.convert(event.status, wire.TaskStatus)
    return msgspec.structs.replace(
        task, status=status, metadata=event_metadata(keys.tag_for_task(task.id), event)
    )


def _last_event_id(call: Call[Any]) -> str | None:
    value = call.last_event_id
    if value is None or not value.strip():
        return None
    value = value.strip()
    if not is_entry_id(value):
        raise invalid_params(
            "Last-Event-ID",
            "not an event id this server sent; reconnect with the `id` of the last SSE event "
            "received, or without Last-Event-ID",
        )
    return value


def _trimmed(snapshot: Snapshot, last: str) -> bool:
    """Whether entries after `last` may have been trimmed from the capped stream: the oldest
    entry left is newer than `last` and is not the session's first (creation) event."""
    oldest = snapshot.oldest
    if oldest is None or parse_id(last) >= parse_id(oldest[0]):
        return False
    return EVENT_DECODER.decode(oldest[1]).from_ is not None


async def _resume(
    deps: StreamDeps, snapshot: Snapshot, task: wire.Task, last: str
) -> TaskStream | None:
    """A stream that goes on after `last`; None when nothing will ever follow it (the task
    was already terminal at `last`)."""
    terminal = task.status.state in wire.TERMINAL_STATES
    newest = snapshot.newest or START
    if not terminal and parse_id(last) > parse_id(newest):
        # an id this stream never had (another task's, or made up): start over with the Task
        return TaskStream(deps, task, [(newest, task_frame(task))], follow_after=newest)
    if _trimmed(snapshot, last):
        return TaskStream(
            deps,
            task,
            [(newest, task_frame(task, trimmed=True))],
            follow_after=None if terminal else newest,
        )
    if terminal:
        if parse_id(newest) <= parse_id(last):
            return None
        seen = await deps.events.entry(keys.tag_for_task(task.id), last)
        state = EVENT_DECODER.decode(seen[1]).status.get("state") if seen is not None else None
        if state in wire.TERMINAL_STATES:
            return None  # e.g. the `ended` entry after `ending`: the task was over already
    return TaskStream(deps, task, [], follow_after=last)


def _over(task: wire.Task) -> UnsupportedOperation:
    ref, state = task_ref(task.id), task_state(task.status.state)
    return UnsupportedOperation(
        (
            "Task ",
            ref,
            " is ",
            state,
            ": a terminal task has no more updates to subscribe to. Read it with ",
            method_name("GetTask"),
            ".",
        ),
        details={"taskId": ref, "state": state},
    )


async def _own_snapshot(deps: StreamDeps, call: Call[Any], task_id: str) -> Snapshot:
    snapshot = await deps.events.snapshot(task_id)
    if snapshot.task is None or snapshot.task.owner != call.principal.key:
        raise TaskNotFound(task_id)
    return snapshot


async def subscribe_to_task(deps: StreamDeps, call: Call[p.TaskParams]) -> TaskStream:
    """The current Task, then its updates; -32004 on a terminal task, unless Last-Event-ID
    names an event before the end: then the missed events are replayed up to the terminal one.
    -31011 past the caller's or the task's cap of open streams (after the checks above)."""
    stream = await _subscription(deps, call)
    return stream.admit(deps.slots.take(call.principal.key, stream.task_id))


async def _subscription(deps: StreamDeps, call: Call[p.TaskParams]) -> TaskStream:
    last = _last_event_id(call)
    snapshot = await _own_snapshot(deps, call, call.params.id)
    assert snapshot.task is not None  # noqa: S101 - checked by _own_snapshot
    task = tasks.view(snapshot.task.task, call.params.history_length)
    if last is not None and (stream := await _resume(deps, snapshot, task, last)) is not None:
        return stream
    if task.status.state in wire.TERMINAL_STATES:
        raise _over(task)
    newest = snapshot.newest or START
    return TaskStream(deps, task, [(newest, task_frame(task))], follow_after=newest)


async def send_streaming_message(deps: StreamDeps, call: Call[p.SendParams]) -> TaskStream:
    """SendMessage that never blocks, streamed: a realtime task from its creation event on
    (every event of the session follows); a REJECTED task as the single event. -31011 past the
    caller's cap of open streams before anything is created, or past the task's (a repeated
    message: nothing new is stored then)."""
    last = _last_event_id(call)  # before anything is created
    slot = deps.slots.take(call.principal.key)
    try:
        stream = await _sent(deps, call, last)
        slot.attach(stream.task_id)
    except BaseException:
        slot.release()
        raise
    return stream.admit(slot)


async def _sent(deps: StreamDeps, call: Call[p.SendParams], last: str | None) -> TaskStream:
    params = call.params
    config = params.configuration
    immediate = (
        p.SendConfiguration(return_immediately=True)
        if config is msgspec.UNSET
        else msgspec.structs.replace(config, return_immediately=True)
    )
    sent = await messages.send_message(
        deps.sessions,
        Call(
            method=call.method,
            principal=call.principal,
            params=msgspec.structs.replace(params, configuration=immediate),
            extensions=call.extensions,
        ),
    )
    history_length = config.history_length if config is not msgspec.UNSET else None
    snapshot = await _own_snapshot(deps, call, sent.task.id)
    record: TaskRecord | None = snapshot.task
    assert record is not None  # noqa: S101 - checked by _own_snapshot
    task = tasks.view(record.task, history_length)
    if snapshot.oldest is None:  # no session behind it (a REJECTED task): just the task
        return TaskStream(deps, sent.task, [(None, task_frame(sent.task))], follow_after=None)
    if last is not None:
        resumed = await _resume(deps, snapshot, task, last)
        if resumed is None:
            raise _over(task)
        return resumed
    oldest_id, oldest_event = snapshot.oldest
    if EVENT_DECODER.decode(oldest_event).from_ is None:  # the creation event is still there
        first = task_at(task, snapshot.oldest)
        return TaskStream(deps, task, [(oldest_id, task_frame(first))], follow_after=oldest_id)
    newest = snapshot.newest or START
    trimmed = task_frame(task, trimmed=True)
    if task.status.state in wire.TERMINAL_STATES:
        return TaskStream(deps, task, [(newest, trimmed)], follow_after=None)
    return TaskStream(deps, task, [(newest, trimmed)], follow_after=newest)
