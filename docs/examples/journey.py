"""One realtime session from start to end against a running AIM realtime service.

    export TOKEN=$(scripts/token --sub alice)
    .venv/bin/python docs/examples/journey.py --url http://127.0.0.1:8080

Steps, one line each with the state the service answered: create the session (SendMessage with
a session.create part), wait until it is ready, register this script as a device
(RegisterEndpoint), join (JoinSession: the LiveKit URL and a join token), end (EndSession).
It is written with the project's Python client (`aim_realtime_client`, docs/python-client.md),
which retries what can be retried with the same ids and raises typed errors.

The service must be configured with a LiveKit server (AIM_LIVEKIT_URL and keys): without one,
creating a session fails with -31012. What needs more than this script:

- the session becomes `active` only when a device connects to LiveKit with the join token
  (LiveKit then sends the service a participant_joined webhook); this script only shows the
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
import sys
import time

from aim_realtime_client import AimClient, AimError, Capabilities, Session, UnavailableError

REQUESTED = {
    "mediaBinding": "livekit-webrtc-v1",
    "audio": "bidirectional",
    "userVideoSources": [],
    "agentVideoSources": [],
    "interactions": ["text"],
}


class JourneyError(Exception):
    """A session that failed, or an agent that never came: the one line to print."""


def step(name: str, text: str) -> None:
    """One line per step, written at once (a reader may follow the output as it comes)."""
    sys.stdout.write(f"{name:<9} {text}\n")
    sys.stdout.flush()


async def wait_agent(session: Session, within: float) -> None:
    step("agent", f"waiting up to {within:g} s for the agent to join the room")
    deadline = time.monotonic() + within
    while (info := await session.refresh())["agent"]["state"] != "joined":
        if time.monotonic() > deadline:
            raise JourneyError(
                f"the agent did not join within {within:g} s (agent {info['agent']['state']})"
            )
        await asyncio.sleep(0.5)
    step("agent", f"agent joined as {info['agent'].get('identity', '?')}")


async def journey(client: AimClient, options: argparse.Namespace) -> None:
    session = await client.create_session(
        options.device,
        capabilities=Capabilities(interactions=("text",)),
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

    if options.say:
        await wait_agent(session, options.agent_timeout)
        said = await session.send_text(options.say)
        step("say", f"text delivered to the agent (accepted {said.accepted_at}), "
                    f"session {session.state}")  # fmt: skip

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
        "--say",
        metavar="TEXT",
        help="after joining, wait for the agent to join the room and send it TEXT (input.text)",
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
