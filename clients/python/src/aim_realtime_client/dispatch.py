"""What the agent worker is handed: the dispatch metadata, and the service's data messages.

The service dispatches one agent per room with the job metadata `{sessionId, sessionEpoch,
taskId, retention, requested, providerUrl, providerToken, agentGeneration, successorOf?}`
(docs/protocol.md, Provider API). It then sends the agent LiveKit data messages on topic
`aim.realtime.v1`, each `{type, commandId, sessionEpoch, payload}`: the user's interactions
(input.text, visual.select, response.interrupt, media.*), `operation.update` `{operationId,
state}` whenever an operation is resolved, and `agent.leave` `{generation,
successorGeneration}` when a successor took over (a rotation). They arrive at least once;
`Inbox` drops the repeats.
"""

from __future__ import annotations

import json
import uuid
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

TOPIC: Final = "aim.realtime.v1"
RETENTION_VALUES: Final = ("on", "off")
REMEMBERED: Final = 10_000  # commandIds kept for de-duplication (the oldest are forgotten)


class AgentMetadataError(ValueError):
    """The job's metadata is not what the service dispatches; `problems` lists each one."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("dispatch metadata: " + "; ".join(problems))
        self.problems = problems


class AgentMessageError(ValueError):
    """A data message on the service's topic that is not one of its messages."""


@dataclass(frozen=True)
class DispatchMetadata:
    session_id: str
    session_epoch: int
    task_id: str
    retention: dict[str, str]
    requested: dict[str, Any]
    provider_url: str
    provider_token: str = field(repr=False)
    # the agent's place among the session's agents, and (a rotation's successor) the
    # generation it takes over from
    agent_generation: int = 1
    successor_of: int | None = None


def _uuid(value: Any) -> bool:
    try:
        uuid.UUID(value)
    except (TypeError, ValueError, AttributeError):
        return False
    return isinstance(value, str)


def _decoded(raw: str | bytes | Mapping[str, Any]) -> Mapping[str, Any]:
    if isinstance(raw, Mapping):
        return raw
    if isinstance(raw, bytes):
        try:
            raw = raw.decode()
        except UnicodeDecodeError:
            raise AgentMetadataError(["not UTF-8 text"]) from None
    if not raw.strip():
        raise AgentMetadataError(
            [
                "empty: this job was not dispatched by the AIM realtime service (it dispatches "
                "every session's agent explicitly, with metadata)"
            ]
        )
    try:
        value = json.loads(raw)
    except ValueError as exc:
        raise AgentMetadataError([f"not JSON ({exc})"]) from None
    if not isinstance(value, dict):
        raise AgentMetadataError([f"a JSON object was expected, not {type(value).__name__}"])
    return value


def _shape(value: Any) -> str:
    """What a value is, without its content."""
    if isinstance(value, str):
        return f"a string of {len(value)} characters, {value.count('.') + 1} dot-separated parts"
    return "null" if value is None else f"a {type(value).__name__}"


def parse_metadata(raw: str | bytes | Mapping[str, Any]) -> DispatchMetadata:
    """The job metadata checked member by member; AgentMetadataError names every problem."""
    data = _decoded(raw)
    problems: list[str] = []

    def need(name: str, ok: bool, what: str, *, secret: bool = False) -> None:
        if name not in data:
            problems.append(f"{name}: missing")
        elif not ok:
            # a secret's value is never said, not even a malformed one: its shape only
            got = _shape(data[name]) if secret else repr(data[name])
            problems.append(f"{name}: must be {what}, got {got}")

    epoch = data.get("sessionEpoch")
    retention = data.get("retention")
    url = data.get("providerUrl")
    need("sessionId", _uuid(data.get("sessionId")), "a UUID")
    need(
        "sessionEpoch",
        isinstance(epoch, int) and not isinstance(epoch, bool) and epoch >= 1,
        "an integer of at least 1",
    )
    need("taskId", _uuid(data.get("taskId")), "a UUID")
    need(
        "retention",
        isinstance(retention, dict)
        and all(retention.get(key) in RETENTION_VALUES for key in ("transcript", "summary")),
        '{"transcript": "on"|"off", "summary": "on"|"off"}',
    )
    need("requested", isinstance(data.get("requested"), dict), "an object")
    need(
        "providerUrl",
        isinstance(url, str) and url.startswith(("http://", "https://")),
        "an http(s) URL",
    )
    token = data.get("providerToken")
    need("providerToken", isinstance(token, str) and token.count(".") == 2, "a JWT", secret=True)
    generation = data.get("agentGeneration", 1)
    successor_of = data.get("successorOf")
    if not _whole(generation):
        problems.append(f"agentGeneration: must be an integer of at least 1, got {generation!r}")
    if successor_of is not None and not _whole(successor_of):
        problems.append(f"successorOf: must be an integer of at least 1, got {successor_of!r}")
    if problems:
        raise AgentMetadataError(problems)
    return DispatchMetadata(
        session_id=str(data["sessionId"]),
        session_epoch=int(data["sessionEpoch"]),
        task_id=str(data["taskId"]),
        retention=dict(data["retention"]),
        requested=dict(data["requested"]),
        provider_url=str(url),
        provider_token=str(token),
        agent_generation=int(generation),
        successor_of=None if successor_of is None else int(successor_of),
    )


def _whole(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


@dataclass(frozen=True)
class InteractionMessage:
    """Something the user did: `type` input.text, visual.select, response.interrupt, media.*
    (and any type a later service adds), with its payload."""

    type: str
    command_id: str
    session_epoch: int | None
    payload: dict[str, Any]


@dataclass(frozen=True)
class OperationUpdate:
    """An operation reached `state` (running once confirmed, canceled, expired, …). From a data
    message (`command_id` set) or from `sync()` (`operation`: the whole operation)."""

    operation_id: str
    state: str
    command_id: str | None = None
    session_epoch: int | None = None
    payload: dict[str, Any] = field(default_factory=dict)
    operation: dict[str, Any] | None = None


@dataclass(frozen=True)
class LeaveNow:
    """`agent.leave`: generation `successor_generation` took over from this agent
    (`generation`). Its writes are refused from now on (AgentReplacedError); it should wrap up
    and leave the room: the service removes it after a short grace."""

    generation: int
    successor_generation: int
    command_id: str
    session_epoch: int | None = None


@dataclass(frozen=True)
class Handover:
    """What an agent taking over reads (aim.provider.GetHandover): the context its predecessor
    saved (None if none), the operations not over (the predecessor's stay valid: this agent
    finishes them), and the interactions no agent acknowledged, oldest first."""

    generation: int
    agent_generation: int
    successor_of: int | None
    reason: str | None
    context: str | None
    context_generation: int | None
    operations: list[dict[str, Any]]
    interactions: list[InteractionMessage]


AgentMessage = InteractionMessage | OperationUpdate | LeaveNow


class Inbox:
    """De-duplication: interactions by commandId, operation updates by (operationId, state)."""

    def __init__(self, remembered: int = REMEMBERED) -> None:
        self.remembered = remembered
        self._commands: OrderedDict[str, None] = OrderedDict()
        self._updates: set[tuple[str, str]] = set()

    def seen_update(self, operation_id: str, state: str) -> bool:
        """Record an operation's state; True when it was known already."""
        key = (operation_id, state)
        if key in self._updates:
            return True
        self._updates.add(key)
        return False

    def _seen_command(self, command_id: str) -> bool:
        if command_id in self._commands:
            return True
        self._commands[command_id] = None
        if len(self._commands) > self.remembered:
            self._commands.popitem(last=False)
        return False

    def receive(self, payload: bytes | str, topic: str | None) -> AgentMessage | None:
        """The message in a data packet, or None (another topic, or a repeat)."""
        if topic != TOPIC:
            return None
        try:
            message = json.loads(payload)
        except ValueError as exc:
            raise AgentMessageError(f"{TOPIC} message is not JSON: {exc}") from None
        if not isinstance(message, dict):
            raise AgentMessageError(f"{TOPIC} message is not a JSON object")
        kind, command_id = message.get("type"), message.get("commandId")
        body = message.get("payload", {})
        if (
            not isinstance(kind, str)
            or not isinstance(command_id, str)
            or not isinstance(body, dict)
        ):
            raise AgentMessageError(
                f"{TOPIC} message needs a string type and commandId and an object payload: "
                f"{message!r:.200}"
            )
        raw_epoch = message.get("sessionEpoch")
        epoch = raw_epoch if isinstance(raw_epoch, int) else None
        if kind == "operation.update":
            operation_id, state = body.get("operationId"), body.get("state")
            if not isinstance(operation_id, str) or not isinstance(state, str):
                raise AgentMessageError("operation.update needs payload.operationId and .state")
            self._seen_command(command_id)
            if self.seen_update(operation_id, state):
                return None
            return OperationUpdate(operation_id, state, command_id, epoch, body)
        if self._seen_command(command_id):
            return None
        if kind == "agent.leave":
            generation, successor = body.get("generation"), body.get("successorGeneration")
            if not isinstance(generation, int) or not isinstance(successor, int):
                raise AgentMessageError(
                    "agent.leave needs payload.generation and .successorGeneration"
                )
            return LeaveNow(generation, successor, command_id, epoch)
        return InteractionMessage(kind, command_id, epoch, body)

    def taken(self, message: InteractionMessage) -> bool:
        """Record an interaction handed over (not received in a data packet): True when it was
        received before, so that it is acted on once either way."""
        return self._seen_command(message.command_id)
