"""`RoomBinding` against the served service and the LiveKit stand-in, whose webhooks reach the
service: the binding's room enters the stand-in's room with the join token (`/dev/connect`), so
the device is in the room as LiveKit and the service have it. A second device takes the session
over: the first binding's room is left; the end: the second's is left and the bindings stop. A
connection that drops is entered again, and the session is active again."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
import pytest

from aim_realtime_client import AimClient, Events, RoomBinding, Session, StateChanged
from realtime.app import create_app
from realtime.store.redis_client import RedisClient
from tests.conftest import livekit_settings, serving, token
from tests.e2e.webhook_helpers import room
from tests.rooms import StandinRoom

pytestmark = [pytest.mark.e2e, pytest.mark.redis]

WAIT_S = 10.0


async def until(check: Callable[[], object], within: float = WAIT_S) -> None:
    deadline = time.monotonic() + within
    while not check():
        assert time.monotonic() < deadline, "still not so after waiting"
        await asyncio.sleep(0.01)


@contextlib.asynccontextmanager
async def on_the_standin(
    livekit: Any, store: RedisClient
) -> AsyncIterator[tuple[AimClient, httpx.AsyncClient]]:
    """Alice's client of a service whose LiveKit is the stand-in (its public URL the
    stand-in's, its webhooks sent to the service), and a client of the stand-in's HTTP URL."""
    settings = livekit_settings(livekit, livekit_public_url=livekit.ws_url)
    app = create_app(settings, store=store, tracer_provider=None)
    async with (
        serving(app, settings) as base_url,
        httpx.AsyncClient(base_url=livekit.url, timeout=30) as standin,
        AimClient(base_url, token=token("alice")) as client,
    ):
        livekit.set_webhook_target(f"{base_url}/livekit/webhook")
        yield client, standin


def states_of(session: Session) -> list[str]:
    """The states the session's stream shows from now on (a listener keeps them)."""
    states: list[str] = []

    def changed(event: StateChanged) -> None:
        states.append(event.state)

    session.on(Events.STATE, changed)
    return states


async def test_a_takeover_leaves_the_first_device_s_room_and_the_end_leaves_the_second_s(
    livekit, store
):
    async with on_the_standin(livekit, store) as (client, standin):
        phone = await client.create_session("phone")
        sid = phone.session_id
        phone_room = StandinRoom(standin)
        phone_binding = RoomBinding(phone, phone_room)
        joined = await phone_binding.connect()
        assert phone_room.calls == [("connect", livekit.ws_url, joined.token)]
        assert livekit.participant(room(sid), joined.identity) is not None
        phone_states = states_of(phone)
        await until(lambda: phone.state == "active")

        laptop = await client.resume_session(sid, endpoint_key="laptop")
        laptop_room = StandinRoom(standin)
        laptop_binding = RoomBinding(laptop, laptop_room)
        taken = await laptop_binding.connect()
        assert taken.epoch == 2
        await until(lambda: not phone_room.connected)
        assert phone.superseded
        assert phone_room.calls[-1] == ("disconnect",)
        assert not phone_binding.connected
        assert livekit.participant(room(sid), joined.identity) is None
        assert livekit.participant(room(sid), taken.identity) is not None
        await until(lambda: laptop.state == "active")

        await laptop.end("done for today")
        await until(lambda: not laptop_room.connected)
        assert laptop_room.calls[-1] == ("disconnect",)
        await until(lambda: not phone_binding.listening and not laptop_binding.listening)
        assert laptop.ended is not None
        assert laptop.ended.end_reason == "done for today"
        assert len(phone_room.connects) == len(laptop_room.connects) == 1
        assert "active" in phone_states
        await phone_binding.aclose()
        await laptop_binding.aclose()


async def test_a_dropped_connection_is_entered_again_and_the_session_is_active_again(
    livekit, store
):
    async with on_the_standin(livekit, store) as (client, standin):
        phone = await client.create_session("phone")
        sid = phone.session_id
        phone_room = StandinRoom(standin)
        binding = RoomBinding(phone, phone_room)
        joined = await binding.connect()
        states = states_of(phone)
        await until(lambda: phone.state == "active")

        # the connection is lost: LiveKit has the participant leave, the SDK says disconnected
        livekit.leave(room(sid), joined.identity)
        phone_room.drop()
        await until(lambda: phone_room.connected)
        [first, again] = phone_room.connects
        assert first == joined.token
        assert binding.joined is not None  # entered again after a new JoinSession: its token
        assert binding.joined.command_id != joined.command_id
        assert binding.joined.token == again
        assert livekit.participant(room(sid), joined.identity) is not None
        await until(lambda: phone.state == "active" and "reconnecting" in states)
        assert not phone.superseded
        await binding.aclose()
        assert phone_room.connected  # aclose leaves the room as it is
        await phone.end()
