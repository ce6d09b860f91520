"""Metrics (profile §13, §17): one meter provider feeding every reader — OTLP when the `OTEL_*`
variables say so, and the Prometheus reader behind `GET /metrics` (`PrometheusScrape`, a registry
of its own per app). The only module, with app.py, that imports prometheus_client. The gauges
that need Redis (`StoreGauges`) are read at most every `AIM_METRICS_REFRESH_S`, each read
bounded, and keep their last values when Redis does not answer.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Final, NamedTuple

from opentelemetry import metrics
from opentelemetry.exporter.prometheus import PrometheusMetricReader
from opentelemetry.metrics import CallbackOptions, Meter, Observation
from opentelemetry.sdk.metrics import AlwaysOffExemplarFilter, MeterProvider
from opentelemetry.sdk.metrics.export import MetricReader, PeriodicExportingMetricReader
from opentelemetry.sdk.resources import Resource
from prometheus_client import CollectorRegistry, ProcessCollector, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4

from realtime.loop import Counter, Loop
from realtime.telemetry import TRACER_NAME

log = logging.getLogger(__name__)


def _metrics_pushed(environ: Mapping[str, str]) -> bool:
    """Whether metrics are exported over OTLP: `OTEL_METRICS_EXPORTER=otlp` or an OTLP endpoint,
    unless the exporter is `none`."""
    name = environ.get("OTEL_METRICS_EXPORTER", "").strip().lower()
    endpoint = environ.get("OTEL_EXPORTER_OTLP_ENDPOINT") or environ.get(
        "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT"
    )
    return name != "none" and (name == "otlp" or bool(endpoint))


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
    return _meter_provider(_push_readers(environ))


def _meter_provider(readers: list[MetricReader]) -> MeterProvider | None:
    """The service's meter provider for `readers` (None without any). No exemplars: the
    Prometheus text format shows none, and offering each measurement to a reservoir costs every
    call (traces link to calls by their trace id in the access log)."""
    if not readers:
        return None
    return MeterProvider(
        metric_readers=readers,
        resource=Resource.create(),
        exemplar_filter=AlwaysOffExemplarFilter(),
    )


# (method, error code) pairs whose attributes are kept: the registry's methods (and `_OTHER`)
# times the error codes, well within this
RPC_ATTRIBUTE_SETS: Final = 4096
RPC_DURATION_BUCKETS: Final = (
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
)
# tenants named in the usage counters' labels, per process: the first this many seen; the
# others count under `other` (and sessions with no tenant under `none`): a bounded label set
USAGE_TENANTS: Final = 100
# a rotation's seam: a successor that joins at once (a fraction of a second) to one that took the
# whole margin (30 s by default) or longer
SEAM_BUCKETS: Final = (0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0)
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

    def __init__(
        self,
        meter: Meter,
        *,
        clock: Callable[[], float] = time.monotonic,
        ticks: Counter | None = None,
    ) -> None:
        self.read: Callable[[], Awaitable[StoreReading]] | None = None
        self.max_age_s = 15.0
        self.timeout_s = READ_TIMEOUT_S
        self.last: StoreReading | None = None
        self.read_at: float | None = None  # clock time of the last read that answered
        self.up: bool | None = None  # whether the last read answered; None: none tried yet
        self._tried_at: float | None = None
        self._reading: asyncio.Task[None] | None = None
        self._clock = clock
        self._ticks = ticks  # of `keep_fresh`'s loop
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
        interval_s = max(self.max_age_s, 1.0)
        await Loop(
            "gauges", self.refresh, interval_s=interval_s, stop=stop, ticks=self._ticks
        ).run()

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
        # the attributes of each (method, code) pair, made once (the instruments keep them)
        self._rpc_attributes: dict[tuple[str, int], dict[str, str | int]] = {}
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
        # Prometheus: aim_agent_presence_total{change="started|joined|lost|not_started|..."}
        self._agents = meter.create_counter(
            "aim.agent.presence",
            description="changes of the agent's presence in sessions: its job started, it "
            "joined, it was replaced (lost, or its dispatch started nothing in time), no agent "
            "could be had (unavailable)",
        )
        # Prometheus: aim_agent_rotations_total{outcome="begun|retried|handed_over|replaced|lost"}
        self._rotations = meter.create_counter(
            "aim.agent.rotations",
            description="agent rotations across provider caps: begun, a successor retried, "
            "handed over (the successor joined beside its predecessor), replaced (the "
            "predecessor was gone first), lost (no successor took over)",
        )
        # Prometheus: aim_agent_rotation_seam_seconds
        self._seam = meter.create_histogram(
            "aim.agent.rotation.seam",
            unit="s",
            description="a rotation's seam: from the serving agent's last accepted call during "
            "the rotation (else its start) to the handover",
            explicit_bucket_boundaries_advisory=SEAM_BUCKETS,
        )
        # Prometheus: aim_usage_sessions_total{tenant}, aim_usage_*_seconds_total{tenant}
        self._usage_sessions = meter.create_counter(
            "aim.usage.sessions", description="sessions that ended, by tenant (profile §24)"
        )
        self._usage_seconds = {
            kind: meter.create_counter(
                f"aim.usage.{kind}",
                unit="s",
                description=f"{what} of the sessions that ended, by tenant (profile §24)",
            )
            for kind, what in (
                ("session", "seconds from creation to the end"),
                ("connected", "seconds a device was in the room"),
                ("agent", "seconds the agent was in the room"),
            )
        }
        self._usage_tenants: set[str] = set()
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
        # Prometheus: aim_loop_ticks_total{loop="outbox|timers|events|reconciler|gauges",
        # outcome="ok|failed"}
        self.loop_ticks = meter.create_counter(
            "aim.loop.ticks",
            description="ticks of the background loops by loop and outcome (a failed one is "
            "logged, and the loop backs off)",
        )
        self.store = StoreGauges(meter, ticks=self.loop_ticks)
        # session events for the app's backend (profile §21)
        self._events_delivered = meter.create_counter(
            "aim.events.delivered", description="session events a receiver answered with a 2xx"
        )
        self._events_failed = meter.create_counter(
            "aim.events.attempts.failed",
            description="attempts to send a session event that got no 2xx (status or transport)",
        )
        self._events_given_up = meter.create_counter(
            "aim.events.given_up", description="session events given up after AIM_EVENTS_RETRY_S"
        )
        self._events_waiting = 0
        self._oldest_event: Callable[[], float] = float
        meter.create_observable_gauge(
            "aim.events.backlog",
            callbacks=[lambda _: [Observation(self._events_waiting)]],
            description="sessions with session events not yet delivered",
        )
        meter.create_observable_gauge(
            "aim.events.oldest_undelivered",
            unit="s",
            callbacks=[lambda _: [Observation(self._oldest_event())]],
            description="age of the oldest undelivered session event this worker has tried",
        )
        # Prometheus: aim_auth_jwks_fetches_total{outcome="ok|failed"}
        self._jwks_fetches: Callable[[], Mapping[str, int]] = dict
        meter.create_observable_counter(
            "aim.auth.jwks.fetches",
            callbacks=[self._observe_jwks_fetches],
            description="fetches of the JWKS signing keys by outcome (ok, failed)",
        )

    @classmethod
    def from_env(cls, environ: Mapping[str, str], *, scrape: bool) -> Metrics:
        """OTLP as the OTEL_* variables say, plus the Prometheus reader when `scrape`; no
        provider at all when neither is on."""
        prometheus = PrometheusScrape() if scrape else None
        readers = _push_readers(environ)
        pushes = bool(readers)
        if prometheus is not None:
            readers.append(prometheus.reader)
        return cls(_meter_provider(readers), scrape=prometheus, pushes=pushes)

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
        attributes = self._rpc_attributes.get((method, code))
        if attributes is None:
            attributes = {"rpc.method": method, "rpc.jsonrpc.error_code": code}
            if len(self._rpc_attributes) < RPC_ATTRIBUTE_SETS:
                self._rpc_attributes[method, code] = attributes
        self._calls.add(1, attributes)
        self._latency.record(seconds, attributes)

    def effect_failed(self, effect: str) -> None:
        self._effects.add(1, {"aim.effect": effect})

    def timer_fired(self, kind: str) -> None:
        self._timers.add(1, {"aim.timer": kind})

    def agent_presence(self, change: str) -> None:
        self._agents.add(1, {"change": change})

    def session_usage(
        self, tenant: str | None, session_s: float, connected_s: float, agent_s: float
    ) -> None:
        """A session ended: its usage, under its tenant's label (bounded: USAGE_TENANTS)."""
        if tenant is None:
            label = "none"
        elif tenant in self._usage_tenants or len(self._usage_tenants) < USAGE_TENANTS:
            self._usage_tenants.add(tenant)
            label = tenant
        else:
            label = "other"
        attributes = {"tenant": label}
        self._usage_sessions.add(1, attributes)
        for kind, seconds in (
            ("session", session_s),
            ("connected", connected_s),
            ("agent", agent_s),
        ):
            self._usage_seconds[kind].add(seconds, attributes)

    def agent_rotation(self, outcome: str, seam_s: float | None = None) -> None:
        self._rotations.add(1, {"outcome": outcome})
        if seam_s is not None:
            self._seam.record(seam_s)

    def webhook(self, outcome: str) -> None:
        self._webhooks.add(1, {"aim.webhook.outcome": outcome})

    def timeline_lost(self, reason: str, count: int) -> None:
        self._timeline_lost.add(count, {"reason": reason})

    def correction(self, kind: str) -> None:
        self._corrections.add(1, {"kind": kind})

    def event_delivered(self, kind: str) -> None:
        self._events_delivered.add(1, {"type": kind})

    def event_attempt_failed(self, reason: str) -> None:
        self._events_failed.add(1, {"reason": reason})

    def event_given_up(self, kind: str) -> None:
        self._events_given_up.add(1, {"type": kind})

    def deliveries_waiting(self, sessions: int) -> None:
        self._events_waiting = sessions

    def watch_deliveries(self, oldest_s: Callable[[], float]) -> None:
        """Report `oldest_s()` as the age of the oldest undelivered session event."""
        self._oldest_event = oldest_s

    def count_jwks_fetches(self, fetches: Callable[[], Mapping[str, int]]) -> None:
        """Report `fetches()` (JWKS fetches so far by outcome) as `aim.auth.jwks.fetches`."""
        self._jwks_fetches = fetches

    def _observe_jwks_fetches(self, options: CallbackOptions) -> Iterable[Observation]:
        return [Observation(n, {"outcome": o}) for o, n in self._jwks_fetches().items()]

    def shutdown(self) -> None:
        if self.provider is not None:
            self.provider.shutdown()
