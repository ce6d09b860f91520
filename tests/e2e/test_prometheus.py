"""`GET /metrics` (profile §13, §17): the instruments in the Prometheus text format, and the
gauges read from Redis (live sessions by state, outbox depth, timer lag) even when it is down."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from realtime.app import create_app
from realtime.metrics import READ_TIMEOUT_S
from realtime.settings import Settings
from realtime.store import keys
from realtime.store.redis_client import RedisClient
from tests.conftest import TEST_SECRET, livekit_settings, rpc, serving
from tests.e2e.realtime_helpers import call, create_session, new_id, register, session_of
from tests.tcp_proxy import redis_proxy

pytestmark = pytest.mark.e2e

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def parse(text: str) -> Samples:
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def value(samples: Samples, name: str, **labels: str) -> float | None:
    """The one sample of `name` whose labels include `labels`, or None."""
    found = [v for (n, ls), v in samples.items() if n == name and set(labels.items()) <= ls]
    assert len(found) <= 1, found
    return found[0] if found else None


async def scrape(http: httpx.AsyncClient) -> Samples:
    response = await http.get("/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain; version=0.0.4")
    return parse(response.text)


def plain_settings(**overrides: Any) -> Settings:
    values: dict[str, Any] = {
        "auth_hs256_secret": TEST_SECRET,
        "rate_limit_rps": 0,
        "metrics_refresh_s": 0,
        **overrides,
    }
    return Settings(**values)


@pytest.fixture(autouse=True)
def _no_otlp(monkeypatch: pytest.MonkeyPatch) -> None:
    """The service's own meter provider, with nothing pushed over OTLP."""
    for name in ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_METRICS_EXPORTER", "OTEL_TRACES_EXPORTER"):
        monkeypatch.delenv(name, raising=False)


async def test_metrics_serves_the_rpc_counters_in_the_prometheus_text_format(store):
    app = create_app(plain_settings(), store=store, run_worker=False)
    async with serving(app) as base_url, httpx.AsyncClient(base_url=base_url) as http:
        await rpc(http, "ListTasks", {})
        await rpc(http, "ListTasks", {})
        await rpc(http, "GetTask", {"id": "3c9a1f0e-7b6d-4e5c-8a2b-1d0c9e8f7a6b"})
        samples = await scrape(http)
    calls = "aim_rpc_calls_total"
    assert value(samples, calls, rpc_method="ListTasks", rpc_jsonrpc_error_code="0") == 2
    assert value(samples, calls, rpc_method="GetTask", rpc_jsonrpc_error_code="-32001") == 1
    duration = "aim_rpc_duration_seconds_count"
    assert value(samples, duration, rpc_method="ListTasks", rpc_jsonrpc_error_code="0") == 2
    fast = value(
        samples, "aim_rpc_duration_seconds_bucket", rpc_method="ListTasks", le="10.0"
    )  # buckets in seconds, not the SDK's default milliseconds
    assert fast == 2
    assert value(samples, "aim_redis_up") == 1
    assert value(samples, "aim_outbox_pending") == 0
    assert value(samples, "aim_timer_lag_seconds") == 0
    assert value(samples, "process_resident_memory_bytes")


async def test_metrics_needs_no_token_and_is_404_when_turned_off(store):
    app = create_app(plain_settings(metrics=False), store=store, run_worker=False)
    async with serving(app) as base_url, httpx.AsyncClient(base_url=base_url) as http:
        assert (await http.get("/metrics")).status_code == 404
        assert (await http.get("/healthz")).status_code == 200
    app = create_app(plain_settings(), store=store, run_worker=False)
    async with serving(app) as base_url, httpx.AsyncClient(base_url=base_url) as http:
        assert (await http.get("/metrics")).status_code == 200  # no Authorization header


async def live_counts(http: httpx.AsyncClient) -> dict[str, float]:
    samples = await scrape(http)
    return {
        dict(labels)["state"]: v
        for (name, labels), v in samples.items()
        if name == "aim_sessions_live"
    }


async def counts_become(http: httpx.AsyncClient, wanted: dict[str, float]) -> dict[str, float]:
    deadline = time.monotonic() + 10
    while True:
        counts = await live_counts(http)
        if {state: n for state, n in counts.items() if n} == wanted:
            return counts
        assert time.monotonic() < deadline, counts
        await asyncio.sleep(0.05)


async def test_live_sessions_are_counted_by_state(livekit, store):
    app = create_app(livekit_settings(livekit, metrics_refresh_s=0), store=store)
    async with serving(app) as base_url, httpx.AsyncClient(base_url=base_url, timeout=30) as http:
        assert await counts_become(http, {}) == dict.fromkeys(
            ("provisioning", "ready", "joining", "active", "reconnecting", "ending"), 0
        )
        sessions = []
        for _ in range(3):
            task = (await create_session(http))["result"]["task"]
            sessions.append(session_of(task)["sessionId"])
        await counts_become(http, {"ready": 3})

        joining, ended, _ = sessions
        endpoint = (await register(http, joining, 1, "phone"))["result"]["endpoint"]
        await call(
            http,
            "JoinSession",
            sessionId=joining,
            sessionEpoch=1,
            endpointId=endpoint["endpointId"],
            commandId=new_id(),
        )
        await call(http, "EndSession", sessionId=ended, commandId=new_id(), reason="done")
        # the ended session leaves the count once its room is deleted
        counts = await counts_become(http, {"ready": 1, "joining": 1})
    assert counts["ending"] == 0
    assert "ended" not in counts


async def seed_outbox(store: RedisClient, session_id: str, effects: int, due_ms: int) -> None:
    outbox = keys.outbox_key(session_id)
    await store.client.hset(outbox, mapping={f"1-{n}": b"{}" for n in range(effects)})
    await store.client.zadd(keys.outbox_due_key(), {session_id: due_ms})


async def test_outbox_depth_and_timer_lag_reflect_what_is_stored(store):
    now = time.time()
    now_ms = int(now * 1000)
    first, second = new_id(), new_id()
    await seed_outbox(store, first, 2, now_ms)
    await seed_outbox(store, second, 1, now_ms + 5000)
    timers = keys.timers_due_key()
    await store.client.zadd(timers, {f"{first}|max|1|1|": now_ms + 60_000})
    # no worker runs here: nothing fires or carries out what was seeded
    app = create_app(plain_settings(), store=store, clock=lambda: now, run_worker=False)
    async with serving(app) as base_url, httpx.AsyncClient(base_url=base_url) as http:
        samples = await scrape(http)
        assert value(samples, "aim_outbox_pending") == 3
        assert value(samples, "aim_timer_lag_seconds") == 0  # armed, none due
        await store.client.zadd(timers, {f"{second}|idle|3|1|": now_ms - 42_500})
        await store.client.zadd(timers, {f"{first}|grace|4|1|e#1": now_ms - 2_000})
        await store.client.hdel(keys.outbox_key(first), "1-0")
        samples = await scrape(http)
    assert value(samples, "aim_timer_lag_seconds") == 42.5  # the oldest of the due timers
    assert value(samples, "aim_outbox_pending") == 2
    # seeded sessions have no snapshot: they are in no state
    assert value(samples, "aim_sessions_live", state="ready") == 0


async def test_the_gauges_are_read_at_most_once_per_refresh_interval(store):
    app = create_app(plain_settings(metrics_refresh_s=3600), store=store, run_worker=False)
    async with serving(app) as base_url, httpx.AsyncClient(base_url=base_url) as http:
        assert value(await scrape(http), "aim_outbox_pending") == 0
        await seed_outbox(store, new_id(), 4, 0)
        samples = await scrape(http)
    assert value(samples, "aim_outbox_pending") == 0  # the hour-old reading still stands
    assert value(samples, "aim_gauges_age_seconds") < 60


@pytest.fixture
async def redis_link(redis_url: str | None, store: RedisClient) -> AsyncIterator[Any]:
    if redis_url is None:
        pytest.skip("needs a real Redis (the embedded store has no socket to cut)")
    async with redis_proxy(redis_url) as link:
        yield link


async def test_metrics_answers_with_the_last_values_while_redis_is_unreachable(
    redis_link, store, caplog
):
    proxy, url = redis_link
    await seed_outbox(store, new_id(), 2, 0)
    proxied = RedisClient.from_url(url)
    try:
        app = create_app(plain_settings(), store=proxied, run_worker=False)
        async with serving(app) as base_url, httpx.AsyncClient(base_url=base_url) as http:
            before = await scrape(http)
            assert value(before, "aim_outbox_pending") == 2
            assert value(before, "aim_redis_up") == 1
            proxy.refuse()
            proxy.cut()
            with caplog.at_level(logging.WARNING, logger="realtime.telemetry"):
                started = time.monotonic()
                during = await scrape(http)
                assert time.monotonic() - started < READ_TIMEOUT_S + 1
            assert value(during, "aim_outbox_pending") == 2  # the last values
            assert value(during, "aim_redis_up") == 0
            assert value(during, "aim_gauges_read_failures_total") == 1
            assert "the Redis gauges keep their last values" in caplog.text
            proxy.restore()
            after = await scrape(http)
    finally:
        await proxied.aclose()
    assert value(after, "aim_redis_up") == 1
    assert value(after, "aim_gauges_read_failures_total") == 1


async def test_start_up_says_where_telemetry_goes(store, tracer_provider, caplog):
    with caplog.at_level(logging.INFO, logger="realtime.app"):
        app = create_app(plain_settings(), store=store, tracer_provider=tracer_provider)
        async with serving(app):
            pass
    assert "telemetry: tracing on; metrics not pushed; GET /metrics served" in caplog.messages
