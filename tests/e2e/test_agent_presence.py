"""The agent's presence is a fact the service tracks and guarantees (profile §22): LiveKit's job
webhooks and the agent's joins and leaves move `agent.state`; a dispatch whose job never starts
is replaced after AIM_AGENT_START_TIMEOUT_S, and after three in a row the session fails with
`agent_unavailable`; an agent lost mid-session is replaced in the same room and epoch. Driven
against the LiveKit stand-in's simulated agent worker, which reports by signed webhook."""

from __future__ import annotations

import json

import pytest

from tests.e2e.agent_operation_helpers import get_task, provider_call, quiet, wait_for_data
from tests.e2e.agent_presence_helpers import (
    START_TIMEOUT_S,
    World,
    attempt_of,
    job_event,
    new_session,
    ours,
    presence_counts,
    presence_world,
    room,
    until,
)
from tests.e2e.operator_api_helpers import eventually, timeline_of
from tests.e2e.realtime_helpers import new_id, register
from tests.e2e.webhook_helpers import deliver, get, join, snapshot, webhook_event
from tests.event_receivers import events_settings, receiver

pytestmark = pytest.mark.e2e


def joined(session: dict) -> bool:
    return session["agent"]["state"] == "joined"


async def connected_device(world: World, session_id: str, key: str = "phone") -> str:
    """A device that registered, joined and connected to LiveKit (which reports it): its id."""
    registered = await register(world.http, session_id, 1, key)
    endpoint: str = registered["result"]["endpoint"]["endpointId"]
    answer = await join(world.http, session_id, endpoint, 1)
    world.livekit.connect(answer["result"]["media"]["token"])
    await until(world, session_id, lambda s: s["state"] == "active")
    return endpoint


async def test_a_session_whose_agent_starts_shows_it_everywhere(store, tracer_provider, tmp_path):
    async with (
        receiver(tmp_path) as backend,
        presence_world(
            store, tracer_provider, auto_jobs=False, **events_settings(backend.url)
        ) as world,
    ):
        session_id = await new_session(world)
        session = await get(world.http, session_id)
        # ready waits for the room and its dispatch, not for the agent (decision 173)
        assert session["state"] == "ready"
        assert session["agent"] == {"state": "dispatched", "dispatchAttempt": 1}
        [dispatch] = ours(world.livekit, session_id)

        job = world.livekit.start_job(dispatch.id)
        session = await until(world, session_id, joined)

        identity = job.state.participant_identity
        assert session["agent"] == {
            "state": "joined",
            "dispatchAttempt": 1,
            "identity": identity,
            "jobId": job.id,
        }
        entries = await timeline_of(world.http, session_id)
        moves = [(e["from"], e["to"], e["changes"]) for e in entries if e["kind"] == "agent"]
        assert moves == [
            ("dispatching", "dispatched", []),
            ("dispatched", "started", ["started"]),
            ("started", "joined", ["joined"]),
        ]
        hooks = [e["event"] for e in entries if e["kind"] == "webhook"]
        assert hooks[:2] == ["agent_job_started", "participant_joined"]
        assert presence_counts(world) == {"started": 1, "joined": 1}
        await backend.wait_for(
            lambda: any(e["type"] == "agent.joined" for e in backend.delivered(session_id))
        )
        [told] = [e for e in backend.delivered(session_id) if e["type"] == "agent.joined"]
        assert told["data"] == {"identity": identity, "dispatchAttempt": 1}


async def test_a_silently_dropped_dispatch_is_replaced_after_the_start_timeout(
    store, tracer_provider
):
    async with presence_world(store, tracer_provider) as world:
        world.livekit.drop_next_dispatches(1)
        session_id = await new_session(world)
        [dropped] = ours(world.livekit, session_id)
        await quiet(0.3)
        assert (await get(world.http, session_id))["agent"]["state"] == "dispatched"

        world.clock.advance(START_TIMEOUT_S)
        session = await until(world, session_id, joined)

        # the same room and epoch; the stale dispatch deleted, one new dispatch, its job started
        assert (session["sessionEpoch"], session["media"]["room"]) == (1, room(session_id))
        assert session["agent"]["dispatchAttempt"] == 2
        [replacement] = ours(world.livekit, session_id)
        assert replacement.id != dropped.id
        assert attempt_of(replacement) == 2
        deleted = world.livekit.calls_to("DeleteDispatch", code="ok")
        assert [c.request.dispatch_id for c in deleted] == [dropped.id]
        [job] = world.livekit.jobs_in(room(session_id), running=True)
        assert job.dispatch_id == replacement.id
        assert session["agent"]["jobId"] == job.id
        assert presence_counts(world)["not_started"] == 1


async def test_three_dropped_dispatches_in_a_row_end_the_session_agent_unavailable(
    store, tracer_provider
):
    async with presence_world(store, tracer_provider) as world:
        world.livekit.drop_next_dispatches(3)
        session_id = await new_session(world)
        phone = await connected_device(world, session_id)

        # each wait is longer than the one before (10 s, 20 s, 40 s)
        for attempt, wait in ((2, 1), (3, 2)):
            world.clock.advance(START_TIMEOUT_S * wait)
            # each replacement is the session's next agent: generation = attempt here
            made = {"state": "dispatched", "dispatchAttempt": attempt, "generation": attempt}
            await until(world, session_id, lambda s, made=made: s["agent"] == made)
            assert len(ours(world.livekit, session_id)) == 1  # one dispatch at a time
        world.clock.advance(START_TIMEOUT_S * 2)  # not yet: 40 s for the third
        await quiet(0.6)
        assert (await get(world.http, session_id))["state"] == "active"
        world.clock.advance(START_TIMEOUT_S * 2)
        session = await until(world, session_id, lambda s: s["state"] == "failed")

        assert session["endReason"] == "agent_unavailable"
        task = await get_task(world.http, session["taskId"])
        assert task["status"]["state"] == "TASK_STATE_FAILED"
        text, data = task["status"]["message"]["parts"]
        assert "No agent could join this session" in text["text"]
        assert data["data"] == {"reason": "agent_unavailable"}
        # the device is removed (its tokens revoked) and the room deleted
        await world.livekit.wait_for_call("DeleteRoom")
        assert world.livekit.calls_to("RemoveParticipant", code="ok")[0].request.identity == phone
        assert room(session_id) not in world.livekit.rooms
        assert len(world.livekit.dropped) == 3
        assert presence_counts(world) == {"not_started": 2, "unavailable": 1}


@pytest.mark.parametrize("how", ["its worker dies", "it leaves the room"])
async def test_an_agent_lost_mid_session_is_replaced_in_the_same_room_and_epoch(
    store, tracer_provider, how
):
    async with presence_world(store, tracer_provider) as world:
        session_id = await new_session(world)
        phone = await connected_device(world, session_id)
        first = await until(world, session_id, joined)
        # the agent had the user confirm nothing, and started an action that is running
        token = json.loads(ours(world.livekit, session_id)[0].metadata)["providerToken"]
        status, body, _ = await provider_call(
            world.http, token, "RequestOperation", sessionId=session_id, sessionEpoch=1,
            requestId=new_id(), kind="action", confirmation="none",
            action={"title": "Look up the menu", "tool": "menu"},
        )  # fmt: skip
        assert status == 200, body
        operation_id = body["result"]["operation"]["operationId"]

        if how == "its worker dies":  # its job ends, and the agent leaves the room
            world.livekit.kill_worker()
        else:  # only the agent's leave is reported (its job runs on, until its dispatch goes)
            world.livekit.leave(room(session_id), first["agent"]["identity"])
        session = await until(
            world, session_id, lambda s: joined(s) and s["agent"]["dispatchAttempt"] == 2
        )

        assert (session["state"], session["sessionEpoch"]) == ("active", 1)
        assert session["media"]["room"] == room(session_id)
        assert session["agent"]["identity"] != first["agent"]["identity"]
        assert world.livekit.participant(room(session_id), phone) is not None  # still there
        assert [attempt_of(d) for d in ours(world.livekit, session_id)] == [2]
        assert [r for r in world.livekit.rooms if session_id in r] == [room(session_id)]
        # the new agent learns what became of the running operation, as a rejoining one did
        updates = await wait_for_data(world.livekit, room(session_id), "operation.update")
        to_new = [
            m
            for m in world.livekit.data_messages
            if list(m.destination_identities) == [session["agent"]["identity"]]
        ]
        assert [json.loads(m.data)["payload"]["operationId"] for m in to_new] == [operation_id]
        assert updates[-1]["payload"] == {"operationId": operation_id, "state": "running"}
        assert presence_counts(world)["lost"] == 1


async def test_job_webhooks_of_another_room_or_an_older_dispatch_are_fenced_and_recorded(
    store, tracer_provider
):
    async with presence_world(store, tracer_provider, auto_jobs=False, webhooks=False) as world:
        session_id = await new_session(world)
        current = room(session_id)
        started = job_event("agent_job_started", current, job_id="AJ_a", identity="agent-a")
        assert await deliver(world.http, started) == "applied"
        assert await deliver(world.http, started) == "duplicate"  # the same delivery again
        # LiveKit reports the same job again under a new event id: nothing moves
        before = await snapshot(world.http, session_id)
        again = job_event("agent_job_started", current, job_id="AJ_a", identity="agent-a")
        assert await deliver(world.http, again) == "applied"
        assert await snapshot(world.http, session_id) == before

        # the job ends: the agent is replaced (dispatch 2)
        ended = job_event("agent_job_ended", current, job_id="AJ_a", identity="agent-a")
        assert await deliver(world.http, ended) == "applied"
        await until(world, session_id, lambda s: s["agent"]["dispatchAttempt"] == 2)
        await until(world, session_id, lambda s: s["agent"]["state"] == "dispatched")
        replaced = await snapshot(world.http, session_id)
        # late reports of dispatch 1 and of its agent change nothing
        late = [
            job_event("agent_job_started", current, job_id="AJ_b", identity="agent-b"),
            job_event("agent_job_ended", current, job_id="AJ_a", identity="agent-a"),
            webhook_event("participant_left", current, identity="agent-a", agent=True),
            webhook_event("participant_joined", current, identity="agent-a", agent=True),
        ]
        for event in late:
            assert await deliver(world.http, event) == "ignored", event.event
        # a job of another agent than ours, and of another session's room
        other_agent = job_event(
            "agent_job_started", current, job_id="AJ_c", attempt=2, agent_name="someone-else"
        )
        assert await deliver(world.http, other_agent) == "ignored"
        foreign = job_event("agent_job_ended", room(new_id()), job_id="AJ_d", attempt=2)
        assert await deliver(world.http, foreign) == "ignored"
        assert await snapshot(world.http, session_id) == replaced

        async def verdicts() -> list[tuple[str, str]]:
            entries = await timeline_of(world.http, session_id)
            found = [(e["event"], e["verdict"]) for e in entries if e["kind"] == "webhook"]
            return found if len(found) == 8 else []

        assert await eventually(verdicts) == [
            ("agent_job_started", "applied"),
            ("agent_job_started", "duplicate"),
            ("agent_job_started", "applied"),
            ("agent_job_ended", "applied"),
            ("agent_job_started", "fenced"),
            ("agent_job_ended", "fenced"),
            ("participant_left", "fenced"),
            ("participant_joined", "fenced"),
        ]


async def test_a_job_of_an_older_epochs_room_is_fenced(store, tracer_provider):
    async with presence_world(store, tracer_provider, auto_jobs=False, webhooks=False) as world:
        session_id = await new_session(world)
        lost = webhook_event("room_finished", room(session_id))
        assert await deliver(world.http, lost) == "applied"  # rebound: epoch 2, a new room
        await until(world, session_id, lambda s: s["state"] == "ready" and s["sessionEpoch"] == 2)
        before = await snapshot(world.http, session_id)

        old = job_event("agent_job_started", room(session_id, 1), job_id="AJ_old")
        assert await deliver(world.http, old) == "ignored"

        assert await snapshot(world.http, session_id) == before

        async def noted() -> bool:
            entries = await timeline_of(world.http, session_id)
            hooks = [(e["event"], e["verdict"]) for e in entries if e["kind"] == "webhook"]
            return ("agent_job_started", "fenced") in hooks

        await eventually(noted)


async def test_a_job_that_ends_before_its_start_is_heard_is_replaced_once(store, tracer_provider):
    async with presence_world(store, tracer_provider, auto_jobs=False, webhooks=False) as world:
        session_id = await new_session(world)
        current = room(session_id)
        ended = job_event("agent_job_ended", current, job_id="AJ_x", identity="agent-x")
        started = job_event("agent_job_started", current, job_id="AJ_x", identity="agent-x")

        assert await deliver(world.http, ended) == "applied"
        assert await deliver(world.http, started) == "ignored"  # late: dispatch 1 is replaced

        session = await until(world, session_id, lambda s: s["agent"]["state"] == "dispatched")
        assert session["agent"]["dispatchAttempt"] == 2
        await world.livekit.wait_for_call("DeleteDispatch")
        assert [attempt_of(d) for d in ours(world.livekit, session_id)] == [2]
        await quiet()
        assert len(world.livekit.calls_to("CreateDispatch", code="ok")) == 1  # once


async def test_livekit_down_during_a_replacement_retries_it_from_the_outbox(store, tracer_provider):
    async with presence_world(store, tracer_provider) as world:
        world.livekit.drop_next_dispatches(1)
        session_id = await new_session(world)
        await world.livekit.set_down(True)

        world.clock.advance(START_TIMEOUT_S)
        session = await until(world, session_id, lambda s: s["effects"]["retrying"] > 0)
        assert (session["agent"]["state"], session["agent"]["dispatchAttempt"]) == (
            "dispatching",
            2,
        )
        await world.livekit.set_down(False)
        world.clock.advance(5)  # the retry is due
        session = await until(world, session_id, joined)

        assert session["agent"]["dispatchAttempt"] == 2
        assert [attempt_of(d) for d in ours(world.livekit, session_id)] == [2]
        assert session["effects"] == {"pending": 0, "retrying": 0}


async def test_the_start_timeout_ends_the_session_while_livekit_stays_down(store, tracer_provider):
    async with presence_world(store, tracer_provider) as world:
        world.livekit.drop_next_dispatches(1)
        session_id = await new_session(world)
        await world.livekit.set_down(True)

        for wait in (1, 2, 4):  # no replacement can be made, no agent ever comes
            world.clock.advance(START_TIMEOUT_S * wait)
            await quiet(0.6)
        session = await until(world, session_id, lambda s: s["state"] == "failed")

        assert session["endReason"] == "agent_unavailable"
        await world.livekit.set_down(False)
        world.clock.advance(120)  # the room is deleted once LiveKit is back
        await world.livekit.wait_for_call("DeleteRoom", within=10)
        assert room(session_id) not in world.livekit.rooms
