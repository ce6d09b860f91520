"""LiveKit webhooks → session events through the same commit path as commands (profile §9).

Every verified webhook is answered 200 — duplicates, events for rooms that are not ours and events
the session refuses (an older epoch's room, a `left` before its `joined`) included: they are
recorded and ignored. Only a failure to record (Redis down) answers 503, so LiveKit retries.
"""

from __future__ import annotations

import logging
from typing import Final

import msgspec

from realtime.engine.entries import Cause, Command, Note, params_digest
from realtime.engine.outcomes import Applied, Contended, Missing, Refused, Replayed
from realtime.errors import Unavailable
from realtime.livekit_adapter.webhooks import Notice
from realtime.methods.context import Services
from realtime.store.timeline import WebhookVerdict
from state_machines import ParticipantJoined, ParticipantLeft, RoomLost, SessionEvent
from state_machines.interactions import InteractionEvent, TrackChanged
from state_machines.session import parse_room_name

log = logging.getLogger(__name__)

WEBHOOK_METHOD: Final = "livekit.webhook"
LEFT_EVENTS: Final = frozenset({"participant_left", "participant_connection_aborted"})
_ENCODER: Final = msgspec.json.Encoder()


def session_event(notice: Notice, room_epoch: int) -> SessionEvent | InteractionEvent | None:
    """The session event a webhook means, or None for events sessions do not follow yet."""
    # an endpoint's epoch is the one its token carried; the agent belongs to the room's epoch
    epoch = room_epoch if notice.is_agent else (notice.participant_epoch or room_epoch)
    if notice.event == "participant_joined" and notice.identity:
        return ParticipantJoined(epoch, notice.identity, notice.is_agent)
    if notice.event in LEFT_EVENTS and notice.identity:
        return ParticipantLeft(epoch, notice.identity, notice.is_agent)
    if notice.event == "room_finished":
        return RoomLost(notice.room)
    if notice.event in ("track_published", "track_unpublished") and notice.track_source:
        return TrackChanged(
            epoch,
            notice.identity,
            notice.track_source,
            notice.event == "track_published",
            is_agent=notice.is_agent,
        )
    return None


async def handle(services: Services, notice: Notice) -> str:
    """Apply one verified webhook; the outcome label (applied | duplicate | ignored).

    The event id is recorded in the same atomic commit as the transition it causes (as the
    commandId of a server command), so a duplicate is recognised exactly when its first
    delivery changed something, and a delivery that failed (Redis down) is not recorded at all.
    The session's timeline shows every webhook of its rooms that sessions follow: an applied one
    in its commit's event entry, the others (duplicate, fenced: for a room the session has left,
    ignored) through the recorder.
    """
    named = parse_room_name(notice.room)
    if named is None:
        return "ignored"  # not a room of this service
    session_id, room_epoch = named
    event = session_event(notice, room_epoch)
    if event is None:
        return "ignored"  # not one sessions follow (nor one their timeline shows)
    command = (
        Command(
            WEBHOOK_METHOD,
            f"webhook:{notice.event_id}",
            params_digest(
                WEBHOOK_METHOD,
                {"event": notice.event, "room": notice.room, "identity": notice.identity},
            ),
        )
        if notice.event_id
        else None
    )
    outcome = await services.engine.execute(
        session_id,
        event,
        command=command,
        result=_ENCODER.encode({"event": notice.event, "eventId": notice.event_id}),
        note=Note(Cause.WEBHOOK, event=notice.event, event_id=notice.event_id or None),
    )
    match outcome:
        case Applied(changed=changed):
            if not changed:  # no commit, so no event entry says so
                _note(services, session_id, notice, "applied")
            return "applied"
        case Replayed():
            _note(services, session_id, notice, "duplicate")
            return "duplicate"
        case Contended():
            raise Unavailable(
                "The session is changing too fast to record this webhook.", service="redis"
            )
        case _:  # refused, for a session that is not there, or an event id seen for another event
            if isinstance(outcome, Refused) and outcome.session.room != notice.room:
                _note(services, session_id, notice, "fenced")
            elif not isinstance(outcome, Missing):
                _note(services, session_id, notice, "ignored")
            log.info(
                "webhook %s for session %s ignored: %s",
                notice.event,
                session_id,
                type(outcome).__name__.lower(),
            )
            return "ignored"


def _note(services: Services, session_id: str, notice: Notice, verdict: WebhookVerdict) -> None:
    services.recorder.webhook(
        session_id, event=notice.event, event_id=notice.event_id or None, verdict=verdict
    )
