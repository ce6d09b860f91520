"""Sends the session events to the app's backend (profile §21): signed, in seq order per
session, retried with backoff, at least once.

Each sweep takes the sessions whose next event is due; one worker at a time holds a session
(a lease), so its events leave in order: the next one waits until the one before it was
answered with a 2xx or given up (`AIM_EVENTS_RETRY_S` after it happened). Sessions do not wait
for each other. Every attempt of an event carries the same `webhook-id`, and what an attempt
found is written only after it, so a worker killed mid-delivery leaves the event to be sent
again, never skipped. The signature is Standard Webhooks' (the `standardwebhooks` package).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from functools import partial
from typing import Final

import httpx
import msgspec
from standardwebhooks import Webhook

from realtime.engine.schedule import ms_of
from realtime.engine.session_events import webhook_id
from realtime.errors import Unavailable
from realtime.metrics import Metrics
from realtime.settings import Settings
from realtime.store.deliveries import DeliveryStore, Head
from realtime.timestamps import timestamp

log = logging.getLogger(__name__)

POLL_INTERVAL_S: Final = 0.5
CONCURRENCY: Final = 32  # sessions sent to at once by one worker
PER_TURN: Final = 100  # events sent to one session before the others get a turn
BACKOFF_BASE_S: Final = 1.0
BACKOFF_MAX_S: Final = 300.0
ERROR_TEXT_MAX: Final = 200


class _Principal(msgspec.Struct, frozen=True):
    tenant: str | None = None


class _Sent(msgspec.Struct, frozen=True):
    type: str
    occurred_at: str = msgspec.field(name="occurredAt")
    principal: _Principal = _Principal()


_SENT: Final = msgspec.json.Decoder(_Sent)


def _done(sending: dict[str, asyncio.Task[None]], session_id: str, _: object) -> None:
    sending.pop(session_id, None)


def backoff_s(attempts: int) -> float:
    """The wait after the `attempts`-th failure: exponential, capped, with equal jitter (half
    fixed, half random), so retries of many sessions spread out but never come at once."""
    ceiling = min(BACKOFF_MAX_S, BACKOFF_BASE_S * 2.0 ** max(0, attempts - 1))
    jitter: float = random.uniform(0, ceiling / 2)  # noqa: S311 - jitter, not a secret
    return ceiling / 2 + jitter


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
        self.http = httpx.AsyncClient(
            timeout=settings.events_timeout_s,
            follow_redirects=False,  # a redirect is an answer, not a delivery
            transport=transport,
            headers={"User-Agent": "aim-realtime session events"},
        )
        self.stopping = asyncio.Event()  # `loop`'s stop
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
        """Every POLL_INTERVAL_S until `stop` is set: start sending to each due session not
        already being sent to, CONCURRENCY at most at once. A slow receiver holds up its own
        session only: the others are started as they come due."""
        sending: dict[str, asyncio.Task[None]] = {}
        self.stopping = stop  # a session's turn ends at its next event once it is set
        try:
            while not stop.is_set():
                try:
                    for session_id in await self.store.due(self.now_ms()):
                        if session_id not in sending and len(sending) < CONCURRENCY:
                            task = asyncio.create_task(self._send_logged(session_id))
                            sending[session_id] = task
                            task.add_done_callback(partial(_done, sending, session_id))
                    self.metrics.deliveries_waiting(await self.store.waiting())
                    await self._forget_delivered()
                except Unavailable as exc:  # Redis unreachable: the next sweep tries again
                    log.debug("session event sweep failed: %s", exc.message)
                except Exception:  # a bug must not stop the deliveries of every other session
                    log.exception("session event sweep failed")
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), POLL_INTERVAL_S)
        finally:
            # what is under way finishes (its outcome noted): one attempt each, at most its deadline
            await asyncio.gather(*sending.values(), return_exceptions=True)
            await self.aclose()

    async def _send_logged(self, session_id: str) -> None:
        try:
            await self.send(session_id)
        except Unavailable as exc:  # the event stays, the next sweep tries again
            log.debug("session events of %s not sent: %s", session_id, exc.message)
        except Exception:
            log.exception("session events of %s not sent", session_id)

    async def _forget_delivered(self) -> None:
        """The gauge's undelivered heads that another worker delivered meanwhile go."""
        still = await self.store.waiting_among(list(self.waiting_since))
        for session_id in set(self.waiting_since) - still:
            self.waiting_since.pop(session_id, None)

    async def send(self, session_id: str) -> None:
        """Send the session's due events in seq order while they are answered with a 2xx."""
        lease, token = self.store.lease(session_id), uuid.uuid4().hex
        # longer than one attempt may take (its deadline), so no other worker starts meanwhile
        hold_ms = int((self.settings.events_timeout_s + 5) * 1000)
        if not await lease.hold(token, hold_ms):
            return  # another worker sends them
        try:
            for _ in range(PER_TURN):
                if self.stopping.is_set():
                    await self.store.wait_until(session_id, self.now_ms())  # for the next worker
                    return
                head = await self.store.head(session_id)
                if head.body is None:
                    self.waiting_since.pop(session_id, None)
                    await self.store.idle(session_id, self.now_ms())
                    return
                if not await self._attempt(session_id, head) or not await lease.hold(
                    token, hold_ms
                ):
                    return
            await self.store.wait_until(session_id, self.now_ms())  # the others' turn first
        finally:
            await lease.release(token)

    async def _attempt(self, session_id: str, head: Head) -> bool:
        """One POST of the head event; True when the session may go on to its next event."""
        assert head.body is not None  # noqa: S101 - checked by send
        sent = _SENT.decode(head.body)
        started_ms = self.now_ms()
        url = self.settings.events_url_for(sent.principal.tenant)
        status, error = await self._post(url, session_id, head.seq, head.body, started_ms)
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
        due_ms = started_ms + int(backoff_s(state.attempts) * 1000)
        state.status, state.next_attempt_at = "retrying", timestamp(due_ms)
        self.waiting_since[session_id] = occurred_ms  # this head's, not an earlier one's
        if await self.store.note(session_id, head, state, advance=False):
            await self.store.wait_until(session_id, due_ms)
        return False

    async def _post(
        self, url: str | None, session_id: str, seq: int, body: bytes, now_ms: int
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
                post = self.http.stream("POST", url or "", content=body, headers=headers)
                async with post as reply:
                    return reply.status_code, None  # the body is not read: nothing uses it
        except (TimeoutError, httpx.TimeoutException):
            return None, f"no answer within {limit:g} s"
        except httpx.HTTPError as exc:
            return None, (str(exc) or type(exc).__name__)[:ERROR_TEXT_MAX]
