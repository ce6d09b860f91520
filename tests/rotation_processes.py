"""Agent rotation (profile §23) across a kill -9, as journeys run on a single Redis
(tests/integration/test_rotation_processes.py) and on a Redis Cluster
(tests/cluster/test_rotation_processes.py): an `aim-realtime worker` process, or the whole
`aim-realtime serve` process, is killed with SIGKILL while a rotation is under way; another
process carries it on from Redis, and the session ends up with exactly one successor, its
predecessor told to leave once, and nothing the user said lost. Real processes run on real
time: the deadlines are seconds away and the rotation begins at once (the margin is longer)."""

from __future__ import annotations

import asyncio
import json
import signal
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from realtime.app import create_app
from realtime.store.redis_client import RedisClient
from realtime.store.sessions import SessionStore
from state_machines import Session
from tests.cli_processes import serve_environ
from tests.cli_processes import serving as serving_cli
from tests.conftest import serving
from tests.e2e.agent_presence_helpers import World, ours
from tests.e2e.rotation_helpers import (
    agent_of,
    interact,
    live_session,
    report_deadline,
    start,
    told_to_leave,
)
from tests.worker_processes import LEASE_S, StartWorker, outputs, settings_for, wait_until

GRACE_S = 1  # AIM_AGENT_LEAVE_GRACE_S in these journeys


async def stored(store: RedisClient, session_id: str) -> Session:
    loaded = await SessionStore(store).load(session_id)
    assert loaded.record is not None
    return loaded.record.session


def successor_dispatches(livekit: Any, session_id: str) -> list[Any]:
    """Every CreateDispatch LiveKit applied for a successor in the session's room."""
    room = f"aim-{session_id}-e1"
    return [
        c
        for c in livekit.calls_to("CreateDispatch", code="ok")
        if c.request.room == room and "successorOf" in json.loads(c.request.metadata)
    ]


async def finish_rotation(
    world: World, store: RedisClient, session_id: str, first: Any, logs: Any = str
) -> Any:
    """After the kill: the successor's dispatch exists once, its job starts, it takes over; the
    predecessor is told to leave once and removed after its grace. The successor's agent."""
    livekit = world.livekit

    async def dispatched() -> bool:
        return any(agent_of(d).generation == 2 for d in ours(livekit, session_id))

    await wait_until(dispatched, within=20, what="the successor dispatched", logs=logs())
    dispatch = next(d for d in ours(livekit, session_id) if agent_of(d).generation == 2)
    second = await start(world, session_id, dispatch)

    async def removed() -> bool:
        calls = livekit.calls_to("RemoveParticipant", code="ok")
        return (await stored(store, session_id)).agent_leaving is None and any(
            c.request.identity == first.identity for c in calls
        )

    until = time.monotonic() + 20
    while not await removed():
        if time.monotonic() > until:
            session = await stored(store, session_id)
            removals = [(c.request.identity, c.code) for c in livekit.calls_to("RemoveParticipant")]
            pytest.fail(
                f"the predecessor was not removed within 20 s: {session!r}\n"
                f"removals: {removals}\n{logs()}"
            )
        await asyncio.sleep(0.05)
    session = await stored(store, session_id)
    assert (session.state, session.agent_generation, session.rotations) == ("active", 2, 1)
    assert len(successor_dispatches(livekit, session_id)) == 1
    assert [m["payload"]["successorGeneration"] for m in told_to_leave(world, session_id)] == [2]
    return second


async def a_worker_killed_mid_rotation_leaves_one_successor(
    store: RedisClient, livekit: Any, workers: StartWorker
) -> None:
    """The rotation's timer fires in worker A, which is killed right after it committed (its
    dispatch made or not); worker B carries the rotation on."""
    env = {"AIM_AGENT_LEAVE_GRACE_S": str(GRACE_S)}
    a = await workers("a", env=env)
    await a.wait_ready()
    app = create_app(
        settings_for(livekit, agent_leave_grace_s=GRACE_S), store=store, run_worker=False
    )
    async with serving(app) as base, httpx.AsyncClient(base_url=base, timeout=30) as http:
        livekit.set_webhook_target(f"{base}/livekit/webhook")
        world = World(livekit, http, time.time, None)  # type: ignore[arg-type]
        session_id, _, first = await live_session(world)
        said = await report_and_speak(world, session_id, first)

        async def begun() -> bool:
            return (await stored(store, session_id)).rotation is not None

        await wait_until(begun, within=10, what="the rotation begun in worker A", logs=outputs(a))
        await a.kill()
        b = await workers("b", env=env)
        await b.wait_ready()
        second = await finish_rotation(world, store, session_id, first)
        given = await second.call(world, session_id, "GetHandover")
        assert [m["commandId"] for m in given["result"]["interactions"]] == [said]
        assert "Traceback" not in b.output(), outputs(b)
        livekit.set_webhook_target(None)


async def report_and_speak(world: World, session_id: str, agent: Any) -> str:
    """The serving agent reports a deadline 25 s away (the rotation begins at once: the margin
    is 30 s), then the user says something it does not acknowledge: the interaction's
    commandId."""
    await report_deadline(world, session_id, agent, 25)
    return await interact(world, session_id, "are you still there?")


async def the_service_killed_mid_rotation_carries_it_on_after_a_restart(
    store: RedisClient, livekit: Any, redis_url: str, tmp_path: Path
) -> None:
    """`aim-realtime serve` (its worker in it) begins the rotation and is killed with SIGKILL;
    a new `serve` on the same Redis finishes it."""
    env = serve_environ(
        redis_url,
        livekit,
        # a session's outbox claimed by the killed process is taken over after this lease
        AIM_WORKER_LEASE_S=str(LEASE_S),
        AIM_AGENT_LEAVE_GRACE_S=str(GRACE_S),
        AIM_RATE_LIMIT_RPS="0",
        AIM_REDIS_CLUSTER="1" if store.cluster else "0",
    )
    first_dir, second_dir = tmp_path / "one", tmp_path / "two"
    first_dir.mkdir()
    second_dir.mkdir()
    with serving_cli(first_dir, ready=True, **env) as one:
        livekit.set_webhook_target(f"{one.base_url}/livekit/webhook")
        async with httpx.AsyncClient(base_url=one.base_url, timeout=30) as http:
            world = World(livekit, http, time.time, None)  # type: ignore[arg-type]
            session_id, _, first = await live_session(world)
            said = await report_and_speak(world, session_id, first)

            async def begun() -> bool:
                return (await stored(store, session_id)).rotation is not None

            await wait_until(begun, within=10, what="the rotation begun", logs=one.output())
            one.process.send_signal(signal.SIGKILL)
            assert one.process.wait(timeout=10) == -signal.SIGKILL
    livekit.set_webhook_target(None)
    with serving_cli(second_dir, ready=True, **env) as two:
        livekit.set_webhook_target(f"{two.base_url}/livekit/webhook")
        async with httpx.AsyncClient(base_url=two.base_url, timeout=30) as http:
            world = World(livekit, http, time.time, None)  # type: ignore[arg-type]
            second = await finish_rotation(world, store, session_id, first, two.output)
            given = await second.call(world, session_id, "GetHandover")
            assert [m["commandId"] for m in given["result"]["interactions"]] == [said]
            refused = await first.call(
                world, session_id, "SaveContext", sessionEpoch=1, context="x"
            )
            assert refused["error"]["code"] == -31002
        livekit.set_webhook_target(None)
        assert "Traceback" not in two.output(), two.output()
