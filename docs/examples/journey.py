"""One realtime session from start to end against a running AIM realtime service.

    export TOKEN=$(scripts/token --sub alice)
    .venv/bin/python docs/examples/journey.py --url http://127.0.0.1:8080
    # on the local LiveKit for development (aim-realtime livekit-dev), the whole journey:
    .venv/bin/python docs/examples/journey.py --connect --say hi --confirm Book --handoff tablet

Steps, one line each with the state the service answered: create the session (SendMessage with
a session.create part), wait until it is ready, register this script as a device
(RegisterEndpoint), join (JoinSession: the LiveKit URL and a join token), end (EndSession).
It is written with the project's Python client (`aim_realtime_client`, docs/python-client.md),
which retries what can be retried with the same ids and raises typed errors.

The service must be configured with a LiveKit server (AIM_LIVEKIT_URL and keys): without one,
creating a session fails with -31012. What needs more than this script:

- the session becomes `active` only when a device connects to LiveKit with the join token
  (LiveKit then sends the service a participant_joined webhook): with the local LiveKit for
  development (`aim-realtime livekit-dev`, docs/local-livekit.md), `--connect` does that, with
  the client's `RoomBinding` (as an app does with LiveKit's `rtc.Room`: it leaves the room when
  another device takes the session over); against a real LiveKit this script only shows the
  token was issued;
- interactions need the agent in the room: with an agent worker registered under the
  service's AIM_AGENT_NAME, `--say "hello"` waits for it to join and sends the text.

Needs the client: the project's environment (`scripts/install`), or any Python with the
`aim-realtime-client` wheel installed (docs/python-client.md, Install). A
JSON-RPC error stops the script with a one-line message on stderr and exit status 1; a bad
command line or an unreachable service exits with 2.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import sys
import time
from collections.abc import Callable
from typing import Final

import httpx

from aim_realtime_client import (
    AimClient,
    AimError,
    Capabilities,
    JoinResult,
    RoomBinding,
    Session,
    UnavailableError,
)

REQUESTED = {
    "mediaBinding": "livekit-webrtc-v1",
    "audio": "bidirectional",
    "userVideoSources": [],
    "agentVideoSources": [],
    "interactions": ["text", "confirmation"],
}
DEVICE = Capabilities(interactions=("text", "confirmation"))
# the agent's states once it is in the room (it reports the last three itself)
IN_THE_ROOM = ("joined", "listening", "thinking", "speaking")
CLIENT_INITIATED: Final = 1  # LiveKit's DisconnectReason after the client's own disconnect


class JourneyError(Exception):
    """A session that failed, or an agent that never came: the one line to print."""


def step(name: str, text: str) -> None:
    """One line per step, written at once (a reader may follow the output as it comes)."""
    sys.stdout.write(f"{name:<9} {text}\n")
    sys.stdout.flush()


async def wait_agent(session: Session, within: float) -> None:
    step("agent", f"waiting up to {within:g} s for the agent to join the room")
    deadline = time.monotonic() + within
    while (info := await session.refresh())["agent"]["state"] not in IN_THE_ROOM:
        if time.monotonic() > deadline:
            raise JourneyError(
                f"the agent did not join within {within:g} s (agent {info['agent']['state']})"
            )
        await asyncio.sleep(0.5)
    step("agent", f"agent joined as {info['agent'].get('identity', '?')}")


class DevRoom:
    """A room of the local LiveKit for development (`aim-realtime livekit-dev`), which has no
    media: it joins with the token as LiveKit's SDK (`livekit.rtc.Room`) would, through POST
    /dev/connect, so the device is in the room and LiveKit tells the service. It has what
    `RoomBinding` uses of `rtc.Room`; with a real LiveKit, pass an `rtc.Room()` instead."""

    def __init__(self) -> None:
        self.joined: tuple[str, str] | None = None  # (the HTTP URL, the token) while in
        self.listeners: list[Callable[..., object]] = []

    async def connect(self, url: str, token: str) -> None:
        base = re.sub(r"^ws", "http", url)  # ws:// → http://, wss:// → https://
        async with httpx.AsyncClient(timeout=10) as http:
            reply = await http.post(f"{base}/dev/connect", json={"token": token})
        if reply.status_code != 200:
            raise JourneyError(f"{base} refused the connect ({reply.status_code}): {reply.text}")
        self.joined = (base, token)

    async def disconnect(self) -> None:
        if self.joined is None:
            return
        (base, token), self.joined = self.joined, None
        async with httpx.AsyncClient(timeout=10) as http:
            await http.post(f"{base}/dev/disconnect", json={"token": token})
        for listener in list(self.listeners):
            listener(CLIENT_INITIATED)

    def on(self, event: str, callback: Callable[..., object]) -> None:
        self.listeners.append(callback)

    def off(self, event: str, callback: Callable[..., object]) -> None:
        self.listeners.remove(callback)

    def isconnected(self) -> bool:
        return self.joined is not None


async def connect(session: Session, joined: JoinResult, within: float) -> RoomBinding:
    """The device into the room with its join result, bound to the session (`RoomBinding`);
    then wait for `active`."""
    binding = RoomBinding(session, DevRoom())
    await binding.connect(joined)
    deadline = time.monotonic() + within
    while (state := (await session.refresh())["state"]) != "active":
        if time.monotonic() > deadline:
            raise JourneyError(f"the session did not become active within {within:g} s")
        await asyncio.sleep(0.2)
    step("connect", f"device in room {joined.room}: session {state}")
    return binding


async def confirm(session: Session, title: str, within: float) -> None:
    """Ask the agent for an action that needs the user's confirmation (the local LiveKit's
    simulated agent asks for one when told `/confirm <title>`), approve it, and wait until the
    agent has carried it out."""
    await session.send_text(f"/confirm {title}")
    deadline = time.monotonic() + within
    while not (pending := (await session.refresh()).get("pendingOperationIds")):
        if time.monotonic() > deadline:
            raise JourneyError(f"the agent asked for no confirmation within {within:g} s")
        await asyncio.sleep(0.2)
    operation_id = pending[0]
    asked = await session.operation(operation_id)
    title_asked = (asked.get("requirement") or {}).get("action", {}).get("title", "?")
    step("confirm", f'operation {operation_id} "{title_asked}": {asked["state"]}')
    answered = await session.confirm(operation_id, "approve")
    while (state := answered["state"]) not in ("succeeded", "failed", "canceled", "expired"):
        if time.monotonic() > deadline:
            raise JourneyError(f"the operation is still {state} after {within:g} s")
        await asyncio.sleep(0.2)
        answered = await session.operation(operation_id)
    step("confirm", f"operation {operation_id} approved: {state}")


async def hand_off(
    client: AimClient,
    first: Session,
    first_room: RoomBinding | None,
    key: str,
    options: argparse.Namespace,
) -> Session:
    """A second device (`key`) takes the session over: it joins (and connects, with
    --connect); the first device is superseded. The second device's Session."""
    second = await client.resume_session(
        first.session_id, endpoint_key=key, task_id=first.task_id, capabilities=DEVICE
    )
    joined = await second.join()
    if options.connect:
        await connect(second, joined, options.ready_timeout)
        if first_room is not None:  # the first device's binding leaves its room on its own
            deadline = time.monotonic() + options.ready_timeout
            while first_room.connected:
                if time.monotonic() > deadline:
                    raise JourneyError("the first device is still in the room")
                await asyncio.sleep(0.05)
    info = await second.refresh()
    was = next(
        (e["state"] for e in info.get("endpoints", []) if e.get("endpointId") == first.endpoint_id),
        "gone",
    )
    step("handoff", f"device {key} in at epoch {joined.epoch}: session {info['state']}; "
                    f"{first.endpoint_key} {was}")  # fmt: skip
    return second


async def journey(client: AimClient, options: argparse.Namespace) -> None:
    session = await client.create_session(
        options.device,
        capabilities=DEVICE,
        requested=REQUESTED,
    )
    step(
        "create",
        f"session {session.session_id} task {session.task_id}: {session.state}, "
        f"epoch {session.epoch}",
    )
    await session.wait_ready(int(options.ready_timeout * 1000))
    if session.state == "failed":
        raise JourneyError(f"session failed: {session.info.get('endReason', 'no reason given')}")
    step(
        "ready",
        f"session {session.state}: room {session.info['media']['room']}, "
        f"agent {session.info['agent']['state']}",
    )

    endpoint = await session.register()
    step("register", f"endpoint {endpoint['endpointId']} ({endpoint['state']}), "
                     f"session {session.state}")  # fmt: skip

    joined = await session.join()
    step(
        "join",
        f"session {session.state}, epoch {joined.epoch}: LiveKit {joined.url} "
        f"room {joined.room}, join token issued (expires {joined.expires_at})",
    )

    binding = await connect(session, joined, options.ready_timeout) if options.connect else None

    if options.say:
        await wait_agent(session, options.agent_timeout)
        said = await session.send_text(options.say)
        step("say", f"text delivered to the agent (accepted {said.accepted_at}), "
                    f"session {session.state}")  # fmt: skip

    if options.confirm:
        await confirm(session, options.confirm, options.agent_timeout)

    if options.handoff:
        session = await hand_off(client, session, binding, options.handoff, options)

    if options.keep:
        step("keep", f"session {session.session_id} left live; it ends when idle or with "
                     "EndSession")  # fmt: skip
        return
    ended = await session.end("journey finished")
    final = await client.call("GetTask", {"id": session.task_id, "historyLength": 0})
    step("end", f"session {ended['state']}, task {final['status']['state']}")


def arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description="Create, join and end one AIM realtime session; one line per step.",
    )
    parser.add_argument(
        "--url",
        default="http://127.0.0.1:8080",
        help="base URL of the service (POST <url>/a2a); default %(default)s",
    )
    parser.add_argument(
        "--token",
        default=os.environ.get("TOKEN"),
        help="bearer token (default: $TOKEN), e.g. export TOKEN=$(scripts/token --sub alice)",
    )
    parser.add_argument(
        "--device",
        default="journey-script",
        help="clientEndpointKey naming this device in the session; default %(default)s",
    )
    parser.add_argument(
        "--connect",
        action="store_true",
        help="after joining, connect with the join token to the local LiveKit for development "
        "(aim-realtime livekit-dev) and wait until the session is active",
    )
    parser.add_argument(
        "--say",
        metavar="TEXT",
        help="after joining, wait for the agent to join the room and send it TEXT (input.text)",
    )
    parser.add_argument(
        "--confirm",
        metavar="TITLE",
        help="after joining, have the agent ask for an action needing the user's confirmation "
        "(the local LiveKit's simulated agent does on `/confirm TITLE`), approve it and wait "
        "until it is carried out",
    )
    parser.add_argument(
        "--handoff",
        metavar="KEY",
        help="then hand the session off to a second device named KEY (it joins and, with "
        "--connect, connects); the first device is superseded",
    )
    parser.add_argument(
        "--agent-timeout",
        type=float,
        default=30.0,
        metavar="SECONDS",
        help="how long --say waits for the agent; default %(default)s",
    )
    parser.add_argument(
        "--ready-timeout",
        type=float,
        default=20.0,
        metavar="SECONDS",
        help="how long to wait for the session to leave provisioning; default %(default)s",
    )
    parser.add_argument(
        "--keep",
        action="store_true",
        help="leave the session live instead of ending it",
    )
    options = parser.parse_args(argv)
    if not options.token:
        parser.error(
            "no token: pass --token or set TOKEN (export TOKEN=$(scripts/token --sub alice))"
        )
    return options


def main(argv: list[str] | None = None) -> int:
    options = arguments(argv)
    return asyncio.run(run(options))


async def run(options: argparse.Namespace) -> int:
    async with AimClient(options.url, token=options.token) as client:
        try:
            await journey(client, options)
        except AimError as error:
            if isinstance(error, UnavailableError) and error.reason == "TRANSPORT":  # no answer
                sys.stderr.write(f"journey: service unreachable: {error}\n")
                return 2
            said = f"{error.code} {error.reason}" if error.code is not None else error.reason
            sys.stderr.write(f"journey: {error.method}: {said}: {error}\n")
            return 1
        except JourneyError as error:
            sys.stderr.write(f"journey: {error}\n")
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
