"""The Python client (`aim_realtime_client`) against the served service and the LiveKit stand-in:
a device's whole journey, with the stream cut and resumed, a handoff and the end; commands
whose answers a proxy drops, applied once; the errors it waits out, retries, or raises."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
from livekit import api

from aim_realtime_client import (
    AgentSession,
    AimClient,
    AuthError,
    InvalidParamsError,
    InvalidStateError,
    LimitExceededError,
    NotFoundError,
    Requirement,
    RetryPolicy,
    StateChanged,
    SupersededError,
)
from realtime.methods import sessions as session_methods
from tests.conftest import LIVEKIT_KEY, LIVEKIT_SECRET, rpc, token
from tests.e2e.agent_operation_helpers import AGENT, data_to_agent, get_session, wait_for_data
from tests.e2e.client_helpers import (
    WAIT_S,
    Events,
    Gate,
    Served,
    Wire,
    proxied_service,
    server_event_ids,
    stream_id,
)
from tests.e2e.realtime_helpers import call
from tests.e2e.webhook_helpers import room, send_webhook

pytestmark = [pytest.mark.e2e, pytest.mark.redis]


async def in_the_room(served: Served, livekit, session_id: str, identity: str, **kw) -> None:
    livekit.add_participant(room(session_id), identity, **({"kind": "agent"} if kw else {}))
    joined = await send_webhook(served.http, "participant_joined", room(session_id), identity,
                                **kw)  # fmt: skip
    assert joined == "applied"


@contextlib.asynccontextmanager
async def alices_device(
    livekit: Any, store: Any, wire: Wire, gate: Gate | None = None
) -> AsyncIterator[tuple[Served, AimClient]]:
    """Alice's client on a device, its requests seen by `wire` (and held by `gate`), of the
    service behind its proxies."""
    async with (
        proxied_service(livekit, store) as served,
        wire.client(gate) as http,
        AimClient(served.device_url, token=token("alice"), http=http) as client,
    ):
        yield served, client


def agent_of(livekit, session_id: str) -> AgentSession:
    """The agent worker's helper, from the metadata of the dispatch LiveKit got."""
    return AgentSession.from_metadata(livekit.dispatches_in(room(session_id))[-1].metadata)


async def test_a_device_session_from_create_to_end_with_a_cut_stream_and_a_handoff(livekit, store):
    wire = Wire()
    async with (
        alices_device(livekit, store, wire) as (served, client),
        contextlib.AsyncExitStack() as stack,
    ):
        phone = await client.create_session("phone")
        sid = phone.session_id
        assert (phone.state, phone.epoch, phone.task_state) == ("ready", 1, "TASK_STATE_WORKING")
        events = Events(phone)
        await events.until(lambda e: isinstance(e, StateChanged))

        joined = await phone.join()
        claims = api.TokenVerifier(LIVEKIT_KEY, LIVEKIT_SECRET).verify(joined.token)
        assert claims.video.room == joined.room == room(sid)
        assert claims.video.room_join
        assert claims.identity == joined.identity == phone.endpoint_id == joined.endpoint_id
        assert joined.url == "wss://media.example"
        assert joined.epoch == phone.epoch == 1

        await in_the_room(served, livekit, sid, str(phone.endpoint_id))
        await in_the_room(served, livekit, sid, AGENT, agent=True)
        said = await phone.send_text("hello")
        [message] = await wait_for_data(livekit, room(sid), "input.text")
        assert (message["commandId"], message["payload"]) == (said.command_id, {"text": "hello"})
        assert said in events.named("interaction")

        # the agent asks; the device sees the requirement and approves it
        agent = await stack.enter_async_context(agent_of(livekit, sid))
        asked = await agent.request_operation(action={"title": "Book a table for two",
                                                      "tool": "reservations.book"})  # fmt: skip
        shown = await events.until(
            lambda e: isinstance(e, Requirement) and e.operation_id == asked["operationId"]
        )
        assert shown.action["title"] == "Book a table for two"
        assert phone.requirement == shown
        approved = await phone.confirm(asked["operationId"], "approve")
        assert approved["state"] == "running"

        # a second one, denied the A2A way (ContinueTask)
        second = await agent.request_operation(action={"title": "Send the menu"})
        await events.until(lambda e: isinstance(e, Requirement)
                           and e.operation_id == second["operationId"])  # fmt: skip
        denied = await phone.confirm(second["operationId"], "deny", via="task")
        assert denied["state"] == "canceled"
        task = await client.call("GetTask", {"id": phone.task_id, "historyLength": 1})
        assert task["history"][-1]["parts"][-1]["data"] == {"decision": "deny"}

        # the stream is cut; the session moves on meanwhile; the stream resumes after its last id
        served.device_proxy.refuse()
        await agent.report_state("thinking")
        third = await agent.request_operation(action={"title": "Call the restaurant"})
        await asyncio.sleep(0.4)  # reconnects are refused meanwhile
        served.device_proxy.restore()
        await events.until(lambda e: isinstance(e, Requirement)
                           and e.operation_id == third["operationId"])  # fmt: skip
        subscribes = wire.of("SubscribeToTask")
        assert len(subscribes) >= 2
        assert "last-event-id" not in subscribes[0].headers
        assert all("last-event-id" in s.headers for s in subscribes[1:])
        assert {s.body for s in subscribes} == {subscribes[0].body}

        # a second device of the same user takes the session over
        laptop = await client.resume_session(sid, endpoint_key="laptop")
        assert laptop.task_id == phone.task_id
        taken = await laptop.join()
        assert taken.epoch == 2
        assert taken.endpoint_id != phone.endpoint_id
        superseded = await events.until(lambda e: e.name == "superseded")
        assert superseded.epoch == 2
        assert phone.superseded
        before = len(wire.requests)
        with pytest.raises(SupersededError) as refused:
            await phone.send_text("still there?")
        assert refused.value.current_epoch == 2
        assert all(s.method != "aim.realtime.SendInteraction" for s in wire.requests[before:])

        laptop_events = Events(laptop)
        ended_session = await laptop.end("done for today")
        assert ended_session["state"] == "ending"
        for seen in (events, laptop_events):
            ended = await seen.until(lambda e: e.name == "ended")
            assert ended.task_state == "TASK_STATE_COMPLETED"
            assert ended.end_reason == "done for today"
            await seen.done()

        # the phone's stream, cut once, has every event of the server's stream once, in order
        updates = events.named("update")
        ids = [u.event_id for u in updates]
        assert "statusUpdate" in updates[-1].result
        assert updates[-1].result["statusUpdate"]["status"]["state"] == "TASK_STATE_COMPLETED"
        first, last = stream_id(ids[0]), stream_id(ids[-1])
        kept = [i for i in await server_event_ids(store, sid) if first < stream_id(i) <= last]
        assert ids[1:] == kept
        assert len(kept) > 10


async def test_commands_whose_answers_are_lost_are_retried_and_applied_once(livekit, store):
    wire = Wire()
    async with alices_device(livekit, store, wire) as (served, client):
        session = await client.create_session("phone")
        sid = session.session_id
        await session.register()

        async def version() -> int:
            got = await call(served.http, "GetSession", sessionId=sid)
            found: int = got["result"]["session"]["version"]
            return found

        before = await version()
        lost = served.device_proxy.arm(b"aim.realtime.JoinSession", forward=True, refuse=False)
        joined = await session.join()
        assert lost.is_set()
        assert await version() == before + 1  # one commit, not two
        first, again = wire.of("aim.realtime.JoinSession")
        assert first.body == again.body
        stored = await call(served.http, "GetCommand", sessionId=sid, commandId=joined.command_id)
        command = stored["result"]["command"]
        assert command["method"] == "aim.realtime.JoinSession"
        assert command["result"]["media"]["token"] == joined.token  # the replay's identical JWT

        await in_the_room(served, livekit, sid, str(session.endpoint_id))
        await in_the_room(served, livekit, sid, AGENT, agent=True)
        before = await version()
        served.device_proxy.arm(b"aim.realtime.SendInteraction", forward=True, refuse=False)
        said = await session.send_text("only once")
        assert await version() == before + 1
        first, again = wire.of("aim.realtime.SendInteraction")
        assert first.body == again.body
        stored = await call(served.http, "GetCommand", sessionId=sid, commandId=said.command_id)
        assert stored["result"]["command"]["result"]["interaction"]["commandId"] == said.command_id
        await wait_for_data(livekit, room(sid), "input.text")
        await asyncio.sleep(0.2)
        delivered = [m for m in livekit.data_messages if m.room == room(sid)]
        assert len(delivered) == 1  # the agent was told once


async def test_a_rate_limit_is_waited_out_as_retry_after_says(livekit, store):
    waits: list[float] = []

    async def sleep(seconds: float) -> None:
        waits.append(seconds)
        await asyncio.sleep(seconds)

    wire = Wire()
    async with (
        proxied_service(livekit, store, rate_limit_rps=2) as served,
        wire.client() as http,
        AimClient(served.base_url, token=token("bob"), http=http, sleep=sleep) as client,
    ):
        session = await client.create_session("phone")  # two calls of the burst of four
        started = time.monotonic()
        for _ in range(3):
            await session.refresh()
        assert -31011 in wire.codes
        assert time.monotonic() - started >= 0.9
        assert 1.0 in waits  # Retry-After: 1, not a backoff
        gets = wire.of("aim.realtime.GetSession")
        assert len(gets) == 1 + 3 + wire.codes.count(-31011)


async def test_an_unavailable_upstream_is_retried_with_the_same_ids(livekit, store, monkeypatch):
    monkeypatch.setattr(session_methods, "PROVISIONING_WAIT_S", 1.0)
    wire = Wire()
    async with (
        proxied_service(livekit, store) as served,
        wire.client() as http,
        AimClient(served.base_url, token=token("carol"), http=http,
                  retry=RetryPolicy(attempts=10, max_delay_ms=1000)) as client,
    ):  # fmt: skip
        await livekit.set_down(True)
        creating = asyncio.create_task(client.create_session("phone"))
        deadline = time.monotonic() + 10
        while -31012 not in wire.codes:
            assert time.monotonic() < deadline
            assert not creating.done()
            await asyncio.sleep(0.05)
        await livekit.set_down(False)
        session = await asyncio.wait_for(creating, 30)
        sends = wire.of("SendMessage")
        assert len(sends) >= 2
        assert {s.body for s in sends} == {sends[0].body}
        listed = await rpc(served.http, "ListTasks", {}, subject="carol")
        assert [t["id"] for t in listed["result"]["tasks"]] == [session.task_id]


async def test_other_errors_are_raised_typed_after_one_request(livekit, store):
    wire = Wire()
    async with (
        proxied_service(livekit, store, max_endpoints_per_session=1) as served,
        wire.client() as http,
        AimClient(served.base_url, token=token("dave"), http=http) as client,
    ):
        session = await client.create_session("phone")
        await session.join()

        def one(method: str) -> None:
            assert len(wire.of(method)) == 1, [s.method for s in wire.requests]

        with pytest.raises(InvalidStateError) as refused:  # the agent is not in the room yet
            await session.send_text("anyone?")
        assert (refused.value.code, refused.value.reason) == (-31003, "INVALID_STATE")
        assert refused.value.metadata["state"] == "joining"
        one("aim.realtime.SendInteraction")

        with pytest.raises(NotFoundError) as unknown:
            await session.operation("0b6c2f3e-94a7-4c1e-8d0f-6f4f7b3a9e21")
        assert unknown.value.code == -31006
        one("aim.realtime.GetOperation")

        laptop = await client.resume_session(session.session_id, endpoint_key="laptop")
        with pytest.raises(LimitExceededError) as full:
            await laptop.register()
        assert (full.value.metadata["limit"], full.value.retry_after_ms) == (
            "endpoints_per_session", None)  # fmt: skip
        assert not full.value.retryable
        assert len(wire.of("aim.realtime.RegisterEndpoint")) == 2  # the phone's, and this one

        long_key = await client.resume_session(session.session_id, endpoint_key="k" * 129)
        with pytest.raises(InvalidParamsError) as invalid:
            await long_key.register()
        assert [v.field for v in invalid.value.violations] == ["params.clientEndpointKey"]
        assert len(wire.of("aim.realtime.RegisterEndpoint")) == 3

        async with AimClient(served.base_url, token="not-a-token", http=http) as stranger:
            sent = len(wire.requests)
            with pytest.raises(AuthError) as denied:
                await stranger.create_session("phone")
            assert (denied.value.code, denied.value.http_status) == (-31401, 401)
            assert len(wire.requests) == sent + 1


async def test_a_superseded_device_whose_check_failed_sends_nothing_at_epoch_2(livekit, store):
    gate, wire = Gate(), Wire()
    async with (
        proxied_service(livekit, store) as served,
        wire.client(gate) as http,
        AimClient(served.device_url, token=token("alice"), http=http) as client,
        AimClient(served.base_url, token=token("alice")) as other,
    ):
        phone = await client.create_session("phone")
        sid = phone.session_id
        events = Events(phone)
        await phone.join()
        await in_the_room(served, livekit, sid, str(phone.endpoint_id))
        await in_the_room(served, livekit, sid, AGENT, agent=True)
        await phone.send_text("hello")

        # GetSession fails for the phone while the laptop takes the session over and comes
        # into the room: the session is active again, at epoch 2, and the phone cannot check
        gate.fail.add("aim.realtime.GetSession")
        laptop = await other.resume_session(sid, endpoint_key="laptop")
        assert (await laptop.join()).epoch == 2
        livekit.add_participant(room(sid), str(laptop.endpoint_id))
        arrived = await send_webhook(served.http, "participant_joined", room(sid),
                                     str(laptop.endpoint_id), epoch=2)  # fmt: skip
        assert arrived == "applied"
        await events.until(lambda e: isinstance(e, StateChanged) and (e.state, e.epoch) == (
            "active", 2))  # fmt: skip
        assert phone.epoch == 2  # shown, not yet used
        assert not phone.superseded

        # the next command checks first: superseded, so it is not sent
        gate.fail.clear()
        version = (await get_session(served.http, sid))["version"]
        sent = len(wire.of("aim.realtime.SendInteraction"))
        with pytest.raises(SupersededError) as refused:
            await phone.send_text("from the phone at epoch 2")
        assert refused.value.current_epoch == 2
        assert len(wire.of("aim.realtime.SendInteraction")) == sent
        assert phone.superseded
        assert (await events.until(lambda e: e.name == "superseded")).epoch == 2
        assert (await get_session(served.http, sid))["version"] == version
        texts = [m["payload"]["text"] for m in data_to_agent(livekit, room(sid), "input.text")]
        assert texts == ["hello"]
        await events.stop()


async def test_an_answer_read_after_the_stream_moved_on_does_not_take_the_state_back(
    livekit, store
):
    gate, wire = Gate(), Wire()
    async with alices_device(livekit, store, wire, gate) as (served, client):
        phone = await client.create_session("phone")
        sid = phone.session_id
        events = Events(phone)
        await events.until(lambda e: isinstance(e, StateChanged) and e.state == "ready")

        # JoinSession applies (joining); its answer is held while the device enters the room
        held = gate.hold("aim.realtime.JoinSession")
        joining = asyncio.create_task(phone.join())
        await asyncio.wait_for(held.wait(), WAIT_S)
        await in_the_room(served, livekit, sid, str(phone.endpoint_id))
        await events.until(lambda e: isinstance(e, StateChanged) and e.state == "active")
        gate.release("aim.realtime.JoinSession")
        joined = await asyncio.wait_for(joining, WAIT_S)
        assert joined.epoch == 1
        assert phone.info["state"] == "joining"  # what the answer said, kept as it came
        assert phone.state == "active"  # what the stream showed since
        await phone.refresh()
        assert phone.state == "active"
        await events.stop()
