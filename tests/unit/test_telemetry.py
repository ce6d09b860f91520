"""Telemetry (profile §13): without a tracer provider no spans, but the caller's trace still
names the logs of its call; with one, a stored cause links later work back to its span."""

from __future__ import annotations

import json
import logging

from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from realtime.logs import JsonLogFormatter
from realtime.telemetry import Telemetry, current_cause

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT_ID = "00f067aa0ba902b7"


def log_line() -> dict[str, object]:
    record = logging.LogRecord("realtime.test", logging.INFO, __file__, 1, "served", None, None)
    line: dict[str, object] = json.loads(JsonLogFormatter().format(record))
    return line


def test_without_tracing_the_callers_traceparent_still_names_the_logs() -> None:
    headers = {"traceparent": f"00-{TRACE_ID}-{PARENT_ID}-01"}
    with Telemetry(None).rpc_span(headers):
        assert not trace.get_current_span().is_recording()
        assert log_line()["trace_id"] == TRACE_ID


def test_without_tracing_or_traceparent_a_call_has_no_trace() -> None:
    with Telemetry(None).rpc_span({}) as span:
        span.set_method("GetTask")  # harmless on no span
        span.set_error(-31012, "down")
        assert not trace.get_current_span().get_span_context().is_valid
        assert "trace_id" not in log_line()


def test_a_stored_cause_is_the_callers_span_and_links_back() -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    telemetry = Telemetry(provider)
    headers = {"traceparent": f"00-{TRACE_ID}-{PARENT_ID}-01", "host": "[::1]:8080"}
    with telemetry.rpc_span(headers) as call:
        call.set_method("SendMessage")
        cause = current_cause()
    assert cause is not None
    assert cause.startswith(f"00-{TRACE_ID}-")
    with telemetry.background_span("timer max", cause, {}):
        pass
    with telemetry.background_span("timer idle", "not-a-traceparent", {}):
        pass  # a cause that does not parse is no link, not a failure
    sent, timer, unlinked = exporter.get_finished_spans()
    assert sent.attributes["server.address"] == "::1"
    assert sent.attributes["server.port"] == 8080
    (link,) = timer.links
    assert (link.context.trace_id, link.context.span_id) == (
        sent.context.trace_id,
        sent.context.span_id,
    )
    assert timer.context.trace_id != sent.context.trace_id
    assert unlinked.links == ()


def test_without_tracing_no_cause_is_stored() -> None:
    with Telemetry(None).rpc_span({}):
        assert current_cause() is None
