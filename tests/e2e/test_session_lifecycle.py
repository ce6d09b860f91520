"""Journeys of a realtime session through webhooks and durable timers (profile §5, §6, §11).

Apps here run with short timers (provisioning, grace, idle and max duration of seconds); the
worker loop fires due timers every 0.25 s. Waits poll GetSession with a deadline instead of
sleeping a fixed time; where a timer must not fire early, the app runs on a clock the test moves
to just before it is due, and one worker tick later the session has not moved.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
import pytest
from livekit.api import TokenVerifier

from realtime.store.sessions import SessionStore
from realtime.worker.timers import POLL_INTERVAL_S
from state_machines.session import MAX_REBINDS
from tests.conftest import LIVEKIT_KEY, LIVEKIT_SECRET, error_info, rpc, service
from tests.e2e.operator_api_helpers import operator_json, timeline_of
from tests.e2e.realtime_helpers import create_session, new_id, register, session_of
from tests.e2e.webhook_helpers import (
    active_session,
    assert_active_on,
    deliver,
    get,
    join,
    room,
    snapshot,
    wait_until,
    webhook_event,
)

pytestmark = pytest.mark.e2e

AGENT = "aim-realtime-agent"


def in_state(state: str):
    return lambda session: session["state"] == state


async def task_state(client: httpx.AsyncClient, task_id: str) -> str:
    state: str = (await rpc(client, "GetTask", {"id": task_id}))["result"]["status"]["state"]
    return state


async def state_path(client: httpx.AsyncClient, session_id: str) -> list[str]:
    """The states the session went through, as the operator's timeline shows its transitions
    (repeats collapsed)."""
    path: list[str] = []
    for entry in await timeline_of(client, session_id):
        target = entry["to"] if entry["kind"] == "transition" else None
        if target is not None and (not path or path[-1] != target):
            path.append(target)
    return path


async def pending_timers(client: httpx.AsyncClient, session_id: str, kind: str) -> list[str]:
    """The session's armed timers of `kind` (`kind@epoch`), as the operator API lists them."""
    found = (await operator_json(client, f"/ops/api/sessions/{session_id}"))["session"]["timers"]
    return [f"{t['kind']}@{t['epoch']}" for t in found if t["kind"] == kind]


async def wait_for_timers_to_fire(client: httpx.AsyncClient, session_id: str, kind: str) -> None:
    deadline = time.monotonic() + 5
    while await pending_timers(client, session_id, kind):
        assert time.monotonic() < deadline, f"the {kind} timer of {session_id} never fired"
        await asyncio.sleep(0.05)


class Clock:
    """The app's clock: the time the test started, moved on only by the test."""

    def __init__(self) -> None:
        self.now = time.time()

    def __call__(self) -> float:
        return self.now


async def one_worker_tick() -> None:
    """Long enough for the worker loop to look at the due timers once more."""
    await asyncio.sleep(POLL_INTERVAL_S + 0.1)


@pytest.fixture
def timed_service(
    livekit: Any, store: Any, tracer_provider: Any
) -> Callable[..., contextlib.AbstractAsyncContextManager[tuple[httpx.AsyncClient, Clock]]]:
    """Starts a service with the given timers (reconnect grace, idle timeout, maximum duration)
    on a clock the test moves: a client of it and the clock."""

    @contextlib.asynccontextmanager
    async def started(
        *, grace_s: int, idle_s: int, max_s: int
    ) -> AsyncIterator[tuple[httpx.AsyncClient, Clock]]:
        clock = Clock()
        timers = {"reconnect_grace_s": grace_s, "idle_timeout_s": idle_s, "max_session_s": max_s}
        async with service(livekit, store, tracer_provider, clock=clock, **timers) as client:
            yield client, clock

    return started


def delete_room_calls(livekit: Any, name: str) -> list[Any]:
    return [c for c in livekit.calls_to("DeleteRoom") if c.request.room == name]


# --- disconnect, grace, idle ---------------------------------------------------------------------


async def test_a_device_that_does_not_come_back_ends_the_session_by_idle_timeout(
    livekit, timed_service
):
    async with timed_service(grace_s=1, idle_s=1, max_s=60) as (client, clock):
        session_id, endpoint = await active_session(client)
        task_id = (await get(client, session_id))["taskId"]

        left = webhook_event("participant_left", room(session_id), identity=endpoint, epoch=1)
        assert await deliver(client, left) == "applied"
        reconnecting = await get(client, session_id)
        assert reconnecting["state"] == "reconnecting"
        assert reconnecting["activeEndpointId"] == endpoint

        clock.now += 0.9
        await one_worker_tick()
        assert (await get(client, session_id))["state"] == "reconnecting", (
            "the grace period ended early"
        )
        clock.now += 0.2  # the grace period (1 s) is over
        ready = await wait_until(client, session_id, in_state("ready"))
        assert "activeEndpointId" not in ready
        assert [e["state"] for e in ready["endpoints"]] == ["disconnected"]
        assert ready["sessionEpoch"] == 1
        assert await task_state(client, task_id) == "TASK_STATE_WORKING"

        # the idle timer is armed by the commit that made the session ready (at 1.1 s)
        clock.now += 0.9
        await one_worker_tick()
        assert (await get(client, session_id))["state"] == "ready", "the idle timeout fired early"
        clock.now += 0.2  # the idle timeout (1 s) is over
        ended = await wait_until(client, session_id, in_state("ended"))
        assert ended["endReason"] == "idle_timeout"
        assert "endedAt" in ended
        assert [e["state"] for e in ended["endpoints"]] == ["removed"]
        assert await task_state(client, task_id) == "TASK_STATE_COMPLETED"
        assert len(delete_room_calls(livekit, room(session_id))) == 1
        assert room(session_id) not in livekit.rooms
        assert await state_path(client, session_id) == [
            "provisioning", "ready", "joining", "active", "reconnecting", "ready", "ending",
            "ended",
        ]  # fmt: skip


async def test_a_device_that_rejoins_inside_the_grace_keeps_the_session(
    livekit, store, tracer_provider
):
    timers = {"reconnect_grace_s": 1, "idle_timeout_s": 1, "max_session_s": 60}
    async with service(livekit, store, tracer_provider, **timers) as client:
        session_id, endpoint = await active_session(client)
        left = webhook_event("participant_left", room(session_id), identity=endpoint, epoch=1)
        assert await deliver(client, left) == "applied"
        assert await pending_timers(client, session_id, "grace")
        back = webhook_event("participant_joined", room(session_id), identity=endpoint, epoch=1)
        assert await deliver(client, back) == "applied"
        rejoined = await snapshot(client, session_id)
        assert_active_on(rejoined, endpoint)

        await wait_for_timers_to_fire(client, session_id, "grace")
        await asyncio.sleep(0.3)  # one more worker tick: no idle timer may fire either
        assert await snapshot(client, session_id) == rejoined


async def test_every_disconnect_gets_a_full_grace_period(timed_service):
    """A device that drops, comes back and drops again has the whole grace the second time."""
    async with timed_service(grace_s=2, idle_s=30, max_s=60) as (client, clock):
        session_id, endpoint = await active_session(client)
        left = webhook_event("participant_left", room(session_id), identity=endpoint, epoch=1)
        assert await deliver(client, left) == "applied"
        back = webhook_event("participant_joined", room(session_id), identity=endpoint, epoch=1)
        assert await deliver(client, back) == "applied"
        clock.now += 1.2  # the scenario: the second drop comes late in the first grace
        await one_worker_tick()
        again = webhook_event("participant_left", room(session_id), identity=endpoint, epoch=1)
        assert await deliver(client, again) == "applied"
        clock.now += 1.9  # the first grace is long over, the second not yet
        await one_worker_tick()
        assert (await get(client, session_id))["state"] == "reconnecting", (
            "the second grace period ended early"
        )
        clock.now += 0.2
        await wait_until(client, session_id, in_state("ready"))


# --- rebinds -------------------------------------------------------------------------------------


async def test_a_lost_room_is_rebound_at_the_next_epoch(rt_client, livekit):
    session_id, endpoint = await active_session(rt_client)
    task_id = (await get(rt_client, session_id))["taskId"]
    assert await deliver(rt_client, webhook_event("room_finished", room(session_id))) == "applied"
    rebound = await get(rt_client, session_id)
    assert rebound["sessionEpoch"] == 2
    assert rebound["state"] in ("provisioning", "ready")
    assert rebound["media"]["room"] == room(session_id, 2)

    ready = await wait_until(rt_client, session_id, in_state("ready"))
    assert "activeEndpointId" not in ready
    assert [e["state"] for e in ready["endpoints"]] == ["registered"]  # back to re-join
    assert ready["agent"]["state"] in ("dispatching", "dispatched")
    assert [c.request.name for c in livekit.calls_to("CreateRoom")][-1] == room(session_id, 2)
    assert [d.agent_name for d in livekit.dispatches_in(room(session_id, 2), AGENT)] == [AGENT]
    assert await task_state(rt_client, task_id) == "TASK_STATE_WORKING"

    for stale in (
        await join(rt_client, session_id, endpoint, 1),
        await register(rt_client, session_id, 1, "phone"),
    ):
        assert stale["error"]["code"] == -31002
        info = error_info(stale)["metadata"]
        assert (info["reason"], info["currentEpoch"], info["state"]) == ("rebound", "2", "ready")

    before = await snapshot(rt_client, session_id)
    late = webhook_event("participant_left", room(session_id, 1), identity=endpoint, epoch=1)
    assert await deliver(rt_client, late) == "ignored"
    assert (
        await deliver(rt_client, webhook_event("room_finished", room(session_id, 1))) == "ignored"
    )
    assert await snapshot(rt_client, session_id) == before

    joined = await join(rt_client, session_id, endpoint, 2)
    media = joined["result"]["media"]
    claims = TokenVerifier(LIVEKIT_KEY, LIVEKIT_SECRET).verify(media["token"])
    assert (claims.video.room, media["room"]) == (room(session_id, 2), room(session_id, 2))
    assert '"sessionEpoch":2' in claims.metadata.replace(" ", "")
    connected = webhook_event("participant_joined", room(session_id, 2), identity=endpoint, epoch=2)
    assert await deliver(rt_client, connected) == "applied"
    assert (await get(rt_client, session_id))["state"] == "active"


async def test_a_room_lost_again_and_again_fails_the_session(rt_client, livekit):
    session_id, endpoint = await active_session(rt_client)
    task_id = (await get(rt_client, session_id))["taskId"]
    for epoch in range(1, MAX_REBINDS + 1):
        assert await deliver(
            rt_client, webhook_event("room_finished", room(session_id, epoch))
        ) == ("applied")
        session = await wait_until(rt_client, session_id, in_state("ready"))
        assert session["sessionEpoch"] == epoch + 1
    last = MAX_REBINDS + 1
    assert (
        await deliver(rt_client, webhook_event("room_finished", room(session_id, last)))
        == "applied"
    )
    failed = await get(rt_client, session_id)
    assert failed["state"] == "failed"
    assert failed["sessionEpoch"] == last
    assert failed["endReason"] == "room_lost"
    assert [e["state"] for e in failed["endpoints"]] == ["removed"]
    assert await task_state(rt_client, task_id) == "TASK_STATE_FAILED"
    for epoch in range(1, last + 1):  # exactly one dispatch per room, never a second
        assert len(livekit.dispatches_in(room(session_id, epoch), AGENT)) <= 1
    # one provisioning call per room: CreateRoom with the agent's dispatch in it
    assert [len(c.request.agents) for c in livekit.calls_to("CreateRoom")] == [1] * last
    assert livekit.calls_to("CreateDispatch") == []

    # over for good: webhooks and commands change nothing
    before = await snapshot(rt_client, session_id)
    assert (
        await deliver(rt_client, webhook_event("room_finished", room(session_id, last)))
        == "ignored"
    )
    again = webhook_event(
        "participant_joined", room(session_id, last), identity=endpoint, epoch=last
    )
    assert await deliver(rt_client, again) == "ignored"
    refused = await join(rt_client, session_id, endpoint, last)
    assert refused["error"]["code"] == -31003
    assert await snapshot(rt_client, session_id) == before


# --- maximum duration, provisioning timeout ------------------------------------------------------


async def test_a_session_ends_at_its_maximum_duration(livekit, timed_service):
    async with timed_service(grace_s=30, idle_s=30, max_s=3) as (client, clock):
        session_id, _ = await active_session(client)
        task_id = (await get(client, session_id))["taskId"]
        assert (await get(client, session_id))["state"] == "active"
        clock.now += 2.9
        await one_worker_tick()
        assert (await get(client, session_id))["state"] == "active", (
            "the maximum duration fired early"
        )
        clock.now += 0.2  # the maximum duration (3 s) is over
        ended = await wait_until(client, session_id, in_state("ended"), within=8)
        assert ended["endReason"] == "max_duration"
        assert await task_state(client, task_id) == "TASK_STATE_COMPLETED"
        assert len(delete_room_calls(livekit, room(session_id))) == 1
        assert await state_path(client, session_id) == [
            "provisioning", "ready", "joining", "active", "ending", "ended"
        ]  # fmt: skip


PROVISIONING_TIMEOUT_S = 2  # AIM_PROVISIONING_TIMEOUT_S here (15 s by default)


async def test_provisioning_that_never_finishes_fails_after_the_provisioning_timeout(
    livekit, store, tracer_provider
):
    timeout_s = PROVISIONING_TIMEOUT_S
    async with service(livekit, store, tracer_provider, provisioning_timeout_s=timeout_s) as client:
        await livekit.set_down(True)
        started = time.monotonic()
        created = await create_session(client, returnImmediately=True)
        task = created["result"]["task"]
        assert task["status"]["state"] == "TASK_STATE_WORKING"
        meta = session_of(task)
        assert meta["sessionState"] == "provisioning"
        session_id = meta["sessionId"]
        failed = await wait_until(client, session_id, in_state("failed"), within=timeout_s + 5)
        assert time.monotonic() - started >= timeout_s - 0.5, "the provisioning timeout fired early"
        assert failed["endReason"] == "provisioning_timeout"
        assert await task_state(client, task["id"]) == "TASK_STATE_FAILED"

        # LiveKit comes back: the failed session's queued provisioning is dropped, not carried out
        await livekit.set_down(False)
        outbox = SessionStore(store)
        deadline = time.monotonic() + 30  # the next retry may be one full backoff away
        while await outbox.pending(session_id):
            assert time.monotonic() < deadline, "the failed session's outbox was never emptied"
            await asyncio.sleep(0.2)
        assert livekit.calls_to("CreateRoom", code="ok") == []
        assert livekit.calls_to("CreateDispatch", code="ok") == []
        assert room(session_id) not in livekit.rooms


async def test_ending_a_provisioning_session_needs_no_timeout(livekit, rt_client):
    """The companion of the provisioning timeout test: EndSession during provisioning is
    immediate."""
    await livekit.set_down(True)
    created = await create_session(rt_client, returnImmediately=True)
    task = created["result"]["task"]
    session_id = session_of(task)["sessionId"]
    ended = await rpc(rt_client, "aim.realtime.EndSession",
                      {"sessionId": session_id, "commandId": new_id(), "reason": "gave up"},
                      realtime=True)  # fmt: skip
    assert ended["result"]["session"]["state"] == "ending"
    assert await task_state(rt_client, task["id"]) == "TASK_STATE_COMPLETED"
    await livekit.set_down(False)


async def test_the_agents_own_calls_do_not_keep_an_idle_session_alive(
    livekit, store, tracer_provider
):
    """Only a device makes a session busy: the agent reporting its state while nobody is
    connected must not postpone the idle timeout."""
    import json

    from tests.e2e.agent_operation_helpers import provider_call

    async with service(
        livekit, store, tracer_provider, idle_timeout_s=1, max_session_s=60
    ) as client:
        task = (await create_session(client))["result"]["task"]
        session_id = session_of(task)["sessionId"]
        token = json.loads(livekit.dispatches_in(room(session_id))[-1].metadata)["providerToken"]
        await wait_until(client, session_id, in_state("ready"))
        ready_at = time.monotonic()
        for state in ("listening", "thinking", "speaking", "listening", "thinking", "speaking"):
            status, body, _ = await provider_call(
                client, token, "ReportAgentState", sessionId=session_id, sessionEpoch=1, state=state
            )
            if "error" in body:
                break  # the session already ended
            assert status == 200
            await asyncio.sleep(0.3)
        ended = await wait_until(client, session_id, in_state("ended"))
        assert ended["endReason"] == "idle_timeout"
        assert time.monotonic() - ready_at < 2.5, "the agent's calls postponed the idle timeout"
