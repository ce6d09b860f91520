"""The operations timeline's writes (profile §17): what a session's commits do not carry.

A commit's own facts (the transition, the command or webhook that caused it, the operations it
moved, the trace id of the request) are in the event entry it writes anyway. What is known
outside any commit goes to the session's timeline stream `aim:{<sessionId>}:timeline`:

- LiveKit calls (effect, attempt, result, duration), written by the runner with the outbox
  change that follows each call, in the same round trip (`SessionStore.done`/`retry_later`);
- replays, rejections with their JSON-RPC code, duplicate/fenced/ignored webhooks and timers
  that found the session moved on, through `Recorder`: entries batched in memory and written in
  one pipeline at most FLUSH_INTERVAL_S after the first of a batch (or once FLUSH_AT are
  waiting), off the request path.

The recorder is best effort: a flush that fails loses its entries, is counted
(`aim.timeline.lost{reason="flush_failed"}`) and logged once until a flush succeeds again; a
request never waits for it or fails because of it. Memory is bounded: over CAPACITY waiting
entries the oldest are dropped and counted (`reason="overflow"`). Entries name ids, kinds,
states and codes only, never message text.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from collections.abc import Callable, Sequence
from enum import StrEnum
from typing import Any, Final, Literal

import msgspec

from realtime.errors import ServiceError
from realtime.metrics import Metrics
from realtime.store import keys
from realtime.store.redis_client import RedisClient, translated_errors
from realtime.telemetry import current_trace_id, trace_id_of
from realtime.timestamps import timestamp

log = logging.getLogger(__name__)

FLUSH_INTERVAL_S: Final = 0.2  # a batch is written this long after its first entry
FLUSH_AT: Final = 256  # ... or as soon as this many entries wait
CAPACITY: Final = 10_000  # entries held at most while Redis does not take them

CommandOutcome = Literal["applied", "replayed", "rejected"]


class WebhookVerdict(StrEnum):
    """What became of one webhook delivery: the label of its metric, its span and, for the
    first four, its timeline entry."""

    APPLIED = "applied"  # it changed the session (or applied as a no-op)
    DUPLICATE = "duplicate"  # its event id was applied before
    FENCED = "fenced"  # for a room the session has left
    IGNORED = "ignored"  # not a room of this service, not an event sessions follow, refused
    MALFORMED = "malformed"  # too large, or not JSON (400/413)
    REJECTED = "rejected"  # its signature did not verify (401)
    UNAVAILABLE = "unavailable"  # it could not be recorded (503: LiveKit retries)


EffectResult = Literal["ok", "retry", "failed"]

_ENCODER: Final = msgspec.json.Encoder()


class TimelineEntry(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True, rename="camel"):
    """One entry of a session's timeline stream (what no commit carries: a command's replay or
    rejection, a webhook's verdict, a timer refused, a LiveKit call), written and read by this
    type; members that are None are left out."""

    at: str
    kind: str
    trace_id: str | None = None  # the request's, when it was traced
    method: str | None = None  # command
    command_id: str | None = None
    outcome: str | None = None
    code: int | None = None
    event: str | None = None  # webhook
    id: str | None = None
    verdict: str | None = None
    timer: str | None = None  # timer
    effect: str | None = None  # LiveKit call
    attempt: int | None = None
    result: str | None = None  # effect or timer
    duration_ms: int | None = None
    error: str | None = None


TIMELINE_DECODER: Final = msgspec.json.Decoder(TimelineEntry)


def timeline_entry(kind: str, now_ms: int, *, cause: str | None = None, **fields: Any) -> bytes:
    """One timeline entry (`TimelineEntry`'s members by their Python names), with the trace id
    of `cause` (the span that stored the work, a `current_cause()`) or else of the current
    request, when there is one."""
    trace_id = trace_id_of(cause) if cause else current_trace_id()
    entry = TimelineEntry(at=timestamp(now_ms), kind=kind, trace_id=trace_id, **fields)
    return _ENCODER.encode(entry)


def effect_entry(
    now_ms: int,
    effect: str,
    *,
    attempt: int,
    result: EffectResult,
    duration_ms: int,
    error: str | None = None,
    cause: str | None = None,
) -> bytes:
    """A LiveKit call of the outbox (`effect`: its API name, e.g. CreateRoom), in the trace of
    the commit that stored it (`cause`), whichever runner carries it out."""
    return timeline_entry(
        "effect",
        now_ms,
        cause=cause,
        effect=effect,
        attempt=attempt,
        result=result,
        duration_ms=duration_ms,
        error=error,
    )


class TimelineStore:
    """Appends to the sessions' timeline streams (capped; each expires when its session's replay
    window ends: the commits set that, and an append only gives a new stream one)."""

    def __init__(self, redis: RedisClient) -> None:
        self._client = redis.client

    async def append(self, entries: Sequence[tuple[str, bytes]], *, ttl_s: int) -> None:
        """Every entry (session id, entry JSON) in one pipeline: XADD each (MAXLEN ~), then one
        EXPIRE NX per session (`ttl_s`, a live session's window: an append never lengthens the
        window a commit set)."""
        pipe = self._client.pipeline(transaction=False)
        streams: dict[str, None] = {}
        for session_id, raw in entries:
            stream = keys.timeline_key(session_id)
            pipe.xadd(stream, {"e": raw}, maxlen=keys.TIMELINE_MAXLEN, approximate=True)
            streams[stream] = None
        for stream in streams:
            pipe.expire(stream, ttl_s, nx=True)
        async with translated_errors():
            await pipe.execute()


class Recorder:
    """Batches timeline entries and writes them off the request path (see the module's doc).

    Built once per process by the composition root, handed to whoever records; `run()` is its
    loop, `close()` writes what is left and ends it."""

    def __init__(
        self,
        store: TimelineStore,
        *,
        ttl_s: int,
        clock: Callable[[], float],
        metrics: Metrics | None = None,
        code_of: Callable[[ServiceError], int] | None = None,
        interval_s: float = FLUSH_INTERVAL_S,
        flush_at: int = FLUSH_AT,
        capacity: int = CAPACITY,
    ) -> None:
        self.store = store
        self.ttl_s = ttl_s
        self.clock = clock
        self.metrics = metrics or Metrics(None)
        # the JSON-RPC code of an error (the rpc layer's table, handed down by the composition
        # root: the store knows no codes)
        self.code_of = code_of
        self.interval_s = interval_s
        self.flush_at = flush_at
        self.capacity = capacity
        self._waiting: deque[tuple[str, bytes]] = deque()
        self._wake = asyncio.Event()  # a batch has started (or the recorder is closing)
        self._full = asyncio.Event()  # FLUSH_AT entries wait (or the recorder is closing)
        self._closing = False
        self._failing = False
        # what happened so far (tests, logs)
        self.flushes = 0
        self.written = 0
        self.dropped = 0  # over capacity
        self.lost = 0  # in flushes that failed
        self.failed_flushes = 0

    @property
    def waiting(self) -> int:
        return len(self._waiting)

    # --- recording (synchronous: a deque append, nothing awaited) ---------------------------------

    def add(self, session_id: str, raw: bytes) -> None:
        """Queue one entry for `session_id`; the oldest is dropped when CAPACITY wait."""
        if len(self._waiting) >= self.capacity:
            self._waiting.popleft()
            self.dropped += 1
            self.metrics.timeline_lost("overflow", 1)
        self._waiting.append((session_id, raw))
        if len(self._waiting) == 1:
            self._wake.set()
        if len(self._waiting) >= self.flush_at:
            self._full.set()
            self._wake.set()

    def command(
        self,
        session_id: str,
        *,
        method: str,
        command_id: str | None,
        outcome: CommandOutcome,
        error: ServiceError | None = None,
    ) -> None:
        code = self.code_of(error) if error is not None and self.code_of is not None else None
        self.add(
            session_id,
            timeline_entry(
                "command",
                self._now_ms(),
                method=method,
                command_id=command_id,
                outcome=outcome,
                code=code,
            ),
        )

    def webhook(
        self, session_id: str, *, event: str, event_id: str | None, verdict: WebhookVerdict
    ) -> None:
        self.add(
            session_id,
            timeline_entry("webhook", self._now_ms(), event=event, id=event_id, verdict=verdict),
        )

    def timer(self, session_id: str, *, timer: str, result: str) -> None:
        self.add(session_id, timeline_entry("timer", self._now_ms(), timer=timer, result=result))

    def _now_ms(self) -> int:
        return int(self.clock() * 1000)

    # --- writing ---------------------------------------------------------------------------------

    async def run(self) -> None:
        """Write batches until `close()`: each one FLUSH_INTERVAL_S after its first entry, or
        at once when FLUSH_AT wait."""
        while True:
            await self._wake.wait()
            self._wake.clear()
            if not self._closing and len(self._waiting) < self.flush_at:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._full.wait(), self.interval_s)
            self._full.clear()
            await self.flush()
            if self._closing and not self._waiting:
                return
            if self._waiting:
                self._wake.set()  # arrived while writing: the next batch has begun

    async def flush(self) -> int:
        """Write everything waiting in one pipeline; the number of entries written (0 when the
        write failed: those entries are lost, counted and, once per outage, logged)."""
        if not self._waiting:
            return 0
        batch = list(self._waiting)
        self._waiting.clear()
        try:
            await self.store.append(batch, ttl_s=self.ttl_s)
        except Exception as exc:  # noqa: BLE001 - best effort: no failure reaches a request
            self.failed_flushes += 1
            self.lost += len(batch)
            self.metrics.timeline_lost("flush_failed", len(batch))
            if not self._failing:
                self._failing = True
                log.warning(
                    "operations timeline: %d entries not written (%s); further failures are "
                    "counted in aim.timeline.lost until a write succeeds",
                    len(batch),
                    getattr(exc, "message", None) or type(exc).__name__,
                )
            return 0
        if self._failing:
            self._failing = False
            log.info("operations timeline: writing again")
        self.flushes += 1
        self.written += len(batch)
        return len(batch)

    async def close(self) -> None:
        """Stop after writing what waits (the loop's last flush)."""
        self._closing = True
        self._wake.set()
        self._full.set()
