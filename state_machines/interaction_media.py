"""Media consent inside a session (profile §7, §9, §10): the user's and the agent's sources,
track webhooks, and what an operation's outcome means for the source it asked for.

The endpoint's publish permission always equals what its grants allow: every change to a user
source that changes `publish_sources` carries an UpdatePermissions with the full set.
"""

from __future__ import annotations

from typing import Final

from state_machines import media
from state_machines import operation as operations
from state_machines import rotation as rotations
from state_machines._base import Accepted, Rejected, RejectReason
from state_machines.effects import SendData, UpdatePermissions
from state_machines.interaction_model import (
    MAX_OPERATIONS,
    AgentMedia,
    TrackChanged,
    UserMedia,
    agent_absent,
    agent_in_room,
    capability_missing,
    replace_state,
    to_agent,
    too_many_operations,
)
from state_machines.operation import Operation
from state_machines.session_model import Session, by_id, device_sources, replace

TRACK_SOURCES: Final[dict[str, media.MediaSource]] = {
    "camera": "camera",
    "screen_share": "screen",
}


def user_media(session: Session, event: UserMedia) -> Accepted[Session] | Rejected:
    """A step of a user source; a request is granted at once (the user asks for it)."""
    endpoint = by_id(session, session.active_endpoint_id or "")
    caps = endpoint.capabilities if endpoint else None
    offered = bool(caps and (caps.camera if event.source == "camera" else caps.screen))
    if event.source not in session.requested.user_video_sources or not offered:
        return capability_missing(event.source)
    steps: tuple[media.MediaEvent, ...] = (
        ("request", "grant") if event.action == "request" else (event.action,)
    )
    sources = session.media
    for step in steps:
        outcome = media.decide(sources, "user", event.source, step)
        if isinstance(outcome, Rejected):
            return replace_state(outcome, session)
        sources = outcome.state
    return with_media(session, sources)


def agent_media(session: Session, event: AgentMedia, now: str) -> Accepted[Session] | Rejected:
    """A step of an agent source, told to the agent; a request opens a running operation."""
    if event.source not in session.requested.agent_video_sources:
        return capability_missing(event.source)
    agent = agent_in_room(session)
    if agent is None:
        return agent_absent(session)
    outcome = media.decide(session.media, "agent", event.source, event.action)
    if isinstance(outcome, Rejected):
        return replace_state(outcome, session)
    payload: dict[str, object] = {"side": "agent", "source": event.source}
    changed = replace(session, media=outcome.state)
    if event.action == "request":
        if len(session.operations) >= MAX_OPERATIONS:
            return too_many_operations(session)
        opened = operations.new_operation(
            operation_id=event.operation_id,
            kind="media.request",
            created_by="client",
            now=now,
            requirement=None,
            media_side="agent",
            media_source=event.source,
        )
        running = replace(opened, state=operations.RUNNING)
        changed = replace(changed, operations=(*session.operations, running))
        payload["operationId"] = event.operation_id
    body = to_agent(session, f"media.{event.action}", event.command_id, payload)
    return Accepted(
        rotations.sent(changed, event.command_id, body), (SendData(session.room, (agent,), body),)
    )


def track(session: Session, event: TrackChanged) -> Accepted[Session] | Rejected:
    """A video track of the active endpoint or the agent was published or unpublished."""
    source = TRACK_SOURCES.get(event.source)
    if event.is_agent:
        current = event.identity == session.agent_identity and event.epoch == session.room_epoch
    else:
        current = event.identity == session.active_endpoint_id and event.epoch == session.epoch
    if source is None or not current:
        return Rejected(
            reason=RejectReason.INVALID_STATE,
            state=session.state,
            current_epoch=session.epoch,
            detail="fenced: not a video track of the agent or the active endpoint in this epoch",
        )
    side: media.MediaSide = "agent" if event.is_agent else "user"
    outcome = media.decide(
        session.media, side, source, "published" if event.published else "unpublished"
    )
    if isinstance(outcome, Rejected):
        return replace_state(outcome, session)
    return with_media(session, outcome.state)


def with_media(session: Session, sources: media.MediaSources) -> Accepted[Session]:
    """The session with new source states; a permission update when what may be published
    changed (LiveKit replaces every flag it is sent, so the full set goes)."""
    endpoint = by_id(session, session.active_endpoint_id or "")
    updated = replace(session, media=sources)
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


def settled_media(session: Session, op: Operation) -> media.MediaSources:
    """What an operation's new state means for the source it asked for: the user allowing the
    agent's request, or the agent carrying out the user's, grants it; a request that ends
    unanswered, refused or failed leaves it `off`. Only the newest request for a source settles
    it: an older operation finishing late never touches a source asked for again since.
    (`op` has just changed state; a request of the user starts running and changes state next
    when the agent reports.)"""
    sources = session.media
    side, source = op.media_side, op.media_source
    if op.kind != "media.request" or side is None or source is None:
        return sources
    newest = [
        item.operation_id
        for item in session.operations
        if item.kind == "media.request" and (item.media_side, item.media_source) == (side, source)
    ][-1]
    if newest != op.operation_id:
        return sources
    allowed = op.state == operations.SUCCEEDED or (
        op.state == operations.RUNNING and op.created_by == "provider"
    )
    step: media.MediaEvent = "grant" if allowed else "deny"
    outcome = media.decide(sources, side, source, step)
    return sources if isinstance(outcome, Rejected) else outcome.state
