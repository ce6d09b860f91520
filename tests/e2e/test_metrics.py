"""Metrics (profile §13): calls by method and outcome, latency, webhooks, effect failures."""

from __future__ import annotations

import asyncio

import httpx
import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from realtime.app import create_app
from realtime.metrics import meter_provider_from_env
from realtime.telemetry import provider_from_env
from tests.conftest import livekit_settings, rpc, serving
from tests.e2e.metrics_helpers import points
from tests.e2e.realtime_helpers import create_session

pytestmark = pytest.mark.e2e


async def test_calls_webhooks_and_effect_failures_are_counted(livekit, store, tracer_provider):
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    app = create_app(
        livekit_settings(livekit),
        store=store,
        tracer_provider=tracer_provider,
        meter_provider=provider,
    )
    async with serving(app) as base_url, httpx.AsyncClient(base_url=base_url) as http:
        await rpc(http, "ListTasks", {})
        await rpc(http, "GetTask", {"id": "3c9a1f0e-7b6d-4e5c-8a2b-1d0c9e8f7a6b"})
        await http.post("/livekit/webhook", content=b"{}")
        await livekit.set_down(True)
        await create_session(http, returnImmediately=True)
        for _ in range(100):
            if points(reader, "aim.effects.failures"):
                break
            await asyncio.sleep(0.05)
    calls = {
        (a["rpc.method"], a["rpc.jsonrpc.error_code"]): v
        for a, v in points(reader, "aim.rpc.calls")
    }
    assert calls[("ListTasks", 0)] == 1
    assert calls[("GetTask", -32001)] == 1
    assert ("rpc.method", "ListTasks") in [
        item for a, _ in points(reader, "aim.rpc.duration") for item in a.items()
    ]
    assert {a["aim.webhook.outcome"] for a, _ in points(reader, "aim.webhooks")} == {"rejected"}
    assert {a["aim.effect"] for a, _ in points(reader, "aim.effects.failures")} == {"CreateRoom"}
    provider.shutdown()


def test_exporters_follow_the_standard_otel_variables():
    assert provider_from_env({}) is None
    assert meter_provider_from_env({}) is None
    assert (
        meter_provider_from_env(
            {
                "OTEL_METRICS_EXPORTER": "none",
                "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318",
            }
        )
        is None
    )
    tracing = provider_from_env({"OTEL_TRACES_EXPORTER": "console"})
    assert tracing is not None
    tracing.shutdown()
    otlp = provider_from_env({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"})
    assert otlp is not None
    otlp.shutdown()
    meters = meter_provider_from_env(
        {"OTEL_METRICS_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9"}
    )
    assert meters is not None
    meters.shutdown(timeout_millis=100)
