"""HTTP routes: the JSON-RPC endpoint, the Agent Card and the probes."""

from __future__ import annotations

import hashlib
from typing import Any, Final

import msgspec
from litestar import Request, Response, get, post
from litestar.datastructures import State

from realtime.effects.webhooks import WebhookRejected
from realtime.effects.webhooks import verify as verify_webhook
from realtime.errors import RpcError
from realtime.methods import webhooks
from realtime.rpc.dispatch import Dispatcher
from realtime.rpc.provider import ProviderDispatcher

JSON: Final = "application/json"


async def read_limited(request: Request[Any, Any, Any], limit: int) -> tuple[bytes, bool]:
    """The body, or (b"", True) once it exceeds `limit` bytes; never buffers more than that."""
    declared = request.headers.get("content-length")
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


@post(["/a2a", "/a2a/"], status_code=200)
async def a2a(request: Request[Any, Any, Any], state: State) -> Response[bytes]:
    dispatcher: Dispatcher = state.dispatcher
    body, too_large = await read_limited(request, dispatcher.services.settings.max_body_bytes)
    reply = await dispatcher.handle(body, request.headers, too_large=too_large)
    return Response(reply.body, status_code=reply.status, media_type=JSON, headers=reply.headers)


@post("/provider", status_code=200)
async def provider(request: Request[Any, Any, Any], state: State) -> Response[bytes]:
    """The agent's JSON-RPC (profile §10), authorized by its session's provider token."""
    dispatcher: ProviderDispatcher = state.provider
    body, too_large = await read_limited(request, dispatcher.services.settings.max_body_bytes)
    reply = await dispatcher.handle(body, request.headers, too_large=too_large)
    return Response(reply.body, status_code=reply.status, media_type=JSON, headers=reply.headers)


@post("/livekit/webhook", status_code=200)
async def livekit_webhook(request: Request[Any, Any, Any], state: State) -> Response[bytes]:
    """Signed LiveKit webhooks: 401 unless verified, 200 once recorded, 503 if it cannot be."""
    dispatcher: Dispatcher = state.dispatcher
    services = dispatcher.services
    body, too_large = await read_limited(request, services.settings.max_body_bytes)
    if too_large:
        return Response(b'{"error":"body too large"}', status_code=413, media_type=JSON)
    try:
        notice = verify_webhook(services.settings, body, request.headers.get("authorization", ""))
    except WebhookRejected as exc:
        services.metrics.webhook("rejected")
        return Response(
            msgspec.json.encode({"error": f"webhook not accepted: {exc}"}),
            status_code=401,
            media_type=JSON,
        )
    try:
        outcome = await webhooks.handle(services, notice)
    except RpcError:
        services.metrics.webhook("unavailable")
        return Response(b'{"error":"state store unavailable"}', status_code=503, media_type=JSON)
    services.metrics.webhook(outcome)
    return Response(msgspec.json.encode({"status": outcome}), media_type=JSON)


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
    if await dispatcher.services.store.ping():
        return Response(b'{"status":"ready"}', media_type=JSON)
    return Response(
        b'{"status":"unavailable","redis":"unreachable"}', status_code=503, media_type=JSON
    )


ROUTES: Final = [a2a, provider, livekit_webhook, agent_card, healthz, readyz]
