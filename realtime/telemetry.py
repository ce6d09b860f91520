"""Tracing and logs (profile §13): with `metrics.py` and app.py, the only modules that import
OpenTelemetry.

One server span per JSON-RPC call, joining the caller's W3C `traceparent`. The exporters follow
the standard `OTEL_*` variables: OTLP over HTTP when `OTEL_EXPORTER_OTLP_ENDPOINT` (or
`OTEL_TRACES_EXPORTER=otlp`) is set, `console` on request, otherwise tracing is off. Attribute
values never hold tokens, JWTs or message text.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator, Mapping
from typing import Final
from urllib.parse import urlsplit, urlunsplit

import msgspec
from opentelemetry import propagate, trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter
from opentelemetry.trace import SpanKind, Status, StatusCode

log = logging.getLogger(__name__)

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


def _traces_exporter(environ: Mapping[str, str]) -> str | None:
    """`otlp`, `console` or None (tracing off), as the OTEL_* variables choose."""
    name = environ.get("OTEL_TRACES_EXPORTER", "").strip().lower()
    endpoint = environ.get("OTEL_EXPORTER_OTLP_ENDPOINT") or environ.get(
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
    )
    if name in ("", "none") and not (name == "" and endpoint):
        return None
    return "console" if name == "console" else "otlp"


def provider_from_env(environ: Mapping[str, str]) -> TracerProvider | None:
    """A tracer provider configured by the standard OTEL_* variables, or None when off."""
    exporter = _traces_exporter(environ)
    if exporter is None:
        return None
    provider = TracerProvider(resource=Resource.create())  # reads OTEL_SERVICE_NAME etc.
    if exporter == "console":
        provider.add_span_processor(BatchSpanProcessor(ConsoleSpanExporter()))
    else:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import (
            OTLPSpanExporter,
        )

        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    return provider


def otlp_endpoint(environ: Mapping[str, str], signal: str) -> str:
    """Where the OTLP/HTTP exporter of `signal` (`traces`, `metrics`) posts, computed as the SDK
    does, without user, password or query (credentials travel in OTEL_EXPORTER_OTLP_HEADERS,
    which is never shown)."""
    url = environ.get(f"OTEL_EXPORTER_OTLP_{signal.upper()}_ENDPOINT", "").strip()
    if not url:
        base = environ.get("OTEL_EXPORTER_OTLP_ENDPOINT", "").strip() or "http://localhost:4318"
        url = f"{base.rstrip('/')}/v1/{signal}"
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
        if ":" in host:
            host = f"[{host}]"
        if parts.port is not None:
            host += f":{parts.port}"
    except ValueError:
        return "(a malformed URL)"
    return urlunsplit((parts.scheme, host, parts.path, "", ""))


def startup_summary(
    environ: Mapping[str, str], *, tracing: bool, metrics_pushed: bool, scraped: bool | None
) -> str:
    """The start-up line: whether traces and metrics leave the process, and where to;
    `scraped` None: a process without HTTP."""
    exporter = _traces_exporter(environ)
    if not tracing:
        traces = "tracing off"
    elif exporter == "console":
        traces = "tracing to the console"
    elif exporter == "otlp":
        traces = f"tracing over OTLP to {otlp_endpoint(environ, 'traces')}"
    else:
        traces = "tracing on"
    pushed = (
        f"metrics over OTLP to {otlp_endpoint(environ, 'metrics')}"
        if metrics_pushed
        else "metrics not pushed"
    )
    served = {
        True: "GET /metrics served",
        False: "GET /metrics off (AIM_METRICS=off)",
        None: "no HTTP, no GET /metrics",
    }[scraped]
    return f"telemetry: {traces}; {pushed}; {served}"


# anything else (an exception's arguments, a path) is logged as its str()
_LOG_ENCODER: Final = msgspec.json.Encoder(enc_hook=str)


class JsonLogFormatter(logging.Formatter):
    """One JSON object per line, with the trace and span ids of the current span, and the
    fields a caller passes as `extra={"json_fields": {...}}` (the access log's)."""

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
        fields = getattr(record, "json_fields", None)
        if fields:
            entry.update(fields)
        context = trace.get_current_span().get_span_context()
        if context.is_valid:
            entry["trace_id"] = format(context.trace_id, "032x")
            entry["span_id"] = format(context.span_id, "016x")
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return _LOG_ENCODER.encode(entry).decode()


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
