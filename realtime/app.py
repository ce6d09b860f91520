"""The one composition root: `create_app(settings, ...)` wires every collaborator.

Tests build apps through the same factory with their own settings, store, clock and tracer.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import AsyncIterator, Callable

from litestar import Litestar
from opentelemetry.sdk.trace import TracerProvider

from realtime.agent_card import build_agent_card
from realtime.auth import Authenticator
from realtime.effects.livekit import LiveKitGateway
from realtime.engine.core import Engine
from realtime.engine.runner import Runner
from realtime.methods.context import Services
from realtime.routes import ROUTES, AgentCardBody
from realtime.rpc.dispatch import Dispatcher, RateLimiter
from realtime.settings import Settings
from realtime.store.redis_store import RedisStore, SessionStore
from realtime.store.selection import open_store
from realtime.telemetry import Telemetry, provider_from_env

log = logging.getLogger(__name__)


def create_app(
    settings: Settings,
    *,
    store: RedisStore | None = None,
    clock: Callable[[], float] = time.time,
    tracer_provider: TracerProvider | None = None,
    run_worker: bool = True,
) -> Litestar:
    """Build the service. Without `store`, one is opened at start-up as profile §14 says."""
    telemetry = Telemetry(
        tracer_provider if tracer_provider is not None else provider_from_env(os.environ)
    )

    @contextlib.asynccontextmanager
    async def lifespan(app: Litestar) -> AsyncIterator[None]:
        release: Callable[[], None] | None = None
        active_store = store
        if active_store is None:
            active_store, release = open_store(settings)
        authenticator = Authenticator(settings, now=clock)
        gateway = LiveKitGateway(settings)
        engine = Engine(settings, SessionStore(active_store), clock=clock)
        runner = Runner(engine, gateway, public_base_url=settings.public_base_url)
        services = Services(
            settings=settings, store=active_store, engine=engine, runner=runner, clock=clock
        )
        engine.on_effects = lambda session_id: services.background(runner.run(session_id))
        app.state.dispatcher = Dispatcher(
            services, authenticator, telemetry, RateLimiter(settings.rate_limit_rps)
        )
        stop = asyncio.Event()
        worker = asyncio.create_task(runner.loop(stop)) if run_worker else None
        try:
            yield
        finally:
            stop.set()
            if worker is not None:
                await worker
            await services.drain()
            await gateway.aclose()
            await authenticator.aclose()
            if release is not None:
                await active_store.aclose()
                release()
            telemetry.shutdown()

    app = Litestar(
        route_handlers=ROUTES,
        lifespan=[lifespan],
        # the JSON-RPC route enforces its own limit so it can answer with a JSON-RPC body
        request_max_body_size=None,
        openapi_config=None,
    )
    app.state.agent_card = AgentCardBody(build_agent_card(settings))
    return app
