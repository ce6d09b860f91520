"""Tracing (profile §13): with `metrics.py` and app.py, the only modules that import OpenTelemetry
(`logs.py` names the current span in each log line through `current_span_ids`).

One server span per JSON-RPC call, joining the caller's W3C `traceparent`, and one per LiveKit
webhook; one internal span per piece of background work (an effect carried out, a timer fired)
that links to the span of the request that caused it. Names and attributes follow OpenTelemetry
semantic conventions 1.44.0 (`SEMCONV_SCHEMA`): RPC spans with the JSON-RPC page for the calls,
RPC client spans for LiveKit's Twirp calls, database client spans for Redis. The exporters follow
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

from opentelemetry import propagate, trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter
from opentelemetry.trace import Link, SpanContext, SpanKind, Status, StatusCode, TraceFlags

log = logging.getLogger(__name__)

TRACER_NAME: Final = "aim-realtime"
SEMCONV_SCHEMA: Final = "https://opentelemetry.io/schemas/1.44.0"

ATTR_RPC_SYSTEM: Final = "rpc.system.name"
ATTR_RPC_METHOD: Final = "rpc.method"
ATTR_RPC_METHOD_ORIGINAL: Final = "rpc.method_original"
ATTR_RPC_STATUS_CODE: Final = "rpc.response.status_code"
ATTR_JSONRPC_VERSION: Final = "jsonrpc.protocol.version"
ATTR_JSONRPC_REQUEST_ID: Final = "jsonrpc.request.id"
ATTR_ERROR_TYPE: Final = "error.type"
ATTR_SERVER_ADDRESS: Final = "server.address"
ATTR_SERVER_PORT: Final = "server.port"
ATTR_HTTP_METHOD: Final = "http.request.method"
ATTR_HTTP_ROUTE: Final = "http.route"
ATTR_HTTP_STATUS: Final = "http.response.status_code"
ATTR_DB_SYSTEM: Final = "db.system.name"
ATTR_DB_OPERATION: Final = "db.operation.name"
ATTR_SESSION_ID: Final = "aim.session.id"
ATTR_SESSION_EPOCH: Final = "aim.session.epoch"
ATTR_COMMAND_ID: Final = "aim.command.id"
ATTR_PRINCIPAL: Final = "aim.principal.key"
ATTR_LIVEKIT_ROOM: Final = "livekit.room"

OTHER_METHOD: Final = "_OTHER"  # rpc.method of a call whose method the service does not know
UNKNOWN_METHOD_SPAN: Final = "jsonrpc"  # the span name then: rpc.system.name
METHOD_ORIGINAL_MAX: Final = 100  # characters of an unknown method name kept on the span
WEBHOOK_ROUTE: Final = "/livekit/webhook"


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


def current_span_ids() -> tuple[str, str] | None:
    """The trace id (32 hex) and span id (16 hex) of the current span, or None."""
    context = trace.get_current_span().get_span_context()
    if not context.is_valid:
        return None
    return format(context.trace_id, "032x"), format(context.span_id, "016x")


def current_trace_id() -> str | None:
    """The trace id of the current span (32 hex), or None. Without a tracer provider the
    call's span carries the caller's `traceparent` (`Telemetry.rpc_span`), so the id is the
    caller's; work started by no call has none."""
    context = trace.get_current_span().get_span_context()
    return format(context.trace_id, "032x") if context.is_valid else None


def current_cause() -> str | None:
    """The current span as a W3C `traceparent` value: what work this span causes later (an
    effect, a timer, a webhook) stores, so its own span can link back here."""
    context = trace.get_current_span().get_span_context()
    if not context.is_valid:
        return None
    return f"00-{context.trace_id:032x}-{context.span_id:016x}-{context.trace_flags:02x}"


def trace_id_of(cause: str) -> str:
    """The trace id (32 hex) of a `current_cause()`."""
    return cause.split("-", 2)[1]


def _span_context(cause: str) -> SpanContext | None:
    """The span context of a stored `current_cause()`, or None for anything else."""
    parts = cause.split("-")
    if len(parts) != 4 or parts[0] != "00":
        return None
    try:
        trace_id, span_id, flags = int(parts[1], 16), int(parts[2], 16), int(parts[3], 16)
    except ValueError:
        return None
    context = SpanContext(trace_id, span_id, is_remote=True, trace_flags=TraceFlags(flags & 1))
    return context if context.is_valid else None


def link_to_cause(cause: str | None) -> None:
    """Link the current span to the span that caused its work (a webhook's to the last call
    that changed the session), unless it is in that trace already or links to it."""
    span = trace.get_current_span()
    if cause is None or not span.is_recording():
        return
    context = _span_context(cause)
    if context is None or context.trace_id == span.get_span_context().trace_id:
        return
    if any(link.context.span_id == context.span_id for link in getattr(span, "links", ())):
        return
    span.add_link(context)


EVENT_TRANSITION: Final = "aim.session.transition"


def note_transition(
    session_id: str, epoch: int, command_id: str | None, from_state: str | None, to_state: str
) -> None:
    """A span event on the current span (the call's, the webhook's, or the background work's)
    for a committed change."""
    span = trace.get_current_span()
    if not span.is_recording():
        # no tracing, or a span sampled out: nothing can be added to it
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


def _server_of(host: str) -> tuple[str, int | None]:
    """`server.address` and `server.port` of a Host header (or a URL's netloc)."""
    try:
        parts = urlsplit(f"//{host}")
        return parts.hostname or "", parts.port
    except ValueError:  # a malformed port
        return "", None


class RpcSpan:
    """The handle a caller gets for the span of one call (JSON-RPC server span)."""

    def __init__(self, span: trace.Span) -> None:
        self._span = span
        self.method = "unknown"  # the metrics' and access log's name for it
        self.code = 0  # 0: success

    def set_method(self, method: str) -> None:
        self.method = method
        self._span.update_name(method)
        self._span.set_attribute(ATTR_RPC_METHOD, method)

    def set_unknown_method(self, original: str) -> None:
        """A method the service does not serve: rpc.method stays `_OTHER`."""
        self._span.set_attribute(ATTR_RPC_METHOD_ORIGINAL, original[:METHOD_ORIGINAL_MAX])

    def set_request_id(self, request_id: int | str) -> None:
        self._span.set_attribute(ATTR_JSONRPC_REQUEST_ID, str(request_id))

    def set_attribute(self, key: str, value: str | int) -> None:
        self._span.set_attribute(key, value)

    def set_error(self, code: int, message: str) -> None:
        """An error response: every JSON-RPC error code is an error of the call (the JSON-RPC
        conventions); which side is at fault is told by the code, not the status."""
        self.code = code
        self._span.set_attribute(ATTR_RPC_STATUS_CODE, str(code))
        self._span.set_attribute(ATTR_ERROR_TYPE, str(code))
        self._span.set_status(Status(StatusCode.ERROR, message))


class WebhookSpan:
    """The handle of a LiveKit webhook's server span."""

    def __init__(self, span: trace.Span) -> None:
        self._span = span

    def set_event(self, event: str, session_id: str | None) -> None:
        self._span.set_attribute("aim.webhook.event", event)
        if session_id:
            self._span.set_attribute(ATTR_SESSION_ID, session_id)

    def set_outcome(self, status: int, verdict: str) -> None:
        self._span.set_attribute(ATTR_HTTP_STATUS, status)
        self._span.set_attribute("aim.webhook.outcome", verdict)
        if status >= 500:
            self._span.set_status(Status(StatusCode.ERROR, verdict))


class Telemetry:
    """Spans for the service; a no-op tracer when no provider is configured."""

    def __init__(self, provider: TracerProvider | None) -> None:
        self.provider = provider
        self._tracer = (
            provider.get_tracer(TRACER_NAME, schema_url=SEMCONV_SCHEMA)
            if provider
            else trace.NoOpTracer()
        )

    @contextlib.contextmanager
    def rpc_span(self, headers: Mapping[str, str]) -> Iterator[RpcSpan]:
        if self.provider is None and "traceparent" not in headers:
            # no tracing and no caller's trace for the logs to name: no span to start
            yield RpcSpan(trace.INVALID_SPAN)
            return
        parent = propagate.extract(headers)
        attributes: dict[str, str | int] = {
            ATTR_RPC_SYSTEM: "jsonrpc",
            ATTR_RPC_METHOD: OTHER_METHOD,
            ATTR_JSONRPC_VERSION: "2.0",
        }
        address, port = _server_of(headers.get("host", ""))
        if address:
            attributes[ATTR_SERVER_ADDRESS] = address
        if port is not None:
            attributes[ATTR_SERVER_PORT] = port
        with self._tracer.start_as_current_span(
            UNKNOWN_METHOD_SPAN,
            context=parent,
            kind=SpanKind.SERVER,
            attributes=attributes,
            record_exception=False,
            set_status_on_exception=False,
        ) as span:
            yield RpcSpan(span)

    @contextlib.contextmanager
    def webhook_span(self) -> Iterator[WebhookSpan]:
        """The server span of one LiveKit webhook (HTTP conventions; LiveKit sends no trace
        context, so the engine links it to the session's last call, `link_to_cause`)."""
        if self.provider is None:
            yield WebhookSpan(trace.INVALID_SPAN)
            return
        with self._tracer.start_as_current_span(
            f"POST {WEBHOOK_ROUTE}",
            context=trace.set_span_in_context(trace.INVALID_SPAN),  # a root: never a caller's
            kind=SpanKind.SERVER,
            attributes={ATTR_HTTP_METHOD: "POST", ATTR_HTTP_ROUTE: WEBHOOK_ROUTE},
            record_exception=False,
            set_status_on_exception=False,
        ) as span:
            yield WebhookSpan(span)

    @contextlib.contextmanager
    def background_span(
        self, name: str, cause: str | None, attributes: Mapping[str, str | int]
    ) -> Iterator[None]:
        """An internal span for work a commit left to do (an effect carried out, a timer
        fired), linked to the span of the commit that caused it (`cause`). Run inline by the
        request that caused it, it is a child of that request's span too."""
        if self.provider is None:
            yield
            return
        context = _span_context(cause) if cause else None
        current = trace.get_current_span().get_span_context()
        links = (
            [Link(context)] if context is not None and context.trace_id != current.trace_id else []
        )
        with self._tracer.start_as_current_span(
            name, kind=SpanKind.INTERNAL, links=links, attributes=attributes
        ):
            yield

    @contextlib.contextmanager
    def redis_span(self, operation: str, session_id: str) -> Iterator[None]:
        """A client span around one atomic Redis script of a session (profile §13)."""
        if self.provider is None:
            yield
            return
        with self._tracer.start_as_current_span(
            f"{operation} redis",
            kind=SpanKind.CLIENT,
            attributes={
                ATTR_DB_SYSTEM: "redis",
                ATTR_DB_OPERATION: operation,
                ATTR_SESSION_ID: session_id,
            },
        ):
            yield

    @contextlib.contextmanager
    def livekit_span(self, method: str, room: str, server: str) -> Iterator[trace.Span]:
        """A client span around one LiveKit server API (Twirp) call: `method` is the fully
        qualified `livekit.RoomService/CreateRoom`; `server` the host[:port] it goes to."""
        if self.provider is None:
            yield trace.INVALID_SPAN
            return
        attributes: dict[str, str | int] = {ATTR_RPC_SYSTEM: "twirp", ATTR_RPC_METHOD: method}
        address, port = _server_of(server)
        attributes[ATTR_SERVER_ADDRESS] = address
        if port is not None:
            attributes[ATTR_SERVER_PORT] = port
        if room:
            attributes[ATTR_LIVEKIT_ROOM] = room
        with self._tracer.start_as_current_span(
            method,
            kind=SpanKind.CLIENT,
            attributes=attributes,
            record_exception=False,  # the status says what failed; no traceback in the trace
        ) as span:
            yield span

    def shutdown(self) -> None:
        if self.provider is not None:
            self.provider.shutdown()
