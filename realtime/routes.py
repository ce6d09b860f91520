"""HTTP routes of clients, agents and LiveKit: the JSON-RPC endpoints (/a2a, /a2a/v0.1,
/provider), the LiveKit webhook, the Agent Cards, the browser client library (/sdk/) and the
probes (the operator's routes are in `operator_routes.py`)."""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from importlib import resources
from importlib.resources.abc import Traversable
from typing import Any, Final

import msgspec
from litestar import Request, Response, get, post, route
from litestar.datastructures import State
from litestar.enums import HttpMethod
from litestar.response.base import ASGIResponse

from realtime.engine.ledger import Ledger
from realtime.errors import Unavailable
from realtime.front import RpcExchange, read_body
from realtime.methods import webhooks
from realtime.methods.context import Clock, Commands
from realtime.metrics import Metrics
from realtime.rpc.envelope import body_error
from realtime.rpc.errors import code_of
from realtime.rpc.headers import combined
from realtime.settings import Settings
from realtime.store.timeline import WebhookVerdict
from realtime.telemetry import Telemetry
from realtime.timestamps import http_date, parse_http_date

log = logging.getLogger(__name__)

JSON: Final = "application/json"


@dataclass(frozen=True, slots=True)
class RouteDeps:
    """What the routes beside the JSON-RPC endpoints use, built once by `create_app`: LiveKit's
    webhooks apply through `commands`, the card's Last-Modified is kept by the `ledger`, the
    readiness probe asks `store_ready` whether Redis answers."""

    settings: Settings
    metrics: Metrics
    telemetry: Telemetry
    commands: Commands
    ledger: Ledger
    store_ready: Callable[[], Awaitable[bool]]
    clock: Clock = time.time


def header_fields(request: Request[Any, Any, Any]) -> dict[str, str]:
    """The request's header fields by lower-case name, as `rpc/headers.combined` reads them."""
    return combined(request.scope["headers"])


# The JSON-RPC routes: reached only by the calls `front.RpcFront` leaves to Litestar (those of
# browsers, which its CORS answers); each hands the call to the same `RpcExchange` as the front
# (an ASGI app: Litestar runs it as it is).


@post(["/a2a", "/a2a/"], status_code=200)
async def a2a(request: Request[Any, Any, Any]) -> RpcExchange:
    return RpcExchange(request.app.state.dispatcher)


@post("/provider", status_code=200)
async def provider(request: Request[Any, Any, Any]) -> RpcExchange:
    """The agent's JSON-RPC (profile §10), authorized by its session's provider token."""
    return RpcExchange(request.app.state.provider)


@post("/livekit/webhook", status_code=200)
async def livekit_webhook(request: Request[Any, Any, Any], state: State) -> Response[bytes]:
    """Signed LiveKit webhooks (`methods.webhooks.handle`): 401 unless verified, 200 once
    recorded, 503 if it cannot be; one server span each (`Telemetry.webhook_span`)."""
    deps: RouteDeps = state.routes
    with deps.telemetry.webhook_span() as span:
        fields = header_fields(request)
        body, too_large = await read_body(
            request.receive, deps.settings.max_body_bytes, fields.get("content-length")
        )
        answer = await _webhook(deps.commands, body, too_large, fields.get("authorization", ""))
        if answer.event is not None:
            span.set_event(answer.event, answer.session_id)
        span.set_outcome(answer.status, answer.verdict)
    deps.metrics.webhook(answer.verdict)
    return Response(answer.body, status_code=answer.status, media_type=JSON)


async def _webhook(
    commands: Commands, body: bytes, too_large: bool, authorization: str
) -> webhooks.WebhookAnswer:
    """The body as the JSON-RPC routes read it (size, then JSON), then the handler."""
    if too_large:
        return webhooks.WebhookAnswer(413, WebhookVerdict.MALFORMED, b'{"error":"body too large"}')
    unreadable = body_error(body)
    if unreadable is not None:
        error = {"code": code_of(unreadable), "message": unreadable.message}
        return webhooks.WebhookAnswer(
            400, WebhookVerdict.MALFORMED, msgspec.json.encode({"error": error})
        )
    return await webhooks.handle(commands, body, authorization)


class AgentCardBody:
    """The card's bytes and ETag, computed once per process, and its Last-Modified: the time
    this card's content was first served (`CardStore`: shared by every process, so the same
    card has the same date on every replica and after restarts, and another card a later one;
    never later than this process's now, RFC 9110 §8.8.2.1). While Redis cannot say, the card
    goes out without it, asked again at most every RETRY_S."""

    RETRY_S: Final = 10.0
    WAIT_S: Final = 1.0  # a public GET never waits longer than this on Redis

    def __init__(self, card: dict[str, Any]) -> None:
        self.body = msgspec.json.encode(card)
        self.etag = '"' + hashlib.sha256(self.body).hexdigest()[:32] + '"'
        self.modified: int | None = None  # Unix seconds, once known
        self._next_try = 0.0

    async def last_modified(self, deps: RouteDeps) -> int | None:
        if self.modified is None and time.monotonic() >= self._next_try:
            self._next_try = time.monotonic() + self.RETRY_S
            # a second early: the response's Date, which must not be earlier (RFC 9110
            # §8.8.2.1), is stamped by the HTTP server from a clock it reads once a second
            now_s = int(deps.clock()) - 1
            try:
                self.modified = await asyncio.wait_for(
                    deps.ledger.card_served(self.etag, now_s), self.WAIT_S
                )
            except (Unavailable, TimeoutError):
                log.warning("agent card: Redis did not say when the card changed; no Last-Modified")
            except Exception:  # a bug: the card still goes out, without the date
                log.exception("agent card: reading when the card changed failed")
        if self.modified is None:
            return None
        return min(self.modified, int(deps.clock()))


def not_modified(fields: dict[str, str], etag: str, modified: int | None) -> bool:
    """Whether a GET of the card is answered 304 (RFC 9110 §13.2.2): If-None-Match decides when
    it is sent (weak comparison, `*` matches); only without it If-Modified-Since does, when it
    is one valid HTTP-date and the card has not changed after it."""
    if_none_match = fields.get("if-none-match")
    if if_none_match is not None:
        tags = [tag.strip() for tag in if_none_match.split(",")]
        return "*" in tags or any(tag.removeprefix("W/") == etag for tag in tags)
    since = parse_http_date(fields.get("if-modified-since", ""))
    return since is not None and modified is not None and modified <= since


async def serve_card(request: Request[Any, Any, Any], card: AgentCardBody) -> Response[bytes]:
    """A card with its ETag and Last-Modified; 304 when the client's copy is current."""
    modified = await card.last_modified(request.app.state.routes)
    headers = {"ETag": card.etag, "Cache-Control": "public, max-age=300"}
    if modified is not None:
        headers["Last-Modified"] = http_date(modified)
    if not_modified(header_fields(request), card.etag, modified):
        return Response(b"", status_code=304, headers=headers)
    return Response(card.body, media_type=JSON, headers=headers)


@get("/.well-known/agent-card.json")
async def agent_card(request: Request[Any, Any, Any], state: State) -> Response[bytes]:
    return await serve_card(request, state.agent_card)


@get("/healthz")
async def healthz() -> Response[bytes]:
    return Response(b'{"status":"ok"}', media_type=JSON)


@get("/readyz")
async def readyz(state: State) -> Response[bytes]:
    deps: RouteDeps = state.routes
    if await deps.store_ready():
        return Response(b'{"status":"ready"}', media_type=JSON)
    return Response(
        b'{"status":"unavailable","redis":"unreachable"}', status_code=503, media_type=JSON
    )


# --- A2A 0.1 clients: their endpoint (`rpc/v01`) and their card, beside the 1.0 ones --------


@post(["/a2a/v0.1", "/a2a/v0.1/"], status_code=200)
async def a2a_v01(request: Request[Any, Any, Any]) -> RpcExchange:
    """Answered as /a2a is, by the A2A 0.1 endpoint."""
    return RpcExchange(request.app.state.v01)


@get("/.well-known/agent.json")
async def agent_card_v01(request: Request[Any, Any, Any], state: State) -> Response[bytes]:
    """The A2A 0.1 card (`a2a/v01_card`), served as the 1.0 one."""
    return await serve_card(request, state.agent_card_v01)


# --- the browser client library: public, cacheable, CORS as for /a2a ----------------------------
# The npm package's own files (clients/js: src/ and the declarations generated into types/),
# found in the package as realtime/static/sdk and realtime/static/types (links in the
# repository, copies in the wheel): one source for the package and the service.


class SdkFile:
    """One file of the browser client library, read once at start from the package: its bytes,
    media type and strong ETag (a hash of the bytes: a new release is a new tag)."""

    # short: a page gets the library of the service it talks to within minutes of a release;
    # revalidating after that is a 304 of a few bytes
    CACHE_CONTROL: Final = "public, max-age=300"

    def __init__(self, body: bytes, media_type: str) -> None:
        self.body = body
        self.media_type = media_type
        self.etag = '"' + hashlib.sha256(body).hexdigest()[:32] + '"'

    def response(self, request: Request[Any, Any, Any]) -> ASGIResponse:
        """200 (HEAD: its header fields only), or 304 when the client's copy is this one."""
        headers = {
            "ETag": self.etag,
            "Cache-Control": self.CACHE_CONTROL,
            "X-Content-Type-Options": "nosniff",
        }
        if not_modified(header_fields(request), self.etag, None):
            return ASGIResponse(body=b"", status_code=304, headers=headers)
        headers["Content-Type"] = self.media_type
        if request.method == HttpMethod.HEAD:
            headers["Content-Length"] = str(len(self.body))
            return ASGIResponse(body=b"", headers=headers, is_head_response=True)
        return ASGIResponse(body=self.body, headers=headers)


SDK_KINDS: Final = (  # folder in realtime/static/, file suffix, media type
    ("sdk", ".js", "text/javascript; charset=utf-8"),
    ("types", ".d.ts", "application/typescript; charset=utf-8"),
)


def sdk_sources() -> dict[str, tuple[Traversable, str]]:
    """Every file of the library: its path under /sdk/ → (the packaged file, media type)."""
    static = resources.files("realtime").joinpath("static")
    found: dict[str, tuple[Traversable, str]] = {}
    for folder, suffix, media_type in SDK_KINDS:
        for item in static.joinpath(folder).iterdir():
            if item.is_file() and item.name.endswith(suffix):
                found[f"/sdk/{item.name}"] = (item, media_type)
    return dict(sorted(found.items()))


SDK_PATHS: Final = tuple(sdk_sources())


def load_sdk() -> dict[str, SdkFile]:
    sources = sdk_sources().items()
    return {path: SdkFile(item.read_bytes(), media_type) for path, (item, media_type) in sources}


@route(list(SDK_PATHS), http_method=[HttpMethod.GET, HttpMethod.HEAD])
async def sdk(request: Request[Any, Any, Any], state: State) -> ASGIResponse:
    """The library's ES modules (no build step) and their TypeScript declarations."""
    found: SdkFile = state.sdk[request.url.path]
    return found.response(request)


ROUTES: Final = [
    a2a,
    a2a_v01,
    provider,
    livekit_webhook,
    agent_card,
    agent_card_v01,
    healthz,
    readyz,
    sdk,
]
