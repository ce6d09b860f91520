"""Agent rotation across provider caps (profile §23), end to end: agents report deadlines and save
context through the provider API, the service dispatches a successor into the same room and
epoch before each deadline, hands the session over when the successor is in, fences the
predecessor, and falls back when a successor never starts or a predecessor dies first. Driven
against the LiveKit stand-in's simulated worker on the service's own clock."""

from __future__ import annotations

import asyncio
import json

import pytest

from tests.e2e.agent_operation_helpers import quiet
from tests.e2e.agent_presence_helpers import (
    START_TIMEOUT_S,
    World,
    ours,
    presence_world,
    room,
    until,
)
from tests.e2e.operator_api_helpers import timeline_of
from tests.e2e.realtime_helpers import call, new_id
from tests.e2e.rotation_helpers import (
    GRACE_S,
    MARGIN_S,
    Agent,
    agent_of,
    ahead,
    deadline_call,
    delivered_to,
    interact,
    live_session,
    report_deadline,
    rotation_counts,
    session_now,
    start,
    successor_dispatched,
    told_to_leave,
    until_dispatches,
)
from tests.event_receivers import events_settings, receiver

pytestmark = pytest.mark.e2e


def rotating(session: dict) -> bool:
    return session["agent"]["state"] == "rotating"


async def rotate(
    world: World, session_id: str, serving: Agent, generation: int
) -> tuple[Agent, Agent]:
    """`serving` reports a deadline a minute ahead; the clock reaches the rotation's start:
    the successor (the agent of `generation`) is dispatched, not started yet. Returns
    (serving, the successor-to-be, not in the room)."""
    await report_deadline(world, session_id, serving, 60)
    world.clock.advance(60 - MARGIN_S + 1)
    dispatch = await successor_dispatched(world, session_id, generation)
    session = await until(world, session_id, rotating)
    assert session["state"] == "active"  # nothing for the app to do
    successor = agent_of(dispatch)
    assert session["agent"]["rotation"]["toGeneration"] == successor.generation
    return serving, successor


async def ack(world: World, session_id: str, agent: Agent, *command_ids: str) -> dict:
    body = await agent.call(
        world, session_id, "AckInteractions", sessionEpoch=1, commandIds=list(command_ids)
    )
    assert "result" in body, body
    return body


async def save(world: World, session_id: str, agent: Agent, context: str) -> dict:
    return await agent.call(world, session_id, "SaveContext", sessionEpoch=1, context=context)


async def handover(world: World, session_id: str, agent: Agent) -> dict:
    body = await agent.call(world, session_id, "GetHandover")
    assert "result" in body, body
    result: dict = body["result"]
    return result


async def test_three_rotations_in_a_row_carry_context_operations_and_interactions(
    store, tracer_provider, tmp_path
):
    async with (
        receiver(tmp_path) as backend,
        presence_world(
            store, tracer_provider, auto_jobs=False, **events_settings(backend.url)
        ) as world,
    ):
        session_id, _, first = await live_session(world)
        assert first.generation == 1
        # the first agent asks the user to confirm an action, saves its context, and takes in
        # the user's first message
        asked = await first.call(
            world,
            session_id,
            "RequestOperation",
            sessionEpoch=1,
            requestId=new_id(),
            kind="action",
            action={"title": "Book the table"},
            confirmation="required",
        )
        operation = asked["result"]["operation"]
        assert "result" in await save(world, session_id, first, "ctx-1")
        hello = await interact(world, session_id, "hello")
        await ack(world, session_id, first, hello)

        # rotation 1: generation 2 is dispatched into the same room and epoch
        _, second = await rotate(world, session_id, first, 2)
        assert second.generation == 2
        during_first = await interact(world, session_id, "said during rotation 1")
        second = await start(world, session_id, second.dispatch)
        session = await session_now(world, session_id)
        assert (session["sessionEpoch"], session["media"]["room"]) == (1, room(session_id))
        assert session["agent"]["state"] == "joined"
        # the predecessor is told to leave, and can no longer write
        [leave] = told_to_leave(world, session_id)
        assert leave["payload"] == {"generation": 1, "successorGeneration": 2}
        refused = await save(world, session_id, first, "too late")
        assert refused["error"]["code"] == -31002, refused
        assert "taken over by generation 2" in refused["error"]["message"]
        # the successor receives the context, the open operation and the unacknowledged message
        given = await handover(world, session_id, second)
        assert given["context"]["data"] == "ctx-1"
        assert given["context"]["generation"] == 1
        assert [op["operationId"] for op in given["operations"]] == [operation["operationId"]]
        assert [m["commandId"] for m in given["interactions"]] == [during_first]
        await ack(world, session_id, second, during_first)
        assert "result" in await save(world, session_id, second, "ctx-2")

        # rotation 2: the user confirms the first agent's operation meanwhile
        _, third = await rotate(world, session_id, second, 3)
        requirement = operation["requirement"]
        confirmed = await call(
            world.http,
            "SendInteraction",
            sessionId=session_id,
            sessionEpoch=1,
            commandId=new_id(),
            type="operation.confirm",
            payload={
                "operationId": operation["operationId"],
                "requirementId": requirement["requirementId"],
                "actionDigest": requirement["actionDigest"],
            },
        )
        assert "result" in confirmed, confirmed
        during_second = await interact(world, session_id, "said during rotation 2")
        third = await start(world, session_id, third.dispatch)
        given = await handover(world, session_id, third)
        assert given["context"]["data"] == "ctx-2"

        # the confirmation reached the serving agent when it was given, and the successor once,
        # when it came in (sent after its start is committed: waited for, 5 s at most)
        def operation_updates() -> list[tuple[list[str], str]]:
            return [
                (m.destination_identities, json.loads(m.data)["commandId"])
                for m in world.livekit.data_messages
                if json.loads(m.data)["type"] == "operation.update"
                and json.loads(m.data)["payload"]["operationId"] == operation["operationId"]
            ]

        for _ in range(250):
            if [third.identity] in [who for who, _ in operation_updates()]:
                break
            await asyncio.sleep(0.02)
        updates = operation_updates()
        assert [who for who, _ in updates].count([third.identity]) == 1
        assert [who for who, _ in updates].count([second.identity]) == 1
        assert [(op["operationId"], op["state"]) for op in given["operations"]] == [
            (operation["operationId"], "running")
        ]
        assert [m["commandId"] for m in given["interactions"]] == [during_second]
        await ack(world, session_id, third, during_second)
        # the third agent finishes what the first asked for; the second may not
        stale = await second.call(
            world,
            session_id,
            "UpdateOperation",
            requestId=new_id(),
            operationId=operation["operationId"],
            state="succeeded",
        )
        assert stale["error"]["code"] == -31002
        assert "taken over by generation 3" in stale["error"]["message"]
        done = await third.call(
            world,
            session_id,
            "UpdateOperation",
            requestId=new_id(),
            operationId=operation["operationId"],
            state="succeeded",
            result={"booked": True},
        )
        assert done["result"]["operation"]["state"] == "succeeded"

        # rotation 3
        _, fourth = await rotate(world, session_id, third, 4)
        fourth = await start(world, session_id, fourth.dispatch)
        given = await handover(world, session_id, fourth)
        assert (given["operations"], given["interactions"]) == ([], [])
        session = await session_now(world, session_id)
        assert session["state"] == "active"
        assert session["agent"].get("generation", 1) == 4

        # every message reached exactly one agent, once: none twice, none lost
        sent = delivered_to(world, session_id)
        assert sent == {
            hello: [first.identity],
            during_first: [first.identity],
            during_second: [second.identity],
        }
        assert [m["payload"]["successorGeneration"] for m in told_to_leave(world, session_id)] == [
            2,
            3,
            4,
        ]
        # the predecessor's grace ends: it is removed, its dispatch deleted; one agent remains
        world.clock.advance(GRACE_S + 1)
        await until_dispatches(world, session_id, lambda found: len(found) == 1)
        assert [agent_of(d).generation for d in ours(world.livekit, session_id)] == [4]
        removed = [c.request.identity for c in world.livekit.calls_to("RemoveParticipant")]
        assert third.identity in removed
        # the app's backend hears each rotation with its generations
        await backend.wait_for(
            lambda: sum(e["type"] == "agent.rotated" for e in backend.delivered(session_id)) == 3
        )
        rotated = [e["data"] for e in backend.delivered(session_id) if e["type"] == "agent.rotated"]
        assert [(r["fromGeneration"], r["toGeneration"]) for r in rotated] == [
            (1, 2),
            (2, 3),
            (3, 4),
        ]
        assert {r["reason"] for r in rotated} == {"provider_cap"}
        assert rotation_counts(world) == {"begun": 3, "handed_over": 3, "seams": 3}
        # the operator's timeline: each rotation's start with its successor, each handover
        # with the generation that serves from then on, and each agent's calls by generation
        entries = await timeline_of(world.http, session_id)
        moves = [
            e
            for e in entries
            if e["kind"] == "agent" and {"rotating", "rotated"} & set(e["changes"])
        ]
        assert [(e["changes"], e.get("successor"), e["generation"]) for e in moves] == [
            (["rotating"], 2, 1),
            (["rotated", "joined"], None, 2),
            (["rotating"], 3, 2),
            (["rotated", "joined"], None, 3),
            (["rotating"], 4, 3),
            (["rotated", "joined"], None, 4),
        ]
        deadlines = [e for e in entries if e.get("method") == "aim.provider.ReportDeadline"]
        assert [e["generation"] for e in deadlines] == [1, 2, 3]


async def test_a_successor_that_never_starts_is_retried_while_the_predecessor_serves(
    store, tracer_provider
):
    async with presence_world(store, tracer_provider, auto_jobs=False) as world:
        session_id, _, first = await live_session(world)
        await save(world, session_id, first, "ctx-1")
        _, never = await rotate(world, session_id, first, 2)

        world.clock.advance(START_TIMEOUT_S)
        # its dispatch alone is deleted and another made; the serving agent stays and writes
        retry = await until_dispatches(
            world, session_id, lambda found: [agent_of(d).generation for d in found] == [1, 3]
        )
        assert never.dispatch.id not in {d.id for d in retry}
        session = await session_now(world, session_id)
        assert (session["agent"]["state"], session["agent"].get("generation", 1)) == (
            "rotating",
            1,
        )
        assert "result" in await save(world, session_id, first, "ctx-2")
        # the retry starts: the handover as usual, with the newest context
        third = await start(world, session_id, retry[-1])
        assert (await handover(world, session_id, third))["context"]["data"] == "ctx-2"
        assert [m["payload"] for m in told_to_leave(world, session_id)] == [
            {"generation": 1, "successorGeneration": 3}
        ]
        assert rotation_counts(world) == {"begun": 1, "retried": 1, "handed_over": 1, "seams": 1}


async def test_at_the_deadline_a_successor_not_started_yet_takes_over(store, tracer_provider):
    async with presence_world(
        store, tracer_provider, auto_jobs=False, agent_start_timeout_s=120
    ) as world:
        session_id, _, first = await live_session(world)
        _, second = await rotate(world, session_id, first, 2)

        world.clock.advance(MARGIN_S)  # past the deadline; the successor has not started
        session = await until(world, session_id, lambda s: s["agent"].get("generation", 1) == 2)
        assert (session["state"], session["agent"]["state"]) == ("active", "dispatched")
        # the predecessor's connection is over: removed rather than told, and fenced
        await until_dispatches(
            world, session_id, lambda found: [d.id for d in found] == [second.dispatch.id]
        )
        refused = await save(world, session_id, first, "gone")
        assert "taken over by generation 2" in refused["error"]["message"]
        assert told_to_leave(world, session_id) == []
        second = await start(world, session_id, second.dispatch)
        assert (await session_now(world, session_id))["agent"]["state"] == "joined"


async def test_with_no_successor_at_the_deadline_the_agent_is_lost_and_replaced(
    store, tracer_provider
):
    # a margin of 45 s leaves room for three tries of 10 s before the deadline
    async with presence_world(
        store, tracer_provider, auto_jobs=False, agent_rotate_margin_s=45
    ) as world:
        session_id, _, first = await live_session(world)
        await save(world, session_id, first, "ctx-1")
        await report_deadline(world, session_id, first, 60)
        world.clock.advance(60 - 45 + 1)
        await successor_dispatched(world, session_id, 2)
        for generation in (3, 4):  # two retries, none starts
            world.clock.advance(START_TIMEOUT_S)
            await successor_dispatched(world, session_id, generation)
        world.clock.advance(START_TIMEOUT_S)  # the third miss: no try left, the agent kept
        await until_dispatches(
            world, session_id, lambda found: [agent_of(d).generation for d in found] == [1]
        )
        session = await session_now(world, session_id)
        assert (session["agent"]["state"], session["agent"].get("generation", 1)) == (
            "rotating",
            1,
        )

        world.clock.advance(60)  # the deadline passes with no successor: the agent is lost
        replacement = await successor_dispatched(world, session_id, 5)
        session = await session_now(world, session_id)
        assert (session["state"], session["agent"]["state"]) == ("active", "dispatched")
        assert session["agent"].get("generation", 1) == 5
        await until_dispatches(
            world, session_id, lambda found: [d.id for d in found] == [replacement.id]
        )
        fifth = await start(world, session_id, replacement)
        assert (await handover(world, session_id, fifth))["context"]["data"] == "ctx-1"
        assert rotation_counts(world) == {"begun": 1, "retried": 2, "lost": 1}


async def test_an_agents_worker_dying_before_the_handover_leaves_the_successor_to_take_over(
    store, tracer_provider
):
    async with presence_world(store, tracer_provider, auto_jobs=False) as world:
        session_id, _, first = await live_session(world)
        await save(world, session_id, first, "ctx-1")
        _, second = await rotate(world, session_id, first, 2)
        pending = await interact(world, session_id, "unanswered")

        # the agents' worker process dies: the serving agent's connection drops and its job
        # ends failed; the successor's job, not taken yet, goes to another worker
        [gone] = world.livekit.kill_worker()
        assert gone.state.participant_identity == first.identity
        session = await until(world, session_id, lambda s: s["agent"].get("generation", 1) == 2)
        assert session["agent"]["state"] in ("dispatching", "dispatched")
        # no new dispatch: the successor is the replacement, the dead agent's dispatch deleted
        await until_dispatches(
            world, session_id, lambda found: [d.id for d in found] == [second.dispatch.id]
        )

        second = await start(world, session_id, second.dispatch)
        given = await handover(world, session_id, second)
        assert given["context"]["data"] == "ctx-1"
        assert [m["commandId"] for m in given["interactions"]] == [pending]
        assert told_to_leave(world, session_id) == []  # nobody to tell
        assert rotation_counts(world) == {"begun": 1, "replaced": 1, "seams": 1}


async def test_a_configured_interval_rotates_agents_on_its_own(store, tracer_provider):
    async with presence_world(
        store, tracer_provider, auto_jobs=False, agent_rotate_after_s=120
    ) as world:
        session_id, _, first = await live_session(world)
        assert (await session_now(world, session_id))["agent"]["state"] == "joined"
        world.clock.advance(120 - MARGIN_S + 1)
        dispatch = await successor_dispatched(world, session_id, 2)
        assert agent_of(dispatch).generation == first.generation + 1
        session = await until(world, session_id, rotating)
        assert session["agent"]["rotation"]["reason"] == "planned"
        second = await start(world, session_id, dispatch)
        assert second.generation == 2
        # the successor's own interval begins when it joins
        world.clock.advance(120 - MARGIN_S + 1)
        assert agent_of(await successor_dispatched(world, session_id, 3)).generation == 3


async def test_bad_rotation_requests_are_refused_and_store_nothing(store, tracer_provider):
    async with presence_world(store, tracer_provider, auto_jobs=False) as world:
        session_id, _, first = await live_session(world)
        past = await deadline_call(
            world, session_id, first, "2001-01-01T00:00:00Z", reason="provider_cap"
        )
        assert past["error"]["code"] == -32602
        assert "deadline" in past["error"]["message"]
        huge = await save(world, session_id, first, "x" * (64 * 1024 + 1))
        assert huge["error"]["code"] == -32602
        assert "65536" in huge["error"]["message"]
        far = await deadline_call(
            world, session_id, first, "2099-01-01T00:00:00Z", reason="planned"
        )
        assert far["error"]["code"] == -32602
        wrong_epoch = await deadline_call(
            world, session_id, first, ahead(world, 60), reason="planned", epoch=2
        )
        assert wrong_epoch["error"]["code"] == -31002
        assert (await handover(world, session_id, first))["context"] is None
        session = await session_now(world, session_id)
        assert session["agent"]["state"] == "joined"

        # two reports at once: one rotation
        reports = await asyncio.gather(
            report_deadline(world, session_id, first, 20),
            report_deadline(world, session_id, first, 20),
        )
        assert all("result" in r for r in reports)
        world.clock.advance(1)
        await successor_dispatched(world, session_id, 2)
        await quiet(0.3)
        assert len(ours(world.livekit, session_id)) == 2

        # a rotation asked for while the session ends is refused
        ended = await call(
            world.http, "EndSession", sessionId=session_id, commandId=new_id(), reason="done"
        )
        assert "result" in ended, ended
        late = await deadline_call(world, session_id, first, ahead(world, 60), reason="planned")
        assert late["error"]["code"] == -31003
