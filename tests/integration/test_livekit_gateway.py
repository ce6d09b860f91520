"""The LiveKit gateway against the stand-in: idempotent calls, error classes, join tokens."""

from __future__ import annotations

from typing import Any

import pytest
from livekit import api
from livekit.api import TokenVerifier

from realtime.livekit_adapter.api import (
    LiveKitGateway,
    LiveKitNotConfigured,
    LiveKitRejected,
    LiveKitUnavailable,
)
from realtime.livekit_adapter.tokens import join_token_claims, sign_join_token
from realtime.settings import Settings
from tests.conftest import LIVEKIT_KEY, LIVEKIT_SECRET, livekit_settings

ROOM = "aim-3f2a-e1"


@pytest.fixture
async def gateway(livekit):
    gateway = LiveKitGateway(livekit_settings(livekit), timeout_s=1.0)
    yield gateway
    await gateway.aclose()


async def test_create_room_twice_leaves_one_room(gateway, livekit):
    await gateway.create_room(ROOM, metadata={"sessionId": "s", "sessionEpoch": 1})
    await gateway.create_room(ROOM, metadata={"sessionId": "s", "sessionEpoch": 1})
    assert list(livekit.rooms) == [ROOM]
    assert livekit.rooms[ROOM].metadata == '{"sessionId":"s","sessionEpoch":1}'


async def test_dispatch_happens_once_per_room_even_when_retried(gateway, livekit):
    await gateway.create_room(ROOM, metadata={})
    first = await gateway.ensure_dispatch(ROOM, metadata={"sessionId": "s"})
    second = await gateway.ensure_dispatch(ROOM, metadata={"sessionId": "s"})
    assert first == second
    assert len(livekit.dispatches_in(ROOM, "aim-realtime-agent")) == 1
    assert len(livekit.calls_to("CreateDispatch")) == 1


def forced_failover(service: Any) -> None:
    """Force livekit-api's region failover on for the stand-in's loopback host, as it is on
    for a `*.livekit.cloud` host (its own test knobs), without its backoff."""
    service._client._failover_force = True
    service._client._failover_backoff = 0.0


async def test_a_lost_dispatch_answer_is_never_replayed_into_a_second_agent(gateway, livekit):
    request = api.CreateAgentDispatchRequest(agent_name="aim-realtime-agent", room=ROOM)
    await gateway.create_room(ROOM, metadata={})
    # livekit-api's default client: its failover replays the call whose answer was lost
    sdk = api.LiveKitAPI(livekit.url, LIVEKIT_KEY, LIVEKIT_SECRET)
    try:
        forced_failover(sdk.agent_dispatch)
        livekit.fail_next(1, status=503, method="CreateDispatch", effect_first=True)
        await sdk.agent_dispatch.create_dispatch(request)
    finally:
        await sdk.aclose()
    assert len(livekit.dispatches_in(ROOM, "aim-realtime-agent")) == 2  # two agents would join

    other = "aim-4b1c-e1"
    await gateway.create_room(other, metadata={})
    forced_failover(gateway._client().agent_dispatch)
    livekit.fail_next(1, status=503, method="CreateDispatch", effect_first=True)
    with pytest.raises(LiveKitUnavailable):
        await gateway.ensure_dispatch(other, metadata={"sessionId": "s"})
    assert len(livekit.calls_to("CreateDispatch")) == 3  # the SDK's two, the gateway's one
    # the outbox's retry looks before it creates: still one dispatch
    await gateway.ensure_dispatch(other, metadata={"sessionId": "s"})
    assert len(livekit.dispatches_in(other, "aim-realtime-agent")) == 1


async def test_missing_room_and_participant_count_as_done(gateway, livekit):
    await gateway.delete_room("aim-nothing-e1")
    await gateway.create_room(ROOM, metadata={})
    await gateway.remove_participant(ROOM, "nobody")
    assert [call.code for call in livekit.calls_to("DeleteRoom")] == ["not_found"]


async def test_rooms_and_participants_are_listed_as_plain_values(gateway, livekit):
    await gateway.create_room(ROOM, metadata={})
    made = livekit.add_room("aim-other-e2", age_s=30)
    livekit.add_participant(ROOM, "device-1")
    livekit.add_participant(ROOM, "agent-AJ_1", kind="agent")
    rooms = {room.name: room for room in await gateway.list_rooms()}
    assert set(rooms) == {ROOM, "aim-other-e2"}
    assert rooms["aim-other-e2"].created_ms == made.creation_time_ms
    made.creation_time_ms = 0  # a server older than creation_time_ms sends seconds only
    assert [r.created_ms for r in await gateway.list_rooms(["aim-other-e2"])] == [
        made.creation_time * 1000
    ]
    assert await gateway.list_rooms(["aim-missing-e1"]) == []
    listed = sorted(await gateway.list_participants(ROOM))
    assert [(p.identity, p.is_agent) for p in listed] == [("agent-AJ_1", True), ("device-1", False)]
    joined = {p.identity: p.joined_ms for p in listed}
    assert joined["agent-AJ_1"] == livekit.participant(ROOM, "agent-AJ_1").joined_at_ms
    assert await gateway.list_participants("aim-missing-e1") == []


async def test_removals_and_deletions_say_whether_there_was_anything_to_do(gateway, livekit):
    await gateway.create_room(ROOM, metadata={})
    livekit.add_participant(ROOM, "device-1")
    assert await gateway.remove_participant(ROOM, "device-1") is True
    assert await gateway.remove_participant(ROOM, "device-1") is False
    assert await gateway.delete_room(ROOM) is True
    assert await gateway.delete_room(ROOM) is False


async def test_permissions_are_sent_as_a_full_set(gateway, livekit):
    await gateway.create_room(ROOM, metadata={})
    livekit.add_participant(ROOM, "device-1")
    await gateway.update_permissions(
        ROOM, "device-1", can_subscribe=True, publish_sources=["microphone", "camera"]
    )
    permission = livekit.permission(ROOM, "device-1")
    assert permission.can_publish is True
    assert permission.can_subscribe is True
    assert permission.can_publish_data is False
    assert list(permission.can_publish_sources) == [2, 1]  # MICROPHONE, CAMERA


async def test_wrong_credentials_are_rejected_with_status_401(livekit):
    settings = livekit_settings(livekit, livekit_api_secret="wrong-secret-" + "x" * 40)
    gateway = LiveKitGateway(settings)
    try:
        with pytest.raises(LiveKitRejected) as raised:
            await gateway.create_room(ROOM, metadata={})
        assert raised.value.status == 401
    finally:
        await gateway.aclose()


async def test_unreachable_or_5xx_livekit_is_unavailable(gateway, livekit):
    livekit.fail_next(1, status=503)
    with pytest.raises(LiveKitUnavailable):
        await gateway.create_room(ROOM, metadata={})
    await livekit.set_down(True)
    with pytest.raises(LiveKitUnavailable):
        await gateway.create_room(ROOM, metadata={})


async def test_a_hung_livekit_times_out_as_unavailable(gateway, livekit):
    livekit.delay(3.0, method="CreateRoom")
    with pytest.raises(LiveKitUnavailable):
        await gateway.create_room(ROOM, metadata={})


async def test_unconfigured_livekit_is_unavailable():
    gateway = LiveKitGateway(Settings())
    with pytest.raises(LiveKitNotConfigured):
        await gateway.delete_room(ROOM)


def test_join_token_carries_exactly_the_grants_and_signs_deterministically(livekit):
    settings = livekit_settings(livekit, join_token_ttl_s=120)
    claims = join_token_claims(
        settings, room=ROOM, identity="ep-1", name="alice", epoch=3, session_id="s-1",
        can_subscribe=True, publish_sources=["microphone"], now=1_900_000_000,
    )  # fmt: skip
    assert claims["exp"] - claims["nbf"] == 120
    assert sign_join_token(settings, claims) == sign_join_token(settings, dict(claims))
    import time

    fresh = join_token_claims(
        settings, room=ROOM, identity="ep-1", name="alice", epoch=3, session_id="s-1",
        can_subscribe=False, publish_sources=[], now=int(time.time()),
    )  # fmt: skip
    verified = TokenVerifier(LIVEKIT_KEY, LIVEKIT_SECRET).verify(sign_join_token(settings, fresh))
    assert verified.identity == "ep-1"
    assert verified.name == "alice"
    assert verified.video.room == ROOM
    assert verified.video.can_publish is False
    assert verified.video.can_subscribe is False
    assert verified.video.can_update_own_metadata is False
    assert not verified.video.room_admin
    assert '"sessionEpoch":3' in verified.metadata


def test_unknown_track_source_is_refused(livekit):
    with pytest.raises(ValueError, match="mic"):
        join_token_claims(
            livekit_settings(livekit), room=ROOM, identity="e", name="n", epoch=1,
            session_id="s", can_subscribe=True, publish_sources=["mic"], now=0,
        )  # fmt: skip
