"""The LiveKit stand-in, driven only through the real ``livekit-api`` client (and raw HTTP for
what the client cannot send), behaves like LiveKit's server (livekit-notes §2, §3)."""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import json
import time
from collections.abc import AsyncIterator

import aiohttp
import aiohttp.web
import jwt
import pytest
from livekit import api

from realtime.livekit_dev.standin import (
    ConnectRefused,
    LiveKitStandin,
    running_standin,
    sign_webhook,
    webhook_headers,
)

KEY = "APIstandinTestKey"
SECRET = "standin-test-secret-0123456789-abcdefghij"  # 32+ bytes: PyJWT warns on short keys
ROOM = "aim-s-1-e1"


@pytest.fixture
async def standin() -> AsyncIterator[LiveKitStandin]:
    async with running_standin(KEY, SECRET) as lk:
        yield lk


@pytest.fixture
async def lkapi(standin: LiveKitStandin) -> AsyncIterator[api.LiveKitAPI]:
    client = api.LiveKitAPI(standin.ws_url, KEY, SECRET)
    yield client
    await client.aclose()


def admin_token(room: str, **grants: bool) -> str:
    video = api.VideoGrants(room=room, **grants)
    return api.AccessToken(KEY, SECRET).with_grants(video).to_jwt()


async def raw_post(
    standin: LiveKitStandin, path: str, body: bytes | str, headers: dict[str, str]
) -> tuple[int, str, str]:
    async with (
        aiohttp.ClientSession() as session,
        session.post(standin.url + path, data=body, headers=headers) as resp,
    ):
        return resp.status, resp.headers.get("Content-Type", ""), await resp.text()


# ---- rooms ----------------------------------------------------------------------------------
async def test_create_room_is_an_upsert(standin: LiveKitStandin, lkapi: api.LiveKitAPI) -> None:
    first = await lkapi.room.create_room(
        api.CreateRoomRequest(name=ROOM, empty_timeout=60, max_participants=3, metadata='{"a":1}')
    )
    assert first.sid.startswith("RM_")
    assert first.creation_time > 0
    assert first.departure_timeout == 20  # server default
    second = await lkapi.room.create_room(api.CreateRoomRequest(name=ROOM, empty_timeout=90))
    assert second.sid == first.sid
    assert second.empty_timeout == 90  # non-zero fields are updated ...
    assert second.max_participants == 3  # ... zero fields leave the stored value
    assert second.metadata == '{"a":1}'
    listed = await lkapi.room.list_rooms(api.ListRoomsRequest())
    assert [r.name for r in listed.rooms] == [ROOM]
    assert [c.code for c in standin.calls_to("CreateRoom")] == ["ok", "ok"]
    assert standin.calls_to("CreateRoom")[0].request.max_participants == 3


async def test_new_room_gets_dispatches_like_livekit(
    standin: LiveKitStandin, lkapi: api.LiveKitAPI
) -> None:
    await lkapi.room.create_room(api.CreateRoomRequest(name="plain"))
    agents = [api.RoomAgentDispatch(agent_name="voice", metadata="m")]
    await lkapi.room.create_room(api.CreateRoomRequest(name=ROOM, agents=agents))
    await lkapi.room.create_room(api.CreateRoomRequest(name=ROOM, agents=agents))  # upsert
    assert [d.agent_name for d in standin.dispatches_in("plain")] == [""]
    assert [(d.agent_name, d.metadata) for d in standin.dispatches_in(ROOM)] == [("voice", "m")]


async def test_delete_room(standin: LiveKitStandin, lkapi: api.LiveKitAPI) -> None:
    with pytest.raises(api.ServerError) as err:
        await lkapi.room.delete_room(api.DeleteRoomRequest(room=ROOM))
    assert (err.value.code, err.value.status) == ("not_found", 404)
    assert err.value.message == "requested room does not exist"

    await lkapi.room.create_room(api.CreateRoomRequest(name=ROOM))
    standin.add_participant(ROOM, "user-1")
    await lkapi.agent_dispatch.create_dispatch(
        api.CreateAgentDispatchRequest(agent_name="voice", room=ROOM)
    )
    await lkapi.room.delete_room(api.DeleteRoomRequest(room=ROOM))
    assert ROOM not in standin.rooms
    assert standin.participant(ROOM, "user-1") is None
    assert standin.dispatches_in(ROOM) == []


async def test_update_room_metadata(standin: LiveKitStandin, lkapi: api.LiveKitAPI) -> None:
    with pytest.raises(api.ServerError) as err:
        await lkapi.room.update_room_metadata(api.UpdateRoomMetadataRequest(room=ROOM))
    assert err.value.code == "not_found"
    await lkapi.room.create_room(api.CreateRoomRequest(name=ROOM))
    room = await lkapi.room.update_room_metadata(
        api.UpdateRoomMetadataRequest(room=ROOM, metadata="x")
    )
    assert room.metadata == standin.rooms[ROOM].metadata == "x"


async def test_list_rooms_lists_every_room_or_the_named_ones(
    standin: LiveKitStandin, lkapi: api.LiveKitAPI
) -> None:
    before = datetime.datetime.now(datetime.UTC).timestamp()
    for name in ("a", "b", ROOM):
        await lkapi.room.create_room(api.CreateRoomRequest(name=name))
    listed = await lkapi.room.list_rooms(api.ListRoomsRequest())
    assert sorted(r.name for r in listed.rooms) == sorted(["a", "b", ROOM])
    named = await lkapi.room.list_rooms(api.ListRoomsRequest(names=[ROOM, "missing", "a"]))
    assert sorted(r.name for r in named.rooms) == ["a", ROOM]  # unknown names are left out
    [room] = (await lkapi.room.list_rooms(api.ListRoomsRequest(names=[ROOM]))).rooms
    # seconds, and (newer servers) milliseconds
    assert before - 1 <= room.creation_time <= before + 5
    assert room.creation_time == room.creation_time_ms // 1000
    assert [c.code for c in standin.calls_to("ListRooms")] == ["ok"] * 3
    assert standin.calls_to("ListRooms")[1].request.names == [ROOM, "missing", "a"]


async def test_list_rooms_needs_the_room_list_grant(standin: LiveKitStandin) -> None:
    standin.add_room(ROOM)
    for grants in ({"room_admin": True}, {"room_create": True}, {}):
        client = api.LiveKitAPI(standin.url, token=admin_token(ROOM, **grants))
        try:
            with pytest.raises(api.ServerError) as err:
                await client.room.list_rooms(api.ListRoomsRequest())
        finally:
            await client.aclose()
        assert (err.value.code, err.value.status) == ("unauthenticated", 401)
        assert err.value.message == "permissions denied"
    client = api.LiveKitAPI(standin.url, token=admin_token("", room_list=True))
    try:
        listed = await client.room.list_rooms(api.ListRoomsRequest())
    finally:
        await client.aclose()
    assert [r.name for r in listed.rooms] == [ROOM]


async def test_list_participants_needs_room_admin_for_that_room(standin: LiveKitStandin) -> None:
    standin.add_room(ROOM)
    standin.add_participant(ROOM, "user-1")
    request = api.ListParticipantsRequest(room=ROOM)
    for token in (
        admin_token("other-room", room_admin=True),
        admin_token(ROOM, room_list=True),
        admin_token(ROOM, room_create=True),
    ):
        client = api.LiveKitAPI(standin.url, token=token)
        try:
            with pytest.raises(api.ServerError) as err:
                await client.room.list_participants(request)
        finally:
            await client.aclose()
        assert (err.value.code, err.value.status) == ("unauthenticated", 401)
    client = api.LiveKitAPI(standin.url, token=admin_token(ROOM, room_admin=True))
    try:
        listed = await client.room.list_participants(request)
    finally:
        await client.aclose()
    assert [p.identity for p in listed.participants] == ["user-1"]
    assert listed.participants[0].state == api.ParticipantInfo.ACTIVE


async def test_rooms_made_by_hand_can_be_aged_and_dropped(
    standin: LiveKitStandin, lkapi: api.LiveKitAPI
) -> None:
    made = standin.add_room(ROOM, age_s=600, metadata="by hand")
    assert standin.add_room(ROOM) is made  # an existing room stays as it is
    [listed] = (await lkapi.room.list_rooms(api.ListRoomsRequest())).rooms
    now = datetime.datetime.now(datetime.UTC).timestamp()
    assert now - 602 <= listed.creation_time <= now - 598
    assert abs(listed.creation_time_ms / 1000 - (now - 600)) < 2
    assert (listed.metadata, listed.sid) == ("by hand", made.sid)
    standin.age_room(ROOM, 5)
    [listed] = (await lkapi.room.list_rooms(api.ListRoomsRequest())).rooms
    assert now - 7 <= listed.creation_time <= now - 3
    standin.add_participant(ROOM, "user-1")
    standin.close_room(ROOM)  # silently: the stand-in sends no webhook
    assert (await lkapi.room.list_rooms(api.ListRoomsRequest())).rooms == []
    empty = await lkapi.room.list_participants(api.ListParticipantsRequest(room=ROOM))
    assert list(empty.participants) == []


async def test_a_lost_call_is_acknowledged_and_not_carried_out(
    standin: LiveKitStandin, lkapi: api.LiveKitAPI
) -> None:
    standin.add_room(ROOM)
    standin.lose_next(method="DeleteRoom")
    await lkapi.room.create_room(api.CreateRoomRequest(name="other"))  # other methods work
    await lkapi.room.delete_room(api.DeleteRoomRequest(room=ROOM))
    assert ROOM in standin.rooms  # acknowledged, but the room is still there
    assert [c.code for c in standin.calls_to("DeleteRoom")] == ["ok"]
    await lkapi.room.delete_room(api.DeleteRoomRequest(room=ROOM))  # only the next one
    assert ROOM not in standin.rooms
    standin.lose_next(method="DeleteRoom")
    client = api.LiveKitAPI(standin.url, token=admin_token(ROOM, room_admin=True))
    try:  # grants are still checked
        with pytest.raises(api.ServerError) as err:
            await client.room.delete_room(api.DeleteRoomRequest(room="other"))
    finally:
        await client.aclose()
    assert err.value.code == "unauthenticated"


# ---- participants ---------------------------------------------------------------------------
async def test_participants(standin: LiveKitStandin, lkapi: api.LiveKitAPI) -> None:
    # a missing room lists nobody (the server's store has no entry)
    empty = await lkapi.room.list_participants(api.ListParticipantsRequest(room=ROOM))
    assert list(empty.participants) == []
    await lkapi.room.create_room(api.CreateRoomRequest(name=ROOM))
    standin.add_participant(ROOM, "user-1", name="Alice")
    standin.add_participant(ROOM, "agent-1", kind="agent")
    listed = await lkapi.room.list_participants(api.ListParticipantsRequest(room=ROOM))
    assert {p.identity: p.kind for p in listed.participants} == {
        "user-1": api.ParticipantInfo.STANDARD,
        "agent-1": api.ParticipantInfo.AGENT,
    }
    got = await lkapi.room.get_participant(
        api.RoomParticipantIdentity(room=ROOM, identity="user-1")
    )
    assert (got.name, got.state) == ("Alice", api.ParticipantInfo.ACTIVE)
    assert standin.rooms[ROOM].num_participants == 2
    with pytest.raises(api.ServerError) as err:
        await lkapi.room.get_participant(api.RoomParticipantIdentity(room=ROOM, identity="nobody"))
    assert (err.value.code, err.value.message) == ("not_found", "participant does not exist")


async def test_remove_participant(standin: LiveKitStandin, lkapi: api.LiveKitAPI) -> None:
    await lkapi.room.create_room(api.CreateRoomRequest(name=ROOM))
    with pytest.raises(api.ServerError) as err:
        await lkapi.room.remove_participant(
            api.RoomParticipantIdentity(room=ROOM, identity="user-1")
        )
    assert (err.value.code, err.value.status) == ("not_found", 404)
    standin.add_participant(ROOM, "user-1")
    await lkapi.room.remove_participant(api.RoomParticipantIdentity(room=ROOM, identity="user-1"))
    assert standin.participant(ROOM, "user-1") is None
    assert standin.calls_to("RemoveParticipant", code="ok")[0].request.identity == "user-1"


async def test_join_needs_an_existing_room_unless_auto_create() -> None:
    async with running_standin(KEY, SECRET) as lk:
        with pytest.raises(LookupError):
            lk.add_participant(ROOM, "user-1")
    async with running_standin(KEY, SECRET, auto_create=True) as lk:
        lk.add_participant(ROOM, "user-1")
        assert ROOM in lk.rooms


async def test_update_participant_replaces_the_whole_permission(
    standin: LiveKitStandin, lkapi: api.LiveKitAPI
) -> None:
    await lkapi.room.create_room(api.CreateRoomRequest(name=ROOM))
    standin.add_participant(ROOM, "user-1")
    full = api.ParticipantPermission(
        can_subscribe=True,
        can_publish=True,
        can_publish_data=False,
        can_publish_sources=[api.TrackSource.MICROPHONE, api.TrackSource.CAMERA],
        can_update_metadata=False,
    )
    info = await lkapi.room.update_participant(
        api.UpdateParticipantRequest(room=ROOM, identity="user-1", permission=full, metadata="m")
    )
    assert info.permission == full
    assert standin.permission(ROOM, "user-1") == full
    assert standin.participant(ROOM, "user-1").metadata == "m"
    # a partial permission is not merged: every flag not sent becomes false
    await lkapi.room.update_participant(
        api.UpdateParticipantRequest(
            room=ROOM, identity="user-1", permission=api.ParticipantPermission(can_subscribe=True)
        )
    )
    assert standin.permission(ROOM, "user-1") == api.ParticipantPermission(can_subscribe=True)
    assert standin.participant(ROOM, "user-1").metadata == "m"  # empty metadata: unchanged
    with pytest.raises(api.ServerError) as err:
        await lkapi.room.update_participant(
            api.UpdateParticipantRequest(room=ROOM, identity="ghost", permission=full)
        )
    assert (err.value.code, err.value.message) == ("not_found", "participant does not exist")


async def test_mute_published_track(standin: LiveKitStandin, lkapi: api.LiveKitAPI) -> None:
    await lkapi.room.create_room(api.CreateRoomRequest(name=ROOM))
    standin.add_participant(ROOM, "user-1")
    track = standin.add_track(ROOM, "user-1", api.TrackSource.CAMERA)
    muted = await lkapi.room.mute_published_track(
        api.MuteRoomTrackRequest(room=ROOM, identity="user-1", track_sid=track.sid, muted=True)
    )
    assert muted.track.muted
    assert standin.participant(ROOM, "user-1").tracks[0].muted
    with pytest.raises(api.ServerError) as err:
        await lkapi.room.mute_published_track(
            api.MuteRoomTrackRequest(room=ROOM, identity="user-1", track_sid=track.sid)
        )
    assert (err.value.code, err.value.status) == ("failed_precondition", 412)
    with pytest.raises(api.ServerError) as err:
        await lkapi.room.mute_published_track(
            api.MuteRoomTrackRequest(room=ROOM, identity="user-1", track_sid="TR_x", muted=True)
        )
    assert err.value.code == "not_found"


async def test_send_data_is_recorded(standin: LiveKitStandin, lkapi: api.LiveKitAPI) -> None:
    await lkapi.room.create_room(api.CreateRoomRequest(name=ROOM))
    await lkapi.room.send_data(
        api.SendDataRequest(
            room=ROOM,
            data=b'{"type":"hello"}',
            kind=api.DataPacket.RELIABLE,
            topic="aim.interaction",
            destination_identities=["user-1", "agent-1"],
        )
    )
    (call,) = standin.calls_to("SendData", code="ok")
    assert call.request.data == b'{"type":"hello"}'
    assert call.request.topic == "aim.interaction"
    assert list(call.request.destination_identities) == ["user-1", "agent-1"]
    assert len(call.request.nonce) == 16  # the client always sets one
    assert standin.data_messages == [call.request]
    with pytest.raises(api.ServerError) as err:  # nobody hosts a missing room
        await lkapi.room.send_data(api.SendDataRequest(room="gone", data=b"x"))
    assert (err.value.code, err.value.message) == ("unavailable", "no response from servers")


# ---- agent dispatch -------------------------------------------------------------------------
async def test_dispatches_are_not_deduplicated(
    standin: LiveKitStandin, lkapi: api.LiveKitAPI
) -> None:
    await lkapi.room.create_room(api.CreateRoomRequest(name=ROOM))
    request = api.CreateAgentDispatchRequest(agent_name="voice", room=ROOM, metadata='{"s":1}')
    first = await lkapi.agent_dispatch.create_dispatch(request)
    second = await lkapi.agent_dispatch.create_dispatch(request)
    assert first.id.startswith("AD_")
    assert first.id != second.id
    listed = await lkapi.agent_dispatch.list_dispatch(ROOM)
    voice = [d for d in listed if d.agent_name == "voice"]
    assert {d.id for d in voice} == {first.id, second.id}
    assert all(d.metadata == '{"s":1}' and d.room == ROOM for d in voice)
    assert [d.agent_name for d in listed if d.agent_name != "voice"] == [""]  # room's default
    assert (await lkapi.agent_dispatch.get_dispatch(first.id, ROOM)).id == first.id
    deleted = await lkapi.agent_dispatch.delete_dispatch(first.id, ROOM)
    assert deleted.id == first.id
    assert [d.id for d in standin.dispatches_in(ROOM, "voice")] == [second.id]
    assert await lkapi.agent_dispatch.get_dispatch(first.id, ROOM) is None
    with pytest.raises(api.ServerError) as err:
        await lkapi.agent_dispatch.delete_dispatch(first.id, ROOM)
    assert err.value.code == "not_found"


async def test_dispatch_to_a_missing_room() -> None:
    request = api.CreateAgentDispatchRequest(agent_name="voice", room=ROOM)
    async with running_standin(KEY, SECRET) as lk:
        client = lk.client()
        try:
            with pytest.raises(api.ServerError) as err:
                await client.agent_dispatch.create_dispatch(request)
            assert (err.value.code, err.value.status) == ("unavailable", 503)
            with pytest.raises(api.ServerError) as err:
                await client.agent_dispatch.list_dispatch(ROOM)
            assert err.value.code == "unavailable"
        finally:
            await client.aclose()
    async with running_standin(KEY, SECRET, auto_create=True) as lk:
        client = lk.client()
        try:
            created = await client.agent_dispatch.create_dispatch(request)
        finally:
            await client.aclose()
        assert ROOM in lk.rooms
        assert created.id in {d.id for d in lk.dispatches_in(ROOM, "voice")}


# ---- auth -----------------------------------------------------------------------------------
@pytest.mark.parametrize(("key", "secret"), [(KEY, "x" * 40), ("APIother", SECRET)])
async def test_bad_credentials_fail_before_twirp(
    standin: LiveKitStandin, key: str, secret: str
) -> None:
    client = api.LiveKitAPI(standin.url, key, secret)
    try:
        with pytest.raises(api.ServerError) as err:
            await client.room.create_room(api.CreateRoomRequest(name=ROOM))
    finally:
        await client.aclose()
    assert (err.value.code, err.value.status, err.value.message) == ("unknown", 401, "")
    assert standin.rooms == {}
    assert standin.calls_to("CreateRoom")[0].code == "invalid_token"
    status, content_type, text = await raw_post(
        standin,
        "/twirp/livekit.RoomService/ListRooms",
        b"",
        {"Authorization": f"Bearer {api.AccessToken(key, secret).to_jwt()}"},
    )
    assert status == 401
    assert content_type.startswith("text/plain")
    assert text.startswith("invalid")


async def test_expired_token_is_rejected(standin: LiveKitStandin) -> None:
    token = (
        api.AccessToken(KEY, SECRET)
        .with_grants(api.VideoGrants(room_create=True))
        .with_ttl(datetime.timedelta(minutes=-5))  # beyond the 60 s leeway
        .to_jwt()
    )
    client = api.LiveKitAPI(standin.url, token=token)
    try:
        with pytest.raises(api.ServerError) as err:
            await client.room.create_room(api.CreateRoomRequest(name=ROOM))
    finally:
        await client.aclose()
    assert (err.value.code, err.value.status) == ("unknown", 401)


async def test_admin_grant_for_another_room_is_unauthenticated(
    standin: LiveKitStandin, lkapi: api.LiveKitAPI
) -> None:
    await lkapi.room.create_room(api.CreateRoomRequest(name=ROOM))
    standin.add_participant(ROOM, "user-1")
    client = api.LiveKitAPI(standin.url, token=admin_token("other-room", room_admin=True))
    try:
        with pytest.raises(api.ServerError) as err:
            await client.room.remove_participant(
                api.RoomParticipantIdentity(room=ROOM, identity="user-1")
            )
        assert (err.value.code, err.value.status) == ("unauthenticated", 401)
        assert err.value.message == "permissions denied"
        with pytest.raises(api.ServerError) as err:  # roomAdmin is no roomCreate
            await client.room.create_room(api.CreateRoomRequest(name="other-room"))
        assert err.value.code == "unauthenticated"
    finally:
        await client.aclose()
    assert standin.participant(ROOM, "user-1") is not None
    # the right room's admin grant works
    client = api.LiveKitAPI(standin.url, token=admin_token(ROOM, room_admin=True))
    try:
        await client.room.remove_participant(
            api.RoomParticipantIdentity(room=ROOM, identity="user-1")
        )
    finally:
        await client.aclose()
    assert standin.participant(ROOM, "user-1") is None


async def test_no_token_means_no_grants(standin: LiveKitStandin) -> None:
    request = api.ListRoomsRequest().SerializeToString()
    status, content_type, text = await raw_post(
        standin,
        "/twirp/livekit.RoomService/ListRooms",
        request,
        {"Content-Type": "application/protobuf"},
    )
    assert (status, content_type) == (401, "application/json")
    assert json.loads(text) == {"code": "unauthenticated", "msg": "permissions denied"}


# ---- Twirp details --------------------------------------------------------------------------
async def test_json_requests_and_twirp_routing(standin: LiveKitStandin) -> None:
    auth = {"Authorization": f"Bearer {admin_token('', room_create=True, room_list=True)}"}
    json_headers = {**auth, "Content-Type": "application/json"}
    status, content_type, text = await raw_post(
        standin, "/twirp/livekit.RoomService/CreateRoom", '{"name": "j", "bogus": 1}', json_headers
    )
    assert (status, content_type) == (200, "application/json")
    assert json.loads(text)["name"] == "j"
    assert json.loads(text)["max_participants"] == 0  # proto names, defaults included

    status, _, text = await raw_post(
        standin, "/twirp/livekit.AgentDispatchService/GetDispatch", "{}", json_headers
    )
    assert (status, json.loads(text)["code"]) == (404, "bad_route")
    status, _, text = await raw_post(
        standin, "/twirp/livekit.RoomService/CreateRoom", "{}", {**auth, "Content-Type": "text/x"}
    )
    assert (status, json.loads(text)["code"]) == (404, "bad_route")
    status, _, text = await raw_post(
        standin,
        "/twirp/livekit.RoomService/CreateRoom",
        b"\xff\xff",
        {**auth, "Content-Type": "application/protobuf"},
    )
    assert (status, json.loads(text)["code"]) == (400, "malformed")


# ---- failure modes --------------------------------------------------------------------------
async def test_unreachable_server_raises_a_connection_error(
    standin: LiveKitStandin, lkapi: api.LiveKitAPI
) -> None:
    await lkapi.room.create_room(api.CreateRoomRequest(name=ROOM))  # keep-alive connection open
    await standin.set_down(True)
    assert standin.down
    with pytest.raises(aiohttp.ClientError):
        await lkapi.room.create_room(api.CreateRoomRequest(name=ROOM))
    with pytest.raises(aiohttp.ClientConnectorError):
        await lkapi.room.list_rooms(api.ListRoomsRequest())
    await standin.set_down(False)
    rooms = await lkapi.room.list_rooms(api.ListRoomsRequest())
    assert [r.name for r in rooms.rooms] == [ROOM]


async def test_fail_next(standin: LiveKitStandin, lkapi: api.LiveKitAPI) -> None:
    standin.fail_next(1, status=503)
    with pytest.raises(api.ServerError) as err:
        await lkapi.room.create_room(api.CreateRoomRequest(name=ROOM))
    assert (err.value.code, err.value.status) == ("unavailable", 503)
    assert ROOM not in standin.rooms
    await lkapi.room.create_room(api.CreateRoomRequest(name=ROOM))  # only the next one failed

    # a lost reply: the dispatch is created, but the client sees a 503
    standin.fail_next(1, status=503, method="CreateDispatch", effect_first=True)
    await lkapi.room.list_rooms(api.ListRoomsRequest())  # other methods are unaffected
    with pytest.raises(api.ServerError):
        await lkapi.agent_dispatch.create_dispatch(
            api.CreateAgentDispatchRequest(agent_name="voice", room=ROOM)
        )
    assert len(standin.dispatches_in(ROOM, "voice")) == 1
    assert [c.code for c in standin.calls_to("CreateDispatch")] == ["unavailable"]


async def test_delay_and_client_timeouts(standin: LiveKitStandin) -> None:
    # livekit-api 1.2.2 passes timeout=None to every post, which aiohttp reads as "no
    # timeout": LiveKitAPI(timeout=...) does not bound a call; callers need asyncio.timeout.
    client = standin.client(timeout=aiohttp.ClientTimeout(total=0.1))
    try:
        standin.delay(0.4, n=1)
        loop = asyncio.get_running_loop()
        started = loop.time()
        await client.room.list_rooms(api.ListRoomsRequest())
        assert loop.time() - started >= 0.4

        standin.delay(0.4, n=1, method="CreateRoom", effect_first=True)
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(0.1):
                await client.room.create_room(api.CreateRoomRequest(name=ROOM))
        assert ROOM in standin.rooms  # carried out although the caller gave up
        listed = await client.room.list_rooms(api.ListRoomsRequest())
        assert [r.name for r in listed.rooms] == [ROOM]
    finally:
        await client.aclose()


async def test_wait_for_call(standin: LiveKitStandin, lkapi: api.LiveKitAPI) -> None:
    waiter = asyncio.create_task(standin.wait_for_call("CreateRoom", within=2.0))
    await asyncio.sleep(0)
    await lkapi.room.create_room(api.CreateRoomRequest(name=ROOM))
    call = await waiter
    assert (call.code, call.request.name) == ("ok", ROOM)
    assert call.claims is not None
    assert call.claims.video.room_create


# ---- webhooks -------------------------------------------------------------------------------
async def test_signed_webhooks_verify_like_livekits() -> None:
    event = api.WebhookEvent(
        event="participant_joined",
        id="EV_test",
        created_at=1_795_957_345,
        room=api.Room(name=ROOM, sid="RM_x"),
        participant=api.ParticipantInfo(identity="user-1", state=api.ParticipantInfo.ACTIVE),
    )
    body, auth = sign_webhook(event, KEY, SECRET)
    assert '"createdAt": "1795957345"' in body  # protojson: int64 as a string
    receiver = api.WebhookReceiver(api.TokenVerifier(KEY, SECRET))
    assert receiver.receive(body, auth) == event
    claims = api.TokenVerifier(KEY, SECRET).verify(auth)
    assert claims.identity == ""
    assert headers_ok(webhook_headers(auth), auth)
    with pytest.raises(Exception, match="hash mismatch"):
        receiver.receive(body.replace("user-1", "user-2"), auth)
    with pytest.raises(Exception, match="Signature"):
        api.WebhookReceiver(api.TokenVerifier(KEY, "y" * 40)).receive(body, auth)


def headers_ok(headers: dict[str, str], auth: str) -> bool:
    return headers["Authorization"] == auth and headers["Content-Type"] == (
        "application/webhook+json"
    )


def join_token(room: str, identity: str, *, nbf: int, ttl_s: int = 300, exp: bool = True) -> str:
    """A join token as a client would hold it, issued (nbf) at `nbf`."""
    claims: dict[str, object] = {
        "iss": KEY,
        "sub": identity,
        "nbf": nbf,
        "video": {"roomJoin": True, "room": room, "canSubscribe": True},
    }
    if exp:
        claims["exp"] = nbf + ttl_s
    return jwt.encode(claims, SECRET, algorithm="HS256")


async def test_a_client_connects_with_a_join_token_into_an_existing_room(standin, lkapi):
    await lkapi.room.create_room(api.CreateRoomRequest(name=ROOM))
    now = int(time.time())

    joined = standin.connect(join_token(ROOM, "ep-1", nbf=now))

    assert joined.identity == "ep-1"
    assert standin.participant(ROOM, "ep-1") is not None
    listed = await lkapi.room.list_participants(api.ListParticipantsRequest(room=ROOM))
    assert [p.identity for p in listed.participants] == ["ep-1"]


async def test_a_connect_is_refused_without_exp_expired_forged_or_to_a_missing_room(standin, lkapi):
    await lkapi.room.create_room(api.CreateRoomRequest(name=ROOM))
    now = int(time.time())
    refused = [
        join_token(ROOM, "ep-1", nbf=now, exp=False),  # exp is required (protocol #1706)
        join_token(ROOM, "ep-1", nbf=now - 1000, ttl_s=300),  # expired beyond the leeway
        join_token(ROOM, "ep-1", nbf=now + 600),  # not valid yet beyond the leeway
        join_token("aim-none-e1", "ep-1", nbf=now),  # no such room (no auto_create)
        jwt.encode({"iss": KEY, "sub": "ep-1", "exp": now + 60}, SECRET, algorithm="HS256"),
        jwt.encode(
            {"iss": KEY, "sub": "ep-1", "nbf": now, "exp": now + 60, "video": {"room": ROOM}},
            "another-secret-0123456789-abcdefghijklmnop",
            algorithm="HS256",
        ),
    ]
    for token in refused:
        with pytest.raises(ConnectRefused):
            standin.connect(token)
    assert standin.participant(ROOM, "ep-1") is None


async def test_remove_participant_with_revoke_token_ts_refuses_older_tokens_at_connect(
    standin, lkapi
):
    await lkapi.room.create_room(api.CreateRoomRequest(name=ROOM))
    now = int(time.time())
    old = join_token(ROOM, "ep-1", nbf=now - 10)
    standin.connect(old)

    await lkapi.room.remove_participant(
        api.RoomParticipantIdentity(room=ROOM, identity="ep-1", revoke_token_ts=now)
    )

    assert standin.participant(ROOM, "ep-1") is None
    with pytest.raises(ConnectRefused, match="revoked"):
        standin.connect(old)
    # a token issued from the revocation on connects; so does another identity's older token
    assert standin.connect(join_token(ROOM, "ep-1", nbf=now)).identity == "ep-1"
    assert standin.connect(join_token(ROOM, "ep-2", nbf=now - 10)).identity == "ep-2"


async def test_a_removal_without_revoke_token_ts_leaves_the_token_usable(standin, lkapi):
    await lkapi.room.create_room(api.CreateRoomRequest(name=ROOM))
    token = join_token(ROOM, "ep-1", nbf=int(time.time()) - 10)
    standin.connect(token)

    await lkapi.room.remove_participant(api.RoomParticipantIdentity(room=ROOM, identity="ep-1"))

    assert standin.connect(token).identity == "ep-1"  # LiveKit before protocol #1576


# ---- webhooks sent, and the simulated agent worker ------------------------------------------
class Receiver:
    """A loopback webhook receiver that verifies each delivery with livekit-api's own
    `WebhookReceiver` and `TokenVerifier`; `fail_next` answers the next deliveries 503."""

    def __init__(self) -> None:
        self.events: list[api.WebhookEvent] = []
        self.refused: list[str] = []
        self.fail_next = 0
        self._verifier = api.WebhookReceiver(api.TokenVerifier(KEY, SECRET))
        self._runner: aiohttp.web.AppRunner | None = None
        self.url = ""

    async def _receive(self, request: aiohttp.web.Request) -> aiohttp.web.Response:
        body = await request.text()
        if request.headers.get("Content-Type") != "application/webhook+json":
            self.refused.append("content type")
            return aiohttp.web.Response(status=415)
        try:
            event = self._verifier.receive(body, request.headers.get("Authorization", ""))
        except Exception as exc:  # noqa: BLE001 - any failure to verify is a refusal
            self.refused.append(str(exc))
            return aiohttp.web.Response(status=401)
        if self.fail_next > 0:
            self.fail_next -= 1
            return aiohttp.web.Response(status=503)
        self.events.append(event)
        return aiohttp.web.Response(text="ok")

    async def __aenter__(self) -> Receiver:
        app = aiohttp.web.Application()
        app.router.add_post("/livekit/webhook", self._receive)
        self._runner = aiohttp.web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = aiohttp.web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.url = f"http://127.0.0.1:{self._runner.addresses[0][1]}/livekit/webhook"
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    def kinds(self) -> list[str]:
        return [event.event for event in self.events]

    def of(self, kind: str) -> list[api.WebhookEvent]:
        return [event for event in self.events if event.event == kind]


@pytest.fixture
async def receiver() -> AsyncIterator[Receiver]:
    async with Receiver() as found:
        yield found


@contextlib.asynccontextmanager
async def worker_standin(
    receiver: Receiver, **options: object
) -> AsyncIterator[tuple[LiveKitStandin, api.LiveKitAPI]]:
    """A stand-in sending its webhooks to `receiver`, with a simulated agent worker, and a
    livekit-api client on it."""
    options = {"auto_jobs": True, **options}
    async with running_standin(KEY, SECRET, webhook_url=receiver.url, **options) as lk:
        client = lk.client()
        try:
            yield lk, client
        finally:
            await client.aclose()


async def dispatch(client: api.LiveKitAPI, agent: str = "voice", metadata: str = "") -> str:
    request = api.CreateAgentDispatchRequest(agent_name=agent, room=ROOM, metadata=metadata)
    return str((await client.agent_dispatch.create_dispatch(request)).id)


async def voice_dispatches(client: api.LiveKitAPI) -> list[api.AgentDispatch]:
    """The room's dispatches of agent "voice" (a new room also has LiveKit's default one)."""
    return [d for d in await client.agent_dispatch.list_dispatch(ROOM) if d.agent_name == "voice"]


async def settle(lk: LiveKitStandin, seconds: float = 0.0) -> None:
    """Let scheduled jobs start (after `seconds`) and every webhook so far be delivered."""
    await asyncio.sleep(seconds)
    await lk.webhooks_sent()


async def started_in_the_room(lk: LiveKitStandin, client: api.LiveKitAPI) -> str:
    """The room made, an agent dispatched into it and its job started: the dispatch's id."""
    lk.add_room(ROOM)
    dispatch_id = await dispatch(client)
    await settle(lk, 0.05)
    return dispatch_id


async def test_webhooks_are_sent_signed_as_livekit_signs_them(receiver: Receiver) -> None:
    async with worker_standin(receiver) as (lk, client):
        await client.room.create_room(api.CreateRoomRequest(name=ROOM))
        lk.add_participant(ROOM, "user-1", metadata='{"sessionEpoch":1}')
        await client.room.remove_participant(
            api.RoomParticipantIdentity(room=ROOM, identity="user-1")
        )
        await client.room.delete_room(api.DeleteRoomRequest(room=ROOM))
        await settle(lk)

    assert receiver.refused == []
    assert receiver.kinds() == [
        "room_started", "participant_joined", "participant_left", "room_finished"
    ]  # fmt: skip
    joined = receiver.of("participant_joined")[0]
    assert joined.room.name == ROOM
    assert joined.id.startswith("EV_")
    assert abs(joined.created_at - time.time()) < 60
    assert (joined.participant.identity, joined.participant.metadata) == (
        "user-1",
        '{"sessionEpoch":1}',
    )
    assert len({event.id for event in receiver.events}) == 4
    assert all(sent.delivered and sent.attempts == 1 for sent in lk.webhooks)


async def test_no_webhooks_without_a_target(receiver: Receiver) -> None:
    async with running_standin(KEY, SECRET, auto_jobs=True) as lk:
        lk.add_room(ROOM)
        lk.add_participant(ROOM, "user-1")
        client = lk.client()
        try:
            await dispatch(client)
        finally:
            await client.aclose()
        await settle(lk, 0.05)
        assert lk.webhooks == []
        assert len(lk.jobs_in(ROOM, running=True)) == 1  # the worker works all the same
        lk.set_webhook_target(receiver.url)  # from now on
        lk.leave(ROOM, "user-1")
        await settle(lk)
    assert receiver.kinds() == ["participant_left"]


async def test_a_refused_webhook_is_tried_again_with_the_same_id(receiver: Receiver) -> None:
    receiver.fail_next = 2
    async with worker_standin(receiver) as (lk, _):
        lk.add_room(ROOM)
        await settle(lk)
    [sent] = lk.webhooks
    assert (sent.attempts, sent.status) == (3, 200)
    assert [event.id for event in receiver.events] == [sent.event.id]


async def test_a_dispatch_gets_a_job_that_starts_after_the_delay(receiver: Receiver) -> None:
    async with worker_standin(receiver, job_start_delay=0.3) as (lk, client):
        lk.add_room(ROOM)
        dispatch_id = await dispatch(client, metadata='{"sessionId":"s-1"}')
        await settle(lk, 0.1)
        assert receiver.of("agent_job_started") == []  # not yet: the worker takes its time
        assert lk.participants[ROOM] == {}
        await settle(lk, 0.4)
        [listed] = await voice_dispatches(client)
        participants = await client.room.list_participants(api.ListParticipantsRequest(room=ROOM))

    assert receiver.kinds() == ["room_started", "agent_job_started", "participant_joined"]
    [started] = receiver.of("agent_job_started")
    job = started.job
    assert job.id.startswith("AJ_")
    assert (job.dispatch_id, job.agent_name, job.room.name) == (dispatch_id, "voice", ROOM)
    assert job.metadata == '{"sessionId":"s-1"}'
    assert started.room.name == ROOM
    assert job.state.status == api.JS_RUNNING
    assert job.state.started_at > 0
    identity = job.state.participant_identity
    assert identity == f"agent-{job.id}"
    [joined] = receiver.of("participant_joined")
    assert joined.participant.identity == identity
    assert joined.participant.kind == api.ParticipantInfo.Kind.AGENT
    assert joined.participant.attributes["lk.agent.name"] == "voice"
    assert [j.id for j in listed.state.jobs] == [job.id]  # ListDispatch shows the job
    assert [(p.identity, p.kind) for p in participants.participants] == [
        (identity, api.ParticipantInfo.Kind.AGENT)
    ]


async def test_a_room_created_with_its_agent_gets_a_job(receiver: Receiver) -> None:
    async with worker_standin(receiver) as (lk, client):
        agents = [api.RoomAgentDispatch(agent_name="voice", metadata="m")]
        await client.room.create_room(api.CreateRoomRequest(name=ROOM, agents=agents))
        await settle(lk, 0.05)
    [dispatched] = lk.dispatches_in(ROOM)
    [started] = receiver.of("agent_job_started")
    assert (started.job.dispatch_id, started.job.metadata) == (dispatched.id, "m")
    assert receiver.kinds()[0] == "room_started"


async def test_a_dispatch_without_an_agent_name_gets_no_job(receiver: Receiver) -> None:
    async with worker_standin(receiver) as (lk, client):
        await client.room.create_room(api.CreateRoomRequest(name=ROOM))  # the default dispatch
        await dispatch(client, agent="")
        await settle(lk, 0.05)
    assert len(lk.dispatches_in(ROOM)) == 2
    assert lk.jobs == {}
    assert receiver.kinds() == ["room_started"]


async def test_ending_a_job_says_so_and_its_agent_leaves(receiver: Receiver) -> None:
    async with worker_standin(receiver) as (lk, client):
        dispatch_id = await started_in_the_room(lk, client)
        [job] = lk.jobs_of(dispatch_id)
        lk.end_job(job.id)
        await settle(lk)
        [listed] = await voice_dispatches(client)

    assert receiver.kinds()[-2:] == ["agent_job_ended", "participant_left"]
    [ended] = receiver.of("agent_job_ended")
    assert (ended.job.id, ended.job.dispatch_id) == (job.id, dispatch_id)
    assert ended.job.state.status == api.JS_SUCCESS
    assert ended.job.state.ended_at >= ended.job.state.started_at > 0
    assert receiver.of("participant_left")[0].participant.identity == f"agent-{job.id}"
    assert lk.participants[ROOM] == {}
    assert listed.state.jobs[0].state.status == api.JS_SUCCESS
    lk.end_job(job.id)  # an ended job stays as it is
    assert len(lk.webhooks_of("agent_job_ended")) == 1


async def test_an_agent_can_leave_before_its_job_ends(receiver: Receiver) -> None:
    async with worker_standin(receiver) as (lk, client):
        dispatch_id = await started_in_the_room(lk, client)
        [job] = lk.jobs_of(dispatch_id)
        lk.end_job(job.id, status=api.JS_FAILED, error="crashed", agent_leaves_first=True)
        await settle(lk)
    assert receiver.kinds()[-2:] == ["participant_left", "agent_job_ended"]
    [ended] = receiver.of("agent_job_ended")
    assert (ended.job.state.status, ended.job.state.error) == (api.JS_FAILED, "crashed")


async def test_a_dying_worker_ends_its_jobs_failed_and_new_ones_still_start(
    receiver: Receiver,
) -> None:
    async with worker_standin(receiver) as (lk, client):
        lk.add_room(ROOM)
        first, second = await dispatch(client), await dispatch(client)
        await settle(lk, 0.05)
        killed = lk.kill_worker()
        await settle(lk)
        assert {job.dispatch_id for job in killed} == {first, second}
        assert lk.participants[ROOM] == {}
        ended = receiver.of("agent_job_ended")
        assert [e.job.state.status for e in ended] == [api.JS_FAILED] * 2
        assert len(receiver.of("participant_left")) == 2
        third = await dispatch(client)  # nothing re-dispatches the dead jobs; a new one starts
        await settle(lk, 0.05)
    assert [e.job.dispatch_id for e in receiver.of("agent_job_started")][-1] == third
    assert len(receiver.of("agent_job_started")) == 3


async def test_delete_dispatch_answers_the_dispatch_then_ends_its_job(receiver: Receiver) -> None:
    async with worker_standin(receiver) as (lk, client):
        dispatch_id = await started_in_the_room(lk, client)
        deleted = await client.agent_dispatch.delete_dispatch(dispatch_id, ROOM)
        assert deleted.id == dispatch_id
        assert await client.agent_dispatch.get_dispatch(dispatch_id, ROOM) is None
        await settle(lk, 0.05)
        with pytest.raises(api.ServerError) as err:
            await client.agent_dispatch.delete_dispatch(dispatch_id, ROOM)
    assert (err.value.code, err.value.message) == ("not_found", "dispatch ID not found")
    [ended] = receiver.of("agent_job_ended")
    assert ended.job.dispatch_id == dispatch_id
    assert ended.job.state.reason == api.JSR_DISPATCH_DELETED
    assert receiver.kinds()[-1] == "participant_left"
    assert lk.participants[ROOM] == {}


async def test_a_job_not_started_when_its_dispatch_is_deleted_never_starts(
    receiver: Receiver,
) -> None:
    async with worker_standin(receiver, job_start_delay=0.2) as (lk, client):
        lk.add_room(ROOM)
        dispatch_id = await dispatch(client)
        await client.agent_dispatch.delete_dispatch(dispatch_id, ROOM)
        await settle(lk, 0.3)
    [job] = lk.jobs_of(dispatch_id)
    assert job.state.status == api.JS_CANCELLED
    assert receiver.kinds() == ["room_started"]


async def test_dropped_dispatches_never_get_a_job(receiver: Receiver) -> None:
    async with worker_standin(receiver) as (lk, client):
        lk.add_room(ROOM)
        lk.drop_next_dispatches(2)
        dropped = [await dispatch(client), await dispatch(client)]
        taken = await dispatch(client)
        await settle(lk, 0.1)
        listed = {d.id: d for d in await voice_dispatches(client)}
    assert all(d.startswith("AD_") for d in dropped)  # created, and their ids answered
    assert set(listed) == {*dropped, taken}
    assert lk.dropped == dropped
    assert [listed[d].state.jobs for d in dropped] == [[], []]
    assert [e.job.dispatch_id for e in receiver.of("agent_job_started")] == [taken]
    assert [lk.jobs_of(d) for d in dropped] == [[], []]


async def test_with_auto_jobs_off_a_job_starts_only_by_hand(receiver: Receiver) -> None:
    async with worker_standin(receiver, auto_jobs=False) as (lk, client):
        dispatch_id = await started_in_the_room(lk, client)
        assert lk.jobs == {}
        job = lk.start_job(dispatch_id)
        await settle(lk)
        with pytest.raises(LookupError):
            lk.start_job("AD_missing")
    assert job.state.status == api.JS_RUNNING
    assert receiver.kinds() == ["room_started", "agent_job_started", "participant_joined"]
    assert receiver.of("agent_job_started")[0].job.id == job.id


async def test_deleting_the_room_ends_its_jobs(receiver: Receiver) -> None:
    async with worker_standin(receiver) as (lk, client):
        await client.room.create_room(api.CreateRoomRequest(name=ROOM))
        dispatch_id = await dispatch(client)
        await settle(lk, 0.05)
        lk.add_participant(ROOM, "user-1")
        await client.room.delete_room(api.DeleteRoomRequest(room=ROOM))
        await settle(lk)
    [job] = lk.jobs_of(dispatch_id)
    assert receiver.kinds()[-4:] == [
        "agent_job_ended", "participant_left", "participant_left", "room_finished"
    ]  # fmt: skip
    ended = receiver.of("agent_job_ended")[0].job
    assert (ended.id, ended.state.reason) == (job.id, api.JSR_ROOM_CLOSED)
    left = {e.participant.identity for e in receiver.of("participant_left")}
    assert left == {f"agent-{job.id}", "user-1"}


async def test_a_client_connects_and_disconnects_over_http_with_its_join_token(standin, lkapi):
    """`POST /dev/connect` and `/dev/disconnect` (aim-realtime livekit-dev): the join and the
    leave a client's connect makes, the token checked as `connect` checks it."""
    await lkapi.room.create_room(api.CreateRoomRequest(name=ROOM))
    token = join_token(ROOM, "ep-1", nbf=int(time.time()))
    async with aiohttp.ClientSession(standin.url) as http:
        async with http.post("/dev/connect", json={"token": token}) as reply:
            assert reply.status == 200
            joined = await reply.json()
        assert (joined["room"], joined["identity"]) == (ROOM, "ep-1")
        assert standin.participant(ROOM, "ep-1") is not None
        async with http.post("/dev/disconnect", json={"token": token}) as reply:
            assert (reply.status, await reply.json()) == (200, {"left": True})
        assert standin.participant(ROOM, "ep-1") is None
        async with http.post("/dev/disconnect", json={"token": token}) as reply:
            assert await reply.json() == {"left": False}
        expired = join_token(ROOM, "ep-1", nbf=int(time.time()) - 600, ttl_s=60)
        async with http.post("/dev/connect", json={"token": expired}) as reply:
            assert reply.status == 401
        async with http.post("/dev/connect", json={"token": ""}) as reply:
            assert reply.status == 400


# ---- the simulated agent that speaks (agents_speak, aim-realtime livekit-dev) ----------------


class Provider:
    """The service's provider API as the simulated agent reaches it: the JSON-RPC calls it
    received, with the bearer token of each."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, dict[str, object], str]] = []
        self._runner: aiohttp.web.AppRunner | None = None
        self.url = ""

    async def _call(self, request: aiohttp.web.Request) -> aiohttp.web.Response:
        body = await request.json()
        self.calls.append((body["method"], body["params"], request.headers["Authorization"]))
        return aiohttp.web.json_response({"jsonrpc": "2.0", "id": body["id"], "result": {}})

    async def __aenter__(self) -> Provider:
        app = aiohttp.web.Application()
        app.router.add_post("/provider", self._call)
        self._runner = aiohttp.web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = aiohttp.web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.url = f"http://127.0.0.1:{self._runner.addresses[0][1]}/provider"
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    async def until(self, count: int) -> list[tuple[str, dict[str, object]]]:
        for _ in range(200):
            if len(self.calls) >= count:
                break
            await asyncio.sleep(0.01)
        return [(method, params) for method, params, _ in self.calls]


def data_to(room: str, identity: str, body: dict[str, object]) -> api.SendDataRequest:
    return api.SendDataRequest(
        room=room,
        data=json.dumps(body).encode(),
        kind=api.DataPacket.Kind.RELIABLE,
        destination_identities=[identity],
        topic="aim.realtime.v1",
    )


async def test_a_speaking_agent_reports_itself_answers_texts_and_carries_out_what_it_asked(
    receiver,
):
    async with (
        Provider() as provider,
        worker_standin(receiver, agents_speak=True) as (lk, client),
    ):
        await client.room.create_room(api.CreateRoomRequest(name=ROOM))
        meta = {"sessionId": "s-1", "sessionEpoch": 1, "providerUrl": provider.url,
                "providerToken": "provider-token"}  # fmt: skip
        await dispatch(client, metadata=json.dumps(meta))
        await settle(lk)
        [agent] = [p for p in lk.participants[ROOM] if p.startswith("agent-")]
        # it joined: it says so, then listens
        assert await provider.until(2) == [
            ("aim.provider.ReportAgentState", {"sessionId": "s-1", "sessionEpoch": 1,
                                               "state": "joined"}),
            ("aim.provider.ReportAgentState", {"sessionId": "s-1", "sessionEpoch": 1,
                                               "state": "listening"}),
        ]  # fmt: skip
        assert {token for _, _, token in provider.calls} == {"Bearer provider-token"}

        text = {"type": "input.text", "commandId": "c-1", "sessionEpoch": 1,
                "payload": {"text": "/confirm Book a table"}}  # fmt: skip
        await client.room.send_data(data_to(ROOM, agent, text))
        await client.room.send_data(data_to(ROOM, agent, text))  # at least once: taken once
        calls = await provider.until(7)
        assert [(m.rsplit(".", 1)[1], p.get("state")) for m, p in calls[2:7]] == [
            ("ReportAgentState", "thinking"), ("ReportAgentState", "speaking"),
            ("AckInteractions", None), ("RequestOperation", None),
            ("ReportAgentState", "listening"),
        ]  # fmt: skip
        assert calls[4][1]["commandIds"] == ["c-1"]
        asked = calls[5][1]
        assert (asked["kind"], asked["action"], asked["confirmation"]) == (
            "action", {"title": "Book a table"}, "required"
        )  # fmt: skip

        update = {
            "type": "operation.update",
            "commandId": "sync:op-1:running",
            "sessionEpoch": 1,
            "payload": {"operationId": "op-1", "state": "running"},
        }
        await client.room.send_data(data_to(ROOM, agent, update))  # fmt: skip
        calls = await provider.until(8)
        method, params = calls[7]
        assert method == "aim.provider.UpdateOperation"
        assert (params["operationId"], params["state"], params["result"]) == (
            "op-1", "succeeded", {"done": True}
        )  # fmt: skip
        assert "sessionEpoch" not in params  # UpdateOperation takes none
        assert len(provider.calls) == 8  # nothing else, and nothing twice


async def test_an_agent_of_another_app_or_a_message_not_for_it_stays_silent(receiver):
    async with (
        Provider() as provider,
        worker_standin(receiver, agents_speak=True) as (lk, client),
    ):
        await client.room.create_room(api.CreateRoomRequest(name=ROOM))
        await dispatch(client, metadata="not json")  # no provider to talk to
        await settle(lk)
        [agent] = [p for p in lk.participants[ROOM] if p.startswith("agent-")]
        text = {"type": "input.text", "commandId": "c-1", "payload": {"text": "hi"}}
        await client.room.send_data(data_to(ROOM, agent, text))
        other_topic = data_to(ROOM, agent, text)
        other_topic.topic = "chat"
        await client.room.send_data(other_topic)
        await asyncio.sleep(0.1)
        assert provider.calls == []
        assert lk.agents[agent].calls == []


async def test_a_browser_page_of_any_origin_may_connect(standin, lkapi):
    """CORS on /dev/connect and /dev/disconnect: the preflight is answered, and so is the call,
    for any origin (the join token is the credential, as with a LiveKit server)."""
    await lkapi.room.create_room(api.CreateRoomRequest(name=ROOM))
    origin = {"Origin": "http://page.example"}
    async with aiohttp.ClientSession(standin.url) as http:
        preflight = {**origin, "Access-Control-Request-Method": "POST",
                     "Access-Control-Request-Headers": "content-type"}  # fmt: skip
        async with http.options("/dev/connect", headers=preflight) as reply:
            assert reply.status == 204
            assert reply.headers["Access-Control-Allow-Origin"] == "*"
            assert reply.headers["Access-Control-Allow-Methods"] == "POST"
            assert reply.headers["Access-Control-Allow-Headers"] == "Content-Type"
        token = join_token(ROOM, "ep-1", nbf=int(time.time()))
        async with http.post("/dev/connect", json={"token": token}, headers=origin) as reply:
            assert reply.status == 200
            assert reply.headers["Access-Control-Allow-Origin"] == "*"
        async with http.post("/dev/connect", json={}, headers=origin) as reply:
            assert (reply.status, reply.headers["Access-Control-Allow-Origin"]) == (400, "*")
