"""Credentials LiveKit itself revokes (profile §22): a superseded device, and every device at the
end, is removed with `revoke_token_ts`, so the join tokens it holds no longer connect; a device
that joins again gets a token issued after the revocation, which does."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from realtime.livekit_dev.standin import ConnectRefused
from tests.conftest import service
from tests.e2e.realtime_helpers import call, new_id, register
from tests.e2e.webhook_helpers import deliver, get, join, ready_session, room, webhook_event

pytestmark = pytest.mark.e2e


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


async def joined_device(client, livekit, session_id: str, key: str, epoch: int) -> tuple[str, str]:
    """(endpointId, join token) of a device that registered and joined, connected to LiveKit."""
    endpoint = (await register(client, session_id, epoch, key))["result"]["endpoint"]["endpointId"]
    joined = await join(client, session_id, endpoint, epoch)
    token = joined["result"]["media"]["token"]
    livekit.connect(token)
    return endpoint, token


async def removal_of(livekit, identity: str) -> Any:
    deadline = time.monotonic() + 5
    while True:
        found = [
            c.request
            for c in livekit.calls_to("RemoveParticipant", code="ok")
            if c.request.identity == identity
        ]
        if found:
            return found[-1]
        assert time.monotonic() < deadline, f"{identity} was never removed"
        await asyncio.sleep(0.02)


async def phone_in_room(client, livekit) -> tuple[str, str, str]:
    """(sessionId, endpointId, its join token) of a ready session whose phone joined and is in
    the room (LiveKit's participant_joined applied)."""
    _, session_id = await ready_session(client)
    phone, token = await joined_device(client, livekit, session_id, "phone", 1)
    joined = webhook_event("participant_joined", room(session_id), identity=phone, epoch=1)
    assert await deliver(client, joined) == "applied"
    return session_id, phone, token


async def test_a_superseded_device_cannot_connect_again_and_a_new_join_can(
    livekit, store, tracer_provider
):
    clock = Clock(time.time() - 20)
    async with service(livekit, store, tracer_provider, clock=clock) as client:
        session_id, phone, phone_token = await phone_in_room(client, livekit)

        clock.now += 5  # the tablet takes over five seconds after the phone's token was issued
        tablet, tablet_token = await joined_device(client, livekit, session_id, "tablet", 1)

        removal = await removal_of(livekit, phone)
        assert removal.revoke_token_ts == int(clock.now)
        with pytest.raises(ConnectRefused, match="revoked"):
            livekit.connect(phone_token)
        assert livekit.participant(room(session_id), tablet) is not None

        clock.now += 5  # the phone takes the session back: its new token is issued after
        again = await register(client, session_id, 2, "phone")  # a superseded device re-registers
        assert again["result"]["endpoint"]["endpointId"] == phone, again
        back = await join(client, session_id, phone, 2)
        assert "result" in back, back
        assert back["result"]["session"]["sessionEpoch"] == 3
        assert livekit.connect(back["result"]["media"]["token"]).identity == phone
        assert (await removal_of(livekit, tablet)).revoke_token_ts == int(clock.now)
        with pytest.raises(ConnectRefused, match="revoked"):
            livekit.connect(tablet_token)


async def test_the_end_revokes_every_device_before_the_room_is_deleted(
    livekit, store, tracer_provider
):
    clock = Clock(time.time() - 20)
    async with service(livekit, store, tracer_provider, clock=clock) as client:
        session_id, phone, _ = await phone_in_room(client, livekit)
        clock.now += 3

        ended = await call(
            client, "EndSession", sessionId=session_id, commandId=new_id(), reason="user_hangup"
        )
        assert "result" in ended, ended

        removal = await removal_of(livekit, phone)
        assert removal.revoke_token_ts == int(clock.now)
        assert livekit.revoked[(room(session_id), phone)] == int(clock.now)
        await livekit.wait_for_call("DeleteRoom")
        methods = [
            c.method for c in livekit.calls if c.method in ("RemoveParticipant", "DeleteRoom")
        ]
        assert methods == ["RemoveParticipant", "DeleteRoom"]
        assert (await get(client, session_id))["state"] in ("ending", "ended")
