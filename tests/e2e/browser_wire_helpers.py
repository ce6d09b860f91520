"""Building blocks of `test_browser_client_wire.py`: loopback servers that answer the browser
library as no AIM service does — a redirect, a long `Retry-After` — and a listener that records
whatever reaches it (a redirect's target: nothing may).

Both answer CORS as a permissive server would (the page is on another origin), so what the
browser does is decided by the library's fetch options, not by a failed preflight.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass, field
from typing import Any

from tests.e2e.browser_helpers import library_script

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
Headers = list[tuple[bytes, bytes]]


@dataclass
class Seen:
    """One request as it arrived."""

    method: str
    path: str
    headers: dict[str, str]
    body: bytes


async def _lifespan(receive: Receive, send: Send) -> None:
    while (await receive())["type"] != "lifespan.shutdown":
        await send({"type": "lifespan.startup.complete"})
    await send({"type": "lifespan.shutdown.complete"})


async def read_body(receive: Receive) -> bytes:
    """A request's whole body, however many messages it came in."""
    body = b""
    while True:
        message = await receive()
        body += message.get("body", b"")
        if not message.get("more_body"):
            return body


async def _received(scope: Scope, receive: Receive, send: Send, seen: list[Seen]) -> Seen | None:
    """The request that arrived, appended to `seen`; None for the lifespan (answered here)."""
    if scope["type"] == "lifespan":
        await _lifespan(receive, send)
        return None
    headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
    arrived = Seen(scope["method"], scope["path"], headers, await read_body(receive))
    seen.append(arrived)
    return arrived


def _cors(seen: Seen) -> Headers:
    """Whatever the browser asks for is allowed, and Retry-After is readable."""
    asked = seen.headers.get("access-control-request-headers", "")
    return [
        (b"access-control-allow-origin", b"*"),
        (b"access-control-allow-methods", b"POST"),
        (b"access-control-allow-headers", asked.encode("latin-1")),
        (b"access-control-expose-headers", b"Retry-After"),
    ]


async def _answer(send: Send, status: int, headers: Headers, body: bytes = b"") -> None:
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def _json_rpc(seen: Seen, member: str, value: Any) -> bytes:
    try:
        request_id = json.loads(seen.body).get("id")
    except ValueError:
        request_id = None
    return json.dumps({"jsonrpc": "2.0", "id": request_id, member: value}).encode()


@dataclass
class Trap:
    """Records every request (a preflight too) and answers like a service would: a preflight
    allowed, a call answered with a result. A redirect's target: it must see nothing."""

    seen: list[Seen] = field(default_factory=list)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        seen = await _received(scope, receive, send, self.seen)
        if seen is None:
            return
        json_type = (b"content-type", b"application/json")
        if seen.method == "OPTIONS":
            await _answer(send, 204, _cors(seen))
        else:
            result = {"task": {"id": "t1", "status": {"state": "TASK_STATE_WORKING"}}}
            await _answer(send, 200, [*_cors(seen), json_type], _json_rpc(seen, "result", result))


@dataclass
class Unusual:
    """Answers the library as no AIM service does, by path prefix:

    - `/redirect/…`: 307 to `target` (the `Trap`'s /a2a), the method and body to be kept;
    - `/limited/…`: -31011 with `Retry-After: 120` (two minutes: past the library's cap);
    - `/brief/…`: -31011 with `Retry-After: 1` the first time, then a result;
    - `/allowance/…`: -31013 (HTTP 402), the tenant's minutes of the day used up.
    """

    target: str = ""
    seen: list[Seen] = field(default_factory=list)

    def calls(self, prefix: str) -> list[Seen]:
        return [s for s in self.seen if s.method == "POST" and s.path.startswith(prefix)]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        seen = await _received(scope, receive, send, self.seen)
        if seen is None:
            return
        cors = _cors(seen)
        json_type = (b"content-type", b"application/json")
        if seen.method == "OPTIONS":
            await _answer(send, 204, cors)
        elif seen.path.startswith("/redirect/"):
            await _answer(send, 307, [*cors, (b"location", self.target.encode())])
        elif seen.path.startswith("/limited/") or (
            seen.path.startswith("/brief/") and len(self.calls("/brief/")) == 1
        ):
            wait = "120" if seen.path.startswith("/limited/") else "1"
            info = {
                "@type": "type.googleapis.com/google.rpc.ErrorInfo",
                "reason": "LIMIT_EXCEEDED",
                "domain": "urn:aim:a2a:realtime:v1",
                "metadata": {"limit": "requests_per_second", "retryAfterSeconds": wait},
            }
            error = {"code": -31011, "message": "Too many requests.", "data": [info]}
            headers = [*cors, json_type, (b"retry-after", wait.encode())]
            await _answer(send, 429, headers, _json_rpc(seen, "error", error))
        elif seen.path.startswith("/allowance/"):
            info = {
                "@type": "type.googleapis.com/google.rpc.ErrorInfo",
                "reason": "ALLOWANCE_EXHAUSTED",
                "domain": "urn:aim:a2a:realtime:v1",
                "metadata": {
                    "allowance": "session_minutes_per_day", "allowed": "10", "used": "10",
                    "scope": "tenant", "resetsAt": "2026-12-05T00:00:00.000Z",
                    "resetsInSeconds": "3600",
                },
            }  # fmt: skip
            error = {"code": -31013, "message": "Minutes used up.", "data": [info]}
            await _answer(send, 402, [*cors, json_type], _json_rpc(seen, "error", error))
        else:
            await _answer(send, 200, [*cors, json_type], _json_rpc(seen, "result", {"ok": True}))


# what the library does with the unusual answers, as plain data (run by `Device.script`)
UNUSUAL = library_script(
    "service, unusual, token, done",
    """\
  const seen = (e) => ({name: e.name, code: e.code, reason: e.reason, httpStatus: e.httpStatus,
    retryable: e.retryable, retryAfterMs: e.retryAfterMs, message: e.message,
    typed: e instanceof lib.AimError});
  const within = (promise, ms) => Promise.race([promise,
    new Promise((resolve) => setTimeout(() => resolve({stillWaiting: ms}), ms))]);
  const thrown = (call) => within(call().then((result) => ({result}), seen), 8000);
  const fast = {attempts: 3, baseDelayMs: 10, maxDelayMs: 10};
  const out = {};

  // a call to a URL that redirects: thrown at once, typed, nothing sent where it points
  const moved = new lib.AimClient({baseUrl: `${unusual}/redirect`, token, retry: fast});
  out.call = await thrown(() => moved.call("GetTask", {id: "t1", historyLength: 0}));

  // the stream (SubscribeToTask over the real network; the other calls answered here)
  const RT = "urn:aim:a2a:realtime:v1";
  const task = {id: "t1", contextId: "c1", status: {state: "TASK_STATE_WORKING"},
                metadata: {[RT]: {sessionId: "s1", sessionEpoch: 1, sessionState: "ready",
                                  taskVersion: 1}}};
  const partly = async (url, init) => {
    const {id, method} = JSON.parse(init.body);
    if (method === "SubscribeToTask") return fetch(url, init);
    return new Response(JSON.stringify({jsonrpc: "2.0", id, result: {task}}),
                        {headers: {"content-type": "application/json"}});
  };
  const streaming = new lib.AimClient({baseUrl: `${unusual}/redirect/stream`, token,
                                       fetch: partly});
  const session = await streaming.createSession({endpointKey: "k", returnImmediately: true});
  const failed = new Promise((resolve) => session.on("error", ({error}) => resolve(seen(error))));
  out.stream = await within(failed, 8000);
  session.close();

  // a Retry-After past maxRetryAfterMs (60 s by default) is thrown, not slept through
  let started = Date.now();
  const limited = new lib.AimClient({baseUrl: `${unusual}/limited`, token});
  out.limited = await thrown(() => limited.call("GetTask", {id: "t1"}));
  out.limitedMs = Date.now() - started;
  // a short one is still waited out, unless the app's cap is shorter
  started = Date.now();
  const brief = new lib.AimClient({baseUrl: `${unusual}/brief`, token});
  out.brief = await thrown(() => brief.call("GetTask", {id: "t1"}));
  out.briefMs = Date.now() - started;
  const strict = new lib.AimClient({baseUrl: `${unusual}/limited`, token,
                                    retry: {maxRetryAfterMs: 0}});
  out.strict = await thrown(() => strict.call("GetTask", {id: "t1"}));
  // an allowance used up: its own class, said at once, never retried
  const spent = new lib.AimClient({baseUrl: `${unusual}/allowance`, token, retry: fast});
  try {
    await spent.call("GetTask", {id: "t1"});
  } catch (e) {
    out.allowance = {...seen(e), allowance: e.allowance, resetsAt: e.resetsAt,
                     limit: e instanceof lib.LimitExceededError};
  }
  done(out);
""",
)

# createSession of a service without LiveKit, every request counted (run by `Device.script`)
UNCONFIGURED = library_script(
    "service, token, done",
    """\
  const sent = [];
  const counted = (url, init) => {
    sent.push(JSON.parse(init.body).method);
    return fetch(url, init);
  };
  const client = new lib.AimClient({baseUrl: service, token, fetch: counted});
  const started = Date.now();
  const error = await client.createSession({endpointKey: "k"}).then(() => null, (e) => e);
  done({name: error?.name, code: error?.code, retryable: error?.retryable,
        metadata: error?.metadata, message: error?.message, sent, ms: Date.now() - started});
""",
)
