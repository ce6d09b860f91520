"""One provider call (`POST /provider`) from bytes to bytes (profile §10).

Order of checks: size → JSON → envelope → method → provider token → params → the token's
session → rate limit (per session) → handler. A token is good for its own session only: any
other session id is refused with 403 whether or not that session exists.
"""

from __future__ import annotations

from collections.abc import Mapping

from realtime.a2a.provider import decode_provider_params
from realtime.errors import AuthError, MethodNotFound
from realtime.methods.context import ProviderDeps
from realtime.methods.provider import PROVIDER_METHODS
from realtime.metrics import Metrics
from realtime.provider_tokens import ProviderGrant, verify_provider_token
from realtime.rpc.dispatch import Endpoint, RateLimiter, Reply, Served
from realtime.rpc.envelope import result_response
from realtime.telemetry import ATTR_PRINCIPAL, ATTR_SESSION_ID, RpcSpan, Telemetry


class ProviderDispatcher(Endpoint):
    """Serves `POST /provider` bodies."""

    path = "/provider"

    def __init__(
        self, deps: ProviderDeps, metrics: Metrics, telemetry: Telemetry, limiter: RateLimiter
    ) -> None:
        super().__init__(deps.settings, metrics, telemetry, limiter)
        self.deps = deps

    async def _handle(
        self, body: bytes, headers: Mapping[str, str], span: RpcSpan, served: Served
    ) -> Reply:
        envelope = self._envelope(body, span, served)
        handler = PROVIDER_METHODS.get(envelope.method)
        if handler is None:
            span.set_unknown_method(envelope.method)
            raise MethodNotFound(
                f"Method {envelope.method!r} does not exist on /provider. Methods: "
                f"{', '.join(PROVIDER_METHODS)}.",
                details={"method": envelope.method},
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
        self.limiter.charge(f"provider:{grant.session_id}", "provider calls for this session")
        result = await handler(self.deps, grant, params)
        return Reply(200, result_response(envelope.id, result))

    def _authorize(self, headers: Mapping[str, str]) -> ProviderGrant:
        settings = self.settings
        return verify_provider_token(
            settings.provider_secret,
            headers.get("authorization"),
            now=self.deps.clock(),
            leeway=settings.auth_leeway_s,
        )
