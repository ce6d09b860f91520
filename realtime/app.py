"""The one composition root: `create_app(settings, ...)` wires every collaborator.

Tests build apps through the same factory with their own settings, store, clock and tracer.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import os
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from litestar import Litestar
from litestar.config.cors import CORSConfig
from litestar.datastructures import MutableScopeHeaders
from litestar.types import Message, Scope
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.trace import TracerProvider

from realtime.a2a import projection
from realtime.agent_card import build_agent_card
from realtime.auth import Authenticator
from realtime.engine.admission import Admission
from realtime.engine.core import Engine
from realtime.engine.ledger import Ledger
from realtime.fanout import EventHub, StreamSlots
from realtime.front import RpcFront
from realtime.livekit_adapter.api import LiveKitGateway
from realtime.logs import ACCESS_LOG
from realtime.methods.context import (
    Commands,
    MethodDeps,
    OperatorDeps,
    ProviderDeps,
    SessionDeps,
    StreamDeps,
    TaskDeps,
)
from realtime.metrics import Metrics, StoreReading
from realtime.operator_routes import METRICS_ROUTE, OPERATOR_ROUTES, OperatorConsole
from realtime.policy import PolicySource
from realtime.routes import ROUTES, AgentCardBody, RouteDeps, load_sdk
from realtime.rpc.dispatch import Dispatcher, RateLimiter
from realtime.rpc.errors import code_of
from realtime.rpc.provider import ProviderDispatcher
from realtime.rpc.v01 import V01Dispatcher, agent_card_v01
from realtime.settings import Settings
from realtime.store import keys
from realtime.store.cards import CardStore
from realtime.store.census import CensusStore
from realtime.store.compaction import Compactor
from realtime.store.deliveries import DeliveryStore
from realtime.store.events import EventStore
from realtime.store.leases import DutyLease
from realtime.store.operator_reads import OperatorReads
from realtime.store.redis_client import RedisClient
from realtime.store.selection import open_store
from realtime.store.sessions import SessionStore
from realtime.store.tasks import TaskStore
from realtime.store.tenants import TenantStore
from realtime.store.timeline import Recorder, TimelineStore
from realtime.store.timers import TimerStore
from realtime.telemetry import Telemetry, provider_from_env, startup_summary
from realtime.worker.deliverer import Deliverer
from realtime.worker.reconciler import Reconciler
from realtime.worker.runner import Runner
from realtime.worker.timers import Timers

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Running:
    """What `running` built for the HTTP side: each family's dependencies, once. The engine and
    the runner are `commands`' (the same objects the worker loops use)."""

    methods: MethodDeps  # the A2A methods
    provider: ProviderDeps
    operator: OperatorDeps
    commands: Commands  # LiveKit's webhooks (the methods' are the same)
    ledger: Ledger  # the writes no commit carries (the card's Last-Modified among them)
    store_ready: Callable[[], Awaitable[bool]]  # whether Redis answers (readiness)


def store_reading(
    census_store: CensusStore, clock: Callable[[], float]
) -> Callable[[], Awaitable[StoreReading]]:
    """The read behind the Redis gauges (`aim.sessions.live`, `aim.outbox.pending`,
    `aim.timer.lag`): one census of the indexes."""
    warned = False

    async def read() -> StoreReading:
        nonlocal warned
        census = await census_store.read()
        if census.truncated and not warned:
            warned = True
            log.warning("metrics: more sessions than a census counts; the gauges stop there")
        now_ms = int(clock() * 1000)
        oldest = census.oldest_timer_ms
        lag_ms = 0 if oldest is None else max(0, now_ms - oldest)
        return StoreReading(census.states, census.outbox_pending, lag_ms / 1000)

    return read


@contextlib.asynccontextmanager
async def running(
    settings: Settings,
    *,
    store: RedisClient | None = None,
    clock: Callable[[], float] = time.time,
    run_worker: bool = True,
    metrics: Metrics | None = None,
    telemetry: Telemetry | None = None,
) -> AsyncIterator[Running]:
    """Everything but HTTP: the stores, the engine, the outbox runner and (with `run_worker`)
    the worker loops that retry effects, fire timers and reconcile LiveKit with the sessions.
    `serve` and `worker` both start here. `store` is the Redis client to use (opened as the
    settings say when None); every store is built here, once, from it."""
    release: Callable[[], None] | None = None
    redis = store
    if redis is None:
        redis, release = open_store(settings)
    sessions = SessionStore(redis, telemetry, cache_entries=settings.session_cache_entries)
    timers = TimerStore(redis)
    events = EventStore(redis)
    gateway = LiveKitGateway(settings, telemetry=telemetry)
    metrics = metrics or Metrics(None)
    policy_file = settings.tenant_policy_file
    tenants = TenantStore(redis)
    admission = Admission(
        settings,
        PolicySource(Path(policy_file) if policy_file else None, clock),
        tenants,
        sessions,
        clock=clock,
    )
    engine = Engine(
        settings,
        sessions,
        project=projection.follow,
        admission=admission,
        clock=clock,
        telemetry=telemetry,
        metrics=metrics,
    )
    runner = Runner(
        engine,
        gateway,
        metrics=metrics,
    )
    # the operations timeline's entries that no commit carries, written off the request path
    recorder = Recorder(
        TimelineStore(redis),
        ttl_s=settings.live_window_s,
        clock=clock,
        metrics=metrics,
        code_of=code_of,
    )
    deliveries = DeliveryStore(redis)
    task_store = TaskStore(redis)
    ledger = Ledger(settings, task_store, deliveries, CardStore(redis))
    commands = Commands(settings, engine, runner, recorder)
    tasks = TaskDeps(settings, task_store, ledger, clock=clock)
    sessions_deps = SessionDeps(settings, commands, sessions, tasks, clock=clock)
    hub = EventHub(events, buffer=settings.sse_buffer_events)
    slots = StreamSlots(
        per_principal=settings.sse_max_streams_per_principal,
        per_task=settings.sse_max_streams_per_task,
    )
    built = Running(
        methods=MethodDeps(
            tasks, sessions_deps, StreamDeps(settings, sessions_deps, events, hub, slots, clock)
        ),
        provider=ProviderDeps(settings, commands, sessions, clock=clock),
        operator=OperatorDeps(
            settings, OperatorReads(redis), sessions, deliveries, ledger, admission, clock=clock
        ),
        commands=commands,
        ledger=ledger,
        store_ready=redis.ping,
    )
    metrics.store.attach(
        store_reading(CensusStore(redis, timers), clock), max_age_s=settings.metrics_refresh_s
    )
    stop = asyncio.Event()
    loops = (
        [
            asyncio.create_task(runner.loop(stop)),
            asyncio.create_task(
                Timers(
                    engine,
                    runner,
                    Compactor(redis, sessions, tenants, usage_ttl_s=settings.usage_ttl_s),
                    timers,
                    metrics=metrics,
                    recorder=recorder,
                ).loop(stop)
            ),
        ]
        if run_worker
        else []
    )
    if run_worker and settings.events_enabled:
        deliverer = Deliverer(settings, deliveries, metrics=metrics, clock=clock)
        loops.append(asyncio.create_task(deliverer.loop(stop)))
        for route in settings.events_routes:
            log.info("session events: %s", route)
    if metrics.pushes:  # an OTLP export cannot await a read: keep the Redis gauges current
        loops.append(asyncio.create_task(metrics.store.keep_fresh(stop)))
    if run_worker and settings.reconcile_interval_s and settings.livekit_configured:
        lease = DutyLease(redis, keys.reconciler_lease_key())
        reconciler = Reconciler(engine, gateway, lease, runner, timers, metrics=metrics)
        loops.append(asyncio.create_task(reconciler.loop(stop)))
        log.info(
            "reconciler on: every %d s while this worker holds the lease; grace %d s",
            settings.reconcile_interval_s,
            settings.reconcile_grace_s,
        )
    elif run_worker:
        log.info(
            "reconciler off: %s",
            "LiveKit is not configured" if settings.reconcile_interval_s else "interval 0",
        )
    recording = asyncio.create_task(recorder.run())
    try:
        yield built
    finally:
        stop.set()
        await hub.close()
        await asyncio.gather(*loops)
        await metrics.store.aclose()
        await runner.drain()
        await recorder.close()  # what the loops and the last requests recorded is written
        await recording
        await gateway.aclose()
        if release is not None:
            await redis.aclose()
            release()


async def run_worker(settings: Settings, stop: asyncio.Event) -> None:
    """`aim-realtime worker`: effects and timers without HTTP, until `stop` is set."""
    metrics = Metrics.from_env(os.environ, scrape=False)
    telemetry = Telemetry(provider_from_env(os.environ))
    try:
        async with running(settings, metrics=metrics, telemetry=telemetry):
            log.info(
                startup_summary(
                    os.environ,
                    tracing=telemetry.provider is not None,
                    metrics_pushed=metrics.pushes,
                    scraped=None,
                )
            )
            log.info("worker running: retrying effects and firing timers")
            await stop.wait()
    finally:
        metrics.shutdown()  # flush the last export
        telemetry.shutdown()


# what a browser app on another origin sends and reads (profile §1 headers, SSE resumption,
# trace context, the card's validators)
CORS_REQUEST_HEADERS: Final = (
    "Authorization",
    "Content-Type",
    "A2A-Version",
    "A2A-Extensions",
    "X-A2A-Extensions",
    "Last-Event-ID",
    "traceparent",
    "tracestate",
    "If-None-Match",
    "If-Modified-Since",
)
CORS_RESPONSE_HEADERS: Final = (
    "A2A-Extensions",
    "X-A2A-Extensions",
    "Retry-After",
    "WWW-Authenticate",
    "ETag",
    "Last-Modified",
)


def cors_config(origins: tuple[str, ...]) -> CORSConfig | None:
    """CORS for `AIM_CORS_ORIGINS` (None: same-origin callers only). Bearer tokens, never
    cookies: no credentials mode."""
    if not origins:
        return None
    return CORSConfig(
        allow_origins=list(origins),
        allow_methods=["GET", "POST", "OPTIONS"],
        allow_headers=list(CORS_REQUEST_HEADERS),
        expose_headers=list(CORS_RESPONSE_HEADERS),
        allow_credentials=False,
        max_age=600,
    )


async def vary_origin(message: Message, scope: Scope) -> None:
    """`Vary: Origin` on every response (a `before_send` hook), when CORS allows a list of
    origins: the answer then depends on the request's Origin (which Litestar's CORS says only
    to an allowed one), so a shared cache must not hand one origin's variant to another."""
    if message["type"] == "http.response.start":
        headers = MutableScopeHeaders.from_message(message)
        vary = headers.get("vary")
        if vary is None:
            headers["Vary"] = "Origin"
        elif "origin" not in (part.strip().lower() for part in vary.split(",")):
            headers["Vary"] = f"{vary}, Origin"


def create_app(
    settings: Settings,
    *,
    store: RedisClient | None = None,
    clock: Callable[[], float] = time.time,
    rate_clock: Callable[[], float] = time.monotonic,
    tracer_provider: TracerProvider | None = None,
    meter_provider: MeterProvider | None = None,
    run_worker: bool = True,
    settle_heap: bool = False,
) -> RpcFront:
    """Build the service. Without `store` (a Redis client), one is opened at start-up as
    profile §14 says; `run_worker=False` (`serve --no-worker`) leaves effects retries and
    timers to workers. `settle_heap` (what `serve` asks for: one app per process) freezes what
    start-up allocated, so garbage collection stops walking it. A `meter_provider` (tests)
    replaces the service's own: its readers get the instruments, and `GET /metrics` (on unless
    `AIM_METRICS=off`) answers an empty page. `rate_clock` is the request budgets' clock:
    monotonic, so a change of the wall clock neither refills nor drains a bucket."""
    telemetry = Telemetry(
        tracer_provider if tracer_provider is not None else provider_from_env(os.environ)
    )
    metrics = (
        Metrics(meter_provider)
        if meter_provider is not None
        else Metrics.from_env(os.environ, scrape=settings.metrics)
    )

    @contextlib.asynccontextmanager
    async def lifespan(app: Litestar) -> AsyncIterator[None]:
        authenticator = Authenticator(settings, now=clock)
        metrics.count_jwks_fetches(authenticator.jwks_fetches)
        try:
            async with running(
                settings,
                store=store,
                clock=clock,
                run_worker=run_worker,
                metrics=metrics,
                telemetry=telemetry,
            ) as built:
                log.info(
                    startup_summary(
                        os.environ,
                        tracing=telemetry.provider is not None,
                        metrics_pushed=metrics.pushes,
                        scraped=settings.metrics,
                    )
                )
                app.state.dispatcher = Dispatcher(
                    built.methods,
                    authenticator,
                    telemetry,
                    RateLimiter(settings.rate_limit_rps, clock=rate_clock),
                    metrics=metrics,
                )
                # A2A 0.1 clients: the same principals, so the same request budget
                app.state.v01 = V01Dispatcher(
                    built.methods,
                    authenticator,
                    telemetry,
                    app.state.dispatcher.limiter,
                    metrics=metrics,
                )
                # the agent makes a few calls per turn: ten times a client's budget per session
                app.state.provider = ProviderDispatcher(
                    built.provider,
                    metrics,
                    telemetry,
                    RateLimiter(settings.rate_limit_rps * 10, clock=rate_clock),
                )
                app.state.operator = built.operator
                app.state.routes = RouteDeps(
                    settings,
                    metrics,
                    telemetry,
                    built.commands,
                    built.ledger,
                    built.store_ready,
                    clock,
                )
                if settle_heap:
                    # what start-up built lives as long as the process: out of the collector's
                    # sight, a full collection no longer walks it (tens of ms every second or
                    # two under load, the p99 of every call)
                    gc.collect()
                    gc.freeze()
                yield
        finally:
            await authenticator.aclose()
            telemetry.shutdown()
            metrics.shutdown()
            ACCESS_LOG.flush()  # the last calls' lines

    varies = bool(settings.cors_origins) and "*" not in settings.cors_origins
    app = Litestar(
        route_handlers=(
            [*ROUTES, *OPERATOR_ROUTES, METRICS_ROUTE]
            if settings.metrics
            else [*ROUTES, *OPERATOR_ROUTES]
        ),
        lifespan=[lifespan],
        # the JSON-RPC route enforces its own limit so it can answer with a JSON-RPC body
        request_max_body_size=None,
        openapi_config=None,
        logging_config=None,  # the process's logging (JSON lines from the CLI) stays as it is
        cors_config=cors_config(settings.cors_origins),
        # with `*` every origin gets the same answer, so no Vary is needed
        before_send=[vary_origin] if varies else [],
    )
    app.state.metrics = metrics  # GET /metrics
    app.state.agent_card = AgentCardBody(build_agent_card(settings))
    app.state.agent_card_v01 = AgentCardBody(agent_card_v01(build_agent_card(settings), settings))
    app.state.operator_console = OperatorConsole.load()
    app.state.sdk = load_sdk()  # the browser client library, served at /sdk/
    # the JSON-RPC calls that carry the load skip Litestar's request machinery (`front`)
    return RpcFront(app, vary_origin=varies)
