"""Shared fixtures: a real Redis (private redis-server) per test session, apps built through
`create_app`, bearer tokens, and an in-memory span exporter.

Redis selection mirrors the service: AIM_TEST_REDIS_URL (a database dedicated to tests: it is
flushed), else a private redis-server on a unix socket, else the embedded store — never when
AIM_REQUIRE_REDIS=1 (CI), where a missing Redis fails the run instead of passing silently.
With AIM_TEST_REDIS_CLUSTER=1 (the cluster pass, `tests/cluster`) the URL is a Redis Cluster's,
or a local cluster of three masters is started for the session (`tests/redis_cluster.py`).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import tempfile
import time
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import msgspec
import pytest
import uvicorn
from hypothesis import settings as hypothesis_settings
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from realtime.app import create_app
from realtime.auth import mint_dev_token
from realtime.http_server import server_config
from realtime.settings import Settings
from realtime.store.redis_client import RedisClient
from realtime.store.server import PrivateRedis, redis_server_available
from tests import redis_cluster
from tests.cluster import ON_CLUSTER, flush_cluster, skip_reason

# The suite runs a worker per core on a machine it shares: a per-example deadline would measure
# the machine's load, not the code (the examples' counts and shrinking stay Hypothesis's own).
hypothesis_settings.register_profile("suite", deadline=None)
hypothesis_settings.load_profile("suite")

TEST_SECRET = "test-secret-0123456789-abcdefghijklmnopqrstuvwxyz"
ALL_SCOPES = ("a2a.invoke", "a2a.tasks.read", "a2a.tasks.cancel")
REALTIME = "urn:aim:a2a:realtime:v1"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """In the cluster pass, skip the tests that cannot run on a Redis Cluster (saying why)."""
    if ON_CLUSTER:
        for item in items:
            if reason := skip_reason(item.nodeid):
                item.add_marker(pytest.mark.skip(reason=f"on Redis Cluster: {reason}"))


@pytest.fixture(scope="session")
def redis_url() -> Iterator[str | None]:
    """The URL of the Redis the tests use; None means the embedded store."""
    url = os.environ.get("AIM_TEST_REDIS_URL")
    if url:
        yield url
        return
    if ON_CLUSTER:
        with (
            tempfile.TemporaryDirectory(prefix="aim-test-cluster-") as cluster_dir,
            redis_cluster.running(Path(cluster_dir)) as cluster,
        ):
            yield cluster.url
        return
    if redis_server_available():
        with tempfile.TemporaryDirectory(prefix="aim-test-redis-") as data_dir:
            server = PrivateRedis(Path(data_dir), appendonly=False)
            try:
                yield server.url
            finally:
                server.stop()
        return
    if os.environ.get("AIM_REQUIRE_REDIS") == "1":
        pytest.fail("AIM_REQUIRE_REDIS=1 but there is no redis-server binary and no URL")
    yield None


@pytest.fixture
async def store(redis_url: str | None) -> AsyncIterator[RedisClient]:
    if ON_CLUSTER and redis_url:
        store = RedisClient.from_url(redis_url, cluster=True)
        await flush_cluster(store)
    else:
        store = RedisClient.from_url(redis_url) if redis_url else RedisClient.in_process()
        await store.client.flushdb()
    try:
        yield store
    finally:
        await store.aclose()


@pytest.fixture
def settings() -> Settings:
    return Settings(auth_hs256_secret=TEST_SECRET, rate_limit_rps=0)


@pytest.fixture
def span_exporter() -> InMemorySpanExporter:
    return InMemorySpanExporter()


@pytest.fixture
def tracer_provider(span_exporter: InMemorySpanExporter) -> Iterator[TracerProvider]:
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(span_exporter))
    yield provider
    provider.shutdown()


class _Server(uvicorn.Server):
    """uvicorn's server, stopped as soon as the test is done with it: its main loop and its
    shutdown wake on what they wait for instead of polling every 0.1 s (0.2 s of every test
    that serves an app). The shutdown is uvicorn's: stop accepting, ask each connection to
    close, let connections and requests end (within the configured grace), then the app's
    lifespan shutdown."""

    def __init__(self, config: uvicorn.Config) -> None:
        super().__init__(config)
        self.stopped = asyncio.Event()

    async def main_loop(self) -> None:
        counter = 0
        while not await self.on_tick(counter):  # a tick also refreshes the Date header
            counter = (counter + 1) % 864000
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.stopped.wait(), 0.1)

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        for server in self.servers:
            server.close()
        for connection in list(self.server_state.connections):
            connection.shutdown()
        try:
            async with asyncio.timeout(self.config.timeout_graceful_shutdown):
                # uvicorn signals neither a closed connection nor an ended request
                while self.server_state.connections or self.server_state.tasks:  # noqa: ASYNC110
                    await asyncio.sleep(0.005)
        except TimeoutError:
            for task in self.server_state.tasks:
                task.cancel(msg="Task cancelled, timeout graceful shutdown exceeded")
        for server in self.servers:
            await server.wait_closed()
        if not self.force_exit:
            await self.lifespan.shutdown()


@contextlib.asynccontextmanager
async def serving(
    app: Any, settings: Settings | None = None, *, port: int = 0
) -> AsyncIterator[str]:
    """Serve `app` on a loopback port (ephemeral unless `port`) in this event loop, configured
    as `serve` configures it (`settings` for the connection limits; the defaults when None)."""
    # IPPROTO_TCP makes asyncio set TCP_NODELAY on accepted connections (no 40 ms Nagle stalls)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.bind(("127.0.0.1", port))
    port = sock.getsockname()[1]
    server = _Server(server_config(app, settings or Settings(), log_level="warning"))
    task = asyncio.create_task(server.serve(sockets=[sock]))
    while not server.started:
        if task.done():
            task.result()
        await asyncio.sleep(0.005)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        server.stopped.set()
        await task
        sock.close()


@pytest.fixture
async def client(
    settings: Settings, store: RedisClient, tracer_provider: TracerProvider
) -> AsyncIterator[httpx.AsyncClient]:
    app = create_app(settings, store=store, tracer_provider=tracer_provider)
    async with serving(app) as base_url, httpx.AsyncClient(base_url=base_url) as http:
        yield http


def token(subject: str = "alice", scopes: tuple[str, ...] = ALL_SCOPES, ttl_s: int = 600) -> str:
    return mint_dev_token(TEST_SECRET, subject=subject, scopes=scopes, ttl_s=ttl_s, now=time.time())


def headers(
    subject: str = "alice",
    *,
    scopes: tuple[str, ...] = ALL_SCOPES,
    realtime: bool = False,
    version: str | None = "1.0",
) -> dict[str, str]:
    result = {"Authorization": f"Bearer {token(subject, scopes)}"}
    if version is not None:
        result["A2A-Version"] = version
    if realtime:
        result["A2A-Extensions"] = REALTIME
    return result


async def rpc(
    client: httpx.AsyncClient,
    method: str,
    params: dict[str, Any],
    *,
    subject: str = "alice",
    request_id: int | str = 1,
    **header_options: Any,
) -> dict[str, Any]:
    """POST one JSON-RPC call and return the decoded response object (any HTTP status)."""
    response = await client.post(
        "/a2a",
        content=msgspec.json.encode(
            {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}
        ),
        headers={"Content-Type": "application/json", **headers(subject, **header_options)},
    )
    body: dict[str, Any] = response.json()
    body["_status"] = response.status_code
    return body


def error_info(body: dict[str, Any]) -> dict[str, Any]:
    infos = [d for d in body["error"]["data"] if d["@type"].endswith("google.rpc.ErrorInfo")]
    assert len(infos) == 1
    return infos[0]


def violations(body: dict[str, Any]) -> list[str]:
    return [
        violation["field"]
        for d in body["error"]["data"]
        if d["@type"].endswith("google.rpc.BadRequest")
        for violation in d["fieldViolations"]
    ]


LIVEKIT_KEY = "lk-test-key"
LIVEKIT_SECRET = "lk-test-secret-0123456789-abcdefghijklmnopqrstuvwxyz"


@pytest.fixture
async def livekit() -> AsyncIterator[Any]:
    from realtime.livekit_dev.standin import running_standin

    async with running_standin(LIVEKIT_KEY, LIVEKIT_SECRET) as standin:
        yield standin


def livekit_settings(livekit: Any, **overrides: Any) -> Settings:
    values: dict[str, Any] = {
        "auth_hs256_secret": TEST_SECRET,
        "rate_limit_rps": 0,
        "livekit_url": livekit.ws_url,
        "livekit_public_url": "wss://media.example",
        "livekit_api_key": LIVEKIT_KEY,
        "livekit_api_secret": LIVEKIT_SECRET,
        "livekit_webhook_keys": ((LIVEKIT_KEY, LIVEKIT_SECRET),),
        **overrides,
    }
    if ON_CLUSTER and overrides.get("redis_url"):
        values.setdefault("redis_cluster", True)
    return Settings(**values)


@contextlib.asynccontextmanager
async def service(
    livekit: Any,
    store: RedisClient,
    tracer_provider: TracerProvider | None = None,
    *,
    clock: Callable[[], float] = time.time,
    **overrides: Any,
) -> AsyncIterator[httpx.AsyncClient]:
    """A client of a service wired to the LiveKit stand-in (`livekit_settings` with
    `overrides`) on `clock`, served in this event loop; spans go to `tracer_provider`."""
    settings = livekit_settings(livekit, **overrides)
    app = create_app(settings, store=store, clock=clock, tracer_provider=tracer_provider)
    async with serving(app) as base_url, httpx.AsyncClient(base_url=base_url, timeout=30) as http:
        yield http


@pytest.fixture
async def rt_client(
    livekit: Any, store: RedisClient, tracer_provider: TracerProvider
) -> AsyncIterator[httpx.AsyncClient]:
    """A client of a service wired to the LiveKit stand-in."""
    async with service(livekit, store, tracer_provider) as http:
        yield http
