"""A session driven through its journey while an SSE stream (SendStreamingMessage,
SubscribeToTask) follows it: the states it passes, read off the stream's events."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from tests.conftest import REALTIME
from tests.e2e.realtime_helpers import call, new_id, register
from tests.e2e.sse_helpers import SseReader
from tests.e2e.webhook_helpers import deliver, room, webhook_event

JOURNEY = ["provisioning", "ready", "joining", "active", "ending"]


def session_state(result: dict[str, Any]) -> str:
    body = result.get("task") or result["statusUpdate"]
    state: str = body["metadata"][REALTIME]["sessionState"]
    return state


def condensed(states: list[str]) -> list[str]:
    """Consecutive repeats folded (a state may commit several changes, e.g. the agent joining)."""
    return [s for i, s in enumerate(states) if i == 0 or states[i - 1] != s]


async def wait_for_state(reader: SseReader, state: str, seen: list[Any]) -> None:
    """Read events (into `seen`) until one puts the session in `state`."""
    while True:
        event = await reader.next_data()
        assert event is not None, f"stream closed before {state}: {seen}"
        seen.append(event)
        if session_state(event.result) == state:
            return


async def drive_to_active(client: Any, session_id: str) -> str:
    endpoint = (await register(client, session_id, 1, "phone"))["result"]["endpoint"]["endpointId"]
    joined = await call(client, "JoinSession", sessionId=session_id, sessionEpoch=1,
                        endpointId=endpoint, commandId=new_id())  # fmt: skip
    assert joined["result"]["session"]["state"] == "joining"
    event = webhook_event("participant_joined", room(session_id), identity=endpoint, epoch=1)
    assert await deliver(client, event) == "applied"
    return endpoint


async def end(client: Any, session_id: str) -> None:
    ended = await call(client, "EndSession", sessionId=session_id, commandId=new_id(),
                       reason="user hung up")  # fmt: skip
    assert ended["result"]["session"]["state"] == "ending"


async def journey_to_the_end(
    client: Any,
    reader: SseReader,
    first: Any,
    session_id: str,
    until: Callable[[SseReader, str, list[Any]], Awaitable[None]] = wait_for_state,
) -> list[Any]:
    """The session whose stream began with `first` readied, driven to active and ended; every
    event of the stream, read to its end (`until` reads up to a state)."""
    seen = [first]
    await until(reader, "ready", seen)
    await drive_to_active(client, session_id)
    await until(reader, "active", seen)
    await end(client, session_id)
    seen.extend(await reader.rest())
    return seen
