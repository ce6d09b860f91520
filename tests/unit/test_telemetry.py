"""Telemetry without a tracer provider (profile §13): no spans, but the caller's trace still
names the logs of its call."""

from __future__ import annotations

import json
import logging

from opentelemetry import trace

from realtime.telemetry import JsonLogFormatter, Telemetry

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
