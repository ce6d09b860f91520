"""The endpoint lifecycle: one device of a session (realtime-profile §5, §6).

Invariants:
- `removed` absorbs: once the session is over its endpoints accept nothing;
- `superseded` (after a handoff) only comes back through `reregister` (RegisterEndpoint with the
  same clientEndpointKey) or goes to `removed`;
- `reregister` never changes the state of a live endpoint, so registering again is harmless;
- the session decides *when* (active endpoint, epochs); this table decides *whether*.
"""

from __future__ import annotations

from typing import Final, Literal

import msgspec

from state_machines._base import Accepted, Rejected, RejectReason

EndpointState = Literal[
    "registered", "joining", "connected", "disconnected", "superseded", "removed"
]
EndpointEvent = Literal[
    "join", "connected", "disconnected", "supersede", "remove", "reregister", "rebind"
]

REGISTERED: Final = "registered"
JOINING: Final = "joining"
CONNECTED: Final = "connected"
DISCONNECTED: Final = "disconnected"
SUPERSEDED: Final = "superseded"
REMOVED: Final = "removed"

# the states of an endpoint that still belongs to the session's device set
_USABLE: Final[tuple[EndpointState, ...]] = (REGISTERED, JOINING, CONNECTED, DISCONNECTED)

TRANSITIONS: Final[dict[tuple[EndpointState, EndpointEvent], EndpointState]] = {
    **{(state, "join"): JOINING for state in _USABLE},
    (JOINING, "connected"): CONNECTED,
    # LiveKit reconnects a dropped participant with its token: no new JoinSession
    (DISCONNECTED, "connected"): CONNECTED,
    (JOINING, "disconnected"): DISCONNECTED,
    (CONNECTED, "disconnected"): DISCONNECTED,
    **{(state, "supersede"): SUPERSEDED for state in _USABLE},
    **{(state, "remove"): REMOVED for state in (*_USABLE, SUPERSEDED)},
    (SUPERSEDED, "reregister"): REGISTERED,
    **{(state, "reregister"): state for state in _USABLE},
    # the room was lost: every device must join the new room with a new token
    **{(state, "rebind"): REGISTERED for state in _USABLE},
}


class Capabilities(msgspec.Struct, frozen=True):
    """What the device can do: media in/out, video sources, interaction classes."""

    audio_input: bool
    audio_output: bool
    camera: bool
    screen: bool
    interactions: tuple[str, ...]


class Endpoint(msgspec.Struct, frozen=True, kw_only=True):
    """One registered device; `endpoint_id` is its LiveKit identity."""

    endpoint_id: str
    client_endpoint_key: str
    capabilities: Capabilities
    registered_at: str
    state: EndpointState = REGISTERED
    joined_at: str | None = None
    joined_epoch: int | None = None


def allowed_events(state: EndpointState) -> tuple[EndpointEvent, ...]:
    """The events `state` accepts, in table order."""
    return tuple(event for (source, event) in TRANSITIONS if source == state)


def accepts(endpoint: Endpoint, event: EndpointEvent) -> bool:
    return (endpoint.state, event) in TRANSITIONS


def transition(endpoint: Endpoint, event: EndpointEvent) -> Endpoint:
    """Apply an event the caller already knows is legal (a KeyError here is a bug)."""
    return msgspec.structs.replace(endpoint, state=TRANSITIONS[endpoint.state, event])


def decide(endpoint: Endpoint, event: EndpointEvent) -> Accepted[Endpoint] | Rejected:
    """Apply `event` to `endpoint`: the endpoint in its next state, or a rejection."""
    if not accepts(endpoint, event):
        return Rejected(
            reason=RejectReason.INVALID_STATE,
            state=endpoint.state,
            allowed=allowed_events(endpoint.state),
            detail=f"endpoint {endpoint.endpoint_id} is {endpoint.state}: `{event}` does not apply",
        )
    return Accepted(transition(endpoint, event))
