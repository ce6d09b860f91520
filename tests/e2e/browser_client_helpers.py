"""Building blocks of the browser client's tests (`test_browser_client.py`): the service and a
static server of the test page on two origins, a TCP proxy between the browser and the service,
and a `Device`, one browser window showing `browser_client_page.html`.

Selenium blocks: every `Device` method is called through `asyncio.to_thread`, so this event
loop (which serves the service, the page and the proxy) keeps running meanwhile.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Awaitable, Callable, MutableMapping
from pathlib import Path
from typing import Any
from urllib.parse import urlencode, urlsplit

import httpx

from realtime.app import create_app
from realtime.store.redis_client import RedisClient
from tests.conftest import livekit_settings, serving
from tests.e2e.browser_helpers import library_script
from tests.e2e.sse_helpers import stream
from tests.tcp_proxy import TcpProxy, _Link

PAGE = Path(__file__).with_name("browser_client_page.html")
WAIT_S = 30

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]


async def page_app(scope: Scope, receive: Receive, send: Send) -> None:
    """The app's own origin: the test page at `/`, nothing else."""
    if scope["type"] == "lifespan":
        while (await receive())["type"] != "lifespan.shutdown":
            await send({"type": "lifespan.startup.complete"})
        await send({"type": "lifespan.shutdown.complete"})
        return
    found = scope["path"] == "/"
    body = PAGE.read_bytes() if found else b"not found"
    kind = b"text/html; charset=utf-8" if found else b"text/plain"
    await send({"type": "http.response.start", "status": 200 if found else 404,
                "headers": [(b"content-type", kind), (b"cache-control", b"no-store")]})  # fmt: skip
    await send({"type": "http.response.body", "body": body})


class AnswerCuttingProxy(TcpProxy):
    """`TcpProxy` for HTTP: after `arm(pattern, forward=True)` the reply's head (status line,
    header fields) still reaches the client, then the connection is cut: the answer is lost
    after it began. A browser never repairs that loss by itself; a reply lost whole it does
    repair, once, by sending the request again when the connection was a reused one."""

    async def _reply(self, link: _Link, data: bytes, writer: asyncio.StreamWriter) -> None:
        if not link.swallow:
            writer.write(data)
            await writer.drain()
        elif not link.replied.is_set():
            link.held += data
            end = link.held.find(b"\r\n\r\n")
            if end >= 0:
                writer.write(link.held[: end + 4])
                await writer.drain()
                link.replied.set()  # the proxy cuts every connection now


@contextlib.asynccontextmanager
async def origins(
    livekit: Any, store: RedisClient, **settings: Any
) -> AsyncIterator[tuple[str, str, AnswerCuttingProxy, httpx.AsyncClient]]:
    """(page origin, the service's origin as the browser reaches it: through the proxy, the
    proxy, a client of the service itself). The service lists the page's origin in
    AIM_CORS_ORIGINS, as a deployment serving an app from elsewhere does; `settings` are the
    service's others."""
    async with serving(page_app) as page_origin:
        configured = livekit_settings(livekit, cors_origins=(page_origin,), **settings)
        app = create_app(configured, store=store, tracer_provider=None)
        async with (
            serving(app) as base_url,
            httpx.AsyncClient(base_url=base_url, timeout=30) as http,
        ):
            address = urlsplit(base_url)
            host, port = address.hostname or "127.0.0.1", address.port or 80
            connect = lambda: asyncio.open_connection(host, port)  # noqa: E731
            async with AnswerCuttingProxy(connect) as proxy:
                yield page_origin, f"http://127.0.0.1:{proxy.port}", proxy, http


class Device:
    """One window of the browser showing the test page as one device."""

    def __init__(self, driver: Any, url: str, *, new_window: bool) -> None:
        from selenium.webdriver.support.ui import WebDriverWait

        self.driver = driver
        if new_window:
            driver.switch_to.new_window("window")
        self.handle = driver.current_window_handle
        self.wait = WebDriverWait(driver, WAIT_S, poll_frequency=0.05)
        driver.get(url)
        self.until("library", "loaded")

    @staticmethod
    def url(page_origin: str, service: str, token: str, device: str, **more: str) -> str:
        return f"{page_origin}/?" + urlencode({"service": service, "token": token,
                                               "device": device, **more})  # fmt: skip

    def _element(self, element_id: str) -> Any:
        from selenium.webdriver.common.by import By

        if self.driver.current_window_handle != self.handle:
            self.driver.switch_to.window(self.handle)
        return self.driver.find_element(By.ID, element_id)

    def text(self, element_id: str) -> str:
        text: str = self._element(element_id).text
        return text

    def items(self, list_id: str) -> list[str]:
        from selenium.webdriver.common.by import By

        self._element(list_id)  # this window
        found = self.driver.find_elements(By.CSS_SELECTOR, f"#{list_id} li")
        return [item.text for item in found]

    def click(self, element_id: str) -> None:
        self._element(element_id).click()

    def type(self, element_id: str, text: str) -> None:
        field = self._element(element_id)
        field.clear()
        field.send_keys(text)

    def shown(self, element_id: str) -> bool:
        shown: bool = self._element(element_id).is_displayed()
        return shown

    def until(self, element_id: str, text: str) -> None:
        self.wait.until(lambda _: self.text(element_id) == text,
                        f"#{element_id} never showed {text!r}")  # fmt: skip

    def until_true(self, check: Callable[[], bool], what: str) -> None:
        self.wait.until(lambda _: check(), what)

    def until_count(self, list_id: str, count: int) -> list[str]:
        self.until_true(lambda: len(self.items(list_id)) >= count,
                        f"#{list_id} has fewer than {count} items")  # fmt: skip
        return self.items(list_id)

    def frames(self) -> list[tuple[int, str, str]]:
        """(stream, SSE id, the rest) of every frame the page's streams received, in order."""
        found = []
        for line in self.items("frames"):
            stream, event_id, rest = line.split(" ", 2)
            found.append((int(stream), event_id, rest))
        return found

    def connections(self) -> list[tuple[int, str]]:
        """(stream, the Last-Event-ID it was opened with, or "none") of every stream opened."""
        opened = (line.split(" ") for line in self.items("connections"))
        return [(int(n), sent) for n, sent in opened]

    def requests(self, method: str) -> list[dict[str, Any]]:
        """The bodies of the requests of `method` the library sent (every attempt)."""
        found = []
        for line in self.items("requests"):
            name, body = line.split(" ", 1)
            if name == method:
                found.append(json.loads(body))
        return found

    def script(self, source: str, *args: Any) -> Any:
        """Run `source` in this window (asynchronously: it calls its last argument)."""
        self._element("library")  # this window
        self.driver.set_script_timeout(WAIT_S)
        return self.driver.execute_async_script(source, *args)

    def events(self, name: str) -> list[dict[str, Any]]:
        """The payloads of the library's `name` events, in order."""
        found = []
        for line in self.items("events"):
            event, _, payload = line.partition(" ")
            if event == name:
                found.append(json.loads(payload))
        return found


async def server_frames_after(
    http: httpx.AsyncClient, task_id: str, last_event_id: str
) -> list[tuple[str, str]]:
    """The service's own event stream of the task after `last_event_id`, up to its end, in the
    page's notation (SubscribeToTask resumed there)."""
    params = {"id": task_id, "historyLength": 0}
    async with stream(http, "SubscribeToTask", params, last_event_id=last_event_id) as reader:
        events = await reader.rest(within=10)
    frames = []
    for event in events:
        assert event.id is not None
        item = event.result.get("task") or event.result["statusUpdate"]
        meta = item["metadata"]["urn:aim:a2a:realtime:v1"]
        rest = f"{meta['sessionState']} {meta['sessionEpoch']} {item['status']['state']}"
        frames.append((event.id, rest))
    return frames


def resumed_exactly(frames: list[tuple[int, str, str]], connections: list[tuple[int, str]]) -> None:
    """Each stream after the first was opened with the id of the last frame received before it."""
    assert connections[0] == (1, "none"), connections
    for stream_no, sent in connections[1:]:
        before = [event_id for n, event_id, _ in frames if n < stream_no]
        assert before, (stream_no, frames)
        assert sent == before[-1], (stream_no, sent, before[-1])


# what the page's library throws, as plain data (run by `Device.script`)
TYPED_ERRORS = library_script(
    "service, token, dead, done",
    """\
  const seen = (e) => ({name: e.name, code: e.code, reason: e.reason, message: e.message,
    metadata: e.metadata, httpStatus: e.httpStatus, retryable: e.retryable,
    currentEpoch: e.currentEpoch ?? null, violations: e.violations ?? null,
    typed: e instanceof lib.AimError});
  const thrown = (call) => call().then(() => null, seen);
  const client = new lib.AimClient({baseUrl: service, token});
  const fast = {attempts: 2, baseDelayMs: 10, maxDelayMs: 10};
  const vision = ["audio_input", "audio_output", "vision_input"];
  const session = await client.createSession({endpointKey: "k".repeat(129)});
  const stranger = new lib.AimClient({baseUrl: service, token: "not-a-token"});
  done({
    rejected: await thrown(() => client.createSession({endpointKey: "k",
                                                       requiredCapabilities: vision})),
    invalidParams: await thrown(() => session.join()),
    notFound: await thrown(() => client.call("aim.realtime.GetSession",
                                             {sessionId: crypto.randomUUID()})),
    auth: await thrown(() => stranger.createSession({endpointKey: "k"})),
    noAnswer: await thrown(() => new lib.AimClient({baseUrl: dead, token, retry: fast})
                                   .createSession({endpointKey: "k"})),
    badDecision: await thrown(() => session.confirm("op", "maybe")),
  });
""",
)


# window.device's hold and release (browser_client_page.html), run by `Device.script`
HOLD = "const [method, done] = arguments; window.device.hold(method); done(true);"
RELEASE = "const [method, done] = arguments; window.device.release(method); done(true);"

# the library alone, against a scripted service (its `fetch` option), run by `Device.script`:
# what it sends and what it tells the app where the service says something unusual
SCRIPTED = library_script(
    "service, done",
    """\
  const RT = "urn:aim:a2a:realtime:v1";
  const INPUT = "TASK_STATE_INPUT_REQUIRED";
  const seen = (e) => ({name: e.name, code: e.code, reason: e.reason, httpStatus: e.httpStatus});
  const until = async (check, what) => {
    for (const end = Date.now() + 5000; !check();) {
      if (Date.now() > end) throw new Error(`never: ${what}`);
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
  };
  const json = (body, status = 200) => new Response(JSON.stringify(body),
    {status, headers: {"content-type": "application/json"}});
  const task = ({state = "TASK_STATE_WORKING", version = 1, sessionState = "active",
                 requirement = null} = {}) => ({
    id: "t1", contextId: "c1",
    status: {state, ...(requirement ? {message: {messageId: "m", role: "ROLE_AGENT",
                                                 parts: [{text: "?"}, {data: requirement}]}} : {})},
    metadata: {[RT]: {sessionId: "s1", sessionEpoch: 1, sessionState, taskVersion: version}},
  });
  const resource = (state) => ({session: {sessionId: "s1", taskId: "t1", sessionEpoch: 1, state,
                                          version: 1, endpoints: [], endReason: "done"}});
  const frame = (id, item, kind = "statusUpdate") =>
    `id: ${id}\\ndata: ${JSON.stringify({jsonrpc: "2.0", id: 1, result: {[kind]: item}})}\\n\\n`;
  const errorFrame = (code) =>
    `data: ${JSON.stringify({jsonrpc: "2.0", id: 1, error: {code, message: "said"}})}\\n\\n`;
  const asked = (version) => ({requirementId: "r1", operationId: "op1", action: {title: "Book"},
                               actionDigest: "d1", expectedVersion: version});

  // answers[method]: a result, a function of the params giving one, or a Response; streams:
  // the SSE text of each subscribe in turn, the last kept open (`push` adds to it)
  function scripted(answers, streams = []) {
    const calls = [];
    let open = null;
    const fetch = async (url, init) => {
      const {id, method, params} = JSON.parse(init.body);
      calls.push({method, params, lastEventId: init.headers["Last-Event-ID"] ?? null});
      if (method === "SubscribeToTask") {
        if (streams.length === 0) {
          return json({jsonrpc: "2.0", id, error: {code: -32001, message: "no more streams"}});
        }
        const text = streams.shift();
        const last = streams.length === 0;
        const body = new ReadableStream({start(controller) {
          controller.enqueue(new TextEncoder().encode(text));
          if (last) open = controller; else controller.close();
          init.signal?.addEventListener("abort", () => {
            try { controller.error(new DOMException("aborted", "AbortError")); } catch {}
          });
        }});
        return new Response(body, {headers: {"content-type": "text/event-stream"}});
      }
      const answer = answers[method];
      if (answer === undefined) {
        return json({jsonrpc: "2.0", id, error: {code: -32601, message: `no ${method}`}});
      }
      const value = typeof answer === "function" ? answer(params) : answer;
      return value instanceof Response ? value : json({jsonrpc: "2.0", id, result: value});
    };
    const push = (text) => open.enqueue(new TextEncoder().encode(text));
    const sent = (method) => calls.filter((c) => c.method === method);
    return {fetch, calls, push, sent};
  }
  const client = (service_, options = {}) =>
    new lib.AimClient({baseUrl: service, token: "t", fetch: service_.fetch, ...options});
  const out = {};

  // confirm via the task: the requirement as the session shows it now, else as GetTask says
  const confirming = scripted({
    SendMessage: {task: task({sessionState: "ready"})},
    ContinueTask: task({version: 6}),
    "aim.realtime.GetSession": resource("ready"),
    "aim.realtime.GetOperation": {operation: {operationId: "op1", state: "running"}},
    GetTask: task({state: INPUT, version: 5, requirement: asked(5)}),
  }, [frame("1-0", task({state: INPUT, version: 2, requirement: asked(2)}), "task")
      + frame("2-0", task({state: INPUT, version: 3, requirement: asked(3)}))]);
  const one = await client(confirming).createSession({endpointKey: "k"});
  one.follow();
  await until(() => one.taskVersion === 3, "task version 3");
  await one.confirm("op1", "approve", {via: "task"});
  confirming.push(frame("3-0", task({version: 4})));
  await until(() => one.taskVersion === 4 && one.requirement === null, "no requirement");
  await one.confirm("op1", "approve", {via: "task"});
  out.expectedVersions = confirming.sent("ContinueTask").map((c) => c.params.expectedVersion);
  out.taskReads = confirming.sent("GetTask").length;
  one.close();

  // join() on a session that stays provisioning: TIMEOUT, and nothing registered
  const slow = scripted({
    SendMessage: {task: task({sessionState: "provisioning"})},
    "aim.realtime.GetSession": resource("provisioning"),
  });
  const two = await client(slow, {readyTimeoutMs: 300})
    .createSession({endpointKey: "k", returnImmediately: true});
  out.timeout = await two.join().then(() => null, seen);
  out.registered = slow.sent("aim.realtime.RegisterEndpoint").length;

  // HTTP 401/403 is an AuthError whatever the JSON-RPC code
  const denied = scripted({GetTask: json({jsonrpc: "2.0", id: 1,
                                          error: {code: -32603, message: "no"}}, 403)});
  out.auth = await client(denied).call("GetTask", {id: "t1"}).then(() => null, seen);

  // the stream: a frame that is not JSON is skipped, an error frame is a break (reconnect after
  // the last id), -32004 on a terminal task is the end
  const streaming = scripted({
    SendMessage: {task: task({sessionState: "ready"})},
    GetTask: task({state: "TASK_STATE_COMPLETED", version: 9, sessionState: "ending"}),
    "aim.realtime.GetSession": resource("ending"),
  }, ["data: not json\\n\\n" + frame("1-0", task({sessionState: "ready"}), "task")
      + errorFrame(-32603) + frame("8-0", task({sessionState: "failed", version: 8})),
      frame("2-0", task({version: 2})) + errorFrame(-32004), ""]);
  const three = await client(streaming).createSession({endpointKey: "k", returnImmediately: true});
  const events = [];
  for (const name of ["state", "ended", "error"]) {
    three.on(name, (payload) => events.push([name, name === "error" ? seen(payload.error)
                                                                    : payload]));
  }
  await until(() => events.some(([name]) => name === "ended" || name === "error"), "an end");
  await new Promise((resolve) => setTimeout(resolve, 300));
  out.streamEvents = events;
  out.subscribes = streaming.sent("SubscribeToTask").map((c) => c.lastEventId);
  done(out);
""",
)


# the library's 401s against a scripted service (its `fetch` option), run by `Device.script`:
# which error class each reason gives, and when the token function is asked again
AUTH_ERRORS = """
const [service, done] = arguments;
(async () => {
  const lib = await import(`${service}/sdk/aim-realtime.js`);
  const seen = (e) => ({name: e.name, authReason: e.authReason ?? null, code: e.code,
    httpStatus: e.httpStatus, auth: e instanceof lib.AuthError});
  const refused = (reason) => new Response(JSON.stringify({jsonrpc: "2.0", id: 1, error: {
    code: -31401, message: "no", data: [{"@type": "type.googleapis.com/google.rpc.ErrorInfo",
      reason: "UNAUTHENTICATED", domain: "urn:aim:a2a:realtime:v1", metadata: {reason}}]}}),
    {status: 401, headers: {"content-type": "application/json"}});
  const ok = () => new Response(JSON.stringify({jsonrpc: "2.0", id: 1, result: {tasks: []}}),
    {headers: {"content-type": "application/json"}});
  // answers in turn; records the Authorization header of each request
  const scripted = (...answers) => {
    const sent = [];
    const fetch = async (url, init) => {
      sent.push(init.headers["Authorization"]);
      return answers.shift()();
    };
    return {fetch, sent};
  };
  const counting = () => {
    const token = () => `t${++token.asked}`;
    token.asked = 0;
    return token;
  };
  const run = async (token, ...answers) => {
    const wire = scripted(...answers);
    const client = new lib.AimClient({baseUrl: service, token, fetch: wire.fetch,
                                      retry: {attempts: 3, baseDelayMs: 1, maxDelayMs: 1}});
    const outcome = await client.call("ListTasks", {}).then((r) => ({result: r}),
                                                             (e) => ({error: seen(e)}));
    return {...outcome, sent: wire.sent, asked: token.asked ?? null};
  };
  done({
    refreshed: await run(counting(), () => refused("token_expired"), ok),
    expiredAgain: await run(counting(), () => refused("token_expired"),
                            () => refused("token_expired")),
    expiredFixed: await run("fixed", () => refused("token_expired")),
    misconfigured: await run(counting(), () => refused("invalid_signature")),
    wrongAudience: await run(counting(), () => refused("invalid_audience")),
    missing: await run(counting(), () => refused("missing_token")),
  });
})().catch((e) => done({crashed: `${e} ${e.stack}`}));
"""
