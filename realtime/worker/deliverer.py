"""Sends the session events to the app's backend (profile §21): signed, in seq order per
session, retried with backoff, at least once.

Each sweep takes the sessions whose next event is due; one worker at a time holds a session
(a lease), so its events leave in order: the next one waits until the one before it was
answered with a 2xx or given up (`AIM_EVENTS_RETRY_S` after it happened). Sessions do not wait
for each other. Every attempt of an event carries the same `webhook-id`, and what an attempt
found is written only after it, so a worker killed mid-delivery leaves the event to be sent
again, never skipped. The signature is Standard Webhooks' (the `standardwebhooks` package).

Receivers do not wait for each other either (decision 161): each destination URL has at most
`AIM_EVENTS_MAX_PER_DESTINATION` of the worker's CONCURRENCY sessions under way, the due
sessions are taken in turns between destinations, and a destination that keeps failing is
paused by its breaker. A session whose destination is full or paused is not started: it is put
back in the index for when it may go, so it holds no slot and nothing polls for it.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import partial
from typing import Final

import httpx
import msgspec
from standardwebhooks import Webhook

from realtime.engine.schedule import ms_of
from realtime.engine.session_events import webhook_id
from realtime.environment import without_credentials
from realtime.errors import Unavailable
from realtime.loop import Backoff, Loop, jitter
from realtime.metrics import Metrics
from realtime.settings import Settings
from realtime.store.deliveries import SWEEP, DeliveryStore, Head
from realtime.timestamps import timestamp

log = logging.getLogger(__name__)

POLL_INTERVAL_S: Final = 0.5
CONCURRENCY: Final = 32  # sessions sent to at once by one worker (each destination its share)
PER_TURN: Final = 100  # events sent to one session before the others get a turn
# the wait after an attempt that got no 2xx: 0.5-1 s, then 1-2 s … up to 150-300 s
BACKOFF: Final = Backoff(first_s=1.0, max_s=300.0)
ERROR_TEXT_MAX: Final = 200
# the breaker of a destination: this many attempts in a row without an answer, or answered
# with a 5xx or a 429, pause it; after the pause one trial attempt at a time, and a failed trial
# pauses it twice as long (capped); any other answer closes it
BREAKER_FAILURES: Final = 5
BREAKER_PAUSE_S: Final = 5.0
BREAKER_PAUSE_MAX_S: Final = 120.0
ROUTES_KEPT: Final = 10_000  # sessions whose destination this worker remembers


class _Principal(msgspec.Struct, frozen=True):
    tenant: str | None = None


class _Sent(msgspec.Struct, frozen=True):
    type: str
    occurred_at: str = msgspec.field(name="occurredAt")
    principal: _Principal = _Principal()


_SENT: Final = msgspec.json.Decoder(_Sent)


def _done(sending: dict[str, asyncio.Task[None]], session_id: str, _: object) -> None:
    sending.pop(session_id, None)


def _unwell(status: int | None) -> bool:
    """An attempt that counts against its destination's breaker: no answer, a 5xx or a 429."""
    return status is None or status >= 500 or status == 429


@dataclass(slots=True)
class Destination:
    """One receiver URL as this worker sees it: the sessions being sent to it (`sending`), its
    failed attempts in a row, and its breaker (`pauses` in a row; 0: closed)."""

    sending: int = 0
    failures: int = 0
    pauses: int = 0
    paused_until_ms: int = 0

    def paused(self, now_ms: int) -> bool:
        return self.pauses > 0 and now_ms < self.paused_until_ms

    def has_room(self, now_ms: int, cap: int) -> bool:
        """Whether one more session may be sent to now: not paused, and under its cap (one at
        a time while it is on trial after a pause)."""
        if self.paused(now_ms):
            return False
        return self.sending < (1 if self.pauses else cap)

    def free_at(self, now_ms: int, attempt_ms: int) -> int:
        """When a session turned away now should look again: the pause's end, the answer of
        the trial under way (at most one attempt's deadline), or soon (a slot frees)."""
        if self.paused(now_ms):
            return self.paused_until_ms
        if self.pauses:
            return now_ms + attempt_ms
        return now_ms + int(POLL_INTERVAL_S * 1000)

    def answered(self, status: int | None, now_ms: int) -> float | None:
        """Count an attempt's outcome; the pause in seconds when this one paused it."""
        if not _unwell(status):
            self.failures = self.pauses = 0
            return None
        self.failures += 1
        if self.paused(now_ms):
            return None  # an attempt begun before the pause: it is paused already
        if self.pauses == 0 and self.failures < BREAKER_FAILURES:
            return None
        self.pauses += 1
        pause_s = min(BREAKER_PAUSE_MAX_S, BREAKER_PAUSE_S * 2.0 ** (self.pauses - 1))
        self.paused_until_ms = now_ms + int(pause_s * 1000)
        return pause_s


class Deliverer:
    """`loop()` as the worker: sweeps the due sessions until stopped."""

    def __init__(
        self,
        settings: Settings,
        store: DeliveryStore,
        *,
        metrics: Metrics | None = None,
        clock: Callable[[], float] = time.time,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        if settings.events_url is None or settings.events_secret is None:
            raise ValueError("session events are not configured (AIM_EVENTS_URL, _SECRET)")
        self.settings = settings
        self.store = store
        self.metrics = metrics or Metrics(None)
        self.clock = clock
        self.signer = Webhook(settings.events_secret)
        limit = settings.events_timeout_s
        self.http = httpx.AsyncClient(
            # a receiver that does not take the connection is known fast, without holding a slot
            # for the whole deadline (which bounds the attempt as a whole: `_post`)
            timeout=httpx.Timeout(limit, connect=min(settings.events_connect_timeout_s, limit)),
            follow_redirects=False,  # a redirect is an answer, not a delivery
            transport=transport,
            headers={"User-Agent": "aim-realtime session events"},
        )
        self.stopping = asyncio.Event()  # `loop`'s stop
        self.destinations: dict[str, Destination] = {}  # by URL (the settings name a few)
        self.routes: dict[str, str] = {}  # session id → its destination, once its head was read
        self.turn = 0  # which destination goes first in the next sweep
        # the occurredAt of each session's undelivered head this worker has tried (the gauge of
        # the oldest undelivered event)
        self.waiting_since: dict[str, int] = {}
        self.metrics.watch_deliveries(self._oldest_undelivered_s)

    def now_ms(self) -> int:
        return int(self.clock() * 1000)

    def _oldest_undelivered_s(self) -> float:
        if not self.waiting_since:
            return 0.0
        return max(0.0, (self.now_ms() - min(self.waiting_since.values())) / 1000)

    async def aclose(self) -> None:
        await self.http.aclose()

    async def loop(self, stop: asyncio.Event) -> None:
        """Every POLL_INTERVAL_S until `stop` is set: start sending to the due sessions
        (`sweep`). A slow receiver holds up its own sessions only, and a slow destination its
        own share of the slots."""
        sending: dict[str, asyncio.Task[None]] = {}
        self.stopping = stop  # a session's turn ends at its next event once it is set
        tick = partial(self.tick, sending)
        try:
            ticks = self.metrics.loop_ticks
            await Loop("events", tick, interval_s=POLL_INTERVAL_S, stop=stop, ticks=ticks).run()
        finally:
            # what is under way finishes (its outcome noted): one attempt each, at most its deadline
            await asyncio.gather(*sending.values(), return_exceptions=True)
            await self.aclose()

    async def tick(self, sending: dict[str, asyncio.Task[None]]) -> None:
        """One sweep, then the backlog gauge and the undelivered heads it follows."""
        await self.sweep(sending)
        self.metrics.deliveries_waiting(await self.store.waiting())
        await self._forget_delivered()

    def destination(self, url: str) -> Destination:
        return self.destinations.setdefault(url, Destination())

    def _slots_free(self) -> bool:
        return sum(d.sending for d in self.destinations.values()) < CONCURRENCY

    def _in_turns(self, due: list[str]) -> Iterator[str]:
        """The due sessions one destination after another (round robin, each in due order),
        the sessions not yet routed as one more destination; who goes first rotates."""
        queues: dict[str | None, list[str]] = {}
        for session_id in due:
            queues.setdefault(self.routes.get(session_id), []).append(session_id)
        order = list(queues.values())
        self.turn = (self.turn + 1) % max(1, len(order))
        order = order[self.turn :] + order[: self.turn]
        for index in range(max(map(len, order), default=0)):
            for queue in order:
                if index < len(queue):
                    yield queue[index]

    async def sweep(self, sending: dict[str, asyncio.Task[None]]) -> None:
        """Start sending to the due sessions that may go now. A routed session whose
        destination is paused or full is put back for when it may go; one not routed yet is
        started, and routes itself on its first read."""
        now_ms = self.now_ms()
        cap = self.settings.events_max_per_destination
        attempt_ms = int(self.settings.events_timeout_s * 1000)
        later: dict[str, int] = {}
        for session_id in self._in_turns(await self.store.due(now_ms)):
            if session_id in sending:
                continue
            url = self.routes.get(session_id)
            reserved = None
            if url is not None:
                reserved = self.destination(url)
                if not reserved.has_room(now_ms, cap):
                    later[session_id] = reserved.free_at(now_ms, attempt_ms)
                    continue
                if not self._slots_free():
                    continue  # every slot is taken: it stays due, in its place
                reserved.sending += 1
            elif len(sending) >= CONCURRENCY + SWEEP:
                continue
            task = asyncio.create_task(self._send_logged(session_id, reserved))
            sending[session_id] = task
            task.add_done_callback(partial(_done, sending, session_id))
        await self.store.wait_each(later)

    async def _send_logged(self, session_id: str, reserved: Destination | None = None) -> None:
        try:
            await self.send(session_id, reserved)
        except Unavailable as exc:  # the event stays, the next sweep tries again
            log.debug("session events of %s not sent: %s", session_id, exc.message)
        except Exception:
            log.exception("session events of %s not sent", session_id)

    async def _forget_delivered(self) -> None:
        """The gauge's undelivered heads that another worker delivered meanwhile go."""
        still = await self.store.waiting_among(list(self.waiting_since))
        for session_id in set(self.waiting_since) - still:
            self.waiting_since.pop(session_id, None)

    async def send(self, session_id: str, reserved: Destination | None = None) -> None:
        """Send the session's due events in seq order while they are answered with a 2xx.
        `reserved`: its destination's slot, taken by the sweep; without it the slot is taken
        here once the destination is known, or the session is put back for later."""
        lease, token = self.store.lease(session_id), uuid.uuid4().hex
        # longer than one attempt may take (its deadline), so no other worker starts meanwhile
        hold_ms = int((self.settings.events_timeout_s + 5) * 1000)
        if not await lease.hold(token, hold_ms):
            if reserved is not None:
                reserved.sending -= 1
            return  # another worker sends them
        try:
            for _ in range(PER_TURN):
                if self.stopping.is_set():
                    await self.store.wait_until(session_id, self.now_ms())  # for the next worker
                    return
                head = await self.store.head(session_id)
                if head.body is None:
                    self.waiting_since.pop(session_id, None)
                    self.routes.pop(session_id, None)
                    await self.store.idle(session_id, self.now_ms())
                    return
                sent = _SENT.decode(head.body)
                url = self.settings.events_url_for(sent.principal.tenant) or ""
                self._route(session_id, url)
                target = self.destination(url)
                if target is not reserved:
                    turned_away = self._take_slot(target)
                    if turned_away is not None:
                        await self.store.wait_until(session_id, turned_away)
                        return
                    if reserved is not None:
                        reserved.sending -= 1
                    reserved = target
                elif target.paused(self.now_ms()):  # paused while this turn went on
                    await self.store.wait_until(session_id, target.paused_until_ms)
                    return
                if not await self._attempt(session_id, head, sent, url, target):
                    return
                if not await lease.hold(token, hold_ms):
                    return
            await self.store.wait_until(session_id, self.now_ms())  # the others' turn first
        finally:
            if reserved is not None:
                reserved.sending -= 1
            await lease.release(token)

    def _route(self, session_id: str, url: str) -> None:
        if session_id not in self.routes and len(self.routes) >= ROUTES_KEPT:
            self.routes.pop(next(iter(self.routes)))  # the longest known goes
        self.routes[session_id] = url

    def _take_slot(self, target: Destination) -> int | None:
        """Take a slot of `target` for this session: None when taken, else when to look again."""
        now_ms = self.now_ms()
        if not target.has_room(now_ms, self.settings.events_max_per_destination):
            return target.free_at(now_ms, int(self.settings.events_timeout_s * 1000))
        if not self._slots_free():
            return now_ms + int(POLL_INTERVAL_S * 1000)
        target.sending += 1
        return None

    async def _attempt(
        self, session_id: str, head: Head, sent: _Sent, url: str, target: Destination
    ) -> bool:
        """One POST of the head event; True when the session may go on to its next event."""
        assert head.body is not None  # noqa: S101 - checked by send
        started_ms = self.now_ms()
        status, error = await self._post(url, session_id, head.seq, head.body, started_ms)
        pause_s = target.answered(status, self.now_ms())
        if pause_s is not None:
            log.warning(
                "session events to %s paused for %g s: %d attempts in a row failed (%s)",
                without_credentials(url),
                pause_s,
                target.failures,
                error or f"HTTP {status}",
            )
        state = head.state
        state.attempts += 1
        state.last_status, state.last_error = status, error
        state.last_attempt_at = timestamp(started_ms)
        if status is not None and 200 <= status < 300:
            state.status, state.next_attempt_at = "delivered", None
            state.delivered_at = timestamp(self.now_ms())
            self.metrics.event_delivered(sent.type)
            self.waiting_since.pop(session_id, None)
            await self.store.note(session_id, head, state, advance=True)
            return True
        self.metrics.event_attempt_failed("status" if status is not None else "transport")
        occurred_ms = ms_of(sent.occurred_at)
        # retried for the bound from when it happened, or from the redelivery an operator asked
        since_ms = max(occurred_ms, head.since_ms or 0)
        if started_ms - since_ms >= self.settings.events_retry_s * 1000:
            # retried for the whole bound: the session goes on; the receiver sees the gap in seq
            state.status, state.next_attempt_at = "failed", None
            self.metrics.event_given_up(sent.type)
            log.warning(
                "session event %s of session %s given up after %d attempts: %s",
                head.seq,
                session_id,
                state.attempts,
                error or f"HTTP {status}",
                extra={"session_id": session_id},
            )
            self.waiting_since.pop(session_id, None)
            await self.store.note(session_id, head, state, advance=True)
            return True
        due_ms = started_ms + BACKOFF.delay_ms(state.attempts, jitter())
        state.status, state.next_attempt_at = "retrying", timestamp(due_ms)
        self.waiting_since[session_id] = occurred_ms  # this head's, not an earlier one's
        if await self.store.note(session_id, head, state, advance=False):
            await self.store.wait_until(session_id, due_ms)
        return False

    async def _post(
        self, url: str, session_id: str, seq: int, body: bytes, now_ms: int
    ) -> tuple[int | None, str | None]:
        """The receiver's HTTP status, or None and what went wrong on the way."""
        message_id = webhook_id(session_id, seq)
        at = datetime.fromtimestamp(now_ms / 1000, tz=UTC)
        headers = {
            "Content-Type": "application/json",
            "webhook-id": message_id,
            "webhook-timestamp": str(now_ms // 1000),
            "webhook-signature": self.signer.sign(message_id, at, body.decode()),
        }
        limit = self.settings.events_timeout_s
        try:
            # one deadline for the whole attempt (httpx's bounds each phase on its own)
            async with asyncio.timeout(limit):
                post = self.http.stream("POST", url, content=body, headers=headers)
                async with post as reply:
                    return reply.status_code, None  # the body is not read: nothing uses it
        except httpx.ConnectTimeout:
            return None, f"no connection within {self.http.timeout.connect or limit:g} s"
        except (TimeoutError, httpx.TimeoutException):
            return None, f"no answer within {limit:g} s"
        except httpx.HTTPError as exc:
            return None, (str(exc) or type(exc).__name__)[:ERROR_TEXT_MAX]
