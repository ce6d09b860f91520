"""The agent worker's helper (`aim_realtime_client.AgentSession`) against the served service: it
reads the dispatch metadata LiveKit hands the worker, calls /provider exactly once per intent,
learns of operations answered before it joined, and drops the repeats of data messages."""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import pytest

from aim_realtime_client import (
    AgentChanged,
    AgentMetadataError,
    AgentReplacedError,
    AgentSession,
    AimClient,
    AuthError,
    InteractionMessage,
    LeaveNow,
    OperationUpdate,
    Session,
)
from aim_realtime_client.dispatch import parse_metadata
from tests.conftest import token
from tests.e2e.agent_operation_helpers import AGENT, TOPIC, quiet, wait_for_data
from tests.e2e.client_helpers import Events, Served, proxied_service
from tests.e2e.realtime_helpers import call
from tests.e2e.webhook_helpers import room, send_webhook

pytestmark = [pytest.mark.e2e, pytest.mark.redis]

TRANSCRIPT_ON = {"transcript": "on", "summary": "off"}


async def live_device(served: Served, livekit, client: AimClient, **options) -> Session:
    """A session whose device joined and is in the room (the agent not yet)."""
    session = await client.create_session("phone", **options)
    await session.join()
    livekit.add_participant(room(session.session_id), str(session.endpoint_id))
    assert await send_webhook(served.http, "participant_joined", room(session.session_id),
                              str(session.endpoint_id)) == "applied"  # fmt: skip
    return session


@contextlib.asynccontextmanager
async def device_in_room(
    livekit, store, **options
) -> AsyncIterator[tuple[Served, AimClient, Session, contextlib.AsyncExitStack]]:
    """The proxied service, alice's client, her session whose device joined and is in the room
    (`live_device`), and a stack the test enters its agents into, closed first."""
    async with (
        proxied_service(livekit, store) as served,
        AimClient(served.base_url, token=token("alice")) as client,
        contextlib.AsyncExitStack() as stack,
    ):
        yield served, client, await live_device(served, livekit, client, **options), stack


async def agent_joins(served: Served, livekit, session_id: str, identity: str = AGENT) -> None:
    livekit.add_participant(room(session_id), identity, kind="agent")
    joined = await send_webhook(served.http, "participant_joined", room(session_id), identity,
                                agent=True)  # fmt: skip
    assert joined == "applied"


def packets(livekit, session_id: str, kind: str) -> list[tuple[bytes, str]]:
    """The data packets the agent got, as (payload, topic)."""
    return [
        (request.data, request.topic)
        for request in livekit.data_messages
        if request.room == room(session_id) and json.loads(request.data)["type"] == kind
    ]


@contextlib.asynccontextmanager
async def helpers(livekit, session_id: str):
    """Makes agent helpers from the session's dispatch metadata, closed at the end."""
    async with contextlib.AsyncExitStack() as stack:

        async def make() -> AgentSession:
            helper = AgentSession.from_metadata(metadata_of(livekit, session_id))
            return await stack.enter_async_context(helper)

        yield make


def metadata_of(livekit, session_id: str) -> str:
    dispatch: str = livekit.dispatches_in(room(session_id))[-1].metadata
    return dispatch


async def test_the_helper_reads_the_dispatch_metadata_and_speaks_for_its_session(livekit, store):
    async with (
        proxied_service(livekit, store) as served,
        AimClient(served.base_url, token=token("alice")) as client,
    ):
        session = await client.create_session("phone", retention=TRANSCRIPT_ON)
        raw = metadata_of(livekit, session.session_id)
        async with AgentSession.from_metadata(raw) as agent:
            assert (agent.session_id, agent.task_id, agent.epoch) == (
                session.session_id, session.task_id, 1)  # fmt: skip
            assert agent.provider_url == f"http://127.0.0.1:{served.agent_proxy.port}/provider"
            assert agent.retention == TRANSCRIPT_ON
            assert agent.requested["interactions"] == ["text", "confirmation"]
            assert agent.provider_token not in repr(agent.metadata)
            await agent.report_state("listening")
            assert (await session.refresh())["agent"]["state"] == "listening"

        assert parse_metadata(raw.encode()) == parse_metadata(json.loads(raw)) == agent.metadata

        broken = {**json.loads(raw), "sessionEpoch": "1"}
        del broken["providerToken"]
        with pytest.raises(AgentMetadataError) as refused:
            AgentSession.from_metadata(broken)
        assert refused.value.problems == [
            "sessionEpoch: must be an integer of at least 1, got '1'",
            "providerToken: missing",
        ]

        # the token is good for its own session only
        other = await client.create_session("phone")
        theirs = {**json.loads(raw), "sessionId": other.session_id}
        async with AgentSession.from_metadata(theirs) as stranger:
            with pytest.raises(AuthError) as denied:
                await stranger.report_state("joined")
            assert denied.value.http_status == 403


async def test_an_operation_answered_before_the_agent_joined_still_reaches_it(livekit, store):
    async with device_in_room(livekit, store) as (served, _client, session, stack):
        sid = session.session_id
        new_agent = await stack.enter_async_context(helpers(livekit, sid))
        agent = await new_agent()
        asked = await agent.request_operation(action={"title": "Book a table"},
                                              expires_in_seconds=60)  # fmt: skip
        assert asked["state"] == "awaiting_confirmation"
        assert await agent.sync() == []  # nothing answered yet
        await session.confirm(asked["operationId"], "approve")

        [update] = await agent.sync()  # read, before any data message could come
        assert (update.operation_id, update.state, update.command_id) == (
            asked["operationId"], "running", None)  # fmt: skip
        assert update.operation is not None
        assert (
            update.operation["requirement"]["requirementId"]
            == asked["requirement"]["requirementId"]
        )
        assert await agent.sync() == []

        # joining, the agent is told again: already known, so nothing new
        await agent_joins(served, livekit, sid)
        await wait_for_data(livekit, room(sid), "operation.update")
        [(payload, topic)] = packets(livekit, sid, "operation.update")
        assert topic == TOPIC
        assert agent.receive(payload, topic) is None

        # a worker that did not read them first learns it from that message, once
        fresh = await new_agent()
        told = fresh.receive(payload, topic)
        assert isinstance(told, OperationUpdate)
        assert (told.operation_id, told.state) == (asked["operationId"], "running")
        assert told.command_id == f"sync:{asked['operationId']}:running"
        assert fresh.receive(payload, topic) is None
        assert await fresh.sync() == []


async def test_data_messages_are_taken_once_each(livekit, store):
    async with device_in_room(livekit, store) as (served, _client, session, stack):
        sid = session.session_id
        await agent_joins(served, livekit, sid)
        agent = await (await stack.enter_async_context(helpers(livekit, sid)))()

        said = await session.send_text("hello")
        await wait_for_data(livekit, room(sid), "input.text")
        [(payload, topic)] = packets(livekit, sid, "input.text")
        message = agent.receive(payload, topic)
        assert message == InteractionMessage("input.text", said.command_id, 1, {"text": "hello"})
        assert agent.receive(payload, topic) is None  # sent again (at least once): dropped
        assert agent.receive(payload, "another.topic") is None

        asked = await agent.request_operation(action={"title": "Book a table"})
        await session.confirm(asked["operationId"], "deny")
        await wait_for_data(livekit, room(sid), "operation.update")
        [(update, topic)] = packets(livekit, sid, "operation.update")
        told = agent.receive(update, topic)
        assert isinstance(told, OperationUpdate)
        assert (told.operation_id, told.state) == (asked["operationId"], "canceled")
        assert agent.receive(update, topic) is None
        assert await agent.sync() == []  # known from the message

        # the agent drops out and is replaced: the server tells its successor the states
        # again, with other ids; a helper that was told already drops them
        livekit.leave(room(sid), AGENT)
        assert await send_webhook(served.http, "participant_left", room(sid), AGENT,
                                  agent=True) == "applied"  # fmt: skip
        await agent_joins(served, livekit, sid, "agent-2")
        await wait_for_data(livekit, room(sid), "operation.update", count=2)
        again, topic = packets(livekit, sid, "operation.update")[1]
        assert json.loads(again)["commandId"] != json.loads(update)["commandId"]
        assert agent.receive(again, topic) is None


async def test_provider_calls_whose_answers_are_lost_apply_once(livekit, store):
    async with device_in_room(livekit, store, retention=TRANSCRIPT_ON) as (
        served,
        client,
        session,
        stack,
    ):
        sid = session.session_id
        await agent_joins(served, livekit, sid)
        agent = await (await stack.enter_async_context(helpers(livekit, sid)))()
        proxy = served.agent_proxy

        lost = proxy.arm(b"aim.provider.RequestOperation", forward=True, refuse=False)
        asked = await agent.request_operation(action={"title": "Book a table"})
        assert lost.is_set()
        assert [op["operationId"] for op in await agent.operations()] == [asked["operationId"]]

        await session.confirm(asked["operationId"], "approve")
        lost = proxy.arm(b"aim.provider.UpdateOperation", forward=True, refuse=False)
        done = await agent.update_operation(asked["operationId"], "succeeded",
                                            result={"booked": True})  # fmt: skip
        assert lost.is_set()
        assert (done["state"], done["result"]) == ("succeeded", {"booked": True})

        lost = proxy.arm(b"aim.provider.AppendTranscript", forward=True, refuse=False)
        item = await agent.append_transcript("agent", "Your table is booked.")
        assert lost.is_set()
        task = await client.call("GetTask", {"id": session.task_id})
        said = [m for m in task.get("history", []) if m["messageId"] == item]
        assert [m["parts"] for m in said] == [[{"text": "Your table is booked."}]]

        await quiet()
        got = await call(served.http, "GetSession", sessionId=sid)
        assert got["result"]["session"]["pendingOperationIds"] == []
        assert [(u.operation_id, u.state) for u in await agent.sync()] == []


async def test_an_agent_hands_its_context_and_unanswered_words_to_its_successor(livekit, store):
    """Rotation as the agent author and the app see it (profile §23): the first agent saves a
    context and reports its model's deadline; the device hears `agent rotating` and the session
    stays active; the successor, dispatched with the next generation, starts with the context
    and the message the first did not acknowledge; the first is told to leave and can no
    longer write."""
    async with device_in_room(livekit, store) as (served, _client, session, stack):
        sid = session.session_id
        events = Events(session)
        await agent_joins(served, livekit, sid)
        make = await stack.enter_async_context(helpers(livekit, sid))
        first = await make()
        assert (first.generation, first.successor_of) == (1, None)
        assert await first.save_context('{"summary": "a table for two"}') == 30
        # 20 s ahead, inside the 30 s margin: the successor is dispatched at once
        await first.report_deadline(datetime.now(UTC) + timedelta(seconds=20), "provider_goaway")
        shown = await events.until(lambda e: isinstance(e, AgentChanged) and e.rotating)
        assert shown == AgentChanged("rotating", generation=1, successor_generation=2)
        assert not shown.rotated
        said = await session.send_text("by the window, please")

        second = AgentSession.from_metadata(await successor_metadata(livekit, sid))
        second = await stack.enter_async_context(second)
        assert (second.generation, second.successor_of) == (2, 1)
        handover = await second.start()
        assert (handover.context, handover.context_generation) == (
            '{"summary": "a table for two"}',
            1,
        )
        assert [m.command_id for m in handover.interactions] == [said.command_id]
        assert handover.interactions[0].payload == {"text": "by the window, please"}
        assert await second.ack(said.command_id) == 0
        rotated = await events.until(lambda e: isinstance(e, AgentChanged) and e.rotated)
        assert rotated == AgentChanged("joined", generation=2, rotated_from=1)
        assert (session.agent_state, session.agent_generation) == ("joined", 2)
        assert session.state == "active"

        await wait_for_data(livekit, room(sid), "agent.leave")
        [(payload, topic)] = packets(livekit, sid, "agent.leave")
        assert first.receive(payload, topic) == LeaveNow(1, 2, "leave:1", 1)
        with pytest.raises(AgentReplacedError) as replaced:
            await first.save_context("too late")
        assert replaced.value.agent_generation == 2
        # what the successor was handed is not taken again if it arrives as a data message
        [(words, topic)] = packets(livekit, sid, "input.text")
        assert second.receive(words, topic) is None
        await events.stop()


async def successor_metadata(livekit, session_id: str) -> str:
    """The dispatch metadata of the session's second agent, once it is dispatched."""
    for _ in range(200):
        for dispatch in livekit.dispatches_in(room(session_id)):
            if json.loads(dispatch.metadata).get("agentGeneration") == 2:
                return str(dispatch.metadata)
        await quiet(0.025)
    raise AssertionError("no successor was dispatched")
