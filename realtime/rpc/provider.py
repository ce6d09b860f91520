"""One provider call (`POST /provider`) from bytes to bytes (profile §10).

Order of checks: size → JSON → envelope → method → provider token → params → the token's
session → rate limit (per session) → handler. A token is good for its own session only: any
other session id is refused with 403 whether or not that session exists.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Final

import msgspec

from realtime.a2a.provider import decode_provider_params
from realtime.auth import AuthError, ProviderGrant, verify_provider_token
from realtime.errors import RpcError, invalid_request
from realtime.methods.provider import PROVIDER_METHODS
from realtime.rpc.dispatch import Endpoint, Reply, error_body
from realtime.rpc.envelope import RequestId, decode_envelope
from realtime.telemetry import ATTR_PRINCIPAL, ATTR_SESSION_ID, RpcSpan

log = logging.getLogger(__name__)

_ENCODER: Final = msgspec.json.Encoder()


class ProviderDispatcher(Endpoint):
    """Serves `POST /provider` bodies."""

    async def _handle(
        self, body: bytes, headers: Mapping[str, str], span: RpcSpan, *, too_large: bool
    ) -> Reply:
        request_id: RequestId | None = None
        try:
            if too_large:
                limit = self.services.settings.max_body_bytes
                return Reply(
                    413, error_body(invalid_request(f"the body exceeds {limit} bytes"), None)
                )
            envelope, error, request_id = decode_envelope(body)
            if request_id is not None:
                span.set_request_id(request_id)
            if error is not None:
                raise error
            assert envelope is not None  # noqa: S101
            handler = PROVIDER_METHODS.get(envelope.method)
            if handler is None:
                raise RpcError(
                    "MethodNotFound",
                    f"Method {envelope.method!r} does not exist on /provider. Methods: "
                    f"{', '.join(PROVIDER_METHODS)}.",
                    metadata={"method": envelope.method},
                )
            span.set_method(envelope.method)
            grant = self._authorize(headers)
            params = decode_provider_params(envelope.method, bytes(envelope.params))
            if params.session_id.lower() != grant.session_id.lower():
                raise AuthError(
                    403,
                    "insufficient_scope",
                    "this provider token belongs to another session",
                    required_scope="aim.provider",
                )
            span.set_attribute(ATTR_PRINCIPAL, f"provider:{grant.session_id}")
            span.set_attribute(ATTR_SESSION_ID, grant.session_id)
            wait = self.limiter.retry_after(f"provider:{grant.session_id}")
            if wait > 0:
                retry = max(1, round(wait + 0.5))
                raise RpcError(
                    "LimitExceeded",
                    f"Too many provider calls for this session; retry after {retry} s.",
                    metadata={"limit": "requests_per_second", "retryAfterSeconds": retry},
                )
            result = await handler(self.services, grant, params)
            return Reply(
                200, _ENCODER.encode({"jsonrpc": "2.0", "id": request_id, "result": result})
            )
        except AuthError as exc:
            name = "Unauthenticated" if exc.status == 401 else "PermissionDenied"
            metadata = {"scope": exc.required_scope} if exc.required_scope else {}
            failure = RpcError(name, exc.message, metadata=metadata)
            span.set_error(failure.code, failure.message)
            return Reply(
                exc.status,
                error_body(failure, request_id),
                {"WWW-Authenticate": exc.www_authenticate},
            )
        except RpcError as exc:
            span.set_error(exc.code, exc.message)
            return Reply(200, error_body(exc, request_id))
        except Exception:
            log.exception("internal error serving a provider call")
            failure = RpcError(
                "InternalError",
                "The server failed to process the request; it has been logged. Retrying is "
                "safe for requests that carry a requestId or itemId.",
            )
            span.set_error(failure.code, failure.message)
            return Reply(200, error_body(failure, request_id))

    def _authorize(self, headers: Mapping[str, str]) -> ProviderGrant:
        settings = self.services.settings
        return verify_provider_token(
            settings.provider_secret,
            headers.get("authorization"),
            now=self.services.clock(),
            leeway=settings.auth_leeway_s,
        )
