"""LiveKit webhooks → session events through the same commit path as commands (profile §9).

Every verified webhook is answered 200 — duplicates, events for rooms that are not ours and events
the session refuses (an older epoch's room, a `left` before its `joined`) included: they are
recorded and ignored. Only a failure to record (Redis down) answers 503, so LiveKit retries.
"""

from __future__ import annotations

import logging
import re
from typing import Final

from realtime.effects.webhooks import Notice
from realtime.errors import RpcError
from realtime.methods.context import Services
from state_machines import ParticipantJoined, ParticipantLeft, RoomLost, SessionEvent

log = logging.getLogger(__name__)

ROOM_NAME: Final = re.compile(
    r"^aim-(?P<sid>[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})-e(?P<epoch>\d+)$"
)
LEFT_EVENTS: Final = frozenset({"participant_left", "participant_connection_aborted"})


def session_event(notice: Notice, room_epoch: int) -> SessionEvent | None:
    """The session event a webhook means, or None for events sessions do not follow yet."""
    # an endpoint's epoch is the one its token carried; the agent belongs to the room's epoch
    epoch = room_epoch if notice.is_agent else (notice.participant_epoch or room_epoch)
    if notice.event == "participant_joined" and notice.identity:
        return ParticipantJoined(epoch, notice.identity, notice.is_agent)
    if notice.event in LEFT_EVENTS and notice.identity:
        return ParticipantLeft(epoch, notice.identity, notice.is_agent)
    if notice.event == "room_finished":
        return RoomLost(notice.room)
    return None


async def handle(services: Services, notice: Notice) -> str:
    """Apply one verified webhook; the outcome label (applied | duplicate | ignored)."""
    match = ROOM_NAME.match(notice.room)
    if match is None:
        return "ignored"  # not a room of this service
    session_id, room_epoch = match["sid"], int(match["epoch"])
    sessions = services.engine.sessions
    if notice.event_id and not await sessions.first_sighting(session_id, notice.event_id):
        return "duplicate"
    event = session_event(notice, room_epoch)
    if event is None:
        return "ignored"
    try:
        applied = await services.engine.execute(session_id, lambda _: event, owner=None)
    except RpcError as exc:
        if exc.name == "UpstreamUnavailable":
            if notice.event_id:  # not recorded after all: let LiveKit's retry through
                await sessions.forget_sighting(session_id, notice.event_id)
            raise
        log.info("webhook %s for session %s ignored: %s", notice.event, session_id, exc.message)
        return "ignored"
    return "applied" if applied.task is not None else "ignored"
