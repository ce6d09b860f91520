"""One JSON-RPC call from bytes to bytes (or to a stream of SSE events).

Order of checks: size → JSON → envelope → A2A-Version → method → authentication → scope →
extension (aim.realtime.*) → rate limit → params → handler. Protocol errors that do not depend
on who calls come first; nothing touches stored data before the caller is known. A method A2A
defines and this agent does not offer (`MethodSpec.reads_params` False) is refused by its
handler right after the rate limit, its params unread. Streaming
methods run the same checks and their handler's own checks before the first event, so every
error they can raise is answered as plain JSON-RPC JSON.

A2A 0.3 method names without an A2A-Version header (or with `0.3`) go through `a2a/v03`: their
params are translated to 1.0, the same handler runs, and the result goes back in 0.3 shapes.
"""

from __future__ import annotations

import abc
import logging
import time
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final, NamedTuple

import msgspec

from realtime.a2a import v01, v03
from realtime.a2a.params import Params, decode_params
from realtime.auth import Authenticator, Principal
from realtime.errors import (
    AuthError,
    BodyTooLarge,
    ExtensionSupportRequired,
    InternalError,
    LimitExceeded,
    MethodNotFound,
    ServiceError,
    VersionNotSupported,
)
from realtime.methods.context import Call, Services
from realtime.methods.streaming import TaskStream
from realtime.rpc.envelope import Envelope, RequestId, decode_envelope
from realtime.rpc.errors import code_of, error_object, row
from realtime.rpc.registry import EXTENSIONS, METHODS, OFFERED, SUPPORTED_VERSIONS
from realtime.telemetry import ATTR_PRINCIPAL, RpcSpan, Telemetry

log = logging.getLogger(__name__)
# one line per JSON-RPC call (AIM_ACCESS_LOG): what was called and how it ended, never the
# token, the params or the request id (the caller chooses it)
access_log = logging.getLogger("realtime.access")

_ENCODER: Final = msgspec.json.Encoder()
VERSION_HEADER: Final = "a2a-version"
EXTENSIONS_HEADER: Final = "a2a-extensions"
EXTENSIONS_HEADER_V03: Final = "x-a2a-extensions"
LAST_EVENT_ID_HEADER: Final = "last-event-id"


class SseEvent(NamedTuple):
    """One SSE event: `data` None is a heartbeat comment."""

    data: bytes | None
    id: str | None = None
    event: str | None = None


@dataclass(frozen=True, slots=True)
class Reply:
    status: int
    body: bytes
    headers: dict[str, str] = field(default_factory=dict)
    stream: AsyncIterator[SseEvent] | None = None  # set: answer text/event-stream


@dataclass(slots=True)
class Served:
    """What the call turned out to be, as far as the reply's shape depends on it."""

    request_id: RequestId | None = None
    headers: dict[str, str] = field(default_factory=dict)
    v03: bool = False


def error_body(
    error: ServiceError, request_id: RequestId | None, *, v03_shape: bool = False
) -> bytes:
    body = error_object(error)
    if v03_shape:
        body = v03.error(body)
    return _ENCODER.encode({"jsonrpc": "2.0", "id": request_id, "error": body})


def error_reply(error: ServiceError, served: Served) -> Reply:
    """The one answer to a failed call on every JSON-RPC endpoint: the HTTP status of its row,
    the challenge of an authentication failure, `Retry-After` where waiting helps."""
    headers = dict(served.headers)
    if isinstance(error, AuthError):
        headers["WWW-Authenticate"] = error.www_authenticate
    if isinstance(error, LimitExceeded) and error.retry_after is not None:
        headers["Retry-After"] = str(error.retry_after)
    return Reply(
        row(error).status, error_body(error, served.request_id, v03_shape=served.v03), headers
    )


def requested_extensions(headers: Mapping[str, str], *, v03_names: bool = False) -> frozenset[str]:
    raw = headers.get(EXTENSIONS_HEADER, "")
    if v03_names:  # 0.3 clients name the header X-A2A-Extensions
        raw += "," + headers.get(EXTENSIONS_HEADER_V03, "")
    return frozenset(item.strip() for item in raw.split(",") if item.strip())


def version_supported(value: str) -> bool:
    """`Major.Minor`, patch ignored (A2A §3.6)."""
    major_minor = ".".join(value.strip().split(".")[:2])
    return major_minor in SUPPORTED_VERSIONS


class RateLimiter:
    """Per-principal token bucket (burst = twice the rate), kept per process."""

    def __init__(
        self,
        rate: float,
        *,
        clock: Callable[[], float] = time.monotonic,
        max_keys: int = 100_000,
    ) -> None:
        self.rate = rate
        self.burst = 2 * rate
        self.clock = clock
        self.max_keys = max_keys
        self._buckets: dict[str, tuple[float, float]] = {}

    def charge(self, key: str, what: str) -> None:
        """Count one call of `key`, or raise LimitExceeded saying when to retry."""
        wait = self.retry_after(key)
        if wait > 0:
            retry = max(1, round(wait + 0.5))
            raise LimitExceeded(
                f"Too many {what}; retry after {retry} s.",
                limit="requests_per_second",
                retry_after=retry,
            )

    def retry_after(self, key: str) -> float:
        """0 when the call may proceed (and is counted), else seconds until it may."""
        if self.rate <= 0:
            return 0.0
        now = self.clock()
        tokens, last = self._buckets.get(key, (self.burst, now))
        tokens = min(self.burst, tokens + (now - last) * self.rate)
        if tokens < 1:
            self._buckets[key] = (tokens, now)
            return (1 - tokens) / self.rate
        if len(self._buckets) >= self.max_keys and key not in self._buckets:
            self._buckets.clear()  # bounded memory: forgetting buckets only forgives callers
        self._buckets[key] = (tokens - 1, now)
        return 0.0


class Endpoint(abc.ABC):
    """A JSON-RPC endpoint: one SERVER span and one metrics sample per call."""

    jsonrpc_optional: bool = False  # A2A 0.1 lets `jsonrpc` be absent (read as "2.0")

    def __init__(self, services: Services, telemetry: Telemetry, limiter: RateLimiter) -> None:
        self.services = services
        self.telemetry = telemetry
        self.limiter = limiter
        self.access_log = services.settings.access_log

    async def handle(
        self, body: bytes, headers: Mapping[str, str], *, too_large: bool = False
    ) -> Reply:
        started = time.perf_counter()
        served = Served()
        with self.telemetry.rpc_span(headers) as span:
            try:
                if too_large:
                    raise BodyTooLarge(self.services.settings.max_body_bytes)
                reply = await self._handle(body, headers, span, served)
            except ServiceError as exc:
                span.set_error(code_of(exc), exc.message)
                reply = error_reply(exc, served)
            except Exception:  # the last line of defence: a bug, never leaked
                log.exception("internal error serving a JSON-RPC call on %s", self.path)
                failure = InternalError()
                span.set_error(code_of(failure), failure.message)
                reply = error_reply(failure, served)
            elapsed = time.perf_counter() - started
            if self.access_log:  # inside the span: the formatter adds its trace id
                access_log.info(
                    "POST %s %s %d",
                    self.path,
                    span.method,
                    reply.status,
                    extra={
                        "json_fields": {
                            "path": self.path,
                            "method": span.method,
                            "code": span.code,
                            "status": reply.status,
                            "duration_ms": round(elapsed * 1000, 3),
                        }
                    },
                )
        self.services.metrics.rpc_call(span.method, span.code, elapsed)
        return reply

    @property
    @abc.abstractmethod
    def path(self) -> str:
        """The HTTP path this endpoint serves (for the log)."""

    @abc.abstractmethod
    async def _handle(
        self, body: bytes, headers: Mapping[str, str], span: RpcSpan, served: Served
    ) -> Reply:
        """The reply to one body, inside its span; failures are raised (`error_reply`)."""

    def _envelope(self, body: bytes, span: RpcSpan, served: Served) -> Envelope:
        envelope, error, request_id = decode_envelope(body, jsonrpc_optional=self.jsonrpc_optional)
        served.request_id = request_id
        if request_id is not None:
            span.set_request_id(request_id)
        if error is not None:
            raise error
        assert envelope is not None  # noqa: S101 - decode_envelope returns one of both
        return envelope


class Dispatcher(Endpoint):
    """Serves `POST /a2a` bodies."""

    def __init__(
        self,
        services: Services,
        authenticator: Authenticator,
        telemetry: Telemetry,
        limiter: RateLimiter,
    ) -> None:
        super().__init__(services, telemetry, limiter)
        self.authenticator = authenticator

    path = "/a2a"

    async def _handle(
        self, body: bytes, headers: Mapping[str, str], span: RpcSpan, served: Served
    ) -> Reply:
        envelope = self._envelope(body, span, served)
        result = await self._call(envelope.method, envelope.params, headers, span, served)
        if isinstance(result, TaskStream):
            events = self._events(result, envelope.id, v03_shape=served.v03)
            return Reply(200, b"", served.headers, stream=events)
        return Reply(
            200,
            _ENCODER.encode({"jsonrpc": "2.0", "id": envelope.id, "result": result}),
            served.headers,
        )

    async def _events(
        self, stream: TaskStream, request_id: RequestId, *, v03_shape: bool
    ) -> AsyncIterator[SseEvent]:
        """The stream's frames as JSON-RPC responses; a failure after the first event becomes
        an `event: error` carrying a JSON-RPC error response, and ends the stream."""
        try:
            async for frame in stream.frames():
                if frame is None:
                    yield SseEvent(None)
                    continue
                event_id, result = frame
                if v03_shape:
                    result = v03.stream_result(result)
                body = {"jsonrpc": "2.0", "id": request_id, "result": result}
                yield SseEvent(_ENCODER.encode(body), event_id)
        except ServiceError as exc:
            yield SseEvent(error_body(exc, request_id, v03_shape=v03_shape), event="error")
        except Exception:
            log.exception("internal error in an SSE stream")
            error = InternalError()
            yield SseEvent(error_body(error, request_id, v03_shape=v03_shape), event="error")

    async def _call(
        self,
        method: str,
        raw_params: msgspec.Raw,
        headers: Mapping[str, str],
        span: RpcSpan,
        served: Served,
    ) -> Any:
        if method in v01.ONLY_V01:  # A2A 0.1 has an endpoint of its own
            span.set_unknown_method(method)
            base = self.services.settings.public_base_url
            raise MethodNotFound(v01.moved(method, base), details={"method": method})
        version = headers.get(VERSION_HEADER, "")
        target = method
        if method in v03.METHODS and v03.is_v03(version):
            served.v03 = True
            target = v03.METHODS[method]
        elif not version_supported(version):
            hint = (
                f" {method} is an A2A 1.0 method."
                if method in METHODS and v03.is_v03(version)
                else ""
            )
            raise VersionNotSupported(
                f"A2A-Version {version.strip() or '(missing)'} is not supported for this "
                f"request;{hint} send the header A2A-Version: {SUPPORTED_VERSIONS[-1]}.",
                details={"supportedVersions": SUPPORTED_VERSIONS, "requestedVersion": version},
            )
        elif method in v03.METHODS:
            raise MethodNotFound(
                f"{method} is an A2A 0.3 method; with A2A-Version {version.strip()} call "
                f"{v03.METHODS[method]}, or send it without A2A-Version for the 0.3 shapes.",
                details={"method": method},
            )
        spec = METHODS.get(target)
        if spec is None:
            span.set_unknown_method(method)
            raise MethodNotFound(
                f"Method {method!r} does not exist. Methods: {', '.join(OFFERED)}.",
                details={"method": method},
            )
        span.set_method(method)
        principal = await self._authorize(headers, spec.scope)
        span.set_attribute(ATTR_PRINCIPAL, principal.key)
        active = requested_extensions(headers, v03_names=served.v03) & EXTENSIONS
        if active:
            served.headers["A2A-Extensions"] = ", ".join(sorted(active))
            if served.v03:
                served.headers["X-A2A-Extensions"] = served.headers["A2A-Extensions"]
        if spec.realtime and not active:
            raise ExtensionSupportRequired(
                f"{method} belongs to the extension urn:aim:a2a:realtime:v1: list it in the "
                "A2A-Extensions header.",
                details={"extension": "urn:aim:a2a:realtime:v1"},
            )
        self.limiter.charge(principal.key, "requests")
        if not spec.reads_params:  # defined by A2A, not offered here: refused, params unread
            refused = Call(method=target, principal=principal, params=Params(), extensions=active)
            return await spec.handler(self.services, refused)
        raw = bytes(raw_params)
        if served.v03:
            raw = v03.to_v10_params(method, raw)
        params = decode_params(target, raw)
        call = Call(
            method=target,
            principal=principal,
            params=params,
            extensions=active,
            last_event_id=headers.get(LAST_EVENT_ID_HEADER) if spec.streaming else None,
        )
        result = await spec.handler(self.services, call)
        if served.v03 and not spec.streaming:
            return v03.result(target, msgspec.to_builtins(result))
        return result

    async def _authorize(self, headers: Mapping[str, str], scope: str) -> Principal:
        principal = await self.authenticator.authenticate(headers.get("authorization"))
        self.authenticator.require_scope(principal, scope)
        return principal
