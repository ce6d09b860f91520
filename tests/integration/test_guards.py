"""Guards that only show when things interleave badly (profile §6, §11): a runner whose lease ran
out, calls queued for a room the session has left, and an SSE subscriber joining while the hub's
reader is behind. Each test names in its docstring the product check it protects."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping

import pytest

from realtime.a2a.projection import follow
from realtime.engine.core import Engine
from realtime.engine.outcomes import Applied
from realtime.fanout import EventHub, LaggedError, Subscription
from realtime.livekit_adapter.api import LiveKitGateway
from realtime.store import keys
from realtime.store.events import Entry, EventStore
from realtime.store.redis_client import RedisClient
from realtime.store.sessions import SessionStore
from realtime.worker.runner import Runner
from state_machines import End
from tests.conftest import livekit_settings
from tests.e2e.agent_operation_helpers import get_session, interact, open_session
from tests.e2e.webhook_helpers import deliver, room, webhook_event
from tests.integration.engine_helpers import new_session
from tests.integration.event_hub_helpers import commit

pytestmark = pytest.mark.redis

AGENT = "aim-realtime-agent"


async def wait_until(check: Callable[[], Awaitable[bool]], *, within: float, what: str) -> None:
    deadline = time.monotonic() + within
    while not await check():
        if time.monotonic() > deadline:
            pytest.fail(f"not {what} within {within} s")
        await asyncio.sleep(0.02)


# --- the runner's lease ---------------------------------------------------------------------------


async def test_a_runner_whose_lease_ran_out_during_a_hung_call_does_not_carry_on(store, livekit):
    """Guards the lease renewal in `Runner._run_leased` (`if not await self.sessions.renew(...):
    return False, True`).

    A session is created and ended at once: its outbox holds the CreateRoom that provisions it
    and the DeleteRoom of its end. Runner A takes it with a short lease; its CreateRoom hangs in
    LiveKit past the lease. Runner B (another process) takes the lease over, redoes the
    CreateRoom (A never recorded it done: at least once, and an upsert) and moves on to the
    DeleteRoom, which LiveKit is slow to answer. When A's CreateRoom finally returns, A must
    stop: carrying on would run the session's next effect a second time."""
    settings = livekit_settings(livekit)
    engine = Engine(
        settings, SessionStore(store), project=follow
    )  # no inline runs: the test starts both runners
    gateway = LiveKitGateway(settings)
    stalled = Runner(engine, gateway, lease_ms=200)
    takeover = Runner(engine, gateway)
    try:
        session_id = await new_session(engine, provisioned=False)
        assert isinstance(await engine.execute(session_id, End("user_hangup")), Applied)
        lease_key = keys.runner_lease_key(session_id)
        livekit.delay(1.2, n=1, method="CreateRoom")  # A's call: answered long after its lease
        livekit.delay(1.5, n=1, method="DeleteRoom")  # B's: A is back before it is answered

        first = asyncio.create_task(stalled.run(session_id))

        async def a_hangs_and_its_lease_is_gone() -> bool:
            return bool(livekit.calls_to("CreateRoom")) and not await store.client.exists(lease_key)

        await wait_until(a_hangs_and_its_lease_is_gone, within=5, what="A's lease run out")
        second = asyncio.create_task(takeover.run(session_id))
        async with asyncio.timeout(15):
            assert await asyncio.gather(first, second) == [True, True]
    finally:
        await gateway.aclose()

    deleted = livekit.calls_to("DeleteRoom")
    assert len(deleted) == 1, (
        f"the room was deleted {len(deleted)} times: the runner whose lease ran out carried on "
        "with the session's effects after another runner took over"
    )
    # the hung call and the takeover's retry of it; nothing else was carried out twice
    assert len(livekit.calls_to("CreateRoom")) == 2
    loaded = await engine.sessions.load(session_id)
    assert loaded.record is not None
    assert loaded.record.session.state == "ended"
    assert await engine.sessions.pending(session_id) == []


# --- calls for a room the session has left --------------------------------------------------------


@pytest.mark.e2e
@pytest.mark.parametrize(
    ("kind", "payload", "method"),
    [
        ("input.text", {"text": "are you still there?"}, "SendData"),
        ("media.request", {"side": "user", "source": "camera"}, "UpdateParticipant"),
    ],
    ids=["send-data", "update-permissions"],
)
async def test_a_call_queued_for_the_old_room_is_dropped_when_the_session_rebinds(
    rt_client, livekit, store, kind, payload, method
):
    """Guards the room check of `_still_wanted` in runner.py (`effect.room == session.room and
    session.state != "ended"` for SendData and UpdatePermissions).

    LiveKit is down when the user sends a message to the agent (SendData) or is granted the
    camera (UpdatePermissions): the call waits in the outbox. Then LiveKit closes the room and
    says so (room_finished): the session rebinds to a new room at epoch 2. When LiveKit comes
    back, the queued call must be dropped: neither the old room (the agent there is gone) nor
    the new one (another agent, another epoch) may get it."""
    live = await open_session(rt_client, livekit)
    sessions = SessionStore(store)

    async def outbox_empty() -> bool:
        return not await sessions.pending(live.sid)

    await wait_until(outbox_empty, within=5, what="the join's calls carried out")
    await livekit.set_down(True)
    mark = len(livekit.calls)
    sent = await interact(rt_client, live.sid, kind, payload)
    assert "result" in sent, sent

    async def queued_and_tried() -> bool:
        pending = await sessions.pending(live.sid)
        return any(entry.attempts >= 1 for _, entry in pending)

    await wait_until(queued_and_tried, within=5, what="the first attempt failed")
    livekit.close_room(live.room)
    assert await deliver(rt_client, webhook_event("room_finished", live.room)) == "applied"
    rebound = await get_session(rt_client, live.sid)
    new_room = room(live.sid, 2)
    assert (rebound["state"], rebound["sessionEpoch"]) == ("provisioning", 2)
    assert rebound["media"]["room"] == new_room
    await livekit.set_down(False)

    def leaked() -> list[str]:
        return [c.request.room for c in livekit.calls[mark:] if c.method == method and c.request]

    async def settled() -> bool:
        if leaked():
            return True
        state = (await get_session(rt_client, live.sid))["state"]
        return state == "ready" and not await sessions.pending(live.sid)

    await wait_until(settled, within=15, what="provisioned in the new room")
    late = leaked()
    assert not late, (
        f"the {method} queued for {live.room} was sent to LiveKit (to {late}) after the "
        f"session had moved to {new_room}"
    )
    assert not [m for m in livekit.data_messages if m.room in (live.room, new_room)]
    assert (await get_session(rt_client, live.sid))["state"] == "ready"
    assert new_room in livekit.rooms


# --- the SSE hub: a subscriber joining while the reader is behind ---------------------------------

BUFFER = 16
PAGE = 8  # what a resumed stream reads per page before it joins the hub (small: several pages)


class HeldReads(EventStore):
    """The hub's reads, held back while `flowing` is clear: the reader falls behind the stream
    (as it does when one XREAD serves many busy streams), while direct reads go on."""

    def __init__(self, store: RedisClient) -> None:
        super().__init__(store)
        self.flowing = asyncio.Event()
        self.flowing.set()

    async def read(
        self, cursors: Mapping[str, str], *, block_ms: int | None, count: int
    ) -> list[tuple[str, list[Entry]]]:
        replies = await super().read(cursors, block_ms=block_ms, count=count)
        await asyncio.wait_for(self.flowing.wait(), 10)
        return replies


async def received(subscription: Subscription, count: int, within: float = 5.0) -> list[str]:
    """The ids the subscriber is handed until it has `count` (and a little longer, so that a
    repeated entry shows), failing plainly if the hub dropped it as lagging."""
    got: list[str] = []
    deadline = time.monotonic() + within
    lagged = False
    try:
        while len(got) < count and time.monotonic() < deadline:
            got += [entry_id for entry_id, _ in await subscription.next(0.2) or ()]
        got += [entry_id for entry_id, _ in await subscription.next(0.2) or ()]
    except LaggedError:
        lagged = True
    if lagged:
        pytest.fail(
            f"the subscriber was dropped as lagging while it waited for {count} new events "
            f"(handed {got} before): the hub filled its buffer with events it had already read"
        )
    return got


@pytest.mark.parametrize("blocking", [True, False], ids=["blocking", "polling"])
@pytest.mark.parametrize("behind", [5, 40], ids=["within-the-buffer", "beyond-the-buffer"])
async def test_a_subscriber_joining_while_events_are_committed_gets_each_event_once_in_order(
    store, blocking, behind
):
    """Guards the hub's de-duplication (hub.py: `_deliver` skips entries at or before a
    subscriber's `last`; `Subscription.next` hands out only entries after it).

    One client follows a session; the hub's reader then falls behind while `behind` events are
    committed. A second client resumes the way a resumed SSE stream does: it pages through what
    it missed straight from the stream (more events are committed between its pages) and joins
    the hub after the last one it read, ahead of the reader. When the reader catches up, what it
    brings overlaps what the second client has read: the client must get each later event
    exactly once, in order, and not be dropped for entries it never needed."""
    events = HeldReads(store)
    hub = EventHub(events, buffer=BUFFER, blocking=blocking)
    session_id = str(uuid.uuid4())
    try:
        first = await hub.subscribe(session_id, "0-0")
        start = await commit(store, session_id, 3)
        assert await received(first, 3) == start
        events.flowing.clear()  # the reader falls behind from here
        burst = await commit(store, session_id, behind)

        paged: list[str] = []
        after = start[-1]
        for _ in range(100):  # bounded: each page is PAGE entries, one commit comes per page
            page = await events.after(session_id, after, count=PAGE)
            paged += [entry_id for entry_id, _ in page]
            after = paged[-1] if paged else after
            if len(page) < PAGE:
                break
            burst += await commit(store, session_id, 1)  # commits go on while it pages
        assert paged == burst
        late = await hub.subscribe(session_id, after)
        if behind > BUFFER:
            hub.unsubscribe(first)  # it could not hold what the reader brings at once
        more = await commit(store, session_id, 3)
        events.flowing.set()

        got = await received(late, len(more))
        read = set(start + paged)
        again = [
            entry_id for i, entry_id in enumerate(got) if entry_id in read or entry_id in got[:i]
        ]
        assert not again, (
            f"a subscriber that joined after {after} was handed {len(again)} events it already "
            f"had a second time: {again}"
        )
        assert got == more, f"handed {got}, not the later events {more} once each in order"
        if behind <= BUFFER:
            assert await received(first, len(burst) + len(more)) == burst + more
    finally:
        await hub.close()


async def test_a_subscription_never_hands_out_an_event_twice():
    """Guards `Subscription.next` in hub.py (`if position > self.last`): the last line of the
    hub's de-duplication, for entries queued twice or late (a catch-up read overlapping what the
    live reader delivered)."""
    subscription = Subscription(keys.events_key(str(uuid.uuid4())), "0-0", BUFFER)
    entries = [(f"{i}-0", b"{}") for i in range(1, 6)]
    for entry in entries[:3]:
        assert subscription.push(entry)
    assert [i for i, _ in await subscription.next(0) or ()] == ["1-0", "2-0", "3-0"]
    for entry in (entries[1], entries[2], entries[3], entries[2], entries[4]):
        assert subscription.push(entry)
    got = [i for i, _ in await subscription.next(0) or ()]
    assert got == ["4-0", "5-0"], f"the subscriber was handed {got}: events it already had again"
