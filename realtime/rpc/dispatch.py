"""One JSON-RPC call from bytes to bytes.

Order of checks: size → JSON → envelope → A2A-Version → method → authentication → scope →
extension (aim.realtime.*) → rate limit → params → handler. Protocol errors that do not depend
on who calls come first; nothing touches stored data before the caller is known.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

import msgspec

from realtime.a2a.params import decode_params
from realtime.auth import Authenticator, AuthError, Principal
from realtime.errors import RpcError, invalid_request
from realtime.methods.context import Call, Services
from realtime.rpc.envelope import RequestId, decode_envelope
from realtime.rpc.registry import EXTENSIONS, METHODS, SUPPORTED_VERSIONS
from realtime.telemetry import ATTR_PRINCIPAL, RpcSpan, Telemetry

log = logging.getLogger(__name__)

_ENCODER: Final = msgspec.json.Encoder()
VERSION_HEADER: Final = "a2a-version"
EXTENSIONS_HEADER: Final = "a2a-extensions"


@dataclass(frozen=True, slots=True)
class Reply:
    status: int
    body: bytes
    headers: dict[str, str] = field(default_factory=dict)


def error_body(error: RpcError, request_id: RequestId | None) -> bytes:
    return _ENCODER.encode({"jsonrpc": "2.0", "id": request_id, "error": error.to_object()})


def requested_extensions(headers: Mapping[str, str]) -> frozenset[str]:
    raw = headers.get(EXTENSIONS_HEADER, "")
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


class Dispatcher:
    """Serves `POST /a2a` bodies."""

    def __init__(
        self,
        services: Services,
        authenticator: Authenticator,
        telemetry: Telemetry,
        limiter: RateLimiter,
    ) -> None:
        self.services = services
        self.authenticator = authenticator
        self.telemetry = telemetry
        self.limiter = limiter

    async def handle(
        self, body: bytes, headers: Mapping[str, str], *, too_large: bool = False
    ) -> Reply:
        started = time.perf_counter()
        with self.telemetry.rpc_span(headers) as span:
            reply = await self._handle(body, headers, span, too_large=too_large)
        self.services.metrics.rpc_call(span.method, span.code, time.perf_counter() - started)
        return reply

    async def _handle(
        self, body: bytes, headers: Mapping[str, str], span: RpcSpan, *, too_large: bool
    ) -> Reply:
        reply_headers: dict[str, str] = {}
        request_id: RequestId | None = None
        try:
            if too_large:
                limit = self.services.settings.max_body_bytes
                raise _HttpError(413, invalid_request(f"the body exceeds {limit} bytes"))
            envelope, error, request_id = decode_envelope(body)
            if request_id is not None:
                span.set_request_id(request_id)
            if error is not None:
                raise error
            assert envelope is not None  # noqa: S101 - decode_envelope returns one of both
            result = await self._call(
                envelope.method, envelope.params, headers, span, reply_headers
            )
            return Reply(
                200,
                _ENCODER.encode({"jsonrpc": "2.0", "id": request_id, "result": result}),
                reply_headers,
            )
        except _HttpError as exc:
            span.set_error(exc.error.code, exc.error.message)
            return Reply(
                exc.status, error_body(exc.error, request_id), {**reply_headers, **exc.headers}
            )
        except RpcError as exc:
            span.set_error(exc.code, exc.message)
            return Reply(200, error_body(exc, request_id), reply_headers)
        except Exception:  # the last line of defence: a bug, never leaked
            log.exception("internal error serving a JSON-RPC call")
            error = RpcError(
                "InternalError",
                "The server failed to process the request; it has been logged. "
                "Retrying is safe for requests that carry a commandId or messageId.",
            )
            span.set_error(error.code, error.message)
            return Reply(200, error_body(error, request_id), reply_headers)

    async def _call(
        self,
        method: str,
        raw_params: msgspec.Raw,
        headers: Mapping[str, str],
        span: RpcSpan,
        reply_headers: dict[str, str],
    ) -> Any:
        version = headers.get(VERSION_HEADER, "")
        if not version_supported(version):
            raise RpcError(
                "VersionNotSupported",
                f"A2A-Version {version.strip() or '(missing)'} is not supported; "
                f"send the header A2A-Version: {SUPPORTED_VERSIONS[-1]}.",
                metadata={"supportedVersions": SUPPORTED_VERSIONS, "requestedVersion": version},
            )
        spec = METHODS.get(method)
        if spec is None:
            raise RpcError(
                "MethodNotFound",
                f"Method {method!r} does not exist. Methods: {', '.join(METHODS)}.",
                metadata={"method": method},
            )
        span.set_method(method)
        principal = await self._authorize(headers, spec.scope)
        span.set_attribute(ATTR_PRINCIPAL, principal.key)
        active = requested_extensions(headers) & EXTENSIONS
        if active:
            reply_headers["A2A-Extensions"] = ", ".join(sorted(active))
        if spec.realtime and not active:
            raise RpcError(
                "ExtensionSupportRequired",
                f"{method} belongs to the extension urn:aim:a2a:realtime:v1: list it in the "
                "A2A-Extensions header.",
                metadata={"extension": "urn:aim:a2a:realtime:v1"},
            )
        wait = self.limiter.retry_after(principal.key)
        if wait > 0:
            retry = max(1, round(wait + 0.5))
            reply_headers["Retry-After"] = str(retry)
            raise RpcError(
                "LimitExceeded",
                f"Too many requests; retry after {retry} s.",
                metadata={"limit": "requests_per_second", "retryAfterSeconds": retry},
            )
        params = decode_params(method, bytes(raw_params))
        call = Call(method=method, principal=principal, params=params, extensions=active)
        return await spec.handler(self.services, call)

    async def _authorize(self, headers: Mapping[str, str], scope: str) -> Principal:
        try:
            principal = await self.authenticator.authenticate(headers.get("authorization"))
            self.authenticator.require_scope(principal, scope)
        except AuthError as exc:
            name = "Unauthenticated" if exc.status == 401 else "PermissionDenied"
            metadata = {"scope": exc.required_scope} if exc.required_scope else {}
            raise _HttpError(
                exc.status,
                RpcError(name, exc.message, metadata=metadata),
                {"WWW-Authenticate": exc.www_authenticate},
            ) from None
        return principal


class _HttpError(Exception):
    """An error that changes the HTTP status (401, 403, 413)."""

    def __init__(
        self, status: int, error: RpcError, headers: Mapping[str, str] | None = None
    ) -> None:
        super().__init__(error.message)
        self.status = status
        self.error = error
        self.headers = dict(headers or {})
