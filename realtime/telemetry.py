"""Tracing (profile §13): the only module, with app.py, that imports OpenTelemetry.

One server span per JSON-RPC call, joining the caller's W3C `traceparent`. The exporter follows
the standard `OTEL_*` variables: OTLP over HTTP when `OTEL_EXPORTER_OTLP_ENDPOINT` (or
`OTEL_TRACES_EXPORTER=otlp`) is set, `console` on request, otherwise tracing is off. Attribute
values never hold tokens, JWTs or message text.
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import Iterator, Mapping
from typing import Final

from opentelemetry import metrics, propagate, trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import MetricReader, PeriodicExportingMetricReader
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter
from opentelemetry.trace import SpanKind, Status, StatusCode

TRACER_NAME: Final = "aim-realtime"

ATTR_RPC_SYSTEM: Final = "rpc.system"
ATTR_RPC_METHOD: Final = "rpc.method"
ATTR_RPC_REQUEST_ID: Final = "rpc.jsonrpc.request_id"
ATTR_RPC_ERROR_CODE: Final = "rpc.jsonrpc.error_code"
ATTR_RPC_ERROR_MESSAGE: Final = "rpc.jsonrpc.error_message"
ATTR_SESSION_ID: Final = "aim.session.id"
ATTR_SESSION_EPOCH: Final = "aim.session.epoch"
ATTR_COMMAND_ID: Final = "aim.command.id"
ATTR_PRINCIPAL: Final = "aim.principal.key"
ATTR_DB_SYSTEM: Final = "db.system"
ATTR_DB_OPERATION: Final = "db.operation"
ATTR_LIVEKIT_ROOM: Final = "livekit.room"

UNKNOWN_METHOD_SPAN: Final = "jsonrpc.request"


def provider_from_env(environ: Mapping[str, str]) -> TracerProvider | None:
    """A tracer provider configured by the standard OTEL_* variables, or None when off."""
    exporter_name = environ.get("OTEL_TRACES_EXPORTER", "").strip().lower()
    endpoint = environ.get("OTEL_EXPORTER_OTLP_ENDPOINT") or environ.get(
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
    )
    if exporter_name in ("", "none") and not (exporter_name == "" and endpoint):
        return None
    provider = TracerProvider(resource=Resource.create())  # reads OTEL_SERVICE_NAME etc.
    if exporter_name == "console":
        provider.add_span_processor(BatchSpanProcessor(ConsoleSpanExporter()))
    else:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import (
            OTLPSpanExporter,
        )

        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    return provider


def meter_provider_from_env(environ: Mapping[str, str]) -> MeterProvider | None:
    """A meter provider exporting over OTLP when `OTEL_METRICS_EXPORTER=otlp` or an OTLP
    endpoint is set (and the exporter is not `none`); None means metrics are off."""
    exporter_name = environ.get("OTEL_METRICS_EXPORTER", "").strip().lower()
    endpoint = environ.get("OTEL_EXPORTER_OTLP_ENDPOINT") or environ.get(
        "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT"
    )
    if exporter_name == "none" or not (exporter_name == "otlp" or endpoint):
        return None
    from opentelemetry.exporter.otlp.proto.http.metric_exporter import (  # only when exporting
        OTLPMetricExporter,
    )

    reader: MetricReader = PeriodicExportingMetricReader(OTLPMetricExporter())
    return MeterProvider(metric_readers=[reader], resource=Resource.create())


class JsonLogFormatter(logging.Formatter):
    """One JSON object per line, with the trace and span ids of the current span."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, object] = {
            "time": self.formatTime(record),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        session_id = getattr(record, "session_id", None)
        if session_id:
            entry["session_id"] = session_id
        context = trace.get_current_span().get_span_context()
        if context.is_valid:
            entry["trace_id"] = format(context.trace_id, "032x")
            entry["span_id"] = format(context.span_id, "016x")
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str)


def current_trace_id() -> str | None:
    """The trace id of the current span (32 hex), or None. Without a tracer provider the
    call's span carries the caller's `traceparent` (`Telemetry.rpc_span`), so the id is the
    caller's; work started by no call has none."""
    context = trace.get_current_span().get_span_context()
    return format(context.trace_id, "032x") if context.is_valid else None


EVENT_TRANSITION: Final = "aim.session.transition"


def note_transition(
    session_id: str, epoch: int, command_id: str | None, from_state: str | None, to_state: str
) -> None:
    """A span event on the current span (the call's, or the worker's) for a committed change."""
    span = trace.get_current_span()
    if not span.is_recording():
        # no tracing, a span sampled out, or the call's span already ended (effect follow-ups
        # committed in the background after the answer): nothing can be added to it
        return
    attributes: dict[str, str | int] = {
        ATTR_SESSION_ID: session_id,
        ATTR_SESSION_EPOCH: epoch,
        "aim.session.from": from_state or "",
        "aim.session.to": to_state,
    }
    if command_id:
        attributes[ATTR_COMMAND_ID] = command_id
    span.set_attribute(ATTR_SESSION_ID, session_id)
    span.add_event(EVENT_TRANSITION, attributes)


class Metrics:
    """The service's counters (profile §13); no-ops when no meter provider is configured."""

    def __init__(self, provider: MeterProvider | None) -> None:
        self.provider = provider
        meter = (provider or metrics.NoOpMeterProvider()).get_meter(TRACER_NAME)
        self._calls = meter.create_counter(
            "aim.rpc.calls", description="JSON-RPC calls by method and outcome"
        )
        self._latency = meter.create_histogram(
            "aim.rpc.duration", unit="s", description="JSON-RPC call latency"
        )
        self._effects = meter.create_counter(
            "aim.effects.failures", description="LiveKit effects that failed and will be retried"
        )
        self._timers = meter.create_counter("aim.timers.fired", description="timers that fired")
        self._webhooks = meter.create_counter(
            "aim.webhooks", description="LiveKit webhooks by outcome"
        )
        # Prometheus: aim_reconciler_corrections_total{kind="..."}
        self._corrections = meter.create_counter(
            "aim.reconciler.corrections",
            description="drift between LiveKit and the sessions that the reconciler corrected",
        )
        # Prometheus: aim_timeline_lost_total{reason="overflow|flush_failed"}
        self._timeline_lost = meter.create_counter(
            "aim.timeline.lost",
            description="operations timeline entries dropped (recorder over its cap, or a flush "
            "that Redis refused)",
        )

    def rpc_call(self, method: str, code: int, seconds: float) -> None:
        if self.provider is None:
            return  # no meter provider: nothing would be recorded
        attributes: dict[str, str | int] = {"rpc.method": method, "rpc.jsonrpc.error_code": code}
        self._calls.add(1, attributes)
        self._latency.record(seconds, attributes)

    def effect_failed(self, effect: str) -> None:
        self._effects.add(1, {"aim.effect": effect})

    def timer_fired(self, kind: str) -> None:
        self._timers.add(1, {"aim.timer": kind})

    def webhook(self, outcome: str) -> None:
        self._webhooks.add(1, {"aim.webhook.outcome": outcome})

    def timeline_lost(self, reason: str, count: int) -> None:
        self._timeline_lost.add(count, {"reason": reason})

    def correction(self, kind: str) -> None:
        self._corrections.add(1, {"kind": kind})

    def shutdown(self) -> None:
        if self.provider is not None:
            self.provider.shutdown()


class RpcSpan:
    """The handle a caller gets for the span of one call."""

    def __init__(self, span: trace.Span) -> None:
        self._span = span
        self.method = "unknown"
        self.code = 0  # 0: success

    def set_method(self, method: str) -> None:
        self.method = method
        self._span.update_name(method)
        self._span.set_attribute(ATTR_RPC_METHOD, method)

    def set_request_id(self, request_id: int | str) -> None:
        self._span.set_attribute(ATTR_RPC_REQUEST_ID, str(request_id))

    def set_attribute(self, key: str, value: str | int) -> None:
        self._span.set_attribute(key, value)

    def set_error(self, code: int, message: str) -> None:
        self.code = code
        self._span.set_attribute(ATTR_RPC_ERROR_CODE, code)
        self._span.set_attribute(ATTR_RPC_ERROR_MESSAGE, message)
        # client mistakes are not server faults; only internal/upstream errors mark the span
        if code in (-32603, -31012):
            self._span.set_status(Status(StatusCode.ERROR, message))


class Telemetry:
    """Spans for the service; a no-op tracer when no provider is configured."""

    def __init__(self, provider: TracerProvider | None) -> None:
        self.provider = provider
        self._tracer = provider.get_tracer(TRACER_NAME) if provider else trace.NoOpTracer()

    @contextlib.contextmanager
    def rpc_span(self, headers: Mapping[str, str]) -> Iterator[RpcSpan]:
        if self.provider is None and "traceparent" not in headers:
            # no tracing and no caller's trace for the logs to name: no span to start
            yield RpcSpan(trace.INVALID_SPAN)
            return
        parent = propagate.extract(headers)
        with self._tracer.start_as_current_span(
            UNKNOWN_METHOD_SPAN,
            context=parent,
            kind=SpanKind.SERVER,
            attributes={ATTR_RPC_SYSTEM: "jsonrpc"},
            record_exception=False,
            set_status_on_exception=False,
        ) as span:
            yield RpcSpan(span)

    @contextlib.contextmanager
    def redis_span(self, operation: str, session_id: str) -> Iterator[None]:
        """A client span around one atomic Redis script of a session (profile §13)."""
        if self.provider is None:
            yield
            return
        with self._tracer.start_as_current_span(
            f"redis.{operation}",
            kind=SpanKind.CLIENT,
            attributes={
                ATTR_DB_SYSTEM: "redis",
                ATTR_DB_OPERATION: operation,
                ATTR_SESSION_ID: session_id,
            },
        ):
            yield

    @contextlib.contextmanager
    def livekit_span(self, call: str, session_id: str, room: str) -> Iterator[None]:
        """A client span around one LiveKit server API call (profile §13)."""
        if self.provider is None:
            yield
            return
        with self._tracer.start_as_current_span(
            f"livekit.{call}",
            kind=SpanKind.CLIENT,
            attributes={
                ATTR_RPC_SYSTEM: "twirp",
                ATTR_RPC_METHOD: call,
                ATTR_SESSION_ID: session_id,
                ATTR_LIVEKIT_ROOM: room,
            },
        ):
            yield

    def shutdown(self) -> None:
        if self.provider is not None:
            self.provider.shutdown()
