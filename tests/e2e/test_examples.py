"""The examples of docs/client-guide.md and docs/agents.md, run the way their readers run them,
against a real service (a private Redis, the LiveKit stand-in): `docs/examples/journey.py` as a
subprocess (what it prints, its exit status), `docs/examples/browser/index.html` in headless
Chromium (what a person sees on the page), and `docs/examples/agent_worker.py`'s entrypoint
with stand-ins for the parts of livekit-agents it uses (what it hands a successor).

What only LiveKit and an agent worker can do is done here as they would do it: the device's
and the agent's participant_joined webhooks, signed as LiveKit signs them, and the agent's
confirmation request over the provider API.

The page is served from the service's origin, the way a deployment puts both behind one reverse
proxy: a small front server here serves the page at `/` and passes `/a2a` (streaming (SSE)
included) and `/sdk/` (the client library the page loads) through to the service. From
another origin it works once AIM_CORS_ORIGINS lists that origin, and a service that lists none
is refused by the browser.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from realtime.app import create_app
from realtime.auth import mint_dev_token
from realtime.store.redis_client import RedisClient
from tests.cli_processes import free_port
from tests.conftest import livekit_settings, rpc, serving, token
from tests.e2e.agent_operation_helpers import (
    agent_asks_to_book,
    data_to_agent,
    provider_token_of,
    wait_for_data,
)
from tests.e2e.agent_presence_helpers import presence_world, until
from tests.e2e.agent_worker_helpers import jobs, worker_module
from tests.e2e.browser_helpers import binaries, chromium
from tests.e2e.browser_wire_helpers import Receive, Scope, Send, read_body
from tests.e2e.realtime_helpers import call
from tests.e2e.rotation_helpers import (
    MARGIN_S,
    Agent,
    interact,
    live_session,
    start,
    successor_dispatched,
)
from tests.e2e.webhook_helpers import deliver, room, webhook_event
from tests.npm_package import pack, unpacked

pytestmark = [pytest.mark.e2e, pytest.mark.redis]

EXAMPLES = Path(__file__).resolve().parents[2] / "docs" / "examples"
CLIENT = Path(__file__).resolve().parents[2] / "clients" / "python"
JOURNEY = EXAMPLES / "journey.py"
PAGE = EXAMPLES / "browser" / "index.html"
PUBLIC_LIVEKIT = "wss://media.example"  # livekit_settings' AIM_LIVEKIT_PUBLIC_URL
AGENT = "agent-AJ_worker-1"
UUID = r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"
WAIT_S = 15


@contextlib.asynccontextmanager
async def service(
    livekit: Any, store: RedisClient, **settings: Any
) -> AsyncIterator[tuple[str, httpx.AsyncClient]]:
    app = create_app(livekit_settings(livekit, **settings), store=store, tracer_provider=None)
    async with serving(app) as base_url, httpx.AsyncClient(base_url=base_url, timeout=30) as http:
        yield base_url, http


# --- docs/examples/journey.py --------------------------------------------------------------------


@contextlib.asynccontextmanager
async def journey(
    base_url: str, *args: str, env_token: str | None = None, python: str = sys.executable
) -> AsyncIterator[asyncio.subprocess.Process]:
    """The script running against `base_url` (this event loop keeps serving meanwhile), run
    by `python` (the project's environment unless given)."""
    env = {k: v for k, v in os.environ.items() if k not in ("TOKEN", "PYTHONPATH")}
    if env_token is not None:
        env["TOKEN"] = env_token
    process = await asyncio.create_subprocess_exec(
        python,
        str(JOURNEY),
        "--url",
        base_url,
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=env,
    )
    try:
        yield process
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()


async def finished(process: asyncio.subprocess.Process) -> tuple[int, list[str], str]:
    out, err = await asyncio.wait_for(process.communicate(), 40)
    assert process.returncode is not None
    return process.returncode, out.decode().splitlines(), err.decode()


def steps(lines: list[str]) -> list[str]:
    return [line.split()[0] for line in lines]


def client_wheel_environment(tmp_path: Path) -> str:
    """The client's wheel built from clients/python and installed alone (with httpx, from uv's
    cache: nothing is fetched) into a fresh virtual environment: its interpreter."""
    uv = shutil.which("uv")
    if uv is None:
        if os.environ.get("CI"):
            pytest.fail("uv is needed to build the client's wheel (scripts/install installs it)")
        pytest.skip("uv is not installed")
    dist, venv = tmp_path / "dist", tmp_path / "venv"
    run = functools.partial(subprocess.run, check=True, capture_output=True, timeout=120)
    run([uv, "build", "--wheel", "--offline", "--out-dir", str(dist), str(CLIENT)])
    [wheel] = dist.glob("aim_realtime_client-*.whl")
    run([uv, "venv", "--offline", "--python", sys.executable, str(venv)])
    python = str(venv / "bin" / "python")
    run([uv, "pip", "install", "--offline", "--python", python, str(wheel)])
    return python


async def test_the_client_wheel_installed_alone_runs_the_journey(livekit, store, tmp_path):
    """What `pip install aim-realtime-client` gives a new user: the client and httpx, nothing of
    the service, and the whole journey runs on it against the local LiveKit for development
    (here the same stand-in, in process, sending its webhooks to the service, its simulated
    agent answering): connected, a text to the agent, an approved action, a handoff, the end."""
    python = await asyncio.to_thread(client_wheel_environment, tmp_path)
    probe = "import importlib.util as u, sys; print([m for m in ('aim_realtime_client', "
    probe += "'realtime', 'litestar', 'redis', 'msgspec') if u.find_spec(m)])"
    found = await asyncio.create_subprocess_exec(
        python, "-c", probe, stdout=asyncio.subprocess.PIPE, cwd=tmp_path
    )
    out, _ = await found.communicate()
    assert out.decode().strip() == "['aim_realtime_client']"
    port = free_port()  # the service's: where the simulated agent reaches the provider API
    settings = livekit_settings(
        livekit, livekit_public_url=livekit.ws_url, public_base_url=f"http://127.0.0.1:{port}"
    )
    app = create_app(settings, store=store, tracer_provider=None)
    async with serving(app, settings, port=port) as base_url:
        livekit.set_webhook_target(f"{base_url}/livekit/webhook")
        livekit.auto_jobs = livekit.agents_speak = True
        whole = ("--connect", "--say", "hello", "--confirm", "Book a table", "--handoff", "tablet")
        async with journey(base_url, *whole, env_token=token("alice"), python=python) as process:
            code, lines, err = await finished(process)
    assert (code, err) == (0, ""), lines
    assert steps(lines) == [
        "create", "ready", "register", "join", "connect", "agent", "agent", "say", "confirm",
        "confirm", "connect", "handoff", "end",
    ]  # fmt: skip
    assert lines[9].endswith("approved: succeeded"), lines[9]
    assert re.search(r"session active; journey-script superseded$", lines[11]), lines[11]


async def test_journey_creates_joins_and_ends_a_session(livekit, store):
    async with service(livekit, store) as (base_url, http):
        async with journey(base_url, env_token=token("alice")) as process:
            code, lines, err = await finished(process)

        assert (code, err) == (0, ""), lines
        assert steps(lines) == ["create", "ready", "register", "join", "end"]
        created = re.fullmatch(rf"create +session ({UUID}) task ({UUID}): ready, epoch 1", lines[0])
        assert created, lines[0]
        sid, task_id = created.groups()
        assert lines[1] == f"ready     session ready: room {room(sid)}, agent dispatched"
        registered = re.fullmatch(rf"register +endpoint ({UUID}) \(registered\), session ready",
                                  lines[2])  # fmt: skip
        assert registered, lines[2]
        assert lines[3].startswith(
            f"join      session joining, epoch 1: LiveKit {PUBLIC_LIVEKIT} room {room(sid)}, "
            "join token issued (expires 20"
        ), lines[3]
        assert lines[4] == "end       session ending, task TASK_STATE_COMPLETED"

        # what the service and LiveKit saw: the script really did each step
        session = (await call(http, "GetSession", sessionId=sid))["result"]["session"]
        assert session["taskId"] == task_id
        assert session["endReason"] == "journey finished"
        assert [(e["endpointId"], e["clientEndpointKey"]) for e in session["endpoints"]] == [
            (registered.group(1), "journey-script")
        ]
        assert [c.request.name for c in livekit.calls_to("CreateRoom")] == [room(sid)]
        # the room was created with the agent's dispatch in it: one call, one agent
        created = livekit.calls_to("CreateRoom")
        assert [[a.agent_name for a in c.request.agents] for c in created] == [
            ["aim-realtime-agent"]
        ]
        assert livekit.calls_to("CreateDispatch") == []
        await livekit.wait_for_call("DeleteRoom")
        assert room(sid) not in livekit.rooms
        task = (await rpc(http, "GetTask", {"id": task_id, "historyLength": 0}))["result"]
        assert task["status"]["state"] == "TASK_STATE_COMPLETED"


async def test_journey_says_something_once_the_agent_has_joined(livekit, store):
    async with service(livekit, store) as (base_url, http):
        args = ("--token", token("alice"), "--say", "hello from the journey", "--device", "cli")
        async with journey(base_url, *args) as process:
            assert process.stdout is not None
            seen: list[str] = []
            while not seen or not seen[-1].startswith("agent "):  # joined, now waiting
                line = await asyncio.wait_for(process.stdout.readline(), WAIT_S)
                assert line, (seen, await process.stderr.read() if process.stderr else b"")
                seen.append(line.decode().rstrip("\n"))
            created = re.search(rf"session ({UUID})", seen[0])
            assert created, seen
            sid = created.group(1)
            assert seen[-1] == "agent     waiting up to 30 s for the agent to join the room"
            await asyncio.sleep(0.6)  # it keeps waiting while the agent is not there
            assert process.returncode is None
            assert data_to_agent(livekit, room(sid)) == []

            # the agent worker LiveKit dispatched joins the room
            livekit.add_participant(room(sid), AGENT, kind="agent")
            joined = webhook_event("participant_joined", room(sid), identity=AGENT, agent=True)
            assert await deliver(http, joined) == "applied"
            code, rest, err = await finished(process)

        assert (code, err) == (0, "")
        lines = seen + rest
        assert steps(lines) == ["create", "ready", "register", "join", "agent", "agent", "say",
                                "end"]  # fmt: skip
        assert lines[5] == f"agent     agent joined as {AGENT}"
        assert re.fullmatch(r"say +text delivered to the agent \(accepted 20.*\), session joining",
                            lines[6]), lines[6]  # fmt: skip
        [message] = await wait_for_data(livekit, room(sid), "input.text")
        assert message["payload"] == {"text": "hello from the journey"}
        assert list(livekit.data_messages[-1].destination_identities) == [AGENT]
        session = (await call(http, "GetSession", sessionId=sid))["result"]["session"]
        assert [e["clientEndpointKey"] for e in session["endpoints"]] == ["cli"]


async def test_journey_stops_at_the_first_json_rpc_error_with_one_line(livekit, store):
    async with service(livekit, store) as (base_url, _):
        foreign = mint_dev_token("another-secret-" + "x" * 40, subject="alice",
                                 scopes=("a2a.invoke",), ttl_s=60, now=time.time())  # fmt: skip
        async with journey(base_url, "--token", foreign) as process:
            code, lines, err = await finished(process)
        assert (code, lines) == (1, [])
        assert err.count("\n") == 1
        assert err.startswith("journey: SendMessage: -31401 UNAUTHENTICATED: "), err

        # a request the service refuses halfway: a clientEndpointKey over 128 characters
        async with journey(base_url, "--device", "d" * 129, env_token=token("alice")) as process:
            code, lines, err = await finished(process)
        assert code == 1
        assert steps(lines) == ["create", "ready"]
        assert err.count("\n") == 1
        refused = "journey: aim.realtime.RegisterEndpoint: -32602 INVALID_PARAMS: "
        assert err.startswith(refused), err
        assert "params.clientEndpointKey" in err

        async with journey(base_url) as process:  # no --token, no TOKEN
            code, lines, err = await finished(process)
        assert (code, lines) == (2, [])
        assert "no token: pass --token or set TOKEN" in err


# --- docs/examples/browser/index.html ------------------------------------------------------------

HOP_BY_HOP = {b"host", b"connection", b"keep-alive", b"content-length", b"transfer-encoding"}


def front(
    upstream: str | None, sdk: Path | None = None
) -> Callable[[Scope, Receive, Send], Awaitable[None]]:
    """An ASGI app standing in for the reverse proxy of a deployment: `GET /` is the example
    page, `/a2a` and `/sdk/` go to the service and its answer comes back as it is sent (SSE
    too); with no `upstream`, a plain static server of the page (another origin than the
    service's). With `sdk` (an unpacked npm package), `/sdk/<module>.js` is its `src/` file."""
    modules = {f"/sdk/{f.name}": f.read_bytes() for f in (sdk or Path()).glob("src/*.js")}

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            while (await receive())["type"] != "lifespan.shutdown":
                await send({"type": "lifespan.startup.complete"})
            await send({"type": "lifespan.shutdown.complete"})
        elif sdk is not None and scope["path"].startswith("/sdk/"):
            found = modules.get(scope["path"])
            if found is None:
                await answer(send, 404, b"not found", b"text/plain")
            else:
                await answer(send, 200, found, b"text/javascript; charset=utf-8")
        elif upstream is not None and (
            scope["path"] in ("/a2a", "/a2a/") or scope["path"].startswith("/sdk/")
        ):
            await forward(upstream, scope, receive, send)
        elif scope["method"] == "GET" and scope["path"] == "/":
            await answer(send, 200, PAGE.read_bytes(), b"text/html; charset=utf-8")
        else:
            await answer(send, 404, b"not found", b"text/plain")

    return app


async def answer(send: Send, status: int, body: bytes, content_type: bytes) -> None:
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", content_type)]})  # fmt: skip
    await send({"type": "http.response.body", "body": body})


async def forward(upstream: str, scope: Scope, receive: Receive, send: Send) -> None:
    body = await read_body(receive)
    sent = [(k, v) for k, v in scope["headers"] if k.lower() not in HOP_BY_HOP]
    path = upstream + scope["path"]
    async with (
        httpx.AsyncClient(timeout=httpx.Timeout(10, read=None)) as client,  # SSE: no read limit
        client.stream(scope["method"], path, content=body, headers=sent) as reply,
    ):
        kept = [(k, v) for k, v in reply.headers.raw if k.lower() not in HOP_BY_HOP]
        await send({"type": "http.response.start", "status": reply.status_code, "headers": kept})

        async def relay() -> None:
            async for chunk in reply.aiter_raw():
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
            await send({"type": "http.response.body", "body": b""})

        async def gone() -> None:
            while (await receive())["type"] != "http.disconnect":
                pass

        tasks = [asyncio.ensure_future(relay()), asyncio.ensure_future(gone())]
        done, pending = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
        for task in done:
            task.result()


class Page:
    """What a person does on the example page and sees there (selenium, blocking)."""

    def __init__(self, driver: Any) -> None:
        from selenium.webdriver.support.ui import WebDriverWait

        self.driver = driver
        self.wait = WebDriverWait(driver, WAIT_S)

    def element(self, element_id: str) -> Any:
        from selenium.webdriver.common.by import By

        return self.driver.find_element(By.ID, element_id)

    def text(self, element_id: str) -> str:
        text: str = self.element(element_id).text
        return text

    def log(self) -> list[str]:
        from selenium.webdriver.common.by import By

        items = self.driver.find_elements(By.CSS_SELECTOR, "#log li span")  # after the time
        return [item.text for item in items]

    def until_shown(self, element_id: str, text: str) -> None:
        self.wait.until(lambda _: self.text(element_id) == text, f"#{element_id} != {text!r}")

    def until_logged(self, text: str) -> None:
        self.wait.until(lambda _: any(text in line for line in self.log()), f"no log {text!r}")

    def start(self, url: str, bearer: str) -> None:
        self.driver.get(url)
        assert self.driver.title == "AIM realtime · browser example"
        assert self.element("service").get_attribute("value") == url.rstrip("/")
        self.element("token").send_keys(bearer)
        self.element("start").click()

    def say(self, text: str) -> None:
        self.element("text").send_keys(text)
        self.element("send").click()

    def problems(self) -> list[str]:
        logs = self.driver.get_log("browser")
        return [e["message"] for e in logs if e["level"] in ("SEVERE", "WARNING")]


@pytest.mark.slow
async def test_the_browser_page_shows_a_session_live_from_start_to_end(livekit, store):
    browser, driver_path = binaries()
    async with (
        service(livekit, store) as (base_url, http),
        serving(front(base_url)) as page_url,
        contextlib.AsyncExitStack() as stack,
    ):
        # entered last, left first: the browser is gone before the servers stop
        driver = await asyncio.to_thread(stack.enter_context, chromium(browser, driver_path))
        page = Page(driver)

        def started() -> str:
            page.start(page_url + "/", token("alice"))
            page.until_shown("state", "joining")
            page.until_logged("joined: LiveKit")
            return page.text("session")

        sid = await asyncio.to_thread(started)
        assert re.fullmatch(UUID, sid)
        log = page.log()
        assert log[0] == f"created session {sid} (provisioning)"
        assert "session ready (epoch 1)" in log
        endpoint = next(line for line in log if line.startswith("device registered"))
        assert re.fullmatch(rf"device registered: endpoint ({UUID}) \(registered\)", endpoint)
        assert f"joined: LiveKit {PUBLIC_LIVEKIT}, room {room(sid)}, token issued" in log
        assert page.text("epoch") == "1"
        assert page.text("task-state") == "TASK_STATE_WORKING"
        assert page.text("media").startswith(f"{PUBLIC_LIVEKIT} · room {room(sid)} · token issued")
        assert page.element("connect").is_enabled()
        session = (await call(http, "GetSession", sessionId=sid))["result"]["session"]
        device = session["activeEndpointId"]
        assert endpoint == f"device registered: endpoint {device} (registered)"

        # the tab connects to LiveKit with the token (here: LiveKit's webhook says it did)
        arrived = webhook_event("participant_joined", room(sid), identity=device, epoch=1)
        assert await deliver(http, arrived) == "applied"
        await asyncio.to_thread(page.until_shown, "state", "active")

        # text before the agent is in the room is refused, and the page says why
        def refused() -> None:
            page.say("anyone there?")
            page.wait.until(lambda _: "-31003" in page.text("error"))

        await asyncio.to_thread(refused)
        assert "INVALID_STATE" in page.text("error")
        assert "the agent is not in the room" in page.text("error")
        assert data_to_agent(livekit, room(sid)) == []

        livekit.add_participant(room(sid), AGENT, kind="agent")
        agent = webhook_event("participant_joined", room(sid), identity=AGENT, agent=True)
        assert await deliver(http, agent) == "applied"

        def said() -> None:
            page.element("text").clear()
            page.say("hello from the page")
            page.until_logged("text delivered to the agent")

        await asyncio.to_thread(said)
        assert page.text("error") == ""
        [message] = await wait_for_data(livekit, room(sid), "input.text")
        assert message["payload"] == {"text": "hello from the page"}

        # the agent asks for a confirmation; the person approves it on the page
        provider_token = provider_token_of(livekit, sid)
        operation_id = await agent_asks_to_book(http, provider_token, sid)

        def approved() -> None:
            page.wait.until(lambda _: page.element("ask").is_displayed(), "no confirmation asked")
            assert page.text("ask-title") == "Book a table for two"
            assert page.text("task-state") == "TASK_STATE_INPUT_REQUIRED"
            page.element("approve").click()
            page.until_logged("approved: operation running")
            page.until_shown("task-state", "TASK_STATE_WORKING")

        await asyncio.to_thread(approved)
        assert "the agent asks: Book a table for two" in page.log()
        got = await call(http, "GetOperation", sessionId=sid, operationId=operation_id)
        assert got["result"]["operation"]["state"] == "running"

        def ended() -> None:
            page.element("end").click()
            page.until_logged("stream closed: task TASK_STATE_COMPLETED")

        await asyncio.to_thread(ended)
        assert page.text("state") == "ending"
        assert page.text("task-state") == "TASK_STATE_COMPLETED"
        assert "EndSession: ending" in page.log()
        assert not page.element("send").is_enabled()
        problems = await asyncio.to_thread(page.problems)
        assert not problems, problems
        storage = "return JSON.stringify(localStorage) + JSON.stringify(sessionStorage)"
        stored = await asyncio.to_thread(driver.execute_script, storage + " + document.cookie")
        assert stored == "{}{}"  # the token stayed in the tab's memory
        task = await rpc(http, "GetTask", {"id": session["taskId"], "historyLength": 0})
        assert task["result"]["status"]["state"] == "TASK_STATE_COMPLETED"


@pytest.mark.slow
async def test_the_browser_page_on_the_local_livekit_runs_the_journey_from_the_npm_tarball(
    livekit, store, tmp_path
):
    """The page opened with ?livekit=dev, next to the local LiveKit for development (here the
    same stand-in, in process, with its webhooks sent to the service and its simulated agent
    speaking), running the library from the tarball `npm pack` makes (the front serves its
    files at /sdk/): Connect joins the room through the library's RoomBinding, the session is
    active, a text reaches the agent, the action it asks for on `/confirm` is approved and
    carried out; a second browser continues the session (a handoff): the first one is told and
    its binding leaves the room, the second connects and talks; the end. Nothing is delivered
    by the test: LiveKit's side is the local LiveKit's."""
    browser, driver_path = binaries()
    package = unpacked(pack(tmp_path / "npm"), tmp_path)
    port = free_port()  # the service's: where the agent reaches the provider API
    settings = livekit_settings(
        livekit, livekit_public_url=livekit.ws_url, public_base_url=f"http://127.0.0.1:{port}"
    )
    app = create_app(settings, store=store, tracer_provider=None)
    async with (
        serving(app, settings, port=port) as base_url,
        httpx.AsyncClient(base_url=base_url, timeout=30) as http,
        serving(front(base_url, sdk=package)) as page_url,
        contextlib.AsyncExitStack() as stack,
    ):
        livekit.set_webhook_target(f"{base_url}/livekit/webhook")
        livekit.auto_jobs = livekit.agents_speak = True
        first = await asyncio.to_thread(stack.enter_context, chromium(browser, driver_path))
        second = await asyncio.to_thread(stack.enter_context, chromium(browser, driver_path))
        page, other = Page(first), Page(second)

        def active() -> str:
            page.driver.get(page_url + "/?livekit=dev")
            assert page.element("service").get_attribute("value") == page_url
            page.element("token").send_keys(token("alice"))
            page.element("start").click()
            page.until_logged("joined: LiveKit")
            page.element("connect").click()
            page.until_logged("LiveKit (local, for development): in room")
            page.until_shown("state", "active")
            return page.text("session")

        sid = await asyncio.to_thread(active)
        assert f"LiveKit (local, for development): in room {room(sid)}, no media" in page.log()
        served = await asyncio.to_thread(
            first.execute_script,
            "return performance.getEntriesByType('resource').map((e) => e.name)"
            ".filter((n) => n.includes('/sdk/'))",
        )
        assert f"{page_url}/sdk/livekit.js" in served  # the tarball's modules, from the front

        def talked() -> None:
            page.wait.until(lambda _: page.element("send").is_enabled(), "send stays disabled")
            page.say("/confirm Book a table")
            page.until_logged("text delivered to the agent")
            page.wait.until(lambda _: page.element("ask").is_displayed(), "no confirmation asked")
            assert page.text("ask-title") == "Book a table"
            page.element("approve").click()
            page.until_logged("approved: operation running")

        await asyncio.to_thread(talked)
        deadline = time.monotonic() + WAIT_S
        while True:  # the simulated agent carries the approved action out: nothing pending
            session = (await call(http, "GetSession", sessionId=sid))["result"]["session"]
            if not session["pendingOperationIds"]:
                break
            assert time.monotonic() < deadline, session
            await asyncio.sleep(0.05)
        said = [m for m, _ in next(iter(livekit.agents.values())).calls]
        assert said.count("aim.provider.UpdateOperation") == 1
        first_device = session["activeEndpointId"]
        assert livekit.participant(room(sid), first_device) is not None

        def handed_over() -> None:
            other.driver.get(page_url + "/?livekit=dev")
            other.element("token").send_keys(token("alice"))
            other.element("resume-id").send_keys(sid)
            other.element("resume").click()
            other.until_logged("joined: LiveKit")
            page.until_logged("this session moved to another device (epoch 2)")
            page.until_logged("LiveKit: left the room")  # the binding disconnected it
            assert not page.element("send").is_enabled()
            other.element("connect").click()
            other.until_logged("LiveKit (local, for development): in room")
            other.until_shown("state", "active")
            other.until_shown("epoch", "2")
            other.wait.until(lambda _: other.element("send").is_enabled(), "send disabled")
            other.say("hello from the second device")
            other.until_logged("text delivered to the agent")

        await asyncio.to_thread(handed_over)
        assert other.log()[0] == f"continuing session {sid} (active)"
        session = (await call(http, "GetSession", sessionId=sid))["result"]["session"]
        second_device = session["activeEndpointId"]
        assert second_device != first_device
        assert livekit.participant(room(sid), first_device) is None  # the first tab left
        assert livekit.participant(room(sid), second_device) is not None
        [*_, hello] = await wait_for_data(livekit, room(sid), "input.text")
        assert hello["payload"] == {"text": "hello from the second device"}

        def ended() -> None:
            other.element("end").click()
            other.until_logged("stream closed: task TASK_STATE_COMPLETED")

        await asyncio.to_thread(ended)
        for browser_page in (page, other):
            problems = await asyncio.to_thread(browser_page.problems)
            assert not problems, problems
        assert livekit.participant(room(sid), second_device) is None  # the binding left


def started_elsewhere(page: Page, page_url: str, service_url: str, bearer: str) -> None:
    """The page opened from its own origin, pointed at the service's."""
    page.driver.get(page_url + "/")
    page.element("service").clear()
    page.element("service").send_keys(service_url)
    page.element("token").send_keys(bearer)
    page.element("start").click()


@pytest.mark.slow
async def test_the_page_on_another_origin_works_once_that_origin_is_allowed(livekit, store):
    browser, driver_path = binaries()
    async with (
        serving(front(None)) as page_url,
        service(livekit, store, cors_origins=(page_url,)) as (base_url, _),
        contextlib.AsyncExitStack() as stack,
    ):
        driver = await asyncio.to_thread(stack.enter_context, chromium(browser, driver_path))
        page = Page(driver)

        def joined() -> None:
            started_elsewhere(page, page_url, base_url, token("alice"))
            page.until_shown("state", "joining")  # the stream's event, over CORS too
            page.until_logged("joined: LiveKit")

        await asyncio.to_thread(joined)
        assert page.text("error") == ""


@pytest.mark.slow
async def test_the_page_on_another_origin_is_refused_by_a_service_that_allows_none(livekit, store):
    browser, driver_path = binaries()
    async with (
        serving(front(None)) as page_url,
        service(livekit, store) as (base_url, http),
        contextlib.AsyncExitStack() as stack,
    ):
        driver = await asyncio.to_thread(stack.enter_context, chromium(browser, driver_path))
        page = Page(driver)

        def refused() -> str:
            started_elsewhere(page, page_url, base_url, token("alice"))
            page.wait.until(lambda _: page.text("error"), "no error shown")
            return page.text("error")

        assert "Failed to fetch" in await asyncio.to_thread(refused)
        listed = await rpc(http, "ListTasks", {}, subject="alice")
        assert listed["result"]["tasks"] == []  # the browser never sent the call


# --- docs/examples/agent_worker.py ---------------------------------------------------------------

CAP_S = 120  # the worker's MODEL_SESSION_CAP_S: its model's connection lasts two minutes


async def handed(world: Any, session_id: str, agent: Agent, check: Callable[[dict], bool]) -> dict:
    """GetHandover as `agent` until `check` holds of it (bounded): what a successor would get."""
    deadline = time.monotonic() + WAIT_S
    while True:
        body = await agent.call(world, session_id, "GetHandover")
        assert "result" in body, body
        if check(body["result"]):
            return dict(body["result"])
        assert time.monotonic() < deadline, f"not within {WAIT_S} s: {body['result']}"
        await asyncio.sleep(0.05)


def chat_in(handover: dict) -> list[tuple[str, str]]:
    """The chat the worker saved, as (role, text)."""
    context = handover["context"]
    if context is None:
        return []
    return [(i["role"], i["content"][0]) for i in json.loads(context["data"])["items"]]


async def test_the_agent_worker_hands_its_chat_to_its_successor_and_leaves(store, tracer_provider):
    """The LiveKit Agents worker, its livekit-agents parts played by stand-ins
    (agent_worker_helpers): its first job reports its model's deadline and saves the chat after
    each turn; before the deadline the service dispatches a second job, which starts from that
    chat and from the words the first never took in; the first leaves when told to."""
    async with presence_world(store, tracer_provider, auto_jobs=False) as world:
        with worker_module(world.clock, CAP_S) as worker:
            async with jobs(worker, world) as run:
                session_id, _, first = await live_session(world)
                one = run(first.dispatch, first.identity)
                # joined, its deadline reported, listening: it asks the user to book a table
                await until(world, session_id, lambda s: len(s["pendingOperationIds"]) == 1)
                heard = await interact(world, session_id, "a table for two")
                await wait_for_data(world.livekit, room(session_id), "input.text")
                one.deliver(world, session_id)
                saved = await handed(world, session_id, first, lambda h: bool(chat_in(h)))
                assert chat_in(saved) == [
                    ("user", "a table for two"),
                    ("assistant", "You said: a table for two"),
                ]
                assert saved["interactions"] == []  # acknowledged: no successor gets it again
                # said while the first job is busy: it never takes these words in
                lost = await interact(world, session_id, "by the window")
                await wait_for_data(world.livekit, room(session_id), "input.text", 2)
                one.deliver(world, session_id, skip=lambda body: body["commandId"] == lost)
                assert heard != lost

                world.clock.advance(CAP_S - MARGIN_S + 1)  # the rotation starts
                dispatch = await successor_dispatched(world, session_id, 2)
                second = await start(world, session_id, dispatch)
                run(second.dispatch, second.identity)
                given = await handed(world, session_id, second, lambda h: len(chat_in(h)) == 4)
                assert chat_in(given) == [
                    ("user", "a table for two"),
                    ("assistant", "You said: a table for two"),
                    ("user", "by the window"),
                    ("assistant", "You said: by the window"),
                ]
                assert (given["context"]["generation"], given["interactions"]) == (2, [])

                await wait_for_data(world.livekit, room(session_id), "agent.leave")
                one.deliver(world, session_id)
                assert await one.stopped() == "rotated"
                # the second serves, on its own deadline; the first's "left" was refused; the
                # booking was asked for once, by the first
                session = await until(
                    world, session_id, lambda s: s["agent"]["state"] == "listening"
                )
                assert (session["state"], session["agent"]["generation"]) == ("active", 2)
                listed = await second.call(world, session_id, "ListOperations")
                assert len(listed["result"]["operations"]) == 1
