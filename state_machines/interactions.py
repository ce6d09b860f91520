"""What a user does inside a live session (profile §7): messages for the agent and consent to
user media. Track webhooks move a granted source to `live` and back to `stopped`.

Invariants:
- only the active endpoint of a live session past provisioning can interact (else invalid state);
- a class (text, pointer) must be both requested by the session and offered by the endpoint, a
  user source both requested and offered (else capability unavailable, naming what is missing);
- the endpoint's publish permission always equals what its grants allow: every change to a user
  source that changes `publish_sources` carries an UpdatePermissions with the full set.
"""

from __future__ import annotations

import json
from typing import Final, Literal

import msgspec

from state_machines import media
from state_machines._base import Accepted, Rejected, RejectReason
from state_machines.effects import Effect, SendData, UpdatePermissions
from state_machines.session import stale_epoch
from state_machines.session_model import Session, by_id, device_sources, replace

DeliveredKind = Literal["input.text", "visual.select", "response.interrupt"]
MediaAction = Literal["request", "prepare", "stop", "revoke"]

# the interaction class a delivered kind needs (None: always allowed)
CLASS_OF: Final[dict[str, str | None]] = {
    "input.text": "text",
    "visual.select": "pointer",
    "response.interrupt": None,
}
INTERACTIVE_STATES: Final = ("joining", "active", "reconnecting")
TRACK_SOURCES: Final[dict[str, media.MediaSource]] = {
    "camera": "camera",
    "screen_share": "screen",
}


class Deliver(msgspec.Struct, frozen=True, tag=True):
    """input.text / visual.select / response.interrupt: a data message for the agent."""

    epoch: int
    command_id: str
    kind: DeliveredKind
    payload_json: str


class UserMedia(msgspec.Struct, frozen=True, tag=True):
    """media.request / prepare / stop / revoke for a source of the user's side."""

    epoch: int
    command_id: str
    source: media.MediaSource
    action: MediaAction


class TrackChanged(msgspec.Struct, frozen=True, tag=True):
    """Webhook track_published / track_unpublished (LiveKit source name)."""

    epoch: int
    identity: str
    source: str
    published: bool


InteractionEvent = Deliver | UserMedia | TrackChanged


def decide(session: Session, event: InteractionEvent, *, now: str) -> Accepted[Session] | Rejected:
    """Apply an interaction or a track change to `session`."""
    if isinstance(event, TrackChanged):
        return _track(session, event, now)
    refused = stale_epoch(session, event.epoch) or _not_interactive(session)
    if refused is not None:
        return refused
    if isinstance(event, Deliver):
        return _deliver(session, event, now)
    return _user_media(session, event, now)


def _not_interactive(session: Session) -> Rejected | None:
    if session.state in INTERACTIVE_STATES and session.active_endpoint_id is not None:
        return None
    return Rejected(
        reason=RejectReason.INVALID_STATE,
        state=session.state,
        allowed=(),
        current_epoch=session.epoch,
        detail="interactions need a live session with an active endpoint: join it first",
    )


def _missing(missing: str) -> Rejected:
    return Rejected(
        reason=RejectReason.CAPABILITY_UNAVAILABLE,
        state="",
        missing=(missing,),
        detail=f"{missing} was not requested for this session or is not offered by the device",
    )


def _deliver(session: Session, event: Deliver, now: str) -> Accepted[Session] | Rejected:
    needed = CLASS_OF[event.kind]
    endpoint = by_id(session, session.active_endpoint_id or "")
    offered = endpoint.capabilities.interactions if endpoint else ()
    if needed is not None and (
        needed not in session.requested.interactions or needed not in offered
    ):
        return _missing(needed)
    body = json.dumps(
        {
            "type": event.kind,
            "commandId": event.command_id,
            "sessionEpoch": session.epoch,
            "payload": json.loads(event.payload_json),
        },
        separators=(",", ":"),
    )
    if session.agent_identity is None:
        return Rejected(
            reason=RejectReason.INVALID_STATE,
            state=session.state,
            current_epoch=session.epoch,
            detail="the agent has not joined the room yet; send it again shortly",
        )
    effects: tuple[Effect, ...] = (SendData(session.room, (session.agent_identity,), body),)
    return Accepted(replace(session, updated_at=now), effects)


def _user_media(session: Session, event: UserMedia, now: str) -> Accepted[Session] | Rejected:
    endpoint = by_id(session, session.active_endpoint_id or "")
    caps = endpoint.capabilities if endpoint else None
    offered = bool(caps and (caps.camera if event.source == "camera" else caps.screen))
    if event.source not in session.requested.user_video_sources or not offered:
        return _missing(event.source)
    steps: tuple[media.MediaEvent, ...] = (
        ("request", "grant") if event.action == "request" else (event.action,)
    )
    sources = session.media
    for step in steps:
        outcome = media.decide(sources, "user", event.source, step)
        if isinstance(outcome, Rejected):
            return replace_state(outcome, session)
        sources = outcome.state
    return _with_media(session, sources, now)


def _track(session: Session, event: TrackChanged, now: str) -> Accepted[Session] | Rejected:
    source = TRACK_SOURCES.get(event.source)
    if (
        source is None
        or event.identity != session.active_endpoint_id
        or event.epoch != session.epoch
    ):
        return Rejected(
            reason=RejectReason.INVALID_STATE,
            state=session.state,
            current_epoch=session.epoch,
            detail="fenced: not a video track of the active endpoint in this epoch",
        )
    outcome = media.decide(
        session.media, "user", source, "published" if event.published else "unpublished"
    )
    if isinstance(outcome, Rejected):
        return replace_state(outcome, session)
    return _with_media(session, outcome.state, now)


def _with_media(session: Session, sources: media.MediaSources, now: str) -> Accepted[Session]:
    """The session with new source states; a permission update when what may be published
    changed (LiveKit replaces every flag it is sent, so the full set goes)."""
    endpoint = by_id(session, session.active_endpoint_id or "")
    updated = replace(session, media=sources, updated_at=now)
    if endpoint is None:
        return Accepted(updated)
    caps = endpoint.capabilities
    before = device_sources(session, caps)
    after = device_sources(replace(session, media=sources), caps)
    if before == after:
        return Accepted(updated)
    permission = UpdatePermissions(
        session.room, endpoint.endpoint_id, endpoint.capabilities.audio_output, after
    )
    return Accepted(updated, (permission,))


def replace_state(rejected: Rejected, session: Session) -> Rejected:
    """A media rejection as seen from the session (its epoch filled in)."""
    return msgspec.structs.replace(rejected, current_epoch=session.epoch)
