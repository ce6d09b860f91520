"""Per-process fan-out of session event streams to SSE subscribers.

Commits only XADD to `aim:{sid}:events`; delivery is by reading those streams. One reader task
per process follows every stream that has subscribers with one XREAD (BLOCK) over all of them,
so 1,000 open subscriptions cost one Redis connection, not 1,000. On Redis Cluster (one slot per
XREAD) and on the embedded store it polls instead, one non-blocking XREAD per slot group.

Each subscriber has a bounded buffer. The reader never waits for a subscriber: one whose buffer
is full is dropped (`lagged`), its stream ends, and the client resumes with `Last-Event-ID`.
A new stream joins the blocking read at once: the reader's in-flight XREAD is cancelled and
re-issued with the new key.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from typing import Final

from realtime.errors import SERVER_GOING_AWAY, Unavailable
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
