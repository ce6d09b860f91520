"""LiveKit server API calls (profile §9); join tokens are in `tokens.py`.

Every call is idempotent (an existing room is upserted, a missing room or participant counts as
done, a dispatch is created only when none exists for the agent) and bounded by a timeout of our
own: livekit-api hands aiohttp no timeout, so a hung server would otherwise hang the caller.
Failures are sorted into `LiveKitUnavailable` (retry later) and `LiveKitRejected` (no retry will
help: wrong credentials, bad request). Each call is one client span named by its Twirp method
(`livekit.AgentDispatchService/CreateDispatch`).
"""

from __future__ import annotations

import asyncio
import json
import warnings
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Final, NamedTuple, TypeVar
from urllib.parse import urlsplit

import aiohttp
import jwt
from livekit import api

from realtime.settings import Settings
from realtime.telemetry import ATTR_ERROR_TYPE, ATTR_RPC_STATUS_CODE, Telemetry

T = TypeVar("T")

# LiveKit's secrets are LiveKit's to choose (`livekit-server --dev` uses `secret`): a short one is
# said once at start-up, naming its variable (Settings.warnings), instead of PyJWT's warning on
# the first token signed with it (every API call, join token and webhook check here). The
# service's own secrets are refused when short, so this silences nothing else.
warnings.filterwarnings("ignore", category=jwt.warnings.InsecureKeyLengthWarning)

# below the 5 s a blocking create waits, so a LiveKit that hangs is reported as unavailable
CALL_TIMEOUT_S: Final = 4.0
ROOM_EMPTY_TIMEOUT_S: Final = 300
ROOM_DEPARTURE_TIMEOUT_S: Final = 20
ROOM_MAX_PARTICIPANTS: Final = 16  # up to 8 endpoints, the agent, and room for handoffs

DATA_TOPIC: Final = "aim.realtime.v1"
ROOMS: Final = "livekit.RoomService/"
DISPATCH: Final = "livekit.AgentDispatchService/"

SOURCE_NAMES: Final = {
    "microphone": api.TrackSource.MICROPHONE,
    "camera": api.TrackSource.CAMERA,
    "screen_share": api.TrackSource.SCREEN_SHARE,
    "screen_share_audio": api.TrackSource.SCREEN_SHARE_AUDIO,
}


# the member of a dispatch's metadata that says which dispatch into its room it is (1, 2, ...);
# LiveKit copies a dispatch's metadata into its jobs', so a job's webhook tells which it serves
ATTEMPT_KEY: Final = "dispatchAttempt"


def attempt_of(metadata: str) -> int:
    """The dispatch attempt a dispatch's (or job's) metadata names; 1 when it names none (the
    first dispatch of a room, or one made before attempts were written)."""
    try:
        value = json.loads(metadata).get(ATTEMPT_KEY) if metadata else None
    except (ValueError, AttributeError, RecursionError):
        return 1
    if isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= 1_000_000:
        return value
    return 1


class LiveKitUnavailable(Exception):  # noqa: N818 - reads as a condition, like ConnectionError
    """LiveKit could not be reached or answered 5xx: retry with backoff."""


class LiveKitRejected(Exception):  # noqa: N818
    """LiveKit refused the call (401 = our credentials, 4xx = our request): retrying won't help."""

    def __init__(self, message: str, *, status: int) -> None:
        super().__init__(message)
        self.status = status


class LiveKitNotConfigured(LiveKitUnavailable):
    """AIM_LIVEKIT_URL or the API credentials are missing."""


class LiveRoom(NamedTuple):
    """A room as LiveKit lists it."""

    name: str
    created_ms: int  # LiveKit's clock; servers before creation_time_ms send whole seconds


class LiveParticipant(NamedTuple):
    """A participant as LiveKit lists it."""

    identity: str
    is_agent: bool  # kind AGENT: joined with the token LiveKit minted for a dispatched agent
    joined_ms: int = 0  # when it joined, by LiveKit's clock


def dispatch_attributes(metadata: dict[str, Any]) -> dict[str, str]:
    """The attributes that mark a dispatch as the one of a session's room epoch, so that the
    agent and the reconciler tell ours apart without parsing the metadata."""
    return {
        "aim.sessionId": str(metadata.get("sessionId", "")),
        "aim.sessionEpoch": str(metadata.get("sessionEpoch", "")),
    }


class LiveKitGateway:
    """Server API calls for one process; the HTTP session is opened on first use."""

    def __init__(
        self,
        settings: Settings,
        *,
        timeout_s: float = CALL_TIMEOUT_S,
        telemetry: Telemetry | None = None,
    ) -> None:
        self.settings = settings
        self.timeout_s = timeout_s
        self.telemetry = telemetry or Telemetry(None)
        self._api: api.LiveKitAPI | None = None
        self._server = urlsplit(settings.livekit_url or "").netloc

    def _client(self) -> api.LiveKitAPI:
        if not self.settings.livekit_configured:
            raise LiveKitNotConfigured("LiveKit is not configured (AIM_LIVEKIT_URL and keys)")
        if self._api is None:
            # failover off: livekit-api (since 1.2) replays any call that met a 5xx or a
            # transport error against another LiveKit Cloud region, CreateDispatch included,
            # and LiveKit does not de-duplicate dispatches, so a dispatch whose answer was lost
            # would become a second agent in the room. The outbox is our one retry layer: it
            # retries after a look at what LiveKit has (ensure_dispatch lists first).
            self._api = api.LiveKitAPI(
                self.settings.livekit_url,
                self.settings.livekit_api_key,
                self.settings.livekit_api_secret,
                failover=False,
            )
        return self._api

    async def aclose(self) -> None:
        if self._api is not None:
            await self._api.aclose()
            self._api = None

    async def _call(
        self, method: str, room: str, call: Callable[[api.LiveKitAPI], Awaitable[T]]
    ) -> T:
        client = self._client()
        with self.telemetry.livekit_span(method, room, self._server) as span:
            try:
                async with asyncio.timeout(self.timeout_s):
                    return await call(client)
            except api.ServerError as exc:
                span.set_attribute(ATTR_RPC_STATUS_CODE, exc.code or str(exc.status))
                span.set_attribute(ATTR_ERROR_TYPE, exc.code or str(exc.status))
                if exc.status >= 500 or exc.status == 429:
                    raise LiveKitUnavailable(f"LiveKit answered {exc.status} {exc.code}") from exc
                raise LiveKitRejected(
                    "LiveKit rejected our credentials (401)"
                    if exc.status == 401
                    else f"LiveKit refused the call: {exc.status} {exc.code} {exc.message}",
                    status=exc.status,
                ) from exc
            except (aiohttp.ClientError, OSError, TimeoutError) as exc:
                span.set_attribute(ATTR_ERROR_TYPE, type(exc).__name__)
                raise LiveKitUnavailable(f"LiveKit unreachable: {type(exc).__name__}") from exc

    async def ping(self) -> None:
        """One cheap authenticated call (ListRooms of no names): reachability and credentials."""
        await self._call(
            ROOMS + "ListRooms",
            "",
            lambda c: c.room.list_rooms(api.ListRoomsRequest(names=["aim-check"])),
        )

    async def create_room(
        self,
        room: str,
        *,
        metadata: dict[str, Any],
        agent: dict[str, Any] | None = None,
        retry: bool = False,
    ) -> None:
        """Create (or, since CreateRoom is an upsert, refresh) the session's room. With `agent`
        (the dispatch metadata), LiveKit dispatches our agent as it creates the room: one round
        trip provisions the session, and since a room's agents are dispatched only when it is
        created, repeating the call never dispatches twice. A `retry` (an earlier attempt may
        have created the room without its dispatch, or its answer was lost) then makes sure of
        the dispatch, as `ensure_dispatch` does."""
        agents = (
            [
                api.RoomAgentDispatch(
                    agent_name=self.settings.agent_name,
                    metadata=json.dumps(agent, separators=(",", ":")),
                    attributes=dispatch_attributes(agent),
                )
            ]
            if agent is not None
            else []
        )
        request = api.CreateRoomRequest(
            name=room,
            empty_timeout=ROOM_EMPTY_TIMEOUT_S,
            departure_timeout=ROOM_DEPARTURE_TIMEOUT_S,
            max_participants=ROOM_MAX_PARTICIPANTS,
            metadata=json.dumps(metadata, separators=(",", ":")),
            agents=agents,
        )
        await self._call(ROOMS + "CreateRoom", room, lambda c: c.room.create_room(request))
        if agent is not None and retry:
            await self.ensure_dispatch(room, metadata=agent)

    async def ensure_dispatch(self, room: str, *, metadata: dict[str, Any]) -> str:
        """Dispatch the agent into `room` once: LiveKit does not de-duplicate dispatches, so an
        existing dispatch for our agent name (from an earlier attempt) is reused."""
        agent = self.settings.agent_name
        existing = await self._call(
            DISPATCH + "ListDispatch", room, lambda c: c.agent_dispatch.list_dispatch(room)
        )
        for dispatch in existing:
            if dispatch.agent_name == agent:
                return str(dispatch.id)
        request = api.CreateAgentDispatchRequest(
            agent_name=agent,
            room=room,
            metadata=json.dumps(metadata, separators=(",", ":")),
            attributes=dispatch_attributes(metadata),
        )
        created = await self._call(
            DISPATCH + "CreateDispatch", room, lambda c: c.agent_dispatch.create_dispatch(request)
        )
        return str(created.id)

    async def dispatch_attempt(self, room: str, attempt: int, *, metadata: dict[str, Any]) -> str:
        """The id of our agent's dispatch number `attempt` into `room`, created unless an
        earlier try made it (LiveKit does not de-duplicate dispatches: the attempt in the
        metadata tells ours apart)."""
        agent = self.settings.agent_name
        existing = await self._call(
            DISPATCH + "ListDispatch", room, lambda c: c.agent_dispatch.list_dispatch(room)
        )
        for dispatch in existing:
            if dispatch.agent_name == agent and attempt_of(dispatch.metadata) == attempt:
                return str(dispatch.id)
        request = api.CreateAgentDispatchRequest(
            agent_name=agent,
            room=room,
            metadata=json.dumps({**metadata, ATTEMPT_KEY: attempt}, separators=(",", ":")),
        )
        created = await self._call(
            DISPATCH + "CreateDispatch", room, lambda c: c.agent_dispatch.create_dispatch(request)
        )
        return str(created.id)

    async def delete_dispatches(
        self, room: str, *, before_attempt: int = 0, only_attempt: int = 0
    ) -> int:
        """Delete our agent's dispatches in `room` older than `before_attempt`, or the one of
        `only_attempt` (LiveKit ends their jobs and their agents leave); how many were deleted.
        One already gone counts as done; so does a room that is gone."""
        agent = self.settings.agent_name
        try:
            existing = await self._call(
                DISPATCH + "ListDispatch", room, lambda c: c.agent_dispatch.list_dispatch(room)
            )
        except LiveKitRejected as exc:
            if exc.status != 404:
                raise
            return 0
        deleted = 0
        for dispatch in existing:
            attempt = attempt_of(dispatch.metadata)
            wanted = attempt == only_attempt if only_attempt else attempt < before_attempt
            if dispatch.agent_name != agent or not wanted:
                continue
            deleted += await self._delete_dispatch(room, str(dispatch.id))
        return deleted

    async def _delete_dispatch(self, room: str, dispatch_id: str) -> bool:
        return await self._tolerate_missing(
            DISPATCH + "DeleteDispatch",
            room,
            lambda c: c.agent_dispatch.delete_dispatch(dispatch_id, room),
        )

    async def list_rooms(self, names: Sequence[str] = ()) -> list[LiveRoom]:
        """Every room (ListRooms does not page), or those of `names` that exist."""
        request = api.ListRoomsRequest(names=list(names))
        reply = await self._call(ROOMS + "ListRooms", "", lambda c: c.room.list_rooms(request))
        return [
            LiveRoom(room.name, room.creation_time_ms or room.creation_time * 1000)
            for room in reply.rooms
        ]

    async def list_participants(self, room: str) -> list[LiveParticipant]:
        """Who is in `room` (nobody, if it does not exist)."""
        request = api.ListParticipantsRequest(room=room)
        reply = await self._call(
            ROOMS + "ListParticipants", room, lambda c: c.room.list_participants(request)
        )
        agent = api.ParticipantInfo.Kind.AGENT
        return [
            LiveParticipant(p.identity, p.kind == agent, p.joined_at_ms or p.joined_at * 1000)
            for p in reply.participants
        ]

    async def remove_participant(
        self, room: str, identity: str, *, revoke_before_s: int | None = None
    ) -> bool:
        """False when the participant (or its room) was not there: nothing to do. With
        `revoke_before_s` (Unix seconds), LiveKit refuses the identity's tokens whose `nbf` is
        earlier from then on (`revoke_token_ts`; it records it only for a participant in the
        room)."""
        request = api.RoomParticipantIdentity(
            room=room, identity=identity, revoke_token_ts=revoke_before_s or 0
        )
        return await self._tolerate_missing(
            ROOMS + "RemoveParticipant", room, lambda c: c.room.remove_participant(request)
        )

    async def delete_room(self, room: str) -> bool:
        """False when the room was already gone."""
        request = api.DeleteRoomRequest(room=room)
        return await self._tolerate_missing(
            ROOMS + "DeleteRoom", room, lambda c: c.room.delete_room(request)
        )

    async def update_permissions(
        self, room: str, identity: str, *, can_subscribe: bool, publish_sources: Sequence[str]
    ) -> None:
        """Send the full permission set: LiveKit replaces every flag it is sent."""
        permission = api.ParticipantPermission(
            can_subscribe=can_subscribe,
            can_publish=bool(publish_sources),
            can_publish_data=False,
            can_publish_sources=[SOURCE_NAMES[name] for name in publish_sources],
            can_update_metadata=False,
        )
        request = api.UpdateParticipantRequest(room=room, identity=identity, permission=permission)
        await self._tolerate_missing(
            ROOMS + "UpdateParticipant", room, lambda c: c.room.update_participant(request)
        )

    async def send_data(self, room: str, destination: Sequence[str], body: str) -> None:
        """A reliable data message on topic `aim.realtime.v1` (to `destination`, or everyone)."""
        request = api.SendDataRequest(
            room=room,
            data=body.encode(),
            kind=api.DataPacket.Kind.RELIABLE,
            destination_identities=list(destination),
            topic=DATA_TOPIC,
        )
        await self._tolerate_missing(ROOMS + "SendData", room, lambda c: c.room.send_data(request))

    async def _tolerate_missing(
        self, method: str, room: str, call: Callable[[api.LiveKitAPI], Awaitable[Any]]
    ) -> bool:
        """True when the call was carried out, False when its room or participant was missing
        (which counts as done)."""
        try:
            await self._call(method, room, call)
        except LiveKitRejected as exc:
            if exc.status != 404:
                raise
            return False
        return True
