"""A2A 0.1 adapter: 0.1 requests (on their own endpoint, `POST /a2a/v0.1`) become 1.0 params for
the same handlers; 1.0 results, stream events and errors go back in 0.1 shapes (`type` parts,
the client's task `id`, `sessionId`, seven states, `final` on every event). The id map that binds
a client's task ids to the server's is `methods/client_tasks`; the messageIds derived from those
ids are made here. Members the 0.1 schema does not define are ignored; defined ones are checked
strictly, with errors naming the 0.1 path.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping
from typing import Annotated, Any, Final, Literal

import msgspec
from msgspec import Meta

from realtime.a2a import v03
from realtime.a2a.modes import file_part
from realtime.a2a.params import validation_error
from realtime.a2a.scalars import check_file_content
from realtime.a2a.types import TERMINAL_STATES
from realtime.errors import invalid_params

VERSION: Final = "0.1"
PATH: Final = "/a2a/v0.1"
METHODS: Final[Mapping[str, str]] = {
    "tasks/send": "SendMessage",
    "tasks/sendSubscribe": "SendStreamingMessage",
    "tasks/get": "GetTask",
    "tasks/cancel": "CancelTask",
    "tasks/resubscribe": "SubscribeToTask",
}
# in the 0.1 schema, answered -32003: the agent card says pushNotifications: false
PUSH_METHODS: Final = ("tasks/pushNotification/set", "tasks/pushNotification/get")
# the 0.1 names that A2A 0.3 does not share: on /a2a they are sent to the 0.1 endpoint
ONLY_V01: Final = frozenset({"tasks/send", "tasks/sendSubscribe", *PUSH_METHODS})
# the namespace of derived messageIds (decision 116): never change it, or a retry would
# create a second task
MESSAGE_NAMESPACE: Final = uuid.UUID("0b5f3d7e-8a41-4c2b-9e6f-a1d2c3b4e501")
_STATES: Final[Mapping[str, str]] = {
    "TASK_STATE_SUBMITTED": "submitted",
    "TASK_STATE_WORKING": "working",
    "TASK_STATE_INPUT_REQUIRED": "input-required",
    "TASK_STATE_COMPLETED": "completed",
    "TASK_STATE_CANCELED": "canceled",
    "TASK_STATE_FAILED": "failed",
    "TASK_STATE_REJECTED": "failed",  # terminal and not done; the status message says why
    "TASK_STATE_AUTH_REQUIRED": "input-required",  # interrupted: the client must act
}


REALTIME_ONLY: Final = {"type": "data", "data": {"reason": "realtime_only"}}
REALTIME_ONLY_TEXT: Final = (
    "This agent only starts realtime voice/video sessions and does not chat in text. Send "
    'tasks/send or tasks/sendSubscribe with a data part whose data has "operation": '
    '"session.create" (the session.create object of the realtime extension).'
)


def moved(method: str, base_url: str) -> str:
    """The -32601 message of a 0.1-only method sent to /a2a."""
    return (
        f"{method} is an A2A 0.1 method; A2A 0.1 is served at {base_url}{PATH} (see "
        f"{base_url}/.well-known/agent.json). On this endpoint use A2A 0.3 or 1.0."
    )


# --- 0.1 requests (members outside the schema are ignored; defined ones are strict) -----------


class _In(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True, rename="camel"):
    pass


ClientId = Annotated[str, Meta(min_length=1, max_length=128)]
Metadata = dict[str, Any] | None
HistoryLength = int | float | None  # 0.1 says `number`; the 1.0 decoder wants an integer >= 0


class FileContent(_In, frozen=True):
    bytes_: str | None = msgspec.field(default=None, name="bytes")
    uri: str | None = None
    mime_type: str | None = None
    name: str | None = None

    def __post_init__(self) -> None:
        check_file_content(self.uri, self.bytes_)


class TextPart(_In, frozen=True, tag_field="type", tag="text"):
    text: str
    metadata: Metadata = None


class DataPart(_In, frozen=True, tag_field="type", tag="data"):
    data: dict[str, Any]
    metadata: Metadata = None


class FilePart(_In, frozen=True, tag_field="type", tag="file"):
    file: FileContent
    metadata: Metadata = None


Part = TextPart | DataPart | FilePart


class Message(_In, frozen=True):
    role: Literal["user", "agent"]
    parts: list[Part]
    metadata: Metadata = None


class SendParams(_In, frozen=True):
    """TaskSendParams (tasks/send, tasks/sendSubscribe)."""

    id: ClientId
    message: Message
    session_id: str | None = None
    push_notification: dict[str, Any] | None = None
    history_length: HistoryLength = None
    metadata: Metadata = None


class TaskId(_In, frozen=True):
    """TaskIdParams (tasks/cancel)."""

    id: ClientId
    metadata: Metadata = None  # the service's taskParams have no metadata: dropped


class TaskQuery(TaskId, frozen=True):
    """TaskQueryParams (tasks/get, tasks/resubscribe)."""

    history_length: HistoryLength = None


Request = SendParams | TaskId
_PARAMS: Final[Mapping[str, type[_In]]] = {
    "tasks/send": SendParams,
    "tasks/sendSubscribe": SendParams,
    "tasks/get": TaskQuery,
    "tasks/cancel": TaskId,
    "tasks/resubscribe": TaskQuery,
}
_DECODERS: Final[Mapping[type[_In], Callable[[bytes], Any]]] = {
    cls: msgspec.json.Decoder(cls).decode for cls in set(_PARAMS.values())
}
_ENCODER: Final = msgspec.json.Encoder()
# a placeholder for the server id, which the id map supplies once the params are valid
PLACEHOLDER_ID: Final = "00000000-0000-4000-8000-000000000000"


def decode(method: str, raw: bytes) -> Request:
    """A 0.1 request's params, or -32602 naming the 0.1 path."""
    try:
        params: Request = _DECODERS[_PARAMS[method]](raw)
    except msgspec.ValidationError as exc:
        raise validation_error(exc, root="params") from None
    if isinstance(params, SendParams) and params.message.role != "user":
        raise invalid_params(
            "params.message.role", "only `user` messages are accepted; the agent writes its own"
        )
    return params


def message_id(client_id: str) -> str:
    """The 1.0 messageId of a 0.1 task id: the same id always meets the same replay."""
    return str(uuid.uuid5(MESSAGE_NAMESPACE, client_id))


def _part(part: Part) -> dict[str, Any]:
    out: dict[str, Any]
    if isinstance(part, TextPart):
        out = {"text": part.text}
    elif isinstance(part, DataPart):
        # session.create is recognised with this media type only (profile §3)
        out = {"data": part.data, "mediaType": "application/json"}
    else:
        file = part.file
        out = file_part(file.uri, file.bytes_, file.mime_type, file.name)
    if part.metadata is not None:
        out["metadata"] = part.metadata
    return out


def to_v10_params(request: Request, server_id: str = PLACEHOLDER_ID) -> bytes:
    """The 1.0 params JSON of a 0.1 request: SendMessage's, or GetTask's, CancelTask's and
    SubscribeToTask's for `server_id` (decoded first with the placeholder, before the id map is
    read; a resubscribe's historyLength only shapes a Task that 0.1 events do not carry)."""
    out: dict[str, Any]
    if isinstance(request, SendParams):
        message: dict[str, Any] = {
            "messageId": message_id(request.id),
            "role": "ROLE_USER",
            "parts": [_part(part) for part in request.message.parts],
        }
        if request.session_id is not None:
            message["contextId"] = request.session_id
        if request.message.metadata is not None:
            message["metadata"] = request.message.metadata
        out = {"message": message}
        if request.history_length is not None:
            out["configuration"] = {"historyLength": request.history_length}
        if request.metadata is not None:
            out["metadata"] = request.metadata
    else:
        out = {"id": server_id}
        if isinstance(request, TaskQuery) and request.history_length is not None:
            out["historyLength"] = request.history_length
    return _ENCODER.encode(out)


def wants_history(request: Request) -> bool:
    """The 0.1 Task has no `history`: it is sent only when historyLength >= 1 was asked for
    (decision 112)."""
    length = request.history_length if isinstance(request, SendParams | TaskQuery) else None
    return length is not None and length >= 1


# --- 1.0 results → 0.1 ----------------------------------------------------------------------------


def state(value: str) -> str:
    """A 1.0 TaskState as one of the seven 0.1 states (UNSPECIFIED and anything new: unknown)."""
    return _STATES.get(value, "unknown")


def part(value: Mapping[str, Any]) -> dict[str, Any]:
    """A 1.0 Part as the 0.3 adapter writes it, `type` in place of `kind` (the same members)."""
    out = v03.part(value)
    return {"type": out.pop("kind"), **out}


def message(value: Mapping[str, Any]) -> dict[str, Any]:
    """A 1.0 Message as `{role, parts, metadata?}`: its ids and extensions have no 0.1 place."""
    out: dict[str, Any] = {
        "role": "user" if value.get("role") == "ROLE_USER" else "agent",
        "parts": [part(item) for item in value.get("parts", ())],
    }
    if "metadata" in value:
        out["metadata"] = value["metadata"]
    return out


def status(value: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {"state": state(value["state"])}
    if "message" in value:
        out["message"] = message(value["message"])
        parts = out["message"]["parts"]
        if parts[1:] == [REALTIME_ONLY] and parts[0].get("type") == "text":
            # the refusal of a message without session.create: its text says how over 0.1
            parts[0] = {**parts[0], "text": REALTIME_ONLY_TEXT}
    if "timestamp" in value:
        out["timestamp"] = value["timestamp"]
    return out


def artifact(value: Mapping[str, Any], index: int) -> dict[str, Any]:
    """A 1.0 Artifact at `index` (0.1 orders artifacts by index; it has no artifactId)."""
    out: dict[str, Any] = {k: value[k] for k in ("name", "description") if k in value}
    out["parts"] = [part(item) for item in value.get("parts", ())]
    out["index"] = index
    if "metadata" in value:
        out["metadata"] = value["metadata"]
    return out


def task(value: Mapping[str, Any], client_id: str, *, history: bool = False) -> dict[str, Any]:
    """A 1.0 Task as the 0.1 Task of `client_id`: `sessionId` is its contextId."""
    out: dict[str, Any] = {
        "id": client_id,
        "sessionId": value["contextId"],
        "status": status(value["status"]),
    }
    if "artifacts" in value:
        out["artifacts"] = [artifact(item, i) for i, item in enumerate(value["artifacts"])]
    if history and "history" in value:  # outside the 0.1 schema, when asked (decision 112)
        out["history"] = [message(item) for item in value["history"]]
    if "metadata" in value:
        out["metadata"] = value["metadata"]
    return out


def result(method: str, value: Mapping[str, Any], client_id: str, *, history: bool) -> Any:
    """A 1.0 unary result (as builtins) in its 0.1 shape: a Task."""
    found = value["task"] if method == "SendMessage" else value
    return task(found, client_id, history=history)


def _index(value: Mapping[str, Any], indexes: dict[str, int]) -> int:
    return indexes.setdefault(str(value.get("artifactId", "")), len(indexes))


def _status_event(client_id: str, value: Mapping[str, Any], metadata: Any) -> dict[str, Any]:
    out = {"id": client_id, "status": status(value), "final": value["state"] in TERMINAL_STATES}
    return out if metadata is None else {**out, "metadata": metadata}


def stream_events(
    value: Mapping[str, Any], client_id: str, indexes: dict[str, int]
) -> list[dict[str, Any]]:
    """A 1.0 StreamResponse as 0.1 events: TaskStatusUpdateEvent, TaskArtifactUpdateEvent.

    A Task becomes one artifact event per artifact, then its status, so that `final` (true when
    the task is terminal: the stream closes after it) is on the last event. `indexes` is the
    stream's artifactId → index, in the order the ids first appeared."""
    if "task" in value:
        found = value["task"]
        events: list[dict[str, Any]] = [
            {"id": client_id, "artifact": artifact(item, _index(item, indexes)), "final": False}
            for item in found.get("artifacts", ())
        ]
        events.append(_status_event(client_id, found["status"], found.get("metadata")))
        return events
    if "statusUpdate" in value:
        update = value["statusUpdate"]
        return [_status_event(client_id, update["status"], update.get("metadata"))]
    if "artifactUpdate" in value:
        update = value["artifactUpdate"]
        item = update["artifact"]
        mapped = artifact(item, _index(item, indexes))
        mapped.update({k: update[k] for k in ("append", "lastChunk") if k in update})
        event = {"id": client_id, "artifact": mapped, "final": False}
        if "metadata" in update:
            event["metadata"] = update["metadata"]
        return [event]
    return []  # a Message: the service always answers with a Task


# --- errors -----------------------------------------------------------------------------------

_NAMES_V10: Final[Mapping[str, str]] = {target: name for name, target in METHODS.items()}
# 1.0 params paths that are elsewhere in a 0.1 request
_MOVED: Final[Mapping[str, str]] = {
    "params.message.contextId": "params.sessionId",
    "params.configuration.historyLength": "params.historyLength",
}


class Words(v03.Words):
    """The 0.1 words of a message: 0.1 method names, states and params paths, and the client's
    task id for the server's (`server_id`, once the id map knows it)."""

    def __init__(self, client_id: str | None = None, server_id: str | None = None) -> None:
        self.client_id = client_id
        self.server_id = server_id

    def method(self, name: str) -> str:
        return _NAMES_V10.get(name, name)

    def state(self, value: str) -> str:
        return state(value)

    def task(self, task_id: str) -> str:
        if self.client_id is not None and task_id == self.server_id:
            return self.client_id
        return task_id

    def field(self, path: str) -> str:
        return _MOVED.get(path) or super().field(path)
