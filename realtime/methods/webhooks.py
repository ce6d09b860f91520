"""LiveKit webhooks → session events through the same commit path as commands (profile §9).

Every verified webhook is answered 200 — duplicates, events for rooms that are not ours and events
the session refuses (an older epoch's room, a `left` before its `joined`) included: they are
recorded and ignored. Only a failure to record (Redis down) answers 503, so LiveKit retries.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Final

import msgspec

from realtime.engine.entries import Command, Note, params_digest
from realtime.engine.outcomes import Applied, Contended, Denied, Missing, Replayed
from realtime.errors import Unavailable
from realtime.livekit_adapter.webhooks import Notice, WebhookRejected
from realtime.livekit_adapter.webhooks import verify as verify_webhook
from realtime.methods.commands import execute
from realtime.methods.context import Commands
from realtime.store.records import Cause
from realtime.store.timeline import WebhookVerdict
from state_machines import (
    AgentJobEnded,
    AgentJobStarted,
    ParticipantJoined,
    ParticipantLeft,
    RoomLost,
    Session,
    SessionEvent,
)
from state_machines.interactions import InteractionEvent, TrackChanged
from state_machines.rotation import is_successor
from state_machines.session import parse_room_name

log = logging.getLogger(__name__)

WEBHOOK_METHOD: Final = "livekit.webhook"
LEFT_EVENTS: Final = frozenset({"participant_left", "participant_connection_aborted"})
JOB_EVENTS: Final = frozenset({"agent_job_started", "agent_job_ended"})
_ENCODER: Final = msgspec.json.Encoder()


def session_event(
    notice: Notice, room_epoch: int, *, agent_name: str
) -> SessionEvent | InteractionEvent | None:
    """The session event a webhook means, or None for events sessions do not follow (yet): a
    job of another agent than ours (`agent_name`) among them."""
    # an endpoint's epoch is the one its token carried; the agent belongs to the room's epoch
    epoch = room_epoch if notice.is_agent else (notice.participant_epoch or room_epoch)
    if notice.event == "participant_joined" and notice.identity:
        return ParticipantJoined(epoch, notice.identity, notice.is_agent)
    if notice.event in LEFT_EVENTS and notice.identity:
        return ParticipantLeft(epoch, notice.identity, notice.is_agent)
    if notice.event == "room_finished":
        return RoomLost(notice.room)
    if notice.event in JOB_EVENTS and notice.job is not None:
        job = notice.job
        if job.agent_name != agent_name:
            return None
        if notice.event == "agent_job_started":
            return AgentJobStarted(
                room_epoch, job.attempt, job.job_id, job.identity, job.dispatch_id
            )
        return AgentJobEnded(room_epoch, job.attempt, job.job_id, job.identity)
    if notice.event in ("track_published", "track_unpublished") and notice.track_source:
        return TrackChanged(
            epoch,
            notice.identity,
            notice.track_source,
            notice.event == "track_published",
            is_agent=notice.is_agent,
        )
    return None


@dataclass(frozen=True, slots=True)
class WebhookAnswer:
    """The answer to one delivery: its HTTP status, verdict and body, and what the span names
    (the event, the session its room belongs to)."""

    status: int
    verdict: WebhookVerdict
    body: bytes
    event: str | None = None
    session_id: str | None = None


async def handle(commands: Commands, body: bytes, authorization: str) -> WebhookAnswer:
    """Verify one delivery and apply it: 401 unless its signature verifies, 503 when it
    cannot be recorded (LiveKit retries), else 200 with its verdict."""
    try:
        notice = verify_webhook(commands.settings, body, authorization)
    except WebhookRejected as exc:
        error = _ENCODER.encode({"error": f"webhook not accepted: {exc}"})
        return WebhookAnswer(401, WebhookVerdict.REJECTED, error)
    named = parse_room_name(notice.room)  # None: not a room of this service
    session_id = named[0] if named is not None else None
    try:
        verdict = await _apply(commands, notice, named)
    except Unavailable:
        return WebhookAnswer(
            503,
            WebhookVerdict.UNAVAILABLE,
            b'{"error":"state store unavailable"}',
            notice.event,
            session_id,
        )
    status = _ENCODER.encode({"status": verdict})
    return WebhookAnswer(200, verdict, status, notice.event, session_id)


async def _apply(
    commands: Commands, notice: Notice, named: tuple[str, int] | None
) -> WebhookVerdict:
    """Apply one verified webhook; its verdict (applied | duplicate | ignored).

    The event id is recorded in the same atomic commit as the transition it causes (as the
    commandId of a server command), so a duplicate is recognised exactly when its first
    delivery changed something, and a delivery that failed (Redis down) is not recorded at all.
    The session's timeline shows every webhook of its rooms that sessions follow: an applied one
    in its commit's event entry, the others (duplicate, fenced: for a room the session has left,
    ignored) through the recorder.
    """
    if named is None:
        return WebhookVerdict.IGNORED  # not a room of this service
    session_id, room_epoch = named
    event = session_event(notice, room_epoch, agent_name=commands.settings.agent_name)
    if event is None:
        return WebhookVerdict.IGNORED  # not one sessions follow (nor one their timeline shows)
    command = (
        Command(
            WEBHOOK_METHOD,
            f"webhook:{notice.event_id}",
            params_digest(
                WEBHOOK_METHOD,
                {
                    "event": notice.event,
                    "room": notice.room,
                    "identity": notice.identity,
                    **({"job": notice.job.job_id} if notice.job is not None else {}),
                },
            ),
        )
        if notice.event_id
        else None
    )
    outcome = await execute(
        commands,
        session_id,
        event,
        command=command,
        result=_ENCODER.encode({"event": notice.event, "eventId": notice.event_id}),
        note=Note(Cause.WEBHOOK, event=notice.event, event_id=notice.event_id or None),
    )
    match outcome:
        case Applied(changed=changed):
            if not changed:  # no commit, so no event entry says so
                _note(commands, session_id, notice, WebhookVerdict.APPLIED)
            return WebhookVerdict.APPLIED
        case Replayed():
            _note(commands, session_id, notice, WebhookVerdict.DUPLICATE)
            return WebhookVerdict.DUPLICATE
        case Contended():
            raise Unavailable(
                "The session is changing too fast to record this webhook.", service="redis"
            )
        case _:  # refused, for a session that is not there, or an event id seen for another event
            if isinstance(outcome, Denied) and _fenced(event, outcome.session, notice):
                _note(commands, session_id, notice, WebhookVerdict.FENCED)
            elif not isinstance(outcome, Missing):
                _note(commands, session_id, notice, WebhookVerdict.IGNORED)
            log.info(
                "webhook %s for session %s ignored: %s",
                notice.event,
                session_id,
                type(outcome).__name__.lower(),
            )
            return WebhookVerdict.IGNORED


def _fenced(event: object, session: Session, notice: Notice) -> bool:
    """Refused because it is about a room the session left, an older dispatch of the agent, or
    an agent replaced since (rather than out of order in the current room)."""
    if session.room != notice.room:
        return True
    if isinstance(event, AgentJobStarted | AgentJobEnded):
        return event.attempt < session.agent_attempt and not is_successor(session, event.attempt)
    return isinstance(event, ParticipantJoined | ParticipantLeft) and (
        event.identity in session.agents_replaced
    )


def _note(commands: Commands, session_id: str, notice: Notice, verdict: WebhookVerdict) -> None:
    commands.notes.webhook(
        session_id, event=notice.event, event_id=notice.event_id or None, verdict=verdict
    )
