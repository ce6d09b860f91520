"""One realtime session from start to end against a running AIM realtime service.

    TOKEN=$(scripts/token --sub alice)
    .venv/bin/python docs/examples/journey.py --url http://127.0.0.1:8080

Steps, one line each with the state the service answered: create the session (SendMessage with
a session.create part), wait until it is ready, register this script as a device
(RegisterEndpoint), join (JoinSession: the LiveKit URL and a join token), end (EndSession).

The service must be configured with a LiveKit server (AIM_LIVEKIT_URL and keys): without one,
creating a session fails with -31012. What needs more than this script:

- the session becomes `active` only when a device connects to LiveKit with the join token
  (LiveKit then sends the service a participant_joined webhook); this script only shows the
  token was issued;
- interactions need the agent in the room: with an agent worker registered under the
  service's AIM_AGENT_NAME, `--say "hello"` waits for it to join and sends the text.

Needs httpx (in the project's environment) and the standard library. A JSON-RPC error stops the
script with a one-line message on stderr and exit status 1; a bad command line or an
unreachable service exits with 2.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import uuid
from typing import Any

import httpx

REALTIME = "urn:aim:a2a:realtime:v1"
TRANSIENT = -31012  # UPSTREAM_UNAVAILABLE: retry the same request (same ids)
ATTEMPTS = 3


class JourneyError(Exception):
    """A JSON-RPC error (or a session that failed): the one line to print."""


class UnreachableError(Exception):
    """The service could not be reached."""


class Client:
    """JSON-RPC 2.0 over POST /a2a with the A2A 1.0 and realtime extension headers."""

    def __init__(self, url: str, token: str) -> None:
        self.http = httpx.Client(
            base_url=url.rstrip("/"),
            timeout=30.0,  # a blocking create waits up to 5 s for `ready`
            headers={
                "Content-Type": "application/json",
                "Authorization": f"Bearer {token}",
                "A2A-Version": "1.0",
                "A2A-Extensions": REALTIME,
            },
        )
        self.ids = 0

    def call(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        """The call's result. An unanswered call or -31012 is sent again unchanged: with the
        same commandId (or messageId) it applies at most once."""
        for attempt in range(1, ATTEMPTS + 1):
            self.ids += 1
            body = {"jsonrpc": "2.0", "id": self.ids, "method": method, "params": params}
            try:
                reply = self.http.post("/a2a", json=body)
            except httpx.TransportError as lost:  # no answer: it may or may not have applied
                if attempt == ATTEMPTS:
                    raise UnreachableError(f"{self.http.base_url}: {lost}") from lost
                time.sleep(attempt)
                continue
            try:
                answer = reply.json()
            except ValueError:
                status = reply.status_code
                raise JourneyError(f"{method}: HTTP {status}, not a JSON-RPC answer") from None
            if "error" not in answer:
                result: dict[str, Any] = answer["result"]
                return result
            error: dict[str, Any] = answer["error"]
            if error["code"] == TRANSIENT and attempt < ATTEMPTS:
                time.sleep(attempt)
                continue
            infos = [d for d in error.get("data", []) if "ErrorInfo" in d.get("@type", "")]
            reason = infos[0].get("reason", "") if infos else ""
            raise JourneyError(f"{method}: {error['code']} {reason}: {error['message']}")
        raise AssertionError("unreachable")

    def command(self, method: str, **params: Any) -> dict[str, Any]:
        """A realtime command with a fresh commandId (kept for its retries)."""
        return self.call(f"aim.realtime.{method}", {**params, "commandId": str(uuid.uuid4())})


def step(name: str, text: str) -> None:
    """One line per step, written at once (a reader may follow the output as it comes)."""
    sys.stdout.write(f"{name:<9} {text}\n")
    sys.stdout.flush()


def create(client: Client) -> dict[str, Any]:
    """SendMessage with a session.create part; blocks until `ready` (at most 5 s)."""
    result = client.call(
        "SendMessage",
        {
            "message": {
                "messageId": str(uuid.uuid4()),
                "role": "ROLE_USER",
                "parts": [
                    {"text": "Start a voice session"},
                    {
                        "mediaType": "application/json",
                        "data": {
                            "operation": "session.create",
                            "clientSessionId": str(uuid.uuid4()),
                            "requested": {
                                "mediaBinding": "livekit-webrtc-v1",
                                "audio": "bidirectional",
                                "userVideoSources": [],
                                "agentVideoSources": [],
                                "interactions": ["text"],
                            },
                            "requiredCapabilities": ["audio_input", "audio_output"],
                            "recording": "off",
                            "retention": {"transcript": "off", "summary": "off"},
                        },
                    },
                ],
            },
            "configuration": {"historyLength": 0},
        },
    )
    task: dict[str, Any] = result["task"]
    meta = task.get("metadata", {}).get(REALTIME)
    if meta is None:  # REJECTED: the status message says why
        said = " ".join(p["text"] for p in task["status"]["message"]["parts"] if "text" in p)
        raise JourneyError(f"SendMessage: task {task['status']['state']}: {said}")
    step(
        "create",
        f"session {meta['sessionId']} task {task['id']}: {meta['sessionState']}, "
        f"epoch {meta['sessionEpoch']}",
    )
    return task


def session_of(client: Client, session_id: str) -> dict[str, Any]:
    got = client.call("aim.realtime.GetSession", {"sessionId": session_id})
    session: dict[str, Any] = got["session"]
    return session


def wait_ready(client: Client, session_id: str, within: float) -> dict[str, Any]:
    deadline = time.monotonic() + within
    while (session := session_of(client, session_id))["state"] == "provisioning":
        if time.monotonic() > deadline:
            raise JourneyError(f"session still provisioning after {within:g} s")
        time.sleep(0.5)
    if session["state"] == "failed":
        raise JourneyError(f"session failed: {session.get('endReason', 'no reason given')}")
    step(
        "ready",
        f"session {session['state']}: room {session['media']['room']}, "
        f"agent {session['agent']['state']}",
    )
    return session


def wait_agent(client: Client, session_id: str, within: float) -> dict[str, Any]:
    step("agent", f"waiting up to {within:g} s for the agent to join the room")
    deadline = time.monotonic() + within
    while (session := session_of(client, session_id))["agent"]["state"] != "joined":
        if time.monotonic() > deadline:
            raise JourneyError(
                f"the agent did not join within {within:g} s (agent {session['agent']['state']})"
            )
        time.sleep(0.5)
    step("agent", f"agent joined as {session['agent'].get('identity', '?')}")
    return session


def journey(client: Client, options: argparse.Namespace) -> None:
    task = create(client)
    session_id = task["metadata"][REALTIME]["sessionId"]
    session = wait_ready(client, session_id, options.ready_timeout)
    epoch = session["sessionEpoch"]

    registered = client.command(
        "RegisterEndpoint",
        sessionId=session_id,
        sessionEpoch=epoch,
        clientEndpointKey=options.device,
        capabilities={
            "audioInput": True,
            "audioOutput": True,
            "camera": False,
            "screen": False,
            "interactions": ["text"],
        },
    )
    endpoint = registered["endpoint"]
    step(
        "register",
        f"endpoint {endpoint['endpointId']} ({endpoint['state']}), "
        f"session {registered['session']['state']}",
    )

    joined = client.command(
        "JoinSession", sessionId=session_id, sessionEpoch=epoch, endpointId=endpoint["endpointId"]
    )
    media = joined["media"]
    epoch = joined["session"]["sessionEpoch"]
    step(
        "join",
        f"session {joined['session']['state']}, epoch {epoch}: LiveKit {media['url']} "
        f"room {media['room']}, join token issued (expires {media['expiresAt']})",
    )

    if options.say:
        wait_agent(client, session_id, options.agent_timeout)
        said = client.command(
            "SendInteraction",
            sessionId=session_id,
            sessionEpoch=epoch,
            type="input.text",
            payload={"text": options.say},
        )
        step(
            "say",
            f"text delivered to the agent (accepted {said['interaction']['acceptedAt']}), "
            f"session {said['session']['state']}",
        )

    if options.keep:
        step("keep", f"session {session_id} left live; it ends when idle or with EndSession")
        return
    ended = client.command("EndSession", sessionId=session_id, reason="journey finished")
    final = client.call("GetTask", {"id": task["id"], "historyLength": 0})
    step("end", f"session {ended['session']['state']}, task {final['status']['state']}")


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
        help="bearer token (default: $TOKEN), e.g. TOKEN=$(scripts/token --sub alice)",
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
        parser.error("no token: pass --token or set TOKEN (TOKEN=$(scripts/token --sub alice))")
    return options


def main(argv: list[str] | None = None) -> int:
    options = arguments(argv)
    client = Client(options.url, options.token)
    try:
        journey(client, options)
    except JourneyError as error:
        sys.stderr.write(f"journey: {error}\n")
        return 1
    except UnreachableError as error:
        sys.stderr.write(f"journey: service unreachable: {error}\n")
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
