"""A service beside a LiveKit stand-in that runs agent jobs and reports them by webhook, on a
clock the test moves (the start timer is the service's own), and what the tests read of it."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

import httpx
from livekit import api
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from realtime.app import create_app
from realtime.livekit_dev.standin import LiveKitStandin, running_standin
from realtime.store.redis_client import RedisClient
from tests.clocks import Clock
from tests.conftest import LIVEKIT_KEY, LIVEKIT_SECRET, livekit_settings, serving
from tests.e2e.realtime_helpers import create_session, session_of
from tests.e2e.webhook_helpers import event_id, get

AGENT_NAME = "aim-realtime-agent"  # AIM_AGENT_NAME's default
START_TIMEOUT_S = 10  # AIM_AGENT_START_TIMEOUT_S's default


@dataclass
class World:
    livekit: LiveKitStandin
    http: httpx.AsyncClient
    clock: Clock
    metrics: InMemoryMetricReader


@contextlib.asynccontextmanager
async def presence_world(
    store: RedisClient,
    tracer_provider: Any,
    *,
    auto_jobs: bool = True,
    webhooks: bool = True,
    **overrides: Any,
) -> AsyncIterator[World]:
    """The service (its worker on) and a stand-in whose simulated worker takes every dispatch
    (`auto_jobs`) and sends its webhooks to the service (`webhooks`)."""
    clock, reader = Clock(), InMemoryMetricReader()
    async with running_standin(LIVEKIT_KEY, LIVEKIT_SECRET, auto_jobs=auto_jobs) as livekit:
        app = create_app(
            livekit_settings(livekit, **overrides),
            store=store,
            tracer_provider=tracer_provider,
            clock=clock,
            meter_provider=MeterProvider(metric_readers=[reader]),
        )
        async with (
            serving(app) as base_url,
            httpx.AsyncClient(base_url=base_url, timeout=30) as http,
        ):
            if webhooks:
                livekit.set_webhook_target(f"{base_url}/livekit/webhook")
            yield World(livekit, http, clock, reader)
            livekit.set_webhook_target(None)  # the service stops before the stand-in


def room(session_id: str, epoch: int = 1) -> str:
    return f"aim-{session_id}-e{epoch}"


async def new_session(world: World) -> str:
    """A session created and ready (the blocking create): its id."""
    created = await create_session(world.http)
    meta = session_of(created["result"]["task"])
    assert meta["sessionState"] == "ready", created
    return str(meta["sessionId"])


async def until(
    world: World, session_id: str, check: Callable[[dict[str, Any]], bool], within: float = 5.0
) -> dict[str, Any]:
    """GetSession until `check` holds of it (bounded)."""
    deadline = time.monotonic() + within
    while True:
        session = await get(world.http, session_id)
        if check(session):
            return session
        assert time.monotonic() < deadline, f"not within {within} s: {session}"
        await asyncio.sleep(0.05)


def ours(livekit: LiveKitStandin, session_id: str, epoch: int = 1) -> list[api.AgentDispatch]:
    """Our agent's dispatches in the session's room, oldest first."""
    return livekit.dispatches_in(room(session_id, epoch), AGENT_NAME)


def attempt_of(dispatch: api.AgentDispatch) -> int:
    value: int = json.loads(dispatch.metadata).get("dispatchAttempt", 1)
    return value


def job_event(
    kind: str,
    room_name: str,
    *,
    job_id: str,
    attempt: int = 1,
    identity: str = "",
    agent_name: str = AGENT_NAME,
    dispatch_id: str = "AD_test",
    ev_id: str | None = None,
) -> api.WebhookEvent:
    """An `agent_job_started` / `agent_job_ended` webhook as LiveKit sends it: the job (its
    dispatch's metadata copied into it) and its room."""
    state = api.JobState(
        status=api.JS_RUNNING if kind == "agent_job_started" else api.JS_SUCCESS,
        participant_identity=identity,
    )
    job = api.Job(
        id=job_id,
        dispatch_id=dispatch_id,
        type=api.JT_ROOM,
        room=api.Room(name=room_name),
        agent_name=agent_name,
        metadata=json.dumps({"dispatchAttempt": attempt}),
        state=state,
    )
    return api.WebhookEvent(
        event=kind,
        id=ev_id or event_id(),
        created_at=int(time.time()),
        room=api.Room(name=room_name),
        job=job,
    )


def presence_counts(world: World) -> dict[str, float]:
    """`aim.agent.presence` by change, as the service counted them."""
    data = world.metrics.get_metrics_data()
    found: dict[str, float] = {}
    for resource in data.resource_metrics if data else []:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                if metric.name == "aim.agent.presence":
                    for point in metric.data.data_points:
                        found[str(point.attributes["change"])] = point.value
    return found
