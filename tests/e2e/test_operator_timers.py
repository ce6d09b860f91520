"""The operator API marks the timers a session has moved past as stale (profile §17): armed
at an older epoch, or of a kind the session's state no longer accepts. They stay armed until
they come due and are refused; the timers it does not mark stale are the ones that fire."""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
import pytest

from realtime.store.redis_client import RedisClient
from tests.conftest import service as wired_service
from tests.e2e.agent_operation_helpers import open_session
from tests.e2e.operator_api_helpers import eventually, operator_json, rpc_as, timeline_of
from tests.e2e.realtime_helpers import call, create_part, new_id, register, session_of
from tests.e2e.webhook_helpers import send_webhook

pytestmark = [pytest.mark.e2e, pytest.mark.redis]

IDLE_S = 300


@contextlib.asynccontextmanager
async def service(
    livekit: Any, store: RedisClient
) -> AsyncIterator[tuple[httpx.AsyncClient, Callable[[float], None]]]:
    """A client of a service on a clock of the test's (and a function moving it on); the
    reconciler is off, so nothing but the timers acts when the clock moves."""
    now = [time.time()]

    def advance(seconds: float) -> None:
        now[0] += seconds

    def clock() -> float:
        return now[0]

    settings = {"idle_timeout_s": IDLE_S, "reconcile_interval_s": 0}
    async with wired_service(livekit, store, clock=clock, **settings) as http:
        yield http, advance


async def timers(http: httpx.AsyncClient, sid: str) -> dict[str, bool]:
    """`kind@epoch` → stale, for the session's armed timers."""
    found = (await operator_json(http, f"/ops/api/sessions/{sid}"))["session"]["timers"]
    return {f"{t['kind']}@{t['epoch']}": t["stale"] for t in found}


async def state_of(http: httpx.AsyncClient, sid: str) -> str:
    got = await call(http, "GetSession", sessionId=sid)
    state: str = got["result"]["session"]["state"]
    return state


async def test_timers_a_session_moved_past_are_stale_and_refused_the_others_fire(livekit, store):
    async with service(livekit, store) as (http, advance):
        # joined on a phone, handed over to a laptop: active at epoch 2
        live = await open_session(http, livekit)
        laptop = (await register(http, live.sid, 1, "laptop"))["result"]["endpoint"]["endpointId"]
        joined = await call(http, "JoinSession", sessionId=live.sid, sessionEpoch=1,
                            endpointId=laptop, commandId=new_id())  # fmt: skip
        assert joined["result"]["session"]["sessionEpoch"] == 2
        room = f"aim-{live.sid}-e1"  # a handoff keeps the room
        livekit.add_participant(room, laptop)
        assert await send_webhook(http, "participant_joined", room, laptop, epoch=2) == "applied"
        assert await state_of(http, live.sid) == "active"
        # created, never joined: ready, idle
        created = await rpc_as(http, "SendMessage", {"message": {
            "messageId": new_id(), "role": "ROLE_USER", "parts": [create_part()]}})  # fmt: skip
        waiting = session_of(created["result"]["task"])["sessionId"]
        assert await state_of(http, waiting) == "ready"

        # provisioning timers of sessions provisioned long ago, the idle timer of a session that
        # became active, the agent's start timer of a session whose agent joined: stale; the
        # idle and agent timers of a session still idle and without its agent, the maximum
        # durations: not
        assert await timers(http, live.sid) == {
            "provisioning@1": True, "idle@1": True, "max@1": False, "agent@1": True}  # fmt: skip
        assert await timers(http, waiting) == {
            "provisioning@1": True, "idle@1": False, "max@1": False, "agent@1": False}  # fmt: skip

        # past the idle timeout: the stale ones were refused, the one that was not fired
        advance(IDLE_S + 1)

        async def done() -> bool:
            return await state_of(http, waiting) == "ended" and await timers(http, live.sid) == {
                "max@1": False
            }

        await eventually(done, within=10)
        assert await state_of(http, live.sid) == "active"

        async def refused() -> dict[str, str]:  # the timeline's recorder writes in batches
            entries = await timeline_of(http, live.sid)
            found = {e["timer"]: e["result"] for e in entries if e["kind"] == "timer"}
            return found if len(found) == 3 else {}

        assert await eventually(refused) == {
            "provisioning": "refused",
            "idle": "refused",
            "agent": "refused",
        }
        got = await call(http, "GetSession", sessionId=waiting)
        assert got["result"]["session"]["endReason"] == "idle_timeout"
