"""The Redis gauges' bounded reads, the start-up line and the observability settings."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from realtime.metrics import StoreGauges, StoreReading
from realtime.settings import Settings, SettingsError
from realtime.telemetry import otlp_endpoint, startup_summary

READING = StoreReading({"ready": 2, "active": 1}, 3, 0.5)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Reads:
    """A store read that counts its calls and answers READING, or raises `error`."""

    def __init__(self, error: Exception | None = None) -> None:
        self.count = 0
        self.error = error

    async def __call__(self) -> StoreReading:
        self.count += 1
        if self.error is not None:
            raise self.error
        return READING


def gauges(clock: Clock) -> tuple[StoreGauges, InMemoryMetricReader]:
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    return StoreGauges(provider.get_meter("test"), clock=clock), reader


def observed(reader: InMemoryMetricReader) -> dict[str, list[tuple[dict[str, Any], float]]]:
    data = reader.get_metrics_data()
    found: dict[str, list[tuple[dict[str, Any], float]]] = {}
    for resource in data.resource_metrics if data else []:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                points = [
                    (dict(point.attributes or {}), getattr(point, "value", 0))
                    for point in metric.data.data_points
                ]
                if points:
                    found[metric.name] = points
    return found


async def test_before_any_read_the_gauges_show_nothing() -> None:
    store, reader = gauges(Clock())
    await store.refresh()  # nothing attached: nothing to read
    assert observed(reader) == {}


async def test_a_read_fills_the_gauges_and_is_reused_until_it_is_old() -> None:
    clock = Clock()
    store, reader = gauges(clock)
    read = Reads()
    store.attach(read, max_age_s=15)
    await asyncio.gather(store.refresh(), store.refresh())  # concurrent callers share one read
    clock.now += 14
    await store.refresh()
    assert read.count == 1
    values = observed(reader)
    assert sorted(values["aim.sessions.live"], key=lambda p: p[1]) == [
        ({"state": "active"}, 1),
        ({"state": "ready"}, 2),
    ]
    assert values["aim.outbox.pending"] == [({}, 3)]
    assert values["aim.timer.lag"] == [({}, 0.5)]
    assert values["aim.redis.up"] == [({}, 1)]
    assert values["aim.gauges.age"] == [({}, 14)]
    clock.now += 1
    await store.refresh()
    assert read.count == 2


async def test_a_hanging_read_is_given_up_and_the_last_values_stay() -> None:
    clock = Clock()
    store, reader = gauges(clock)
    store.timeout_s = 0.05
    hang = asyncio.Event()

    async def read() -> StoreReading:
        if hang.is_set():
            await asyncio.sleep(3600)
        return READING

    store.attach(read, max_age_s=0)
    await store.refresh()
    hang.set()
    clock.now += 30
    await asyncio.wait_for(store.refresh(), timeout=1)
    values = observed(reader)
    assert values["aim.outbox.pending"] == [({}, 3)]
    assert values["aim.redis.up"] == [({}, 0)]
    assert values["aim.gauges.read_failures"] == [({}, 1)]
    assert values["aim.gauges.age"] == [({}, 30)]


async def test_a_failing_read_is_counted_and_tried_again_once_per_interval() -> None:
    store, reader = gauges(Clock())
    read = Reads(ConnectionError("refused"))
    store.attach(read, max_age_s=10)
    await store.refresh()
    await store.refresh()
    assert read.count == 1
    values = observed(reader)
    assert "aim.outbox.pending" not in values  # never read: no value rather than a made-up 0
    assert values["aim.redis.up"] == [({}, 0)]


async def test_keep_fresh_reads_until_stopped() -> None:
    store, _ = gauges(Clock())
    stop = asyncio.Event()
    reads = 0

    async def read() -> StoreReading:
        nonlocal reads
        reads += 1
        stop.set()
        return READING

    store.attach(read, max_age_s=0)
    await asyncio.wait_for(store.keep_fresh(stop), timeout=5)
    await store.aclose()
    assert reads == 1


def test_the_start_up_line_names_endpoints_without_credentials() -> None:
    environ = {"OTEL_EXPORTER_OTLP_ENDPOINT": "https://user:hunter2@collector.example:4318"}
    line = startup_summary(environ, tracing=True, metrics_pushed=True, scraped=True)
    assert line == (
        "telemetry: tracing over OTLP to https://collector.example:4318/v1/traces; "
        "metrics over OTLP to https://collector.example:4318/v1/metrics; GET /metrics served"
    )
    assert "hunter2" not in line
    assert startup_summary({}, tracing=False, metrics_pushed=False, scraped=False) == (
        "telemetry: tracing off; metrics not pushed; GET /metrics off (AIM_METRICS=off)"
    )
    console = {"OTEL_TRACES_EXPORTER": "console"}
    assert startup_summary(console, tracing=True, metrics_pushed=False, scraped=None) == (
        "telemetry: tracing to the console; metrics not pushed; no HTTP, no GET /metrics"
    )


def test_signal_endpoints_are_used_as_they_are() -> None:
    environ = {
        "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT": "http://[::1]:9999/custom",
        "OTEL_EXPORTER_OTLP_ENDPOINT": "http://ignored:4318",
    }
    assert otlp_endpoint(environ, "metrics") == "http://[::1]:9999/custom"
    assert otlp_endpoint({}, "traces") == "http://localhost:4318/v1/traces"
    signed = {"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "https://c.example/v1/traces?sig=s3cr3t"}
    assert otlp_endpoint(signed, "traces") == "https://c.example/v1/traces"
    bad = {"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://host:notaport/"}
    assert otlp_endpoint(bad, "traces") == "(a malformed URL)"


def test_metrics_and_access_log_are_on_by_default_and_can_be_turned_off() -> None:
    settings = Settings.from_env({})
    assert (settings.metrics, settings.access_log, settings.metrics_refresh_s) == (True, True, 15)
    off = Settings.from_env(
        {"AIM_METRICS": "off", "AIM_ACCESS_LOG": "0", "AIM_METRICS_REFRESH_S": "0"}
    )
    assert (off.metrics, off.access_log, off.metrics_refresh_s) == (False, False, 0)


@pytest.mark.parametrize(
    ("name", "raw"),
    [("AIM_METRICS", "maybe"), ("AIM_ACCESS_LOG", "2"), ("AIM_METRICS_REFRESH_S", "-1"),
     ("AIM_METRICS_REFRESH_S", "soon"), ("AIM_METRICS_REFRESH_S", "3601")],
)  # fmt: skip
def test_bad_observability_settings_are_reported_by_name(name: str, raw: str) -> None:
    with pytest.raises(SettingsError) as caught:
        Settings.from_env({name: raw})
    (problem,) = caught.value.problems
    assert problem.startswith(name)
