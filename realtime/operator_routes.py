"""The operator API and console (profile §17) and the Prometheus scrape: routes an operator
uses, never the public Ingress's (k8s/overlays/prod). Read-only but for one call, the
redelivery of a session's events; the API needs an operator token (scope aim.operator), the
console page and /metrics hold no data of their own."""

from __future__ import annotations

import logging
import secrets
import time
from collections.abc import Awaitable, Callable
from importlib import resources
from typing import Any, Final

import msgspec
from litestar import Request, Response, get, post
from litestar.datastructures import State
from litestar.response.base import ASGIResponse

from realtime.auth import OPERATOR_SCOPE, Principal
from realtime.errors import (
    AuthError,
    BadRequest,
    InternalError,
    LimitExceeded,
    NotFound,
    ServiceError,
    Unavailable,
)
from realtime.logs import ACCESS_LOG
from realtime.methods import operator_deliveries, operator_views
from realtime.methods.context import OperatorDeps
from realtime.metrics import PROMETHEUS_CONTENT_TYPE
from realtime.rpc.dispatch import Dispatcher
from realtime.rpc.errors import code_of
from realtime.rpc.headers import combined

log = logging.getLogger(__name__)

JSON: Final = "application/json"
CSV: Final = "text/csv; charset=utf-8"


@get("/metrics")
async def metrics(state: State) -> Response[bytes]:
    """The Prometheus text format (profile §17), without a token like every scrape target;
    registered unless `AIM_METRICS=off` (then 404). Never waits on Redis for longer than one
    bounded read of the gauges (`telemetry.StoreGauges`)."""
    body = await state.metrics.exposition()
    return Response(body, media_type=PROMETHEUS_CONTENT_TYPE)


METRICS_ROUTE: Final = metrics


# --- the operator API and console (profile §17): scope aim.operator ----------------------------

OPERATOR_HEADERS: Final = {"Cache-Control": "no-store", "X-Content-Type-Options": "nosniff"}
_ENCODER: Final = msgspec.json.Encoder()


def operator_status(error: ServiceError) -> int:
    """The HTTP status of a failed operator API call (REST: the status carries the outcome)."""
    if isinstance(error, AuthError):
        return error.status
    if isinstance(error, LimitExceeded):
        return 429
    if isinstance(error, NotFound):
        return 404
    if isinstance(error, BadRequest):
        return 400
    if isinstance(error, Unavailable):
        return 503
    return 500


def operator_error(error: ServiceError) -> ASGIResponse:
    """`{"error": {"code", "message"}}` (the JSON-RPC code of the same failure), with the
    challenge of an authentication failure as on /a2a."""
    headers = dict(OPERATOR_HEADERS)
    if isinstance(error, AuthError):
        headers["WWW-Authenticate"] = error.www_authenticate
    if isinstance(error, LimitExceeded) and error.retry_after is not None:
        headers["Retry-After"] = str(error.retry_after)
    body = {"error": {"code": code_of(error), "message": error.message}}
    return ASGIResponse(
        body=_ENCODER.encode(body),
        status_code=operator_status(error),
        media_type=JSON,
        headers=headers,
    )


Read = Callable[[OperatorDeps, Principal], Awaitable[dict[str, Any]]]


async def operator_call(
    request: Request[Any, Any, Any], read: Read, *, session_id: str | None = None
) -> ASGIResponse:
    """Authenticate the operator (the bearer tokens of /a2a, scope aim.operator), charge the
    call to its principal's rate limit (the one of /a2a), then `read`; every call, answered or
    refused, leaves an audit line naming the operator and the session it read."""
    started = time.perf_counter()
    dispatcher: Dispatcher = request.app.state.dispatcher
    authenticator = dispatcher.authenticator
    operator: Principal | None = None
    try:
        operator = await authenticator.authenticate(
            combined(request.scope["headers"]).get("authorization")
        )
        authenticator.require_scope(operator, OPERATOR_SCOPE)
        dispatcher.limiter.charge(operator.key, "operator API calls")
        body = await read(request.app.state.operator, operator)
        # a read answers JSON, or bytes already laid out as CSV (the usage listing)
        encoded, media = (body, CSV) if isinstance(body, bytes) else (_ENCODER.encode(body), JSON)
        response = ASGIResponse(
            body=encoded, status_code=200, media_type=media, headers=OPERATOR_HEADERS
        )
    except ServiceError as exc:
        response = operator_error(exc)
    except Exception:  # a bug: logged, never leaked
        log.exception("internal error serving %s", request.url.path)
        response = operator_error(InternalError())
    _audit(request, operator, session_id, response.status_code, started)
    return response


def _audit(
    request: Request[Any, Any, Any],
    operator: Principal | None,
    session_id: str | None,
    status: int,
    started: float,
) -> None:
    """One access line per operator call, whatever `AIM_ACCESS_LOG` says: operators read other
    people's sessions, so who read what is kept (never the token)."""
    path = request.url.path
    fields: dict[str, Any] = {
        "method": request.method,
        "path": path,
        "status": status,
        "duration_ms": round((time.perf_counter() - started) * 1000, 3),
    }
    if operator is not None:
        fields["operator"] = {"tenant": operator.tenant, "sub": operator.subject}
    if session_id is not None:
        fields["session_id"] = session_id[:64]  # the path as sent: bounded in the log
    ACCESS_LOG.write(f"{request.method} {path} {status}", fields)


def _query(request: Request[Any, Any, Any]) -> dict[str, str]:
    params = request.query_params
    return {key: str(params.get(key)) for key in params}


@get("/ops/api/sessions")
async def operator_sessions(request: Request[Any, Any, Any]) -> ASGIResponse:
    query = _query(request)
    return await operator_call(
        request, lambda deps, operator: operator_views.list_sessions(deps, operator, query)
    )


@get("/ops/api/usage")
async def operator_usage(request: Request[Any, Any, Any]) -> ASGIResponse:
    query = _query(request)
    return await operator_call(
        request, lambda deps, operator: operator_views.usage(deps, operator, query)
    )


@get("/ops/api/sessions/{session_id:str}")
async def operator_session(request: Request[Any, Any, Any]) -> ASGIResponse:
    session_id = str(request.path_params["session_id"])
    return await operator_call(
        request,
        lambda deps, operator: operator_views.session_detail(deps, operator, session_id),
        session_id=session_id,
    )


@get("/ops/api/sessions/{session_id:str}/timeline")
async def operator_timeline(request: Request[Any, Any, Any]) -> ASGIResponse:
    session_id, query = str(request.path_params["session_id"]), _query(request)
    return await operator_call(
        request,
        lambda deps, operator: operator_views.timeline(deps, operator, session_id, query),
        session_id=session_id,
    )


@get("/ops/api/sessions/{session_id:str}/deliveries")
async def operator_session_deliveries(request: Request[Any, Any, Any]) -> ASGIResponse:
    session_id = str(request.path_params["session_id"])
    return await operator_call(
        request,
        lambda deps, operator: operator_deliveries.deliveries(deps, operator, session_id),
        session_id=session_id,
    )


@post("/ops/api/sessions/{session_id:str}/events/redeliver", status_code=200)
async def operator_redeliver(request: Request[Any, Any, Any]) -> ASGIResponse:
    session_id, body = str(request.path_params["session_id"]), await request.body()
    return await operator_call(
        request,
        lambda deps, operator: operator_deliveries.redeliver(deps, operator, session_id, body),
        session_id=session_id,
    )


class OperatorConsole:
    """The console page (`realtime/operator_console.html`: one file, its script and styles inline),
    read once; each response gets a fresh nonce, the only way its script and styles may run
    under the page's Content-Security-Policy."""

    NONCE: Final = "{{nonce}}"

    def __init__(self, page: str) -> None:
        self.parts = page.split(self.NONCE)

    @classmethod
    def load(cls) -> OperatorConsole:
        return cls(resources.files("realtime").joinpath("operator_console.html").read_text("utf-8"))

    def render(self) -> tuple[bytes, str]:
        """The page with a new nonce, and its Content-Security-Policy."""
        nonce = secrets.token_urlsafe(18)
        policy = (
            f"default-src 'none'; script-src 'nonce-{nonce}'; style-src 'nonce-{nonce}'; "
            "connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'; "
            "frame-ancestors 'none'"
        )
        return nonce.join(self.parts).encode(), policy


@get("/ops")
async def operator_page(state: State) -> Response[bytes]:
    """The console: public like the Agent Card (it holds no data); it asks for an operator token
    and keeps it in the tab's memory only."""
    console: OperatorConsole = state.operator_console
    page, policy = console.render()
    headers = {
        **OPERATOR_HEADERS,
        "Content-Security-Policy": policy,
        "Referrer-Policy": "no-referrer",
        "X-Frame-Options": "DENY",
    }
    return Response(page, media_type="text/html; charset=utf-8", headers=headers)


OPERATOR_ROUTES: Final = [
    operator_sessions,
    operator_usage,
    operator_session,
    operator_timeline,
    operator_session_deliveries,
    operator_redeliver,
    operator_page,
]
