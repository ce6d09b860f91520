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

from typing import Final, Literal

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
        match (side, source):
            case ("user", "camera"):
                return self.user_camera
            case ("user", "screen"):
                return self.user_screen
            case ("agent", "camera"):
                return self.agent_camera
            case _:
                return self.agent_screen

    def with_state(self, side: MediaSide, source: MediaSource, state: SourceState) -> MediaSources:
        match (side, source):
            case ("user", "camera"):
                return msgspec.structs.replace(self, user_camera=state)
            case ("user", "screen"):
                return msgspec.structs.replace(self, user_screen=state)
            case ("agent", "camera"):
                return msgspec.structs.replace(self, agent_camera=state)
            case _:
                return msgspec.structs.replace(self, agent_screen=state)


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
