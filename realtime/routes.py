"""HTTP routes: the JSON-RPC endpoint, the Agent Card, the probes, the operations API and its
console."""

from __future__ import annotations

import hashlib
import logging
import secrets
from collections.abc import AsyncIterator, Awaitable, Callable
from importlib import resources
from typing import Any, Final

import msgspec
from litestar import Request, Response, get, post
from litestar.datastructures import State
from litestar.response import Stream
from litestar.response.base import ASGIResponse

from realtime.auth import Principal
from realtime.errors import (
    AuthError,
    BadRequest,
    InternalError,
    NotFound,
    ServiceError,
    Unavailable,
)
from realtime.livekit_adapter.webhooks import WebhookRejected
from realtime.livekit_adapter.webhooks import verify as verify_webhook
from realtime.methods import ops, webhooks
from realtime.methods.context import Services
from realtime.metrics import PROMETHEUS_CONTENT_TYPE
from realtime.rpc.dispatch import Dispatcher, SseEvent
from realtime.rpc.envelope import body_error
from realtime.rpc.errors import code_of
from realtime.rpc.provider import ProviderDispatcher
from realtime.rpc.v01 import V01Dispatcher
from realtime.telemetry import WebhookSpan
from state_machines.session import parse_room_name

log = logging.getLogger(__name__)

JSON: Final = "application/json"
EVENT_STREAM: Final = "text/event-stream"
KEEPALIVE: Final = b": keepalive\n\n"
# no caching, and no buffering by proxies (nginx honours X-Accel-Buffering)
SSE_HEADERS: Final = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


async def read_limited(
    request: Request[Any, Any, Any], limit: int, declared: str | None
) -> tuple[bytes, bool]:
    """The body, or (b"", True) once it exceeds `limit` bytes (or its `declared` Content-Length
    does); never buffers more than that."""
    if declared is not None and declared.isdigit() and int(declared) > limit:
        return b"", True
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            return b"", True
        chunks.append(chunk)
    return b"".join(chunks), False


def header_fields(request: Request[Any, Any, Any]) -> dict[str, str]:
    """The request's header fields by lower-case name, repeated lines joined with ", " as
    RFC 9110 §5.3 combines them: a repeated Authorization or A2A-Version then reads as one
    malformed value instead of letting the first line win (profile §16)."""
    fields: dict[str, str] = {}
    for raw_name, raw_value in request.scope["headers"]:
        name, value = raw_name.decode("latin-1").lower(), raw_value.decode("latin-1")
        fields[name] = f"{fields[name]}, {value}" if name in fields else value
    return fields


# characters JSON may carry raw inside strings that many line readers (Python's splitlines,
# httpx's aiter_lines, JavaScript's U+2028 handling in older engines) take for a line break;
# escaped, the JSON means the same and a `data:` line stays one line for every reader
_LINE_BREAKERS: Final = ((b"\xe2\x80\xa8", b"\\u2028"), (b"\xe2\x80\xa9", b"\\u2029"),
                         (b"\xc2\x85", b"\\u0085"))  # fmt: skip


def one_line(data: bytes) -> bytes:
    """`data` (compact JSON, so no raw newlines) with every other line breaker escaped."""
    for raw, escaped in _LINE_BREAKERS:
        data = data.replace(raw, escaped)
    return data


async def sse(events: AsyncIterator[SseEvent]) -> AsyncIterator[bytes]:
    """SSE framing: `id:`, `event:` and one `data:` line (compact JSON has no newlines);
    a heartbeat is a comment line."""
    async for event in events:
        if event.data is None:
            yield KEEPALIVE
            continue
        frame = b""
        if event.id is not None:
            frame += b"id: " + event.id.encode() + b"\n"
        if event.event is not None:
            frame += b"event: " + event.event.encode() + b"\n"
        yield frame + b"data: " + one_line(event.data) + b"\n\n"


# The JSON-RPC routes answer with ASGI responses built here (Litestar sends them as they are):
# the hot path skips Litestar's response conversion and dependency injection.


@post(["/a2a", "/a2a/"], status_code=200)
async def a2a(request: Request[Any, Any, Any]) -> ASGIResponse:
    dispatcher: Dispatcher = request.app.state.dispatcher
    fields = header_fields(request)
    body, too_large = await read_limited(
        request, dispatcher.services.settings.max_body_bytes, fields.get("content-length")
    )
    reply = await dispatcher.handle(body, fields, too_large=too_large)
    if reply.stream is not None:
        return Stream(
            sse(reply.stream),
            status_code=200,
            media_type=EVENT_STREAM,
            headers={**reply.headers, **SSE_HEADERS},
        ).to_asgi_response(None, request)
    return ASGIResponse(
        body=reply.body, status_code=reply.status, media_type=JSON, headers=reply.headers
    )


@post("/provider", status_code=200)
async def provider(request: Request[Any, Any, Any]) -> ASGIResponse:
    """The agent's JSON-RPC (profile §10), authorized by its session's provider token."""
    dispatcher: ProviderDispatcher = request.app.state.provider
    fields = header_fields(request)
    body, too_large = await read_limited(
        request, dispatcher.services.settings.max_body_bytes, fields.get("content-length")
    )
    reply = await dispatcher.handle(body, fields, too_large=too_large)
    return ASGIResponse(
        body=reply.body, status_code=reply.status, media_type=JSON, headers=reply.headers
    )


@post("/livekit/webhook", status_code=200)
async def livekit_webhook(request: Request[Any, Any, Any], state: State) -> Response[bytes]:
    """Signed LiveKit webhooks: 401 unless verified, 200 once recorded, 503 if it cannot be;
    one server span each (`Telemetry.webhook_span`)."""
    dispatcher: Dispatcher = state.dispatcher
    with dispatcher.telemetry.webhook_span() as span:
        status, verdict, body = await _webhook(request, dispatcher.services, span)
        span.set_outcome(status, verdict)
    dispatcher.services.metrics.webhook(verdict)
    return Response(body, status_code=status, media_type=JSON)


async def _webhook(
    request: Request[Any, Any, Any], services: Services, span: WebhookSpan
) -> tuple[int, str, bytes]:
    """(HTTP status, outcome, body) of one webhook delivery."""
    fields = header_fields(request)
    body, too_large = await read_limited(
        request, services.settings.max_body_bytes, fields.get("content-length")
    )
    if too_large:
        return 413, "malformed", b'{"error":"body too large"}'
    unreadable = body_error(body)
    if unreadable is not None:
        error = {"code": code_of(unreadable), "message": unreadable.message}
        return 400, "malformed", msgspec.json.encode({"error": error})
    try:
        notice = verify_webhook(services.settings, body, fields.get("authorization", ""))
    except WebhookRejected as exc:
        return 401, "rejected", msgspec.json.encode({"error": f"webhook not accepted: {exc}"})
    named = parse_room_name(notice.room)
    span.set_event(notice.event, named[0] if named else None)
    try:
        outcome = await webhooks.handle(services, notice)
    except Unavailable:
        return 503, "unavailable", b'{"error":"state store unavailable"}'
    return 200, outcome, msgspec.json.encode({"status": outcome})


class AgentCardBody:
    """The card's bytes and ETag, computed once per process."""

    def __init__(self, card: dict[str, Any]) -> None:
        self.body = msgspec.json.encode(card)
        self.etag = '"' + hashlib.sha256(self.body).hexdigest()[:32] + '"'


@get("/.well-known/agent-card.json")
async def agent_card(request: Request[Any, Any, Any], state: State) -> Response[bytes]:
    card: AgentCardBody = state.agent_card
    headers = {"ETag": card.etag, "Cache-Control": "public, max-age=300"}
    if card.etag in request.headers.get("if-none-match", ""):
        return Response(b"", status_code=304, headers=headers)
    return Response(card.body, media_type=JSON, headers=headers)


@get("/healthz")
async def healthz() -> Response[bytes]:
    return Response(b'{"status":"ok"}', media_type=JSON)


@get("/readyz")
async def readyz(state: State) -> Response[bytes]:
    dispatcher: Dispatcher = state.dispatcher
    if await dispatcher.services.store_ready():
        return Response(b'{"status":"ready"}', media_type=JSON)
    return Response(
        b'{"status":"unavailable","redis":"unreachable"}', status_code=503, media_type=JSON
    )


# --- A2A 0.1 clients: their endpoint (`rpc/v01`) and their card, beside the 1.0 ones --------


@post(["/a2a/v0.1", "/a2a/v0.1/"], status_code=200)
async def a2a_v01(request: Request[Any, Any, Any]) -> ASGIResponse:
    """Answered as /a2a is, by the A2A 0.1 endpoint."""
    dispatcher: V01Dispatcher = request.app.state.v01
    fields = header_fields(request)
    body, too_large = await read_limited(
        request, dispatcher.services.settings.max_body_bytes, fields.get("content-length")
    )
    reply = await dispatcher.handle(body, fields, too_large=too_large)
    if reply.stream is not None:
        return Stream(
            sse(reply.stream),
            status_code=200,
            media_type=EVENT_STREAM,
            headers={**reply.headers, **SSE_HEADERS},
        ).to_asgi_response(None, request)
    return ASGIResponse(
        body=reply.body, status_code=reply.status, media_type=JSON, headers=reply.headers
    )


@get("/.well-known/agent.json")
async def agent_card_v01(request: Request[Any, Any, Any], state: State) -> Response[bytes]:
    """The A2A 0.1 card (`a2a/v01_card`), cached as the 1.0 one."""
    card: AgentCardBody = state.agent_card_v01
    headers = {"ETag": card.etag, "Cache-Control": "public, max-age=300"}
    if card.etag in request.headers.get("if-none-match", ""):
        return Response(b"", status_code=304, headers=headers)
    return Response(card.body, media_type=JSON, headers=headers)


ROUTES: Final = [a2a, a2a_v01, provider, livekit_webhook, agent_card, agent_card_v01, healthz,
                 readyz]  # fmt: skip


@get("/metrics")
async def metrics(state: State) -> Response[bytes]:
    """The Prometheus text format (profile §17), without a token like every scrape target;
    registered unless `AIM_METRICS=off` (then 404). Never waits on Redis for longer than one
    bounded read of the gauges (`telemetry.StoreGauges`)."""
    dispatcher: Dispatcher = state.dispatcher
    body = await dispatcher.services.metrics.exposition()
    return Response(body, media_type=PROMETHEUS_CONTENT_TYPE)


METRICS_ROUTE: Final = metrics


# --- the operations API and console (profile §17): read-only, scope aim.operator ---------------

OPS_HEADERS: Final = {"Cache-Control": "no-store", "X-Content-Type-Options": "nosniff"}
_ENCODER: Final = msgspec.json.Encoder()


def ops_status(error: ServiceError) -> int:
    """The HTTP status of a failed operations API call (REST: the status carries the outcome)."""
    if isinstance(error, AuthError):
        return error.status
    if isinstance(error, NotFound):
        return 404
    if isinstance(error, BadRequest):
        return 400
    if isinstance(error, Unavailable):
        return 503
    return 500


def ops_error(error: ServiceError) -> ASGIResponse:
    """`{"error": {"code", "message"}}` (the JSON-RPC code of the same failure), with the
    challenge of an authentication failure as on /a2a."""
    headers = dict(OPS_HEADERS)
    if isinstance(error, AuthError):
        headers["WWW-Authenticate"] = error.www_authenticate
    body = {"error": {"code": code_of(error), "message": error.message}}
    return ASGIResponse(
        body=_ENCODER.encode(body), status_code=ops_status(error), media_type=JSON, headers=headers
    )


Read = Callable[[Services, Principal], Awaitable[dict[str, Any]]]


async def ops_call(request: Request[Any, Any, Any], read: Read) -> ASGIResponse:
    """Authenticate the operator (the bearer tokens of /a2a, scope aim.operator), then `read`."""
    dispatcher: Dispatcher = request.app.state.dispatcher
    authenticator = dispatcher.authenticator
    try:
        operator = await authenticator.authenticate(header_fields(request).get("authorization"))
        authenticator.require_scope(operator, ops.OPERATOR_SCOPE)
        body = await read(dispatcher.services, operator)
    except ServiceError as exc:
        return ops_error(exc)
    except Exception:  # a bug: logged, never leaked
        log.exception("internal error serving %s", request.url.path)
        return ops_error(InternalError())
    return ASGIResponse(
        body=_ENCODER.encode(body), status_code=200, media_type=JSON, headers=OPS_HEADERS
    )


def _query(request: Request[Any, Any, Any]) -> dict[str, str]:
    params = request.query_params
    return {key: str(params.get(key)) for key in params}


@get("/ops/api/sessions")
async def ops_sessions(request: Request[Any, Any, Any]) -> ASGIResponse:
    query = _query(request)
    return await ops_call(
        request, lambda services, operator: ops.list_sessions(services, operator, query)
    )


@get("/ops/api/sessions/{session_id:str}")
async def ops_session(request: Request[Any, Any, Any]) -> ASGIResponse:
    session_id = str(request.path_params["session_id"])
    return await ops_call(
        request, lambda services, operator: ops.session_detail(services, operator, session_id)
    )


@get("/ops/api/sessions/{session_id:str}/timeline")
async def ops_timeline(request: Request[Any, Any, Any]) -> ASGIResponse:
    session_id, query = str(request.path_params["session_id"]), _query(request)
    return await ops_call(
        request, lambda services, operator: ops.timeline(services, operator, session_id, query)
    )


class OpsConsole:
    """The console page (`realtime/ops_console.html`: one file, its script and styles inline),
    read once; each response gets a fresh nonce, the only way its script and styles may run
    under the page's Content-Security-Policy."""

    NONCE: Final = "{{nonce}}"

    def __init__(self, page: str) -> None:
        self.parts = page.split(self.NONCE)

    @classmethod
    def load(cls) -> OpsConsole:
        return cls(resources.files("realtime").joinpath("ops_console.html").read_text("utf-8"))

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
async def ops_page(state: State) -> Response[bytes]:
    """The console: public like the Agent Card (it holds no data); it asks for an operator token
    and keeps it in the tab's memory only."""
    console: OpsConsole = state.ops_console
    page, policy = console.render()
    headers = {
        **OPS_HEADERS,
        "Content-Security-Policy": policy,
        "Referrer-Policy": "no-referrer",
        "X-Frame-Options": "DENY",
    }
    return Response(page, media_type="text/html; charset=utf-8", headers=headers)


OPS_ROUTES: Final = [ops_sessions, ops_session, ops_timeline, ops_page]
