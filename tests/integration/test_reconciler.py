"""The reconciler (profile §18) against the LiveKit stand-in and a real Redis.

Sessions are made through the HTTP service (`serve --no-worker`); the reconciler runs beside it on
a worker's engine with a clock of its own, and each test calls one sweep at a time rather than
waiting for the interval. What is asserted is what an operator sees: the LiveKit calls made, the
sessions through GetSession, the entries of their event streams and the metric.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import msgspec
import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from realtime.app import Running, create_app, running
from realtime.metrics import Metrics
from realtime.store import keys
from realtime.store.leases import DutyLease
from realtime.store.redis_client import RedisClient
from realtime.store.timers import TimerStore
from realtime.worker.reconciler import Reconciler
from tests.clocks import Clock
from tests.conftest import livekit_settings, serving
from tests.e2e.realtime_helpers import call, create_session, new_id, register, session_of
from tests.e2e.webhook_helpers import (
    active_session,
    deliver,
    get,
    join,
    ready_session,
    room,
    webhook_event,
)
from tests.tcp_proxy import redis_proxy

pytestmark = pytest.mark.redis

GRACE_S = 120  # AIM_RECONCILE_GRACE_S's default
METRIC = "aim.reconciler.corrections"
LEASE = keys.reconciler_lease_key().encode()


@dataclass
class World:
    http: httpx.AsyncClient  # the service, as clients and LiveKit's webhooks reach it
    worker: Running  # a worker's engine, runner and LiveKit gateway (its `commands`')
    clock: Clock
    metrics: Metrics
    reader: InMemoryMetricReader
    lease: DutyLease  # the reconciler's, on the worker's Redis
    timers: TimerStore  # the durable timers, on the worker's Redis

    def reconciler(self, token: str | None = None) -> Reconciler:
        return Reconciler(
            self.worker.commands.engine,
            self.worker.commands.runner.gateway,
            self.lease,
            self.worker.commands.runner,
            self.timers,
            metrics=self.metrics,
            token=token,
        )

    def corrections(self) -> dict[str, float]:
        data = self.reader.get_metrics_data()
        return {
            str(point.attributes["kind"]): point.value
            for resource in (data.resource_metrics if data else [])
            for scope in resource.scope_metrics
            for metric in scope.metrics
            if metric.name == METRIC
            for point in metric.data.data_points
        }


@contextlib.asynccontextmanager
async def world_of(livekit: Any, store: RedisClient, **overrides: Any) -> AsyncIterator[World]:
    settings = livekit_settings(livekit, max_sessions_per_principal=64, **overrides)
    reader = InMemoryMetricReader()
    metrics = Metrics(MeterProvider(metric_readers=[reader]))
    clock = Clock()
    app = create_app(settings, store=store, run_worker=False)
    async with (
        serving(app) as base_url,
        httpx.AsyncClient(base_url=base_url, timeout=30) as http,
        running(settings, store=store, clock=clock, run_worker=False, metrics=metrics) as worker,
    ):
        yield World(
            http,
            worker,
            clock,
            metrics,
            reader,
            DutyLease(store, keys.reconciler_lease_key()),
            TimerStore(store),
        )
    metrics.shutdown()


@pytest.fixture
async def world(livekit: Any, store: RedisClient) -> AsyncIterator[World]:
    async with world_of(livekit, store) as found:
        yield found


async def events(store: RedisClient, session_id: str) -> list[dict[str, Any]]:
    entries = await store.client.xrange(keys.events_key(session_id))
    return [msgspec.json.decode(fields[b"e"]) for _, fields in entries]


async def corrections_of(store: RedisClient, session_id: str) -> list[dict[str, Any]]:
    return [e for e in await events(store, session_id) if e.get("cause") == "reconciler"]


async def until(http: httpx.AsyncClient, session_id: str, **wanted: Any) -> dict[str, Any]:
    """GetSession until its members have the wanted values (within 5 s)."""
    deadline = time.monotonic() + 5
    while True:
        session = await get(http, session_id)
        if all(session.get(name) == value for name, value in wanted.items()):
            return session
        assert time.monotonic() < deadline, (wanted, session)
        await asyncio.sleep(0.02)


def calls(livekit: Any, method: str, room_name: str) -> list[str]:
    """The answers LiveKit gave to `method` calls about `room_name` (`ok`, `not_found` ...)."""
    return [
        c.code
        for c in livekit.calls_to(method)
        if c.request is not None and getattr(c.request, "room", None) == room_name
    ]


async def arrived(livekit: Any, method: str) -> None:
    """Until a call to `method` has reached LiveKit (it may not be answered yet)."""
    for _ in range(500):
        if livekit.calls_to(method):
            return
        await asyncio.sleep(0.01)
    pytest.fail(f"no {method} call within 5 s")


def removals(livekit: Any, room_name: str) -> list[str]:
    return [
        c.request.identity
        for c in livekit.calls_to("RemoveParticipant", code="ok")
        if c.request.room == room_name
    ]


async def quiet(store: RedisClient) -> None:
    """Wait until the service has carried out every queued LiveKit call and its runners have
    let go of their leases (a runner empties the due index just before it releases)."""
    deadline = time.monotonic() + 5
    while await store.client.zcard(keys.outbox_due_key()) or await store.client.keys(
        "aim:*:runner"
    ):
        assert time.monotonic() < deadline, "effects still queued"
        await asyncio.sleep(0.02)


async def redis_state(store: RedisClient) -> dict[bytes, bytes]:
    """Every key and its value (DUMP), the reconciler's lease left out."""
    found = sorted(await store.client.keys("*"))
    return {key: await store.client.dump(key) for key in found if key != LEASE}


class Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)

    def at(self, level: int) -> list[str]:
        return [r.getMessage() for r in self.records if r.levelno >= level]


@pytest.fixture
def reconciler_log() -> Iterator[Lines]:
    """What the reconciler logs (on its logger: the app replaces the root logger's handlers)."""
    logger = logging.getLogger("realtime.worker.reconciler")
    handler = Lines()
    logger.addHandler(handler)
    previous = logger.level
    logger.setLevel(logging.DEBUG)
    try:
        yield handler
    finally:
        logger.removeHandler(handler)
        logger.setLevel(previous)


async def in_room(http: httpx.AsyncClient, livekit: Any) -> tuple[str, str]:
    """(sessionId, endpointId) of an active session whose device and agent are in its room."""
    session_id, endpoint = await active_session(http)
    livekit.add_participant(room(session_id), endpoint)
    livekit.add_participant(room(session_id), "agent-AJ_1", kind="agent")
    joined = webhook_event(
        "participant_joined", room(session_id), identity="agent-AJ_1", agent=True
    )
    assert await deliver(http, joined) == "applied"
    return session_id, endpoint


# --- rooms that outlived their session ----------------------------------------------------------


async def test_a_room_left_behind_by_a_lost_delete_is_deleted_once_past_the_grace_period(
    world, livekit, store
):
    _, session_id = await ready_session(world.http)
    livekit.lose_next(method="DeleteRoom")  # LiveKit acknowledges the delete and keeps the room
    ended = await call(world.http, "EndSession", sessionId=session_id, commandId=new_id(),
                       reason="done")  # fmt: skip
    assert "result" in ended, ended
    await until(world.http, session_id, state="ended")
    assert room(session_id) in livekit.rooms
    assert calls(livekit, "DeleteRoom", room(session_id)) == ["ok"]
    reconciler = world.reconciler()

    report = await reconciler.sweep()  # the room is younger than the grace period: kept
    assert report.corrections == {}
    world.clock.advance(GRACE_S - 2)
    await reconciler.sweep()
    assert room(session_id) in livekit.rooms
    assert calls(livekit, "DeleteRoom", room(session_id)) == ["ok"]
    assert await corrections_of(store, session_id) == []

    world.clock.advance(3)
    report = await reconciler.sweep()
    assert report.corrections == {"room_deleted": 1}
    assert room(session_id) not in livekit.rooms
    assert calls(livekit, "DeleteRoom", room(session_id)) == ["ok", "ok"]
    session = await get(world.http, session_id)
    assert (session["state"], session["endReason"]) == ("ended", "done")
    [entry] = await corrections_of(store, session_id)
    assert (entry["from"], entry["to"], entry["epoch"]) == ("ended", "ended", 1)
    assert entry["correction"] == {
        "kind": "room_deleted",
        "room": room(session_id),
        "reason": "session_over",
    }
    assert entry["status"]["state"] == "TASK_STATE_COMPLETED"
    assert world.corrections() == {"room_deleted": 1}

    await reconciler.sweep()  # nothing left to correct
    assert calls(livekit, "DeleteRoom", room(session_id)) == ["ok", "ok"]
    assert world.corrections() == {"room_deleted": 1}


async def test_the_room_of_an_older_epoch_is_deleted_and_the_current_one_kept(
    world, livekit, store
):
    session_id, _ = await active_session(world.http)
    # room_finished came, but the room did not go (a webhook of a node that lost it, wrongly)
    assert await deliver(world.http, webhook_event("room_finished", room(session_id))) == "applied"
    await until(world.http, session_id, state="ready", sessionEpoch=2)
    assert {room(session_id, 1), room(session_id, 2)} <= set(livekit.rooms)
    world.clock.advance(GRACE_S + 1)

    report = await world.reconciler().sweep()
    assert report.corrections == {"room_deleted": 1}
    assert room(session_id, 1) not in livekit.rooms
    assert room(session_id, 2) in livekit.rooms
    assert calls(livekit, "DeleteRoom", room(session_id, 2)) == []
    [entry] = await corrections_of(store, session_id)
    assert entry["correction"]["reason"] == "rebound"
    assert (entry["to"], entry["epoch"]) == ("ready", 2)
    assert (await get(world.http, session_id))["state"] == "ready"


async def test_a_room_made_by_hand_with_our_name_and_no_session_is_deleted_after_the_grace(
    world, livekit, store, reconciler_log
):
    session_id = str(uuid.uuid4())
    name = room(session_id)
    livekit.add_room(name)
    livekit.add_room("somebody-elses-room", age_s=10 * GRACE_S)
    livekit.add_room(f"aim-{session_id}-e01", age_s=10 * GRACE_S)  # not a name we write
    reconciler = world.reconciler()

    assert (await reconciler.sweep()).corrections == {}
    livekit.age_room(name, GRACE_S - 5)
    assert (await reconciler.sweep()).corrections == {}
    assert name in livekit.rooms
    livekit.age_room(name, GRACE_S + 1)

    assert (await reconciler.sweep()).corrections == {"room_deleted": 1}
    assert set(livekit.rooms) == {"somebody-elses-room", f"aim-{session_id}-e01"}
    assert calls(livekit, "DeleteRoom", name) == ["ok"]
    assert world.corrections() == {"room_deleted": 1}
    # no session, so no stream: the log line is the record
    assert not await store.client.exists(keys.events_key(session_id))
    [line] = [r for r in reconciler_log.records if r.levelno == logging.INFO]
    assert line.getMessage() == f"reconciler: room_deleted in room {name} (no_session)"
    assert line.session_id == session_id


async def test_an_ending_sessions_room_is_left_to_its_own_delete(world, livekit, store):
    _, session_id = await ready_session(world.http)
    livekit.fail_next(5, status=503, method="DeleteRoom")  # its DeleteRoom keeps failing
    await call(world.http, "EndSession", sessionId=session_id, commandId=new_id(), reason="x")
    await until(world.http, session_id, state="ending")
    world.clock.advance(10 * GRACE_S)
    assert (await world.reconciler().sweep()).corrections == {}
    assert room(session_id) in livekit.rooms
    assert await corrections_of(store, session_id) == []


# --- rooms LiveKit lost without telling ---------------------------------------------------------


async def test_a_room_lost_without_room_finished_rebinds_the_session_once(world, livekit, store):
    session_id, _ = await in_room(world.http, livekit)
    livekit.close_room(room(session_id))  # gone, and no room_finished reaches the service
    reconciler = world.reconciler()

    report = await reconciler.sweep()
    assert report.corrections == {"room_missing": 1}
    session = await until(world.http, session_id, state="ready", sessionEpoch=2)
    assert session["media"]["room"] == room(session_id, 2)
    assert room(session_id, 2) in livekit.rooms
    assert len(livekit.dispatches_in(room(session_id, 2), "aim-realtime-agent")) == 1
    [entry] = await corrections_of(store, session_id)
    assert (entry["from"], entry["to"], entry["epoch"]) == ("active", "provisioning", 2)
    assert entry["commandId"] == f"reconciler:room-missing:{room(session_id)}"
    assert entry["correction"] == {
        "kind": "room_missing",
        "room": room(session_id),
        "reason": "room_gone",
    }
    assert world.corrections() == {"room_missing": 1}

    assert (await reconciler.sweep()).corrections == {}  # the new room is there
    # the room_finished LiveKit owed arrives late: it is for a room the session has left
    late = webhook_event("room_finished", room(session_id))
    assert await deliver(world.http, late) == "ignored"
    after = await get(world.http, session_id)
    assert (after["state"], after["sessionEpoch"], after["version"]) == (
        "ready",
        2,
        session["version"],
    )
    assert len(await corrections_of(store, session_id)) == 1
    assert world.corrections() == {"room_missing": 1}


async def test_a_room_finished_during_the_sweep_leaves_the_reconciler_nothing_to_do(
    world, livekit, store
):
    """The sweep reads the session (room e1, active), then LiveKit is slow to list its rooms;
    meanwhile room_finished arrives and the session rebinds. The sweep finds e1 missing, but
    the session has moved on: it changes nothing."""
    session_id, _ = await in_room(world.http, livekit)
    livekit.close_room(room(session_id))
    livekit.delay(0.5, method="ListRooms")
    sweep = asyncio.create_task(world.reconciler().sweep())
    await arrived(livekit, "ListRooms")
    assert await deliver(world.http, webhook_event("room_finished", room(session_id))) == "applied"
    await until(world.http, session_id, state="ready", sessionEpoch=2)

    report = await sweep
    livekit.clear_faults()
    assert report.corrections == {}
    assert len(calls_to_names(livekit, room(session_id))) == 1  # it did look again
    assert (await get(world.http, session_id))["sessionEpoch"] == 2
    assert await corrections_of(store, session_id) == []
    assert world.corrections() == {}


def calls_to_names(livekit: Any, room_name: str) -> list[str]:
    """ListRooms calls that asked for `room_name` by name."""
    return [c.code for c in livekit.calls_to("ListRooms") if list(c.request.names) == [room_name]]


async def test_a_session_still_provisioning_is_not_rebound(world, livekit):
    livekit.fail_next(3, status=503, method="CreateRoom")  # no worker retries it here
    created = await create_session(world.http, returnImmediately=True)
    session_id = session_of(created["result"]["task"])["sessionId"]
    await until(world.http, session_id, state="provisioning")
    assert room(session_id) not in livekit.rooms
    assert (await world.reconciler().sweep()).corrections == {}
    session = await get(world.http, session_id)
    assert (session["state"], session["sessionEpoch"]) == ("provisioning", 1)


# --- participants that do not belong ------------------------------------------------------------


async def test_a_superseded_device_and_a_stranger_are_removed_the_device_and_agent_stay(
    world, livekit, store
):
    session_id, phone = await in_room(world.http, livekit)
    laptop = (await register(world.http, session_id, 1, "laptop"))["result"]["endpoint"]
    handoff = await join(world.http, session_id, laptop["endpointId"], 1)
    assert handoff["result"]["session"]["sessionEpoch"] == 2
    await livekit.wait_for_call("RemoveParticipant")  # the handoff removes the phone
    livekit.add_participant(room(session_id), laptop["endpointId"])
    joined = webhook_event("participant_joined", room(session_id), identity=laptop["endpointId"],
                     epoch=2)  # fmt: skip
    assert await deliver(world.http, joined) == "applied"
    # the phone comes back with its old token and its participant_joined is lost; someone with
    # a token the service never issued joins too
    livekit.add_participant(room(session_id), phone)
    livekit.add_participant(room(session_id), "intruder")
    before = await get(world.http, session_id)
    already = removals(livekit, room(session_id))

    report = await world.reconciler().sweep()
    assert report.corrections == {"participant_removed": 2}
    assert sorted(removals(livekit, room(session_id))[len(already) :]) == sorted(
        [phone, "intruder"]
    )
    assert set(livekit.participants[room(session_id)]) == {laptop["endpointId"], "agent-AJ_1"}
    after = await get(world.http, session_id)
    assert (after["state"], after["sessionEpoch"], after["activeEndpointId"]) == (
        "active",
        2,
        laptop["endpointId"],
    )
    assert after["endpoints"] == before["endpoints"]
    found = {
        e["correction"]["identity"]: e["correction"]["reason"]
        for e in await corrections_of(store, session_id)
    }
    assert found == {phone: "superseded", "intruder": "unknown"}
    assert world.corrections() == {"participant_removed": 2}

    assert (await world.reconciler().sweep()).corrections == {}


async def test_a_second_agent_in_a_room_is_removed_once_and_the_first_stays(world, livekit, store):
    session_id, phone = await in_room(world.http, livekit)  # with the agent "agent-AJ_1"
    await asyncio.sleep(0.01)
    # a second agent, as a replayed dispatch would bring: it joined after the first
    livekit.add_participant(room(session_id), "agent-AJ_2", kind="agent")

    report = await world.reconciler().sweep()

    assert report.corrections == {"extra_agent_removed": 1}
    assert set(livekit.participants[room(session_id)]) == {phone, "agent-AJ_1"}
    (found,) = await corrections_of(store, session_id)
    assert found["correction"] == {
        "kind": "extra_agent_removed",
        "room": room(session_id),
        "reason": "extra_agent",
        "identity": "agent-AJ_2",
    }
    assert world.corrections() == {"extra_agent_removed": 1}
    assert (await get(world.http, session_id))["state"] == "active"
    assert (await world.reconciler().sweep()).corrections == {}  # once


async def test_the_sessions_own_agent_stays_though_a_stray_one_joined_before_it(
    world, livekit, store
):
    session_id, phone = await in_room(world.http, livekit)  # the session's agent: "agent-AJ_1"
    stray = livekit.add_participant(room(session_id), "agent-AJ_0", kind="agent")
    stray.joined_at_ms -= 60_000  # it joined a minute before the session's own agent

    report = await world.reconciler().sweep()

    assert report.corrections == {"extra_agent_removed": 1}
    assert set(livekit.participants[room(session_id)]) == {phone, "agent-AJ_1"}


# --- several workers ------------------------------------------------------------------------------


async def drift(world: World, livekit: Any) -> tuple[str, str, str]:
    """A room made by hand past the grace, a stranger in a session's room, a lost room."""
    orphan = room(str(uuid.uuid4()))
    livekit.add_room(orphan, age_s=GRACE_S + 5)
    crowded, _ = await in_room(world.http, livekit)
    livekit.add_participant(room(crowded), "intruder")
    lost, _ = await in_room(world.http, livekit)
    livekit.close_room(room(lost))
    return orphan, crowded, lost


async def test_two_reconcilers_at_once_correct_each_thing_once(world, livekit, store):
    orphan, crowded, lost = await drift(world, livekit)
    first, second = world.reconciler(), world.reconciler()

    reports = await asyncio.gather(first.run_once(), second.run_once())
    [report] = [r for r in reports if r is not None]  # one holds the lease, one stands by
    assert report.corrections == {"room_deleted": 1, "participant_removed": 1, "room_missing": 1}
    await until(world.http, lost, state="ready", sessionEpoch=2)
    for _ in range(2):
        assert [r.corrections for r in await asyncio.gather(first.run_once(),
                second.run_once()) if r is not None] == [{}]  # fmt: skip
    assert calls(livekit, "DeleteRoom", orphan) == ["ok"]
    assert removals(livekit, room(crowded)) == ["intruder"]
    assert (await get(world.http, lost))["sessionEpoch"] == 2
    assert len(await corrections_of(store, lost)) == 1
    assert world.corrections() == {"room_deleted": 1, "participant_removed": 1, "room_missing": 1}


async def test_two_sweeps_that_both_think_they_hold_the_lease_rebind_a_lost_room_once(
    world, livekit, store
):
    """As after a lease that ran out while its holder hung: both sweeps find the room missing;
    the commandId derived from the room lets only one of them rebind the session."""
    session_id, _ = await in_room(world.http, livekit)
    livekit.close_room(room(session_id))
    first, second = world.reconciler("same"), world.reconciler("same")
    assert await first.lease.hold("same", first.lease_ms)

    reports = await asyncio.gather(first.sweep(), second.sweep())
    assert sorted(r.corrections.get("room_missing", 0) for r in reports) == [0, 1]
    session = await until(world.http, session_id, state="ready", sessionEpoch=2)
    assert session["media"]["room"] == room(session_id, 2)
    [entry] = await corrections_of(store, session_id)
    assert entry["to"] == "provisioning"
    assert world.corrections() == {"room_missing": 1}
    late = webhook_event("room_finished", room(session_id))
    assert await deliver(world.http, late) == "ignored"
    assert (await get(world.http, session_id))["sessionEpoch"] == 2


async def test_the_lease_holder_keeps_the_duty_and_a_successor_takes_it_when_it_ends(
    world, livekit, store
):
    first, second = world.reconciler("first"), world.reconciler("second")
    assert await first.run_once() is not None
    assert await second.run_once() is None  # the first keeps its lease from sweep to sweep
    assert await store.client.get(LEASE) == b"first"
    ttl_ms = await store.client.pttl(LEASE)
    assert 60_000 < ttl_ms <= 90_000  # interval (60 s) + worker lease (30 s)
    stop = asyncio.Event()
    stop.set()
    await first.loop(stop)  # a worker shutting down hands the lease over
    assert await store.client.get(LEASE) is None
    assert await second.run_once() is not None
    assert await store.client.get(LEASE) == b"second"


async def test_a_worker_that_loses_the_lease_during_its_sweep_stops_correcting(
    world, livekit, store, reconciler_log
):
    orphan, _, lost = await drift(world, livekit)
    reconciler = world.reconciler("first")
    livekit.delay(0.3, n=1, method="ListRooms")
    sweep = asyncio.create_task(reconciler.run_once())
    await arrived(livekit, "ListRooms")
    # the lease ran out (a long pause) and another worker took it
    await store.client.set(LEASE, "second", px=90_000)
    assert await sweep is None
    assert reconciler_log.at(logging.INFO) == [
        "reconciler sweep stopped: another worker holds the lease now"
    ]
    assert orphan in livekit.rooms
    assert (await get(world.http, lost))["sessionEpoch"] == 1
    assert world.corrections() == {}
    assert await store.client.get(LEASE) == b"second"


async def test_a_stopping_worker_corrects_nothing_more(world, livekit):
    orphan, _, _ = await drift(world, livekit)
    reconciler = world.reconciler()
    reconciler.stop.set()
    assert (await reconciler.sweep()).corrections == {}
    assert orphan in livekit.rooms


# --- outages --------------------------------------------------------------------------------------


async def test_a_livekit_outage_during_a_sweep_changes_nothing(
    world, livekit, store, reconciler_log
):
    orphan, crowded, lost = await drift(world, livekit)
    await quiet(store)
    reconciler = world.reconciler()
    before = await redis_state(store)

    await livekit.set_down(True)
    assert await reconciler.run_once() is None  # nothing escapes
    assert await redis_state(store) == before
    assert reconciler_log.at(logging.WARNING) == [
        "reconciler sweep stopped, nothing more corrected: LiveKit unreachable: "
        "ClientConnectorError"
    ]
    await livekit.set_down(False)

    # LiveKit fails in the middle of the sweep: what it could not do waits for the next one
    livekit.fail_next(1, status=503, method="DeleteRoom")
    assert await reconciler.run_once() is None
    assert orphan in livekit.rooms
    assert await redis_state(store) == before
    assert len(reconciler_log.at(logging.WARNING)) == 2
    assert world.corrections() == {}

    # LiveKit refuses our credentials: no retry helps, so it is logged as an error
    livekit.fail_next(1, status=401, method="ListRooms")
    assert await reconciler.run_once() is None
    assert reconciler_log.at(logging.ERROR) == [
        "reconciler sweep stopped, nothing more corrected: LiveKit rejected our credentials (401)"
    ]
    assert await redis_state(store) == before

    report = await reconciler.run_once()
    assert report is not None
    assert report.corrections == {"room_deleted": 1, "participant_removed": 1, "room_missing": 1}
    assert orphan not in livekit.rooms
    assert removals(livekit, room(crowded)) == ["intruder"]
    await until(world.http, lost, sessionEpoch=2)


async def test_a_redis_outage_during_a_sweep_changes_nothing(
    livekit, store, redis_url, reconciler_log
):
    if redis_url is None:
        pytest.skip("cutting the link needs a real Redis")
    async with world_of(livekit, store) as world:
        orphan, _, lost = await drift(world, livekit)
        await quiet(store)
    before = await redis_state(store)
    async with redis_proxy(redis_url) as (link, proxied_url):
        proxied = RedisClient.from_url(proxied_url)
        try:
            async with world_of(livekit, proxied) as cut_off:
                reconciler = cut_off.reconciler()
                link.refuse()
                link.cut()
                assert await reconciler.run_once() is None  # nothing escapes
                [line] = reconciler_log.at(logging.WARNING)
                assert line.startswith("reconciler sweep stopped, nothing more corrected: The "
                                       "state store (Redis) is unreachable")  # fmt: skip
                assert await redis_state(store) == before
                assert orphan in livekit.rooms
                link.restore()
                report = await reconciler.run_once()
                assert report is not None
                assert report.corrections == {
                    "room_deleted": 1,
                    "participant_removed": 1,
                    "room_missing": 1,
                }
                await until(cut_off.http, lost, sessionEpoch=2)
        finally:
            await proxied.aclose()


# --- the worker loop ------------------------------------------------------------------------------


async def test_the_worker_reconciles_every_interval_and_an_interval_of_0_turns_it_off(
    livekit, store
):
    async with running(livekit_settings(livekit, reconcile_interval_s=0), store=store):
        await asyncio.sleep(1.5)
    assert livekit.calls_to("ListRooms") == []
    assert await store.client.get(LEASE) is None
    async with running(
        livekit_settings(livekit, reconcile_interval_s=1), store=store, run_worker=False
    ):  # serve --no-worker: no reconciler either
        await asyncio.sleep(1.5)
    assert livekit.calls_to("ListRooms") == []

    async with running(livekit_settings(livekit, reconcile_interval_s=1), store=store):
        await livekit.wait_for_call("ListRooms", within=5)
        assert await store.client.get(LEASE) is not None
        started = time.monotonic()
    assert time.monotonic() - started < 1.0  # stopped promptly
    assert await store.client.get(LEASE) is None  # and handed the duty over
