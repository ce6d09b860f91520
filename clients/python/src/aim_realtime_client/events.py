"""What a session tells its app (`session.on(name, fn)`, `async for event in
session.events()`) and what calls return.

Every event is a frozen dataclass with `name`, the event's name in both client libraries: one
of the `Events` constants (`update`, the raw frames, only for `events(updates=True)` and
`on(Events.UPDATE, fn)`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Final

from aim_realtime_client.errors import AimError


class Events:
    """The names of a session's events, the same in both client libraries (the browser
    module exports `Events` with the same members): what `session.on`, `once` and `off` take,
    and each event class's `name`."""

    STATE: Final = "state"
    AGENT: Final = "agent"
    REQUIREMENT: Final = "requirement"
    INTERACTION: Final = "interaction"
    SUPERSEDED: Final = "superseded"
    REBOUND: Final = "rebound"
    ENDED: Final = "ended"
    ERROR: Final = "error"
    UPDATE: Final = "update"


# every name, in the order `Events` declares them (a ValueError for any other lists them)
EVENT_NAMES: Final[tuple[str, ...]] = tuple(
    value for key, value in vars(Events).items() if key.isupper()
)


@dataclass(frozen=True)
class StateChanged:
    """The session's state, its epoch, the task's state or version changed (not on repeats)."""

    name: ClassVar[str] = Events.STATE
    state: str
    epoch: int
    task_state: str
    task_version: int


@dataclass(frozen=True)
class AgentChanged:
    """The agent's state changed: `dispatched`, `started`, `joined`, what it reports of itself
    (`listening`, `thinking`, `speaking`), or `rotating` while a successor is brought in before
    the serving agent's connection ends (the serving agent still answers and the session keeps
    its state: nothing for the app to do), then the new agent's state.

    `generation` is the serving agent's (1, 2, …), `successor_generation` the one being brought
    in while `rotating`, and `rotated_from` the generation a rotation's successor took over
    from, on the first event of the new generation after `rotating` (else None). Generations
    are None from a service that does not name them."""

    name: ClassVar[str] = Events.AGENT
    state: str
    generation: int | None = None
    successor_generation: int | None = None
    rotated_from: int | None = None

    @property
    def rotating(self) -> bool:
        return self.state == "rotating"

    @property
    def rotated(self) -> bool:
        """The rotation is over: a successor serves now."""
        return self.rotated_from is not None


@dataclass(frozen=True)
class Requirement:
    """The agent asks the user to confirm `action` (the task is TASK_STATE_INPUT_REQUIRED)."""

    name: ClassVar[str] = Events.REQUIREMENT
    operation_id: str
    requirement_id: str
    action: dict[str, Any]
    action_digest: str
    expected_version: int


@dataclass(frozen=True)
class Interaction:
    """A SendInteraction this session object sent was accepted (`operation` when the result
    carried one: confirmations, media.decide, an agent-side media.request)."""

    name: ClassVar[str] = Events.INTERACTION
    command_id: str
    type: str
    accepted_at: str
    operation: dict[str, Any] | None = field(default=None, compare=False)


@dataclass(frozen=True)
class Superseded:
    """Another device took the session over at `epoch`; commands raise SupersededError without
    being sent until `join()` takes it back."""

    name: ClassVar[str] = Events.SUPERSEDED
    epoch: int


@dataclass(frozen=True)
class Rebound:
    """The room was replaced at `epoch` (the session is provisioning again): join() again."""

    name: ClassVar[str] = Events.REBOUND
    epoch: int


@dataclass(frozen=True)
class Ended:
    """The task is terminal; the stream is closed after this event."""

    name: ClassVar[str] = Events.ENDED
    state: str
    task_state: str
    end_reason: str | None


@dataclass(frozen=True)
class StreamFailed:
    """The stream cannot go on (`error`); the session still takes commands."""

    name: ClassVar[str] = Events.ERROR
    error: AimError


@dataclass(frozen=True)
class Update:
    """One raw StreamResponse of the task (`{"task": …}` or `{"statusUpdate": …}`) and its SSE
    id, before the events derived from it; only for `events(updates=True)`."""

    name: ClassVar[str] = Events.UPDATE
    event_id: str | None
    result: dict[str, Any]


Event = (
    StateChanged
    | AgentChanged
    | Requirement
    | Interaction
    | Superseded
    | Rebound
    | Ended
    | StreamFailed
)
AnyEvent = Event | Update


@dataclass(frozen=True)
class JoinResult:
    """JoinSession's media: what livekit's `room.connect(url, token)` needs. Its repr leaves
    the token out (a log line or a traceback may show it)."""

    url: str
    token: str = field(repr=False)
    room: str
    expires_at: str
    epoch: int
    identity: str
    endpoint_id: str
    command_id: str


@dataclass(frozen=True)
class Capabilities:
    """What this device can do (RegisterEndpoint's `capabilities`)."""

    audio_input: bool = True
    audio_output: bool = True
    camera: bool = False
    screen: bool = False
    interactions: tuple[str, ...] = ("text", "confirmation")

    def wire(self) -> dict[str, Any]:
        return {
            "audioInput": self.audio_input,
            "audioOutput": self.audio_output,
            "camera": self.camera,
            "screen": self.screen,
            "interactions": list(self.interactions),
        }

    @classmethod
    def of(cls, value: Capabilities | Mapping[str, Any] | None) -> Capabilities:
        """From a Capabilities, a mapping in either spelling (audioInput / audio_input), or
        None (the defaults)."""
        if value is None:
            return cls()
        if isinstance(value, Capabilities):
            return value
        names = {"audioInput": "audio_input", "audioOutput": "audio_output"}
        values = {names.get(key, key): item for key, item in value.items()}
        if "interactions" in values:
            values["interactions"] = tuple(values["interactions"])
        return cls(**values)


def requirement_in(status: Mapping[str, Any]) -> Requirement | None:
    """The requirement a task status message carries (its data part), if any."""
    message = status.get("message")
    parts = message.get("parts") if isinstance(message, dict) else None
    for part in parts if isinstance(parts, list) else []:
        data = part.get("data") if isinstance(part, dict) else None
        if isinstance(data, dict) and "requirementId" in data and "operationId" in data:
            action = data.get("action")
            return Requirement(
                operation_id=str(data["operationId"]),
                requirement_id=str(data["requirementId"]),
                action=action if isinstance(action, dict) else {},
                action_digest=str(data.get("actionDigest", "")),
                expected_version=int(data.get("expectedVersion", 0)),
            )
    return None
