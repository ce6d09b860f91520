"""A device's Session on a scripted service (an httpx mock transport): what join() does while
the session stays provisioning, how a stream the service refuses ends, the `agent` events the
stream's frames make of a rotation, what resume_session reads, and a call cancelled while it
retries."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest

from aim_realtime_client import (
    AgentChanged,
    AimError,
    Ended,
    Requirement,
    RetryPolicy,
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
    until,
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


async def test_resume_session_reads_the_task_its_state_and_open_requirement():
    """GetSession, then GetTask: the task's state and version, and the requirement it waits
    on, known at once (an approve then sends it without reading it again)."""
    asked = {"operationId": "op1", "requirementId": "rq1", "action": {"title": "Book"},
             "actionDigest": "sha256:ab", "expectedVersion": 7}  # fmt: skip
    message = {"messageId": "m1", "role": "ROLE_AGENT",
               "parts": [{"data": asked, "mediaType": "application/json"}]}  # fmt: skip
    mine = [{"endpointId": "e-phone", "clientEndpointKey": "phone", "state": "active"}]
    operation = {"operationId": "op1", "state": "running"}
    service = Service({
        "aim.realtime.GetSession": lambda _: result({"session": session_object(
            "active", endpoints=mine)}),
        "GetTask": lambda _: result(task("TASK_STATE_INPUT_REQUIRED", "active", version=7,
                                         message=message)),
        "aim.realtime.SendInteraction": lambda params: result({
            "interaction": {"commandId": params["commandId"], "type": params["type"],
                            "acceptedAt": "2026-01-01T00:00:00.000Z"},
            "operation": operation}),
    })  # fmt: skip
    async with service.client() as client:
        session = await client.resume_session("s1", endpoint_key="phone")
        assert service.methods == ["aim.realtime.GetSession", "GetTask"]
        assert service.of("GetTask") == [{"id": "t1", "historyLength": 0}]
        assert (session.state, session.task_state, session.task_version) == (
            "active", "TASK_STATE_INPUT_REQUIRED", 7)  # fmt: skip
        assert session.endpoint_id == "e-phone"
        assert session.requirement == Requirement("op1", "rq1", {"title": "Book"}, "sha256:ab", 7)
        assert session.requirements == {"op1": session.requirement}

        assert await session.confirm("op1", "approve") == operation
    [sent] = service.of("aim.realtime.SendInteraction")
    assert sent["payload"] == {"operationId": "op1", "requirementId": "rq1",
                               "actionDigest": "sha256:ab"}  # fmt: skip
    assert service.methods.count("GetTask") == 1


async def test_a_resumed_task_that_waits_on_nothing_has_no_requirement():
    service = Service({
        "aim.realtime.GetSession": lambda _: result({"session": session_object("ready")}),
        "GetTask": lambda _: result(task("TASK_STATE_WORKING", "ready", version=3)),
    })  # fmt: skip
    async with service.client() as client:
        session = await client.resume_session("s1", endpoint_key="phone")
    assert (session.task_state, session.task_version, session.requirement) == (
        "TASK_STATE_WORKING", 3, None)  # fmt: skip
    assert session.endpoint_id is None


@pytest.mark.parametrize("stop", ["timeout", "cancel"])
async def test_a_command_cancelled_while_it_retries_leaves_no_retry_behind(stop):
    """SendInteraction answered 503 again and again: retried (the same commandId) until the
    caller's `asyncio.timeout` or cancel stops it, which raises as asyncio says; afterwards
    nothing is sent and no task of the client's is left."""
    service = Service({
        "SendMessage": lambda _: result({"task": task("TASK_STATE_WORKING", "active")}),
        "aim.realtime.GetSession": lambda _: result({"session": session_object("active")}),
        "aim.realtime.SendInteraction": lambda _: httpx.Response(503),
    })  # fmt: skip

    async def sleep(_: float) -> None:
        await asyncio.sleep(0.005)

    retry = RetryPolicy(attempts=10_000, base_delay_ms=5, max_delay_ms=5)
    async with service.client(sleep=sleep, retry=retry) as client:
        session = await client.create_session("phone", return_immediately=True)

        def sent() -> int:
            return len(service.of("aim.realtime.SendInteraction"))

        if stop == "timeout":
            with pytest.raises(TimeoutError):
                async with asyncio.timeout(0.2):
                    await session.send_text("hello")
        else:
            sending = asyncio.create_task(session.send_text("hello"))
            await until(lambda: sent() >= 3)
            sending.cancel()
            with pytest.raises(asyncio.CancelledError):
                await sending
        tried = sent()
        assert tried >= 2
        assert len({params["commandId"] for params in service.of(
            "aim.realtime.SendInteraction")}) == 1  # fmt: skip
        await asyncio.sleep(0.1)
        assert sent() == tried
        assert asyncio.all_tasks() == {asyncio.current_task()}
