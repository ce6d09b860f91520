"""One JSON-RPC call from bytes to bytes (or to a stream of SSE events), for every A2A
generation: the generation's `Codec` (`rpc/codec`) maps names and shapes, the pipeline is one.

Order of checks: size → JSON → envelope → A2A-Version → method → authentication → scope →
extension (aim.realtime.*) → rate limit → params → handler. Protocol errors that do not depend
on who calls come first; nothing touches stored data before the caller is known. A method A2A
defines and this agent does not offer (`MethodSpec.reads_params` False) is refused by its
handler right after the rate limit, its params unread. Streaming
methods run the same checks and their handler's own checks before the first event, so every
error they can raise is answered as plain JSON-RPC JSON.

On /a2a a request without A2A-Version (or with `0.3`) is an A2A 0.3 request: its 0.3 method
names go through `a2a/v03` (params translated to 1.0, the same handler, results back in 0.3
shapes) and any other name is -32601 in the 0.3 form, except a 1.0 method name, which is -32009
saying to send `A2A-Version: 1.0` (a 1.0 client that left the header out).
"""

from __future__ import annotations

import abc
import logging
import time
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final, NamedTuple

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
from realtime.logs import ACCESS_LOG
from realtime.methods.context import Call, MethodDeps
from realtime.methods.streaming import Comment, TaskStream
from realtime.metrics import Metrics
from realtime.rpc.codec import V03, V10, Codec
from realtime.rpc.envelope import (
    Envelope,
    RequestId,
    decode_envelope,
    error_response,
    result_response,
)
from realtime.rpc.errors import code_of, row
from realtime.rpc.registry import EXTENSIONS, METHODS, SUPPORTED_VERSIONS
from realtime.settings import Settings
from realtime.telemetry import ATTR_PRINCIPAL, RpcSpan, Telemetry

log = logging.getLogger(__name__)

VERSION_HEADER: Final = "a2a-version"
LAST_EVENT_ID_HEADER: Final = "last-event-id"


class SseEvent(NamedTuple):
    """One SSE event: `data` None is the comment line `comment` (a heartbeat by default)."""

    data: bytes | None
    id: str | None = None
    event: str | None = None
    comment: str = Comment.KEEPALIVE.value


@dataclass(frozen=True, slots=True)
class Reply:
    status: int
    body: bytes
    headers: dict[str, str] = field(default_factory=dict)
    stream: AsyncIterator[SseEvent] | None = None  # set: answer text/event-stream


@dataclass(slots=True)
class Served:
    """What the call turned out to be, as far as the reply's shape depends on it."""

    codec: Codec
    request_id: RequestId | None = None
    headers: dict[str, str] = field(default_factory=dict)


def error_body(error: ServiceError, request_id: RequestId | None, codec: Codec = V10) -> bytes:
    return error_response(request_id, codec.error(error))


def error_reply(error: ServiceError, served: Served) -> Reply:
    """The one answer to a failed call on every JSON-RPC endpoint: the HTTP status of its row,
    the challenge of an authentication failure, `Retry-After` where waiting helps."""
    headers = dict(served.headers)
    if isinstance(error, AuthError):
        headers["WWW-Authenticate"] = error.www_authenticate
    if isinstance(error, LimitExceeded) and error.retry_after is not None:
        headers["Retry-After"] = str(error.retry_after)
    return Reply(row(error).status, error_body(error, served.request_id, served.codec), headers)


class Events:
    """The SSE events of a stream (`events`); `aclose` ends it and frees its slot, also when
    it never began (a client that left before the first event)."""

    def __init__(self, codec: Codec, stream: TaskStream, request_id: RequestId) -> None:
        self._stream = stream
        self._events = events(codec, stream, request_id)

    def __aiter__(self) -> Events:
        return self

    async def __anext__(self) -> SseEvent:
        return await self._events.__anext__()

    async def aclose(self) -> None:
        try:
            await self._events.aclose()
        finally:
            self._stream.close()


async def events(
    codec: Codec, stream: TaskStream, request_id: RequestId
) -> AsyncGenerator[SseEvent]:
    """The stream's frames as JSON-RPC responses in the codec's shapes (a frame's SSE id on
    the last event made of it); a failure after the first event becomes one more event
    carrying a JSON-RPC error response (named `codec.error_event`), and ends the stream."""
    try:
        async for frame in stream.frames():
            if isinstance(frame, Comment):
                yield SseEvent(None, comment=frame.value)
                continue
            event_id, value = frame
            encoded = [result_response(request_id, event) for event in codec.events(value)]
            # nothing of the frame is held while the stream waits for the next one (a stream
            # may wait for hours, a thousand of them at once)
            del frame, value
            while encoded:
                yield SseEvent(encoded.pop(0), None if encoded else event_id)
    except ServiceError as exc:
        yield SseEvent(error_body(exc, request_id, codec), event=codec.error_event)
    except Exception:
        log.exception("internal error in an A2A %s SSE stream", codec.version)
        yield SseEvent(error_body(InternalError(), request_id, codec), event=codec.error_event)


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
                scope="principal",
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

    def __init__(
        self, settings: Settings, metrics: Metrics, telemetry: Telemetry, limiter: RateLimiter
    ) -> None:
        self.settings = settings
        self.metrics = metrics
        self.telemetry = telemetry
        self.limiter = limiter
        self.access_log = settings.access_log
        self.max_body_bytes = settings.max_body_bytes  # a longer body is not read

    async def handle(
        self, body: bytes, headers: Mapping[str, str], *, too_large: bool = False
    ) -> Reply:
        started = time.perf_counter()
        served = Served(self.default_codec())
        with self.telemetry.rpc_span(headers) as span:
            try:
                if too_large:
                    raise BodyTooLarge(self.settings.max_body_bytes)
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
            if self.access_log:
                # one line per call (AIM_ACCESS_LOG): what was called and how it ended, never
                # the token, the params or the request id (the caller chooses it); inside the
                # span, so the line names its trace
                ACCESS_LOG.write(
                    f"POST {self.path} {span.method} {reply.status}",
                    {
                        "path": self.path,
                        "method": span.method,
                        "code": span.code,
                        "status": reply.status,
                        "duration_ms": round(elapsed * 1000, 3),
                    },
                )
        self.metrics.rpc_call(span.method, span.code, elapsed)
        return reply

    def default_codec(self) -> Codec:
        """The codec of an answer given before the request says which generation it is."""
        return V10

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
    """Serves `POST /a2a` bodies (A2A 1.0 and 0.3), and is the pipeline of every A2A endpoint:
    a subclass chooses the codec (`choose_codec`)."""

    def __init__(
        self,
        methods: MethodDeps,
        authenticator: Authenticator,
        telemetry: Telemetry,
        limiter: RateLimiter,
        *,
        metrics: Metrics,
    ) -> None:
        super().__init__(methods.sessions.settings, metrics, telemetry, limiter)
        self.methods = methods  # each family's dependencies: a handler gets its own
        self.authenticator = authenticator

    path = "/a2a"

    def choose_codec(self, method: str, headers: Mapping[str, str], span: RpcSpan) -> Codec:
        """0.3 or 1.0, by A2A-Version and method name (A2A §3.6: no header means 0.3)."""
        if method in v01.ONLY_V01:  # A2A 0.1 has an endpoint of its own
            span.set_unknown_method(method)
            base = self.settings.public_base_url
            raise MethodNotFound(v01.moved(method, base), details={"method": method})
        version = headers.get(VERSION_HEADER, "")
        if v03.is_v03(version) and method not in METHODS:
            return V03
        if not version_supported(version):
            hint = f" {method} is an A2A 1.0 method." if v03.is_v03(version) else ""
            raise VersionNotSupported(
                f"A2A-Version {version.strip() or '(missing)'} is not supported for this "
                f"request;{hint} send the header A2A-Version: {SUPPORTED_VERSIONS[-1]}.",
                details={"supportedVersions": SUPPORTED_VERSIONS, "requestedVersion": version},
            )
        return V10

    async def _handle(
        self, body: bytes, headers: Mapping[str, str], span: RpcSpan, served: Served
    ) -> Reply:
        envelope = self._envelope(body, span, served)
        served.codec = codec = self.choose_codec(envelope.method, headers, span)
        result = await self._call(codec, envelope, headers, span, served)
        if isinstance(result, TaskStream):
            return Reply(200, b"", served.headers, stream=Events(codec, result, envelope.id))
        return Reply(200, result_response(envelope.id, result), served.headers)

    async def _call(
        self,
        codec: Codec,
        envelope: Envelope,
        headers: Mapping[str, str],
        span: RpcSpan,
        served: Served,
    ) -> Any:
        method = envelope.method
        resolved = codec.resolve(method)
        if resolved is None:
            span.set_unknown_method(method)
            raise codec.unknown(method)
        target, spec = resolved
        span.set_method(method)
        principal = await self._authorize(headers, spec.scope)
        span.set_attribute(ATTR_PRINCIPAL, principal.key)
        active = codec.extensions(headers) & EXTENSIONS
        if active and codec.echo_before_params:
            served.headers.update(codec.echo(active))
        if spec.realtime and not active:
            raise ExtensionSupportRequired(
                f"{method} belongs to the extension urn:aim:a2a:realtime:v1: list it in the "
                "A2A-Extensions header.",
                details={"extension": "urn:aim:a2a:realtime:v1"},
            )
        self.limiter.charge(principal.key, "requests")
        if not spec.reads_params:  # defined by A2A, not offered here: refused, params unread
            refused = Call(method=target, principal=principal, params=Params(), extensions=active)
            return await spec.handler(self.methods, refused)
        params = decode_params(target, codec.params(method, bytes(envelope.params)))
        active |= codec.implied_extensions(params)
        if active:
            served.headers.update(codec.echo(active))
        call = Call(
            method=target,
            principal=principal,
            params=params,
            extensions=active,
            last_event_id=headers.get(LAST_EVENT_ID_HEADER) if spec.streaming else None,
        )
        result = await codec.invoke(self.methods, spec.handler, call)
        return result if spec.streaming else codec.result(target, result)

    async def _authorize(self, headers: Mapping[str, str], scope: str) -> Principal:
        principal = await self.authenticator.authenticate(headers.get("authorization"))
        self.authenticator.require_scope(principal, scope)
        return principal
