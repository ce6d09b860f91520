"""Tracing and metrics (profile §13, §17): the only module, with app.py, that imports
OpenTelemetry, and the only one that imports prometheus_client.

One server span per JSON-RPC call, joining the caller's W3C `traceparent`. The exporters follow
the standard `OTEL_*` variables: OTLP over HTTP when `OTEL_EXPORTER_OTLP_ENDPOINT` (or
`OTEL_TRACES_EXPORTER=otlp`) is set, `console` on request, otherwise tracing is off. Attribute
values never hold tokens, JWTs or message text.

Metrics go to every reader of one meter provider: OTLP when the `OTEL_*` variables say so, and
the Prometheus reader behind `GET /metrics` (`PrometheusScrape`, a registry of its own per app).
The gauges that need Redis (`StoreGauges`) are read at most every `AIM_METRICS_REFRESH_S`, each
read bounded, and keep their last values when Redis does not answer.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping
from typing import Final, NamedTuple
from urllib.parse import urlsplit, urlunsplit

import msgspec
from opentelemetry import metrics, propagate, trace
from opentelemetry.exporter.prometheus import PrometheusMetricReader
from opentelemetry.metrics import CallbackOptions, Meter, Observation
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import MetricReader, PeriodicExportingMetricReader
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter
from opentelemetry.trace import SpanKind, Status, StatusCode
from prometheus_client import CollectorRegistry, ProcessCollector, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4

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


def _metrics_pushed(environ: Mapping[str, str]) -> bool:
    """Whether metrics are exported over OTLP: `OTEL_METRICS_EXPORTER=otlp` or an OTLP endpoint,
    unless the exporter is `none`."""
    name = environ.get("OTEL_METRICS_EXPORTER", "").strip().lower()
    endpoint = environ.get("OTEL_EXPORTER_OTLP_ENDPOINT") or environ.get(
        "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT"
    )
    return name != "none" and (name == "otlp" or bool(endpoint))


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


def _push_readers(environ: Mapping[str, str]) -> list[MetricReader]:
    if not _metrics_pushed(environ):
        return []
    from opentelemetry.exporter.otlp.proto.http.metric_exporter import (  # only when exporting
        OTLPMetricExporter,
    )

    return [PeriodicExportingMetricReader(OTLPMetricExporter())]


def meter_provider_from_env(environ: Mapping[str, str]) -> MeterProvider | None:
    """A meter provider exporting over OTLP when `OTEL_METRICS_EXPORTER=otlp` or an OTLP
    endpoint is set (and the exporter is not `none`); None means metrics are off."""
    readers = _push_readers(environ)
    return MeterProvider(metric_readers=readers, resource=Resource.create()) if readers else None


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


# seconds, for calls that take a fraction of a millisecond up to a blocking create (≈ 5 s)
RPC_DURATION_BUCKETS: Final = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
                               0.5, 1.0, 2.5, 5.0, 10.0)  # fmt: skip
# one read of the Redis gauges may take this long; a scrape waits for it at most this long
READ_TIMEOUT_S: Final = 2.0
# the text format every Prometheus reads (the names are all legacy-valid, so the 1.0.0 format
# would be the same bytes); the HTTP layer adds `; charset=utf-8`
PROMETHEUS_CONTENT_TYPE: Final = CONTENT_TYPE_PLAIN_0_0_4.removesuffix("; charset=utf-8")


class PrometheusScrape:
    """What `GET /metrics` serves: the meter provider's instruments, as the Prometheus reader
    translates them, and the process's CPU, memory and open files."""

    def __init__(self) -> None:
        # a registry of its own, not prometheus_client's global one: one per app
        self.registry = CollectorRegistry(auto_describe=False)
        # one instrumentation scope: its labels on every series would say nothing
        self.reader: MetricReader = PrometheusMetricReader(
            scope_info_enabled=False, registry=self.registry
        )
        ProcessCollector(registry=self.registry)

    def render(self) -> bytes:
        return generate_latest(self.registry)


class StoreReading(NamedTuple):
    """One read of the gauges that live in Redis."""

    live: Mapping[str, int]  # session state → live sessions in it
    outbox_pending: int  # effects queued in the outboxes
    timer_lag_s: float  # now - the earliest due timer; 0 when no timer is due


class StoreGauges:
    """The gauges read from Redis. Whoever needs them current (a scrape, the OTLP loop) asks
    `refresh`, which reads again only when the last attempt is older than `max_age_s` and waits
    at most READ_TIMEOUT_S for it, so a scrape never hangs on a Redis that is down: it shows the
    last values, `aim.redis.up` 0, and the failure is counted. Concurrent callers share one
    read. The observable gauges only look at the last values (their callbacks cannot await)."""

    def __init__(self, meter: Meter, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.read: Callable[[], Awaitable[StoreReading]] | None = None
        self.max_age_s = 15.0
        self.timeout_s = READ_TIMEOUT_S
        self.last: StoreReading | None = None
        self.read_at: float | None = None  # clock time of the last read that answered
        self.up: bool | None = None  # whether the last read answered; None: none tried yet
        self._tried_at: float | None = None
        self._reading: asyncio.Task[None] | None = None
        self._clock = clock
        self._failures = meter.create_counter(
            "aim.gauges.read_failures",
            description="reads of the Redis gauges that failed or timed out (last values kept)",
        )
        for name, unit, callback, description in (
            ("aim.sessions.live", "", self._live, "live sessions by state (deployment-wide)"),
            ("aim.outbox.pending", "", self._outbox, "LiveKit calls queued in the outboxes"),
            ("aim.timer.lag", "s", self._lag, "how long the earliest due timer has waited"),
            ("aim.redis.up", "", self._up, "1 when the last read of the Redis gauges answered"),
            ("aim.gauges.age", "s", self._age, "age of the values of the Redis gauges"),
        ):
            meter.create_observable_gauge(
                name, callbacks=[callback], unit=unit, description=description
            )

    def attach(self, read: Callable[[], Awaitable[StoreReading]], *, max_age_s: float) -> None:
        self.read = read
        self.max_age_s = max_age_s

    async def refresh(self) -> None:
        """Read again if the last attempt is older than `max_age_s`; never raises."""
        if self.read is None:
            return
        now = self._clock()
        if self._reading is None and (
            self._tried_at is None or now - self._tried_at >= self.max_age_s
        ):
            self._tried_at = now
            self._reading = asyncio.create_task(self._read_once(self.read))
        if self._reading is not None:
            # the read bounds itself; the margin only guards against one that ignores its
            # cancellation. Not cancelled with the caller: a scrape that goes leaves it to finish
            await asyncio.wait([self._reading], timeout=self.timeout_s + 0.5)

    async def _read_once(self, read: Callable[[], Awaitable[StoreReading]]) -> None:
        try:
            async with asyncio.timeout(self.timeout_s):
                reading = await read()
        except Exception as exc:  # noqa: BLE001 - Redis down, a timeout, a bug: last values stay
            self.up = False
            self._failures.add(1)
            reason = getattr(exc, "message", None) or str(exc) or type(exc).__name__
            log.warning("metrics: the Redis gauges keep their last values: %s", reason)
        else:
            self.last, self.up, self.read_at = reading, True, self._clock()
        finally:
            self._reading = None

    async def keep_fresh(self, stop: asyncio.Event) -> None:
        """Refresh every `max_age_s` (at least every second) until `stop`: what an OTLP
        exporter, which cannot await, needs."""
        while not stop.is_set():
            await self.refresh()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout=max(self.max_age_s, 1.0))

    async def aclose(self) -> None:
        if self._reading is not None:
            await asyncio.wait([self._reading])

    def _live(self, options: CallbackOptions) -> Iterable[Observation]:
        if self.last is None:
            return ()
        return [Observation(count, {"state": state}) for state, count in self.last.live.items()]

    def _outbox(self, options: CallbackOptions) -> Iterable[Observation]:
        return () if self.last is None else [Observation(self.last.outbox_pending)]

    def _lag(self, options: CallbackOptions) -> Iterable[Observation]:
        return () if self.last is None else [Observation(self.last.timer_lag_s)]

    def _up(self, options: CallbackOptions) -> Iterable[Observation]:
        return () if self.up is None else [Observation(int(self.up))]

    def _age(self, options: CallbackOptions) -> Iterable[Observation]:
        return () if self.read_at is None else [Observation(self._clock() - self.read_at)]


class Metrics:
    """The service's instruments (profile §13, §17); no-ops when no meter provider is
    configured. `scrape` is set when `GET /metrics` serves them, `pushes` when they are also
    exported over OTLP."""

    def __init__(
        self,
        provider: MeterProvider | None,
        *,
        scrape: PrometheusScrape | None = None,
        pushes: bool = False,
    ) -> None:
        self.provider = provider
        self.scrape = scrape
        self.pushes = pushes
        meter = (provider or metrics.NoOpMeterProvider()).get_meter(TRACER_NAME)
        self._calls = meter.create_counter(
            "aim.rpc.calls", description="JSON-RPC calls by method and outcome"
        )
        self._latency = meter.create_histogram(
            "aim.rpc.duration",
            unit="s",
            description="JSON-RPC call latency",
            explicit_bucket_boundaries_advisory=RPC_DURATION_BUCKETS,
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
        self.store = StoreGauges(meter)

    @classmethod
    def from_env(cls, environ: Mapping[str, str], *, scrape: bool) -> Metrics:
        """OTLP as the OTEL_* variables say, plus the Prometheus reader when `scrape`; no
        provider at all when neither is on."""
        prometheus = PrometheusScrape() if scrape else None
        readers = _push_readers(environ)
        pushes = bool(readers)
        if prometheus is not None:
            readers.append(prometheus.reader)
        provider = (
            MeterProvider(metric_readers=readers, resource=Resource.create()) if readers else None
        )
        return cls(provider, scrape=prometheus, pushes=pushes)

    async def exposition(self) -> bytes:
        """`GET /metrics`: the Redis gauges refreshed (within their bound), then every
        instrument in the Prometheus text format."""
        if self.scrape is None:
            return b""
        await self.store.refresh()
        return self.scrape.render()

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
