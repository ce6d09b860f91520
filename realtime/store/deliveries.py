"""The session events for the app's backend, as the worker sends them (profile §21).

The commit stores each event (seq → body) in the session's slot and puts the session in the
deliveries index; this store is the worker's and the operator API's door to them: the next
event to send, what each attempt found, the sessions that wait, a redelivery from a seq.
"""

from __future__ import annotations

from typing import Final, Literal

import msgspec

from realtime.store import keys
from realtime.store.leases import DutyLease
from realtime.store.redis_client import RedisClient, translated_errors

# pending: not tried yet; retrying: tried and to be tried again; delivered: a 2xx answered;
# failed: given up after the retry bound
DeliveryStatus = Literal["pending", "retrying", "delivered", "failed"]
SWEEP: Final = 100  # sessions looked at per sweep


class DeliveryState(msgspec.Struct, kw_only=True, omit_defaults=True, rename="camel"):
    """How sending one event fared so far."""

    status: DeliveryStatus = "pending"
    attempts: int = 0
    last_status: int | None = None  # the receiver's HTTP status
    last_error: str | None = None  # a timeout, a refused connection …
    last_attempt_at: str | None = None
    next_attempt_at: str | None = None
    delivered_at: str | None = None


STATE_ENCODER: Final = msgspec.json.Encoder()
STATE_DECODER: Final = msgspec.json.Decoder(DeliveryState)


def as_sent(body: bytes, dropped_before: int) -> bytes:
    """The body a receiver gets: the stored one, with `droppedBefore` when events just before it
    were dropped (the backlog's bound, decision 162). A stored body is a JSON object."""
    if not dropped_before:
        return body
    return body[:-1] + b',"droppedBefore":%d}' % dropped_before


class Head(msgspec.Struct, frozen=True):
    """The next event of a session: its seq, body (None: nothing left to send), state so far,
    how long the events are kept (ms), the redeliveries asked so far (`gen`), when the last
    one was asked (ms; None: never) and how many events just before it were dropped."""

    seq: int
    body: bytes | None
    state: DeliveryState
    ttl_ms: int
    gen: int = 0
    since_ms: int | None = None
    dropped_before: int = 0


class Delivery(msgspec.Struct, frozen=True):
    """One kept event and how sending it fared (the operator API's view); `body` as sent."""

    seq: int
    body: bytes
    state: DeliveryState
    dropped_before: int = 0


class Listing(msgspec.Struct, frozen=True):
    """A session's kept events in seq order, and how many of its events were dropped."""

    deliveries: list[Delivery]
    dropped: int = 0


class DeliveryStore:
    def __init__(self, redis: RedisClient) -> None:
        self._redis = redis
        self._client = redis.client
        self._scripts = redis.scripts

    def lease(self, session_id: str) -> DutyLease:
        """The lease one worker holds while it sends the session's events."""
        return DutyLease(self._redis, keys.delivery_lease_key(session_id))

    async def due(self, now_ms: int) -> list[str]:
        """Sessions whose next event is due (at most SWEEP of them, the longest waiting first)."""
        async with translated_errors():
            found = await self._client.zrange(
                keys.deliveries_due_key(), 0, now_ms, byscore=True, offset=0, num=SWEEP
            )
        return [item.decode() if isinstance(item, bytes) else item for item in found]

    async def waiting(self) -> int:
        """How many sessions have events not yet delivered."""
        async with translated_errors():
            return int(await self._client.zcard(keys.deliveries_due_key()))

    async def head(self, session_id: str) -> Head:
        async with translated_errors():
            seq, body, state, ttl_ms, gen, since, gap = await self._scripts.delivery_head(
                keys=[keys.deliveries_key(session_id), keys.delivery_state_key(session_id)]
            )
        dropped_before = int(gap) if gap else 0
        return Head(
            int(seq),
            as_sent(body, dropped_before) if body else None,
            STATE_DECODER.decode(state) if state else DeliveryState(),
            int(ttl_ms),
            int(gen),
            int(since) if since else None,
            dropped_before,
        )

    async def note(
        self, session_id: str, head: Head, state: DeliveryState, *, advance: bool
    ) -> bool:
        """Keep how an attempt at `head` fared; `advance`: the session moves on to the next
        event. False when a redelivery was asked meanwhile (nothing was written)."""
        async with translated_errors():
            noted = await self._scripts.delivery_note(
                keys=[keys.delivery_state_key(session_id)],
                args=[
                    head.seq,
                    STATE_ENCODER.encode(state),
                    "1" if advance else "0",
                    max(head.ttl_ms, 0),
                    head.gen,
                ],
            )
        return bool(noted)

    async def waiting_among(self, session_ids: list[str]) -> set[str]:
        """Those of `session_ids` that still have events to send."""
        if not session_ids:
            return set()
        async with translated_errors():
            scores = await self._client.zmscore(keys.deliveries_due_key(), session_ids)
        return {sid for sid, score in zip(session_ids, scores, strict=True) if score is not None}

    async def wait_until(self, session_id: str, due_ms: int) -> None:
        """Look at the session again at `due_ms`."""
        async with translated_errors():
            await self._client.zadd(keys.deliveries_due_key(), {session_id: due_ms})

    async def wait_each(self, due: dict[str, int]) -> None:
        """Look at each session again at its time (ms): one command for all."""
        if not due:
            return
        async with translated_errors():
            await self._client.zadd(keys.deliveries_due_key(), dict(due))

    async def idle(self, session_id: str, now_ms: int) -> None:
        """Nothing is left to send: the session leaves the index, unless a commit stored an
        event after the last look (its own index entry may have been the one removed)."""
        async with translated_errors():
            await self._client.zrem(keys.deliveries_due_key(), session_id)
        if (await self.head(session_id)).body is not None:
            await self.wait_until(session_id, now_ms)

    async def listing(self, session_id: str) -> Listing:
        """Every kept event of the session with how sending it fared, in seq order, and how
        many were dropped."""
        async with translated_errors():
            pipe = self._client.pipeline(transaction=False)
            pipe.hgetall(keys.deliveries_key(session_id))
            pipe.hgetall(keys.delivery_state_key(session_id))
            bodies, states = await pipe.execute()
        found = {int(seq): body for seq, body in bodies.items()}
        noted = {int(k): STATE_DECODER.decode(v) for k, v in states.items() if k.isdigit()}
        gaps = {int(k[1:]): int(v) for k, v in states.items() if k[:1] == b"d" and k[1:].isdigit()}
        return Listing(
            [
                Delivery(
                    seq,
                    as_sent(found[seq], gaps.get(seq, 0)),
                    noted.get(seq, DeliveryState()),
                    gaps.get(seq, 0),
                )
                for seq in sorted(found)
            ],
            int(states.get(b"dropped", 0)),
        )

    async def redeliver(self, session_id: str, from_seq: int, now_ms: int) -> int:
        """Send the session's kept events again from `from_seq`; how many will be sent."""
        async with translated_errors():
            again = int(
                await self._scripts.redeliver(
                    keys=[keys.deliveries_key(session_id), keys.delivery_state_key(session_id)],
                    args=[from_seq, now_ms],
                )
            )
            if again:
                await self._client.zadd(keys.deliveries_due_key(), {session_id: now_ms})
        return again
