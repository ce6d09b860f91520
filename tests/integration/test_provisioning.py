"""Provisioning in one LiveKit round trip (profile §22): the room is created with the agent's
dispatch in it, a retry looks before it dispatches, and an outbox stored before rooms came with
their agent still provisions its session."""

from __future__ import annotations

import pytest

from realtime.a2a.projection import follow
from realtime.engine.core import Engine
from realtime.livekit_adapter.api import LiveKitGateway
from realtime.store import keys
from realtime.store.records import SESSION_ENCODER, PendingEffect
from realtime.store.sessions import SessionStore
from realtime.worker.runner import Runner
from state_machines import CreateRoom, DispatchAgent
from tests.conftest import livekit_settings
from tests.e2e.realtime_helpers import create_session, register, session_of
from tests.e2e.webhook_helpers import join
from tests.integration.engine_helpers import new_session

pytestmark = pytest.mark.redis

AGENT = "aim-realtime-agent"


async def test_a_session_is_ready_after_one_livekit_call_and_its_first_join_makes_none(
    rt_client, livekit
):
    created = await create_session(rt_client)
    found = session_of(created["result"]["task"])
    assert found["sessionState"] == "ready"
    session_id = found["sessionId"]
    room = f"aim-{session_id}-e1"
    assert [c.method for c in livekit.calls] == ["CreateRoom"]
    (dispatch,) = livekit.dispatches_in(room, AGENT)
    assert '"sessionId":"' + session_id in dispatch.metadata
    assert '"sessionEpoch":1' in dispatch.metadata
    # the dispatch is marked as this session's, of this room's epoch
    (asked,) = livekit.calls_to("CreateRoom")[0].request.agents
    assert dict(asked.attributes) == {"aim.sessionId": session_id, "aim.sessionEpoch": "1"}

    endpoint = (await register(rt_client, session_id, 1, "phone"))["result"]["endpoint"]
    joined = await join(rt_client, session_id, endpoint["endpointId"], 1)
    assert joined["result"]["session"]["state"] == "joining"
    assert [c.method for c in livekit.calls] == ["CreateRoom"]  # the join asked LiveKit nothing


@pytest.mark.parametrize(
    "fault",
    ["refused", "answer lost", "answered too late", "slow"],
)
async def test_one_dispatch_per_room_whatever_the_provisioning_call_meets(store, livekit, fault):
    settings = livekit_settings(livekit)
    engine = Engine(settings, SessionStore(store), project=follow)
    gateway = LiveKitGateway(settings, timeout_s=0.3)
    runner = Runner(engine, gateway)
    if fault == "refused":
        livekit.fail_next(1, status=503, method="CreateRoom")
    elif fault == "answer lost":
        livekit.fail_next(1, status=503, method="CreateRoom", effect_first=True)
    elif fault == "answered too late":  # carried out, but after the call's timeout
        livekit.delay(0.6, n=1, method="CreateRoom", effect_first=True)
    else:  # within the timeout
        livekit.delay(0.2, n=1, method="CreateRoom")
    try:
        session_id = await new_session(engine, provisioned=False)
        for _ in range(3):  # the inline run, then the worker's retries
            if await runner.run(session_id):
                break
    finally:
        await gateway.aclose()
    loaded = await engine.sessions.load(session_id)
    assert loaded.record is not None
    assert loaded.record.session.state == "ready"
    assert len(livekit.dispatches_in(f"aim-{session_id}-e1", AGENT)) == 1
    assert livekit.calls_to("CreateDispatch", code="ok") == []
    retried = fault != "slow"
    assert len(livekit.calls_to("ListDispatch")) == (1 if retried else 0)


async def test_an_outbox_stored_before_rooms_came_with_their_agent_still_provisions(store, livekit):
    settings = livekit_settings(livekit)
    engine = Engine(settings, SessionStore(store), project=follow)
    gateway = LiveKitGateway(settings)
    runner = Runner(engine, gateway)
    try:
        session_id = await new_session(engine, provisioned=False)
        room = f"aim-{session_id}-e1"
        outbox = keys.outbox_key(session_id)
        await store.client.delete(outbox)
        for effect_id, effect in (
            ("000000000001-00", CreateRoom(room, 1)),
            ("000000000001-01", DispatchAgent(room, 1)),
        ):
            entry = PendingEffect(effect=effect, epoch=1)
            await store.client.hset(outbox, effect_id, SESSION_ENCODER.encode(entry))
        assert await runner.run(session_id)
    finally:
        await gateway.aclose()
    loaded = await engine.sessions.load(session_id)
    assert loaded.record is not None
    assert loaded.record.session.state == "ready"
    assert [c.method for c in livekit.calls] == ["CreateRoom", "ListDispatch", "CreateDispatch"]
    assert len(livekit.dispatches_in(room, AGENT)) == 1
