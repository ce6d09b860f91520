"""`aim-realtime livekit-dev`: the local LiveKit for development run on its own, as
docs/local-livekit.md has a developer run it, with a real service configured from the settings
it prints."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from livekit import api

from realtime.app import create_app
from realtime.settings import Settings
from tests.cli_processes import free_port
from tests.conftest import TEST_SECRET, serving, token
from tests.e2e.realtime_helpers import call, create_session, session_of

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
KEY = "standin-cli-key"
SECRET = "standin-cli-secret-0123456789-abcdefghijklmnop"
START_TIMEOUT_S = 20.0
STOP_TIMEOUT_S = 10.0


class Standin:
    """An `aim-realtime livekit-dev` subprocess; its output goes to a file."""

    def __init__(self, process: subprocess.Popen[bytes], log: Path) -> None:
        self.process = process
        self.log = log

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    async def announced(self) -> str:
        """The output once the stand-in says it serves (it prints the stop hint last)."""
        deadline = time.monotonic() + START_TIMEOUT_S
        while "Ctrl-C or SIGTERM stops it." not in (text := self.output()):
            if self.process.poll() is not None:
                pytest.fail(f"the stand-in exited with {self.process.returncode}:\n{text}")
            if time.monotonic() > deadline:
                pytest.fail(f"the stand-in did not start within {START_TIMEOUT_S} s:\n{text}")
            await asyncio.sleep(0.05)
        return text

    async def stop(self, sig: signal.Signals) -> int:
        """Send `sig` to the process by its PID; its exit code once it is gone."""
        os.kill(self.process.pid, sig)
        return await asyncio.to_thread(self.process.wait, STOP_TIMEOUT_S)


@contextlib.contextmanager
def standin(tmp_path: Path, *args: str) -> Iterator[Standin]:
    log = tmp_path / "standin.out"
    environ = {name: value for name, value in os.environ.items() if not name.startswith("AIM_")}
    with log.open("wb") as sink:
        process = subprocess.Popen(
            [sys.executable, "-m", "realtime.cli", "livekit-dev", *args],
            cwd=REPO,
            env=environ,
            stdin=subprocess.DEVNULL,
            stdout=sink,
            stderr=subprocess.STDOUT,
        )
    try:
        yield Standin(process, log)
    finally:
        if process.poll() is None:  # the test failed before stopping it
            process.kill()
            process.wait(timeout=STOP_TIMEOUT_S)


def exported(output: str) -> dict[str, str]:
    """The `export NAME=value` lines, read as a shell reads them."""
    found = {}
    for line in output.splitlines():
        if line.startswith("export "):
            name, _, value = shlex.split(line)[1].partition("=")
            found[name] = value
    return found


def service_settings(exports: dict[str, str]) -> Settings:
    """What `scripts/serve` reads after the printed lines were pasted into its shell."""
    return Settings.from_env({**exports, "AIM_AUTH_HS256_SECRET": TEST_SECRET})


async def open_session(settings: Settings, store) -> dict[str, str | int]:
    app = create_app(settings, store=store)
    async with serving(app, settings) as base_url, httpx.AsyncClient(base_url=base_url) as client:
        created = await create_session(client)
    meta: dict[str, str | int] = session_of(created["result"]["task"])
    return meta


def refused(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1.0).close()
    except ConnectionRefusedError:
        return True
    return False


async def test_the_printed_settings_give_a_service_whose_sessions_get_ready(tmp_path, store):
    port = free_port()
    args = ("--port", str(port), "--api-key", KEY, "--api-secret", SECRET)
    with standin(tmp_path, *args, "--no-agent-jobs", "--webhook-url", "") as process:
        output = await process.announced()
        assert "not a LiveKit server" in output
        assert "no media, no real agents" in output
        assert "webhooks are not sent" in output
        exports = exported(output)
        assert exports == {
            "AIM_LIVEKIT_URL": f"ws://127.0.0.1:{port}",
            "AIM_LIVEKIT_PUBLIC_URL": f"ws://127.0.0.1:{port}",
            "AIM_LIVEKIT_API_KEY": KEY,
            "AIM_LIVEKIT_API_SECRET": SECRET,
        }
        settings = service_settings(exports)

        meta = await open_session(settings, store)
        assert meta["sessionState"] == "ready"

        # the room and the agent's dispatch are there, as LiveKit's own API lists them
        room = f"aim-{meta['sessionId']}-e1"
        async with api.LiveKitAPI(exports["AIM_LIVEKIT_URL"], KEY, SECRET) as livekit:
            rooms = await livekit.room.list_rooms(api.ListRoomsRequest())
            dispatches = await livekit.agent_dispatch.list_dispatch(room)
        assert [r.name for r in rooms.rooms] == [room]
        assert json.loads(rooms.rooms[0].metadata) == {
            "sessionId": meta["sessionId"],
            "sessionEpoch": 1,
        }
        ours = [d for d in dispatches if d.agent_name == "aim-realtime-agent"]
        assert len(ours) == 1
        handed_over = json.loads(ours[0].metadata)
        assert handed_over["sessionId"] == meta["sessionId"]
        assert handed_over["sessionEpoch"] == 1
        assert handed_over["providerUrl"] == "http://127.0.0.1:8080/provider"
        assert handed_over["providerToken"]

        assert await process.stop(signal.SIGTERM) == 0
        assert process.output().rstrip().endswith("Local LiveKit stopped.")
        assert refused(port)


async def test_by_default_it_takes_the_dev_server_keys_and_ctrl_c_stops_it(tmp_path, store):
    port = free_port()
    with standin(tmp_path, "--port", str(port)) as process:
        output = await process.announced()
        # by default, as for scripts/serve: webhooks to its /livekit/webhook, the agent worker
        assert "webhooks are sent to http://127.0.0.1:8080/livekit/webhook" in output
        assert "a simulated agent worker takes every dispatch" in output
        exports = exported(output)
        assert exports["AIM_LIVEKIT_URL"] == f"ws://127.0.0.1:{port}"
        assert (exports["AIM_LIVEKIT_API_KEY"], exports["AIM_LIVEKIT_API_SECRET"]) == (
            "devkey",
            "secret",
        )
        # livekit-server --dev's 6-byte secret works: the settings warn of it, naming the variable
        settings = service_settings(exports)
        assert [w.split()[0] for w in settings.warnings] == ["AIM_LIVEKIT_API_SECRET"]
        meta = await open_session(settings, store)
        assert meta["sessionState"] == "ready"

        assert await process.stop(signal.SIGINT) == 0
        assert "Traceback" not in process.output()
        assert refused(port)


async def test_with_a_webhook_url_and_agent_jobs_the_service_sees_its_agent_join(tmp_path, store):
    port = free_port()
    settings = service_settings(
        {
            "AIM_LIVEKIT_URL": f"ws://127.0.0.1:{port}",
            "AIM_LIVEKIT_API_KEY": KEY,
            "AIM_LIVEKIT_API_SECRET": SECRET,
        }
    )
    app = create_app(settings, store=store)
    async with serving(app, settings) as base_url, httpx.AsyncClient(base_url=base_url) as client:
        hook = f"{base_url}/livekit/webhook"
        args = ("--port", str(port), "--api-key", KEY, "--api-secret", SECRET)
        with standin(tmp_path, *args, "--webhook-url", hook) as process:
            output = await process.announced()
            assert "a simulated agent worker takes every dispatch" in output
            assert f"webhooks are sent to {hook}" in output
            created = await create_session(client)
            session_id = session_of(created["result"]["task"])["sessionId"]

            deadline = time.monotonic() + 10
            while True:
                got = await call(client, "GetSession", sessionId=session_id)
                agent = got["result"]["session"]["agent"]
                if agent["state"] == "joined":
                    break
                assert time.monotonic() < deadline, agent
                await asyncio.sleep(0.05)
            assert agent["identity"] == f"agent-{agent['jobId']}"
            assert await process.stop(signal.SIGTERM) == 0


async def test_the_journey_reaches_active_on_the_local_livekit_and_ends(tmp_path, store):
    """docs/local-livekit.md's path, as pasted: `aim-realtime livekit-dev`, the service on its
    settings, and docs/examples/journey.py with --connect: the device connects with its join
    token, the session is active, the simulated agent joins, a text reaches it, the agent asks
    for a confirmation the user gives and carries the action out, a second device takes the
    session over, the end."""
    port, service_port = free_port(), free_port()
    settings = service_settings(
        {
            "AIM_LIVEKIT_URL": f"ws://127.0.0.1:{port}",
            "AIM_LIVEKIT_PUBLIC_URL": f"ws://127.0.0.1:{port}",
            "AIM_LIVEKIT_API_KEY": "devkey",
            "AIM_LIVEKIT_API_SECRET": "secret",
            # where the agent calls the provider API: this service (scripts/serve's default)
            "AIM_PUBLIC_BASE_URL": f"http://127.0.0.1:{service_port}",
        }
    )
    app = create_app(settings, store=store)
    async with serving(app, settings, port=service_port) as base_url:
        hook = f"{base_url}/livekit/webhook"
        with standin(tmp_path, "--port", str(port), "--webhook-url", hook) as process:
            await process.announced()
            journey = await asyncio.create_subprocess_exec(
                sys.executable, str(REPO / "docs" / "examples" / "journey.py"), "--url",
                base_url, "--connect", "--say", "hello", "--confirm", "book a table",
                "--handoff", "tablet", "--agent-timeout", "10",
                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
                env={**os.environ, "TOKEN": token("alice")},
            )  # fmt: skip
            out, err = await asyncio.wait_for(journey.communicate(), 40)
            lines = out.decode().splitlines()
            assert (journey.returncode, err.decode()) == (0, ""), (lines, process.output())
            assert [line.split()[0] for line in lines] == [
                "create", "ready", "register", "join", "connect", "agent", "agent", "say",
                "confirm", "confirm", "connect", "handoff", "end",
            ]  # fmt: skip
            assert lines[4].endswith("session active"), lines[4]
            assert lines[6].startswith("agent     agent joined as agent-"), lines[6]
            assert lines[8].endswith('"book a table": awaiting_confirmation'), lines[8]
            assert lines[9].endswith("approved: succeeded"), lines[9]
            assert re.search(r"device tablet in at epoch 2: session active; journey-script "
                             r"superseded$", lines[11]), lines[11]  # fmt: skip
            assert await process.stop(signal.SIGTERM) == 0


async def test_a_connect_with_a_bad_token_is_refused_as_livekit_refuses_it(tmp_path):
    port = free_port()
    with standin(tmp_path, "--port", str(port), "--webhook-url", "") as process:
        await process.announced()
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as http:
            bad = await http.post("/dev/connect", json={"token": "not-a-token"})
            assert bad.status_code == 401
            assert "invalid token" in bad.json()["error"]
            shapeless = await http.post("/dev/connect", content=b"[1]")
            assert shapeless.status_code == 400
            assert shapeless.json() == {"error": 'send {"token": "<join token>"}'}
        assert await process.stop(signal.SIGTERM) == 0
