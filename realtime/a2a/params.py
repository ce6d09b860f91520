"""Strict request parameters: one msgspec Struct per method of `aim-a2a-v1.schema.json`.

Every Struct forbids unknown members (the schema's `additionalProperties: false` at every level)
and carries the schema's lengths, enums, consts and formats as msgspec constraints. The few rules
msgspec cannot express live in `__post_init__` and are where profile §15 makes the service
stricter than the schema (a part carries exactly one content member, `raw` is padded base64,
uuids are hyphenated). Where msgspec is laxer or stricter than the schema in ways §15 does not
allow, this module evens it out: date-times follow RFC 3339 exactly (`Timestamp`), and integers
written with a zero fraction (`1.0`, `1e2`) are integers, as JSON Schema says.
`decode_params(method, raw)` is the one entry point; its errors name the JSON path of the
offending member.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Annotated, Any, Final, Literal, TypeVar

import msgspec
from msgspec import UNSET, Meta, UnsetType

from realtime.a2a.scalars import (
    DIGEST_PATTERN,
    UUID_PATTERN,
    Digest,
    Epoch,
    NonNegative,
    Timestamp,
    Uuid,
    dec_hook,
    is_padded_base64,
)
from realtime.a2a.types import TaskState
from realtime.errors import InvalidParams, invalid_params

Interaction = Literal["text", "pointer", "tool", "confirmation"]
VideoSource = Literal["camera", "screen"]

_CONTENT_MEMBERS: Final = ("text", "raw", "url", "data")
# what one message's parts may hold together, in bytes of their JSON (text, raw, url, data and
# each part's metadata): a message joins a task's history, so it is bounded before anything
# is stored (decision 171)
MAX_MESSAGE_PART_BYTES: Final = 128 * 1024
# a message's contextId is an identifier the service stores with its task and indexes for
# ListTasks: bounded like one (the schema leaves it unbounded; decision 171)
MAX_CONTEXT_ID_CHARS: Final = 256
_SIZE_ENCODER: Final = msgspec.json.Encoder()


class Params(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True, rename="camel"):
    """Base of inbound parameter objects: strict, immutable, camelCase on the wire."""


class Part(Params, frozen=True):
    text: str | UnsetType = UNSET
    raw: Annotated[str, Meta(min_length=1, max_length=699052)] | UnsetType = UNSET
    url: str | UnsetType = UNSET
    data: Any | UnsetType = UNSET
    media_type: Annotated[str, Meta(max_length=127)] | UnsetType = UNSET
    filename: Annotated[str, Meta(min_length=1, max_length=255)] | UnsetType = UNSET
    metadata: Any | UnsetType = UNSET

    def __post_init__(self) -> None:
        present = [name for name in _CONTENT_MEMBERS if getattr(self, name) is not UNSET]
        if len(present) != 1:
            raise ValueError(
                "a part carries exactly one of `text`, `raw`, `url` or `data`"
                + (f"; this one has {', '.join(present)}" if present else "")
            )
        if present[0] in ("raw", "url") and self.media_type is UNSET:
            raise ValueError(f"a `{present[0]}` part needs `mediaType`")
        if isinstance(self.raw, str) and not is_padded_base64(self.raw):
            raise ValueError("`raw` must be standard padded base64 (RFC 4648)")


class ContinuePart(Part, frozen=True):
    def __post_init__(self) -> None:
        super().__post_init__()
        if self.raw is not UNSET or self.url is not UNSET:
            raise ValueError("ContinueTask accepts only `text` and `data` parts")


def part_bytes(part: Part) -> int:
    """The bytes a part's content and metadata take in JSON (strings as UTF-8)."""
    size = 0
    for value in (part.text, part.raw, part.url):
        if isinstance(value, str):
            size += len(value) if value.isascii() else len(value.encode())
    for value in (part.data, part.metadata):
        if value is not UNSET:
            size += len(_SIZE_ENCODER.encode(value))
    return size


def check_part_bytes(parts: Sequence[Part]) -> None:
    """Refuse a message whose parts hold more than MAX_MESSAGE_PART_BYTES together."""
    size = sum(part_bytes(part) for part in parts)
    if size > MAX_MESSAGE_PART_BYTES:
        raise ValueError(
            f"`parts` hold {size} bytes; the parts of one message hold at most "
            f"{MAX_MESSAGE_PART_BYTES} bytes together (text, raw, url, data and metadata)"
        )


Parts = Annotated[list[Part], Meta(min_length=1, max_length=17)]
MessageId = Annotated[str, Meta(min_length=1, max_length=128)]
ContextId = Annotated[str, Meta(max_length=MAX_CONTEXT_ID_CHARS)]
NoReferences = Annotated[list[Any], Meta(max_length=0)]


class Message(Params, frozen=True):
    message_id: MessageId
    role: Literal["ROLE_USER"]
    parts: Parts
    context_id: ContextId | None = None
    # a new message never names a task: the server creates it (schema: `taskId` is null)
    task_id: None = None
    metadata: Any | UnsetType = UNSET
    extensions: list[str] | UnsetType = UNSET
    reference_task_ids: NoReferences | UnsetType = UNSET

    def __post_init__(self) -> None:
        check_part_bytes(self.parts)


class ContinueMessage(Params, frozen=True):
    message_id: MessageId
    role: Literal["ROLE_USER"]
    parts: Annotated[list[ContinuePart], Meta(min_length=1, max_length=17)]
    task_id: Uuid
    context_id: ContextId | None = None
    metadata: Any | UnsetType = UNSET
    extensions: list[str] | UnsetType = UNSET
    reference_task_ids: NoReferences | UnsetType = UNSET

    def __post_init__(self) -> None:
        check_part_bytes(self.parts)


class SendConfiguration(Params, frozen=True):
    return_immediately: bool = False
    accepted_output_modes: (
        list[Literal["text/plain", "image/*", "application/octet-stream"]] | UnsetType
    ) = UNSET
    history_length: NonNegative | None = None
    # push notifications are not supported: only an explicit null is accepted
    task_push_notification_config: None = None


class SendParams(Params, frozen=True):
    message: Message
    configuration: SendConfiguration | UnsetType = UNSET
    metadata: Any | UnsetType = UNSET


class ContinueParams(Params, frozen=True):
    id: Uuid
    requirement_id: Uuid
    expected_version: NonNegative
    action_digest: Digest
    message: ContinueMessage
    history_length: NonNegative | None = None

    def __post_init__(self) -> None:
        if self.message.task_id.lower() != self.id.lower():
            raise ValueError("`message.taskId` must equal `id`")


class TaskParams(Params, frozen=True):
    id: Uuid
    history_length: NonNegative | None = None


class ListParams(Params, frozen=True):
    context_id: str | None = None
    status: TaskState | None = None
    page_size: Annotated[int, Meta(ge=1, le=100)] | None = None
    page_token: str | None = None
    history_length: NonNegative | None = None
    status_timestamp_after: Timestamp | None = None
    include_artifacts: bool = False


class GetSessionParams(Params, frozen=True):
    session_id: Uuid


class EndpointCapabilities(Params, frozen=True):
    audio_input: bool
    audio_output: bool
    camera: bool
    screen: bool
    interactions: list[Interaction]

    def __post_init__(self) -> None:
        if len(set(self.interactions)) != len(self.interactions):
            raise ValueError("`interactions` must not repeat an item")


class RegisterEndpointParams(Params, frozen=True):
    session_id: Uuid
    session_epoch: Epoch
    command_id: Uuid
    client_endpoint_key: Annotated[str, Meta(min_length=1, max_length=128)]
    capabilities: EndpointCapabilities


class JoinSessionParams(Params, frozen=True):
    session_id: Uuid
    session_epoch: Epoch
    endpoint_id: Uuid
    command_id: Uuid


class EndSessionParams(Params, frozen=True):
    session_id: Uuid
    command_id: Uuid
    reason: Annotated[str, Meta(min_length=1, max_length=128)]


InteractionType = Literal[
    "input.text",
    "visual.select",
    "response.interrupt",
    "operation.confirm",
    "operation.cancel",
    "media.request",
    "media.decide",
    "media.prepare",
    "media.stop",
    "media.revoke",
]


class SendInteractionParams(Params, frozen=True):
    session_id: Uuid
    session_epoch: Epoch
    command_id: Uuid
    type: InteractionType
    payload: dict[str, Any]


class GetCommandParams(Params, frozen=True):
    session_id: Uuid
    command_id: Uuid


class GetOperationParams(Params, frozen=True):
    session_id: Uuid
    operation_id: Uuid


class RequestedMedia(Params, frozen=True):
    media_binding: Literal["livekit-webrtc-v1"]
    audio: Literal["bidirectional"]
    user_video_sources: list[VideoSource]
    agent_video_sources: list[VideoSource]
    interactions: list[Interaction]


class Retention(Params, frozen=True):
    transcript: Literal["off", "on"]
    summary: Literal["off"]


class SessionCreate(Params, frozen=True):
    """The `session.create` data part of a SendMessage (`$defs/realtimeSessionCreate`)."""

    operation: Literal["session.create"]
    client_session_id: Uuid
    requested: RequestedMedia
    required_capabilities: list[Literal["audio_input", "audio_output", "vision_input"]]
    recording: Literal["off"]
    retention: Retention


P = TypeVar("P", bound=Params)

PARAMS_TYPES: Final[Mapping[str, type[Params]]] = {
    "SendMessage": SendParams,
    "SendStreamingMessage": SendParams,
    "ContinueTask": ContinueParams,
    "GetTask": TaskParams,
    "ListTasks": ListParams,
    "CancelTask": TaskParams,
    "SubscribeToTask": TaskParams,
    "aim.realtime.GetSession": GetSessionParams,
    "aim.realtime.RegisterEndpoint": RegisterEndpointParams,
    "aim.realtime.JoinSession": JoinSessionParams,
    "aim.realtime.EndSession": EndSessionParams,
    "aim.realtime.SendInteraction": SendInteractionParams,
    "aim.realtime.GetCommand": GetCommandParams,
    "aim.realtime.GetOperation": GetOperationParams,
}

_DECODERS: Final[Mapping[type[Params], Callable[[bytes], Any]]] = {
    cls: msgspec.json.Decoder(cls, dec_hook=dec_hook).decode for cls in set(PARAMS_TYPES.values())
}

_AT_PATH = re.compile(r" - at `\$(?P<path>[^`]*)`$")
_MEMBER = re.compile(r"(?:unknown|required) field `(?P<name>[^`]+)`")
_INT_GOT_FLOAT = re.compile(r"^Expected `int(?: \| null)?`, got `float` - at `\$(?P<path>[^`]*)`$")
_NAMED = re.compile(r"^`(?P<name>[A-Za-z][A-Za-z.]*)` ")
_PATH_STEP = re.compile(r"\.(?P<name>[^.\[]+)|\[(?P<index>\d+)\]")


def decode_params(method: str, raw: bytes) -> Params:
    """Decode `raw` (the JSON of `params`) into the method's Struct or raise -32602."""
    decode = _DECODERS[PARAMS_TYPES[method]]
    try:
        params: Params = decode(raw)
    except msgspec.ValidationError as exc:
        error = exc
    else:
        return params
    # JSON Schema's `integer` is any number with a zero fraction: `1.0` and `1e2` are valid where
    # the schema says integer (ProtoJSON readers take them too), but msgspec refuses a float where
    # it expects an int. Rare, so only on this path: make each such float an int, then decode again.
    value: Any = UNSET
    while (found := _INT_GOT_FLOAT.match(str(error))) is not None:
        try:
            if value is UNSET:
                value = msgspec.json.decode(raw)
        except msgspec.DecodeError:
            break
        if not _integral_float_to_int(value, found["path"]):
            break
        try:
            params = decode(msgspec.json.encode(value))
        except msgspec.ValidationError as exc:
            error = exc
        else:
            return params
    raise validation_error(error, root="params") from None


def _integral_float_to_int(value: Any, path: str) -> bool:
    """Replace the float at `path` (`.name`/`[index]` steps) by its int if it has no fraction."""
    steps: list[str | int] = [
        step["name"] if step["name"] is not None else int(step["index"])
        for step in _PATH_STEP.finditer(path)
    ]
    try:
        container = value
        for step in steps[:-1]:
            container = container[step]
        number = container[steps[-1]]
    except (IndexError, KeyError, TypeError):
        return False
    if not (isinstance(number, float) and math.isfinite(number) and number.is_integer()):
        return False
    container[steps[-1]] = int(number)
    return True


def decode_as(cls: type[P], value: object, *, root: str) -> P:
    """Convert an already-decoded JSON value into `cls` (used for nested payloads)."""
    try:
        return msgspec.convert(value, cls, strict=True, dec_hook=dec_hook)
    except msgspec.ValidationError as exc:
        raise validation_error(exc, root=root) from None


def validation_error(exc: msgspec.ValidationError, *, root: str) -> InvalidParams:
    """Translate a msgspec validation message into -32602 with the offending JSON path."""
    text = str(exc)
    path = ""
    match = _AT_PATH.search(text)
    if match:
        path = match.group("path")
        text = text[: match.start()]
    member = _MEMBER.search(text)
    if member:
        path += "." + member.group("name")
    elif not match and (named := _NAMED.match(text)):
        # a rule of the whole object (`__post_init__`) that names the member it is about
        path += "." + named.group("name")
    for pattern, meaning in _PATTERN_MEANINGS.items():
        text = text.replace(f"matching regex {pattern!r}", meaning)
    return invalid_params(root + path, text)


_PATTERN_MEANINGS: Final = {
    UUID_PATTERN: "holding a hyphenated UUID such as 123e4567-e89b-42d3-a456-426614174000",
    DIGEST_PATTERN: "holding `sha256:` and 64 lowercase hex digits",
}
