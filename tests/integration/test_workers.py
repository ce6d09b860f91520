"""Effects and timers across worker processes (profile §5, §11, §14).

Sessions are created in this process through `create_app(..., run_worker=False)` (what
`aim-realtime serve --no-worker` runs), with a short idle timeout, so every ready session without
a device arms an idle timer that comes due within seconds. Real `aim-realtime worker`
subprocesses share one private Redis with this process and the LiveKit stand-in, and one of them
is killed with SIGKILL while it holds work. Every timer must still fire exactly once: one
`ready → ending` and one `ending → ended` per session, one room deletion per room.
"""

from __future__ import annotations

import asyncio
import time

import httpx
import pytest

from realtime.app import create_app, running
from realtime.store.timers import TimerStore
from tests.conftest import serving
from tests.e2e.realtime_helpers import call
from tests.tcp_proxy import redis_proxy
from tests.worker_processes import (
    FIRED_LINE,
    STARTUP_TIMEOUT_S,
    a_worker_process_retries_provisioning_once_livekit_is_back,
    all_in,
    assert_ended_once_by_idle_timer,
    create_ready,
    delete_room_calls,
    idle_timers,
    need_redis,
    now_ms,
    outputs,
    settings_for,
    states,
    transitions,
    two_workers_and_a_kill_9_fire_every_timer_once,
    wait_until,
)

pytestmark = [pytest.mark.redis, pytest.mark.e2e, pytest.mark.slow]


async def test_two_workers_and_a_kill_9_fire_every_timer_once(store, livekit, workers):
    """Timers shared by two workers, one killed with SIGKILL mid-way, on a single Redis
    (`two_workers_and_a_kill_9_fire_every_timer_once` in tests/worker_processes.py)."""
    await two_workers_and_a_kill_9_fire_every_timer_once(store, livekit, workers)


async def test_a_worker_takes_over_timers_a_killed_worker_claimed(
    store, livekit, workers, redis_url
):
    """Worker A claims every due timer and dies before firing any: its link to Redis is cut
    right after the claim script ran (the claim is applied, A never sees which timers it got),
    then A is killed. Worker B runs alongside but reaches Redis only once A is dead, so it is
    polling long before A's lease ends, however long a process takes to start. B must leave
    the claimed timers alone until the lease (2 s) runs out, then fire each exactly once."""
    url = need_redis(redis_url)
    app = create_app(settings_for(livekit), store=store, run_worker=False)
    async with serving(app) as base, httpx.AsyncClient(base_url=base, timeout=30) as http:
        session_ids = await create_ready(http, 20)
        armed = await idle_timers(store, session_ids)
        assert sorted(m.split("|")[0] for m in armed) == sorted(session_ids)
        # load the claim script into Redis's cache (claiming nothing), so A's first EVALSHA
        # runs it instead of failing with NOSCRIPT
        assert await TimerStore(store).claim(0, 0) == []
        # A's first claim must find the timers due: on a quick machine a worker starts in less
        # than the 2 s idle timeout, and a claim of nothing would leave nothing to take over
        wait_s = max(armed.values()) / 1000 - time.time() + 0.2
        if wait_s > 0:
            await asyncio.sleep(wait_s)
        claim = b"$7\r\nEVALSHA\r\n$40\r\n" + store.scripts.claim_timers.sha.encode()
        async with redis_proxy(url) as (link_a, url_a), redis_proxy(url) as (link_b, url_b):
            claimed_by_a = link_a.arm(claim, forward=True)  # then every link of A is cut
            link_b.refuse()
            a = await workers("a", redis=url_a)
            b = await workers("b", redis=url_b)
            async with asyncio.timeout(STARTUP_TIMEOUT_S):
                await claimed_by_a.wait()
            await a.kill()
            await b.wait_ready()

            held = await idle_timers(store, session_ids)
            claimed = {member: due for member, due in held.items() if due != armed[member]}
            assert claimed, (armed, held, outputs(a))
            assert all(due > armed[member] for member, due in claimed.items())
            claimed_ids = [member.split("|")[0] for member in claimed]
            assert set((await states(store, claimed_ids)).values()) == {"ready"}

            link_b.restore()  # B reaches Redis from now on
            lease_end = min(claimed.values())
            if now_ms() < lease_end - 600:
                await asyncio.sleep((lease_end - 300 - now_ms()) / 1000)
                # B has been polling for a while: claimed timers are not its to take yet
                still = await states(store, claimed_ids)
                assert set(still.values()) == {"ready"}, (still, outputs(b))
            await wait_until(
                all_in(store, session_ids, "ended"),
                within=20,
                what="every session ended by worker B",
                logs=outputs(a, b),
            )
            ending_at = await assert_ended_once_by_idle_timer(store, http, session_ids)
            for member, due in claimed.items():
                assert ending_at[member.split("|")[0]] >= due, "fired before the lease ran out"
            assert b.running, outputs(b)
            await b.stop()  # before its proxy goes away

    assert "Traceback" not in b.output(), outputs(b)
    assert FIRED_LINE not in a.output()  # A fired nothing: B did it all
    deletions = delete_room_calls(livekit, session_ids)
    assert all(codes == ["ok"] for codes in deletions.values()), deletions
    assert len(deletions) == len(session_ids)
    assert await idle_timers(store, session_ids) == {}


async def test_serve_without_worker_leaves_due_timers_alone(store, livekit):
    """`serve --no-worker` (`create_app(run_worker=False)`): a due idle timer is neither
    claimed nor fired; the first worker that comes up fires it."""
    settings = settings_for(livekit, idle_timeout_s=1)
    app = create_app(settings, store=store, run_worker=False)
    async with serving(app) as base, httpx.AsyncClient(base_url=base, timeout=30) as http:
        [session_id] = await create_ready(http, 1)
        armed = await idle_timers(store, [session_id])
        [due] = armed.values()
        await asyncio.sleep(max(0, due - now_ms()) / 1000 + 1.5)  # well past due
        body = await call(http, "GetSession", sessionId=session_id)
        assert body["result"]["session"]["state"] == "ready"
        assert await idle_timers(store, [session_id]) == armed  # not even claimed
        moves = [(e["from"], e["to"]) for e in await transitions(store, session_id)]
        assert moves == [(None, "provisioning"), ("provisioning", "ready")]

    async with running(settings, store=store):  # a worker: the same loops `worker` runs
        await wait_until(all_in(store, [session_id], "ended"), within=10, what="ended")
    moves = [(e["from"], e["to"]) for e in await transitions(store, session_id)]
    assert moves[2:] == [("ready", "ending"), ("ending", "ended")]
    assert await idle_timers(store, [session_id]) == {}
    assert delete_room_calls(livekit, [session_id]) == {f"aim-{session_id}-e1": ["ok"]}


async def test_a_worker_process_retries_provisioning_once_livekit_is_back(
    store, livekit, workers, runner_log
):
    """Provisioning retried by a worker process once LiveKit is back, on a single Redis
    (`a_worker_process_retries_provisioning_once_livekit_is_back` in tests/worker_processes.py)."""
    await a_worker_process_retries_provisioning_once_livekit_is_back(
        store, livekit, workers, runner_log
    )
