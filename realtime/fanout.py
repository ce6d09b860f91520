"""Per-process fan-out of session event streams to SSE subscribers.

Commits only XADD to `aim:{sid}:events`; delivery is by reading those streams. One reader task
per process follows every stream that has subscribers with one XREAD (BLOCK) over all of them,
so 1,000 open subscriptions cost one Redis connection, not 1,000. On Redis Cluster (one slot per
XREAD) and on the embedded store it polls instead, one non-blocking XREAD per slot group.

Each subscriber has a bounded buffer. The reader never waits for a subscriber: one whose buffer
is full is dropped (`lagged`), its stream ends, and the client resumes with `Last-Event-ID`.
A new stream joins the blocking read at once: the reader's in-flight XREAD is cancelled and
re-issued with the new key.

`StreamSlots` counts the open streams of each principal and each task in this process; one
more past either cap is refused before it starts.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import Counter, deque
from typing import Final

from realtime.errors import SERVER_GOING_AWAY, LimitExceeded, Unavailable, task_ref
from realtime.store import keys
from realtime.store.events import Entry, EventStore, parse_id
from realtime.store.redis_client import SOCKET_TIMEOUT_S

log = logging.getLogger(__name__)

# a blocking read returns at least this often (to notice shutdown); its round trip's deadline is
# this plus the store's (`EventStore.read`)
BLOCK_MS: Final = int(SOCKET_TIMEOUT_S * 1000) - 1000
POLL_S: Final = 0.05  # Cluster and the embedded store: how often the reader looks
READ_COUNT: Final = 500  # entries per stream per read
RETRY_S: Final = 0.5  # after Redis failed a read
# what a stream refused for the caps is told to wait: a slot frees when another stream of the
# caller ends, which the server cannot foresee; the same short wait as the live-sessions limit
STREAM_RETRY_AFTER_S: Final = 5


class Subscription:
    """One subscriber's view of one session's stream: the entries after `after`, in order."""

    def __init__(self, stream: str, after: str, limit: int) -> None:
        self.stream = stream
        self.last = parse_id(after)
        self.limit = limit
        self.lagged = False
        self._queue: deque[Entry] = deque()
        self._ready = asyncio.Event()

    def push(self, entry: Entry) -> bool:
        """Queue an entry; False when the buffer is full (the subscriber is then dropped)."""
        if len(self._queue) >= self.limit:
            self.lagged = True
            self._ready.set()
            return False
        self._queue.append(entry)
        self._ready.set()
        return True

    def _catch_up(self, entries: list[Entry]) -> None:
        """Entries read directly at subscription time: they precede everything queued."""
        self._queue.extendleft(reversed(entries))
        if entries:
            self._ready.set()

    async def next(self, wait_s: float) -> list[Entry] | None:
        """The entries queued so far (never repeating one), waiting up to `wait_s` seconds for
        the first; None on timeout. Raises `LaggedError` once the subscriber fell too far behind."""
        if not self._queue and not self.lagged:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._ready.wait(), wait_s)
        self._ready.clear()
        if self.lagged:
            raise LaggedError(self.stream)
        if not self._queue:
            return None
        entries: list[Entry] = []
        while self._queue:
            entry = self._queue.popleft()
            position = parse_id(entry[0])
            if position > self.last:
                self.last = position
                entries.append(entry)
        return entries


class LaggedError(Exception):
    """The subscriber did not keep up; it resumes with Last-Event-ID."""


class _Watch:
    """A stream the reader follows: its cursor (the last id read) and its subscribers."""

    def __init__(self, cursor: str) -> None:
        self.cursor = cursor
        self.subscribers: set[Subscription] = set()


class EventHub:
    """Fans out session event streams to subscribers; one reader task per process."""

    def __init__(
        self,
        events: EventStore,
        *,
        buffer: int = 256,
        block_ms: int = BLOCK_MS,
        poll_s: float = POLL_S,
        blocking: bool | None = None,
    ) -> None:
        self.events = events
        self.buffer = buffer
        self.block_ms = block_ms
        self.poll_s = poll_s
        self.blocking = events.can_block if blocking is None else blocking
        self._watches: dict[str, _Watch] = {}
        self._reader: asyncio.Task[None] | None = None
        self._wake = asyncio.Event()
        self._closed = False

    @property
    def subscribers(self) -> int:
        return sum(len(watch.subscribers) for watch in self._watches.values())

    @property
    def streams(self) -> int:
        return len(self._watches)

    async def subscribe(self, session_id: str, after: str) -> Subscription:
        """Follow the session's events after entry `after` (`0-0`: from the first)."""
        stream = keys.events_key(session_id)
        subscription = Subscription(stream, after, self.buffer)
        watch = self._watches.get(stream)
        if watch is None:
            self._watches[stream] = watch = _Watch(after)
            watch.subscribers.add(subscription)
            self._wake.set()
            self._start()
            return subscription
        # the reader delivers what comes after its cursor; what lies between `after` and the
        # cursor is read here, once, and goes first (both synchronous with the add: no gap)
        cursor = watch.cursor
        watch.subscribers.add(subscription)
        if parse_id(after) < parse_id(cursor):
            try:
                backlog = await self.events.after(session_id, after, until=cursor)
            except BaseException:
                self.unsubscribe(subscription)
                raise
            subscription._catch_up(backlog)
        return subscription

    def unsubscribe(self, subscription: Subscription) -> None:
        watch = self._watches.get(subscription.stream)
        if watch is None:
            return
        watch.subscribers.discard(subscription)
        if not watch.subscribers:
            del self._watches[subscription.stream]

    def _start(self) -> None:
        if self._closed:
            raise Unavailable(SERVER_GOING_AWAY, service="redis")
        if self._reader is None or self._reader.done():
            self._reader = asyncio.get_running_loop().create_task(self._run())

    async def close(self) -> None:
        self._closed = True
        for watch in list(self._watches.values()):
            for subscription in watch.subscribers:
                subscription.lagged = True  # ends each stream; clients resume elsewhere
                subscription._ready.set()
        self._watches.clear()
        if self._reader is not None:
            self._reader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reader

    async def _run(self) -> None:
        while self._watches:
            self._wake.clear()
            reading = {stream: (watch, watch.cursor) for stream, watch in self._watches.items()}
            cursors = {stream: cursor for stream, (_, cursor) in reading.items()}
            try:
                replies = await self._read(cursors)
            except Unavailable:  # Redis unreachable: subscribers wait (heartbeats go on)
                await asyncio.sleep(RETRY_S)
                continue
            except Exception:  # the reader must outlive any one bad read
                log.exception("reading session event streams failed; retrying")
                await asyncio.sleep(RETRY_S)
                continue
            if replies is None:
                continue  # woken for a new stream
            for stream, entries in replies:
                watch, cursor = reading[stream]
                if self._watches.get(stream) is not watch or watch.cursor != cursor:
                    continue  # the stream was dropped (and maybe re-added) while reading
                self._deliver(watch, entries)
            if not self.blocking:
                await self._sleep_or_wake(self.poll_s)

    async def _read(self, cursors: dict[str, str]) -> list[tuple[str, list[Entry]]] | None:
        if not self.blocking:
            return await self.events.read(cursors, block_ms=None, count=READ_COUNT)
        read = asyncio.ensure_future(
            self.events.read(cursors, block_ms=self.block_ms, count=READ_COUNT)
        )
        woken = asyncio.ensure_future(self._wake.wait())
        try:
            await asyncio.wait({read, woken}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            woken.cancel()
            if not read.done():
                # redis-py drops the connection of a cancelled command: nothing is left unread
                read.cancel()
                await asyncio.wait({read})
        if read.cancelled():
            return None
        return read.result()

    async def _sleep_or_wake(self, seconds: float) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._wake.wait(), seconds)

    def _deliver(self, watch: _Watch, entries: list[Entry]) -> None:
        """Synchronous: the cursor and every subscriber advance together."""
        for entry in entries:
            if parse_id(entry[0]) <= parse_id(watch.cursor):
                continue
            watch.cursor = entry[0]
            for subscription in list(watch.subscribers):
                if parse_id(entry[0]) <= subscription.last:
                    continue
                if not subscription.push(entry):
                    log.info(
                        "dropping an SSE subscriber that fell behind on %s", subscription.stream
                    )
                    self.unsubscribe(subscription)


class StreamSlot:
    """One open stream's place in `StreamSlots`: its principal's, and its task's once known."""

    def __init__(self, slots: StreamSlots, principal: str) -> None:
        self._slots = slots
        self.principal: str | None = principal
        self.task_id: str | None = None

    def attach(self, task_id: str) -> None:
        """Count the stream against `task_id` as well; LimitExceeded (the slot released) when
        the task has its cap of streams already."""
        try:
            self._slots.check_task(task_id)
        except LimitExceeded:
            self.release()
            raise
        self._slots.tasks[task_id] += 1
        self.task_id = task_id

    def release(self) -> None:
        """Free the places this stream held; once, whatever the path that ended it."""
        if self.principal is not None:
            _drop(self._slots.principals, self.principal)
            self.principal = None
        if self.task_id is not None:
            _drop(self._slots.tasks, self.task_id)
            self.task_id = None


class StreamSlots:
    """Open streams counted per principal and per task, in this process (as the per-peer
    connection cap and the rate limit are): one more past either cap is `LimitExceeded`."""

    def __init__(self, *, per_principal: int = 16, per_task: int = 8) -> None:
        self.per_principal = per_principal
        self.per_task = per_task
        self.principals: Counter[str] = Counter()
        self.tasks: Counter[str] = Counter()

    def take(self, principal: str, task_id: str | None = None) -> StreamSlot:
        """A slot for one more stream of `principal` (on `task_id`, when it is known yet), or
        LimitExceeded, nothing taken."""
        if self.principals[principal] >= self.per_principal:
            raise LimitExceeded(
                f"You already have {self.per_principal} open streams; close one before opening "
                f"another, or retry after {STREAM_RETRY_AFTER_S} s.",
                limit="streams_per_principal",
                retry_after=STREAM_RETRY_AFTER_S,
            )
        if task_id is not None:
            self.check_task(task_id)
        self.principals[principal] += 1
        slot = StreamSlot(self, principal)
        if task_id is not None:
            slot.attach(task_id)
        return slot

    def check_task(self, task_id: str) -> None:
        """LimitExceeded when `task_id` has its cap of open streams."""
        if self.tasks[task_id] >= self.per_task:
            raise LimitExceeded(
                (
                    "Task ",
                    task_ref(task_id),
                    f" already has {self.per_task} open streams; close one before opening "
                    f"another, or retry after {STREAM_RETRY_AFTER_S} s.",
                ),
                limit="streams_per_task",
                retry_after=STREAM_RETRY_AFTER_S,
            )


def _drop(counts: Counter[str], key: str) -> None:
    counts[key] -= 1
    if counts[key] <= 0:
        del counts[key]  # bounded: only keys with open streams are kept
