"""Media source lifecycles: camera and screen, per side (user, agent) (realtime-profile §5, §7, §9).

`off → requested → granted → preparing → live → stopped`; `revoked` from any state after `off`
(requested, granted, preparing, live, stopped); `off | stopped | revoked → requested` again; a
denied request goes back to `off`.

Invariants:
- each of the four sources has its own state; an event touches exactly one of them;
- a rejection changes nothing and names the events the source's state allows;
- the user's endpoint may publish a video source only while it is granted, preparing or live:
  `stopped` and `revoked` sources are never in `publish_sources`.
"""

from __future__ import annotations

from typing import Final, Literal, assert_never

import msgspec

from state_machines._base import Accepted, Rejected, RejectReason
from state_machines.effects import CAMERA, MICROPHONE, SCREEN_SHARE, SCREEN_SHARE_AUDIO

MediaSide = Literal["user", "agent"]
MediaSource = Literal["camera", "screen"]
SourceState = Literal["off", "requested", "granted", "preparing", "live", "stopped", "revoked"]
MediaEvent = Literal[
    "request", "grant", "deny", "prepare", "published", "unpublished", "stop", "revoke"
]

OFF: Final = "off"
REQUESTED: Final = "requested"
GRANTED: Final = "granted"
PREPARING: Final = "preparing"
LIVE: Final = "live"
STOPPED: Final = "stopped"
REVOKED: Final = "revoked"

# the states in which the user's endpoint holds the publish permission for the source
PUBLISHABLE: Final[tuple[SourceState, ...]] = (GRANTED, PREPARING, LIVE)

TRANSITIONS: Final[dict[tuple[SourceState, MediaEvent], SourceState]] = {
    **{(state, "request"): REQUESTED for state in (OFF, STOPPED, REVOKED)},
    (REQUESTED, "grant"): GRANTED,
    (REQUESTED, "deny"): OFF,
    (GRANTED, "prepare"): PREPARING,
    (PREPARING, "published"): LIVE,
    # a client may publish as soon as the grant is there, without announcing it with prepare
    (GRANTED, "published"): LIVE,
    (LIVE, "unpublished"): STOPPED,
    **{(state, "stop"): STOPPED for state in (GRANTED, PREPARING, LIVE)},
    **{(state, "revoke"): REVOKED for state in (REQUESTED, GRANTED, PREPARING, LIVE, STOPPED)},
}


class MediaSources(msgspec.Struct, frozen=True, kw_only=True):
    """The state of every media source of a session."""

    user_camera: SourceState = OFF
    user_screen: SourceState = OFF
    agent_camera: SourceState = OFF
    agent_screen: SourceState = OFF

    def get(self, side: MediaSide, source: MediaSource) -> SourceState:
        match _field(side, source):
            case "user_camera":
                return self.user_camera
            case "user_screen":
                return self.user_screen
            case "agent_camera":
                return self.agent_camera
            case "agent_screen":
                return self.agent_screen
            case _ as field:
                assert_never(field)

    def with_state(self, side: MediaSide, source: MediaSource, state: SourceState) -> MediaSources:
        return msgspec.structs.replace(self, **{_field(side, source): state})


_Field = Literal["user_camera", "user_screen", "agent_camera", "agent_screen"]


def _field(side: MediaSide, source: MediaSource) -> _Field:
    """The field of MediaSources that holds the `side` `source` (matched one by one, so a new
    side or source fails type checking here)."""
    match side:
        case "user":
            match source:
                case "camera":
                    return "user_camera"
                case "screen":
                    return "user_screen"
                case _:
                    assert_never(source)
        case "agent":
            match source:
                case "camera":
                    return "agent_camera"
                case "screen":
                    return "agent_screen"
                case _:
                    assert_never(source)
        case _:
            assert_never(side)


def allowed_events(state: SourceState) -> tuple[MediaEvent, ...]:
    """The events `state` accepts, in table order."""
    return tuple(event for (source, event) in TRANSITIONS if source == state)


def decide(
    sources: MediaSources, side: MediaSide, source: MediaSource, event: MediaEvent
) -> Accepted[MediaSources] | Rejected:
    """Apply `event` to the `side` `source`: all sources with that one moved, or a rejection."""
    current = sources.get(side, source)
    target = TRANSITIONS.get((current, event))
    if target is None:
        return Rejected(
            reason=RejectReason.INVALID_STATE,
            state=current,
            allowed=allowed_events(current),
            detail=f"the {side} {source} is {current}: `{event}` does not apply",
        )
    return Accepted(sources.with_state(side, source, target))


def publish_sources(
    sources: MediaSources, *, audio_input: bool, camera: bool = True, screen: bool = True
) -> tuple[str, ...]:
    """The LiveKit track sources the user's endpoint may publish, in LiveKit's exact names:
    what is granted, and only what the device offers (`camera`, `screen`), so a grant given on
    one device never reaches a device without that source after a handoff."""
    names: list[str] = []
    if audio_input:
        names.append(MICROPHONE)
    if camera and sources.user_camera in PUBLISHABLE:
        names.append(CAMERA)
    if screen and sources.user_screen in PUBLISHABLE:
        names += [SCREEN_SHARE, SCREEN_SHARE_AUDIO]
    return tuple(names)
