"""A device's Session on a scripted service (an httpx mock transport): what join() does while
the session stays provisioning, how a stream the service refuses ends, and the `agent` events
the stream's frames make of a rotation."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest

from aim_realtime_client import (
    AgentChanged,
    AimError,
    Ended,
    StreamFailed,
)
from aim_realtime_client.follow import Follower
from aim_realtime_client.rpc import REALTIME
from aim_realtime_client.stream import Frame
from tests.unit.client_service_helpers import (
    Service,
    failure,
    result,
    session_object,
    task,
)


async def test_join_raises_timeout_while_the_session_stays_provisioning():
    service = Service({
        "SendMessage": lambda _: result({"task": task("TASK_STATE_WORKING", "provisioning")}),
        "aim.realtime.GetSession": lambda _: result({"session": session_object("provisioning")}),
    })  # fmt: skip
    async with service.client(ready_timeout_ms=300) as client:
        session = await client.create_session("phone", return_immediately=True)
        with pytest.raises(AimError) as late:
            await session.join()
    assert (type(late.value), late.value.reason, late.value.code) == (AimError, "TIMEOUT", None)
    assert "aim.realtime.RegisterEndpoint" not in service.methods


@pytest.mark.parametrize(
    ("task_state", "event"),
    [("TASK_STATE_COMPLETED", Ended), ("TASK_STATE_WORKING", StreamFailed)],
)
async def test_a_refused_subscribe_is_the_end_only_of_a_terminal_task(task_state, event):
    service = Service({
        "SendMessage": lambda _: result({"task": task("TASK_STATE_WORKING", "ready")}),
        "aim.realtime.GetSession": lambda _: result({"session": session_object("ready")}),
        "SubscribeToTask": lambda _: failure(-32004),
        "GetTask": lambda _: result(task(task_state, "ready")),
    })  # fmt: skip
    async with service.client() as client:
        session = await client.create_session("phone")
        seen = [e async for e in session.events()]
    assert [type(e) for e in seen] == [event]
    if isinstance(seen[0], StreamFailed):
        assert seen[0].error.code == -32004


def agent_frame(state: str, generation: int, successor: int | None = None) -> Frame:
    meta = {"sessionId": "s1", "sessionEpoch": 1, "sessionState": "active", "taskVersion": 2,
            "agentState": state, "agentGeneration": generation}  # fmt: skip
    if successor is not None:
        meta["successorGeneration"] = successor
    update = {"taskId": "t1", "contextId": "c1", "status": {"state": "TASK_STATE_WORKING"},
              "metadata": {REALTIME: meta}}  # fmt: skip
    return Frame(None, {"statusUpdate": update})


async def test_a_rotation_is_rotating_then_rotated_from_the_generation_it_replaced():
    """Two rotations as the stream tells them: the second's successor never made it, so the
    serving agent goes on without being rotated from."""
    service = Service({
        "SendMessage": lambda _: result({"task": task("TASK_STATE_WORKING", "ready")}),
        "aim.realtime.GetSession": lambda _: result({"session": session_object("active")}),
    })  # fmt: skip
    async with service.client() as client:
        session = await client.create_session("phone", return_immediately=True)
        seen: list[Any] = []
        session.emit = seen.append  # type: ignore[method-assign]
        follower = Follower(session)
        for frame in [
            agent_frame("listening", 1),
            agent_frame("rotating", 1, 2),
            agent_frame("rotating", 1, 2),  # the serving agent speaks meanwhile: no news
            agent_frame("joined", 2),
            agent_frame("listening", 2),
            agent_frame("rotating", 2, 3),
            agent_frame("speaking", 2),  # no successor could start before the deadline
        ]:
            await follower.apply(frame)
    agents = [event for event in seen if isinstance(event, AgentChanged)]
    assert agents == [
        AgentChanged("listening", 1),
        AgentChanged("rotating", 1, 2),
        AgentChanged("joined", 2, rotated_from=1),
        AgentChanged("listening", 2),
        AgentChanged("rotating", 2, 3),
        AgentChanged("speaking", 2),
    ]
    assert [event.rotated for event in agents] == [False, False, True, False, False, False]
    assert (session.agent_state, session.agent_generation) == ("speaking", 2)
