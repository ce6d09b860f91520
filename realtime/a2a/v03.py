"""A2A 0.3 adapter: 0.3 requests become 1.0 params for the same handlers; 1.0 results, stream
events and errors go back in 0.3 shapes (`kind` discriminators, kebab-case states, bare results).

Served 0.3 methods (no `A2A-Version` header, or `0.3`): message/send, message/stream, tasks/get,
tasks/cancel, tasks/resubscribe. Mapping per the A2A 1.0 spec, appendix A. 0.3 params are
validated strictly here (paths as the 0.3 client wrote them), then the 1.0 decoder checks the
translated params as for any 1.0 call. The 0.3 names of the methods this agent does not offer
(push notification configs, the extended card) map onto their 1.0 names too, so they get A2A's
error for them in the 0.3 form; their params are never translated (`MethodSpec.reads_params`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Annotated, Any, Final, Literal

import msgspec
from msgspec import UNSET, Meta, UnsetType

from realtime import errors
from realtime.a2a.modes import file_part
from realtime.a2a.params import validation_error
from realtime.a2a.scalars import check_file_content

VERSION: Final = "0.3"
METHODS: Final[Mapping[str, str]] = {
    "message/send": "SendMessage",
    "message/stream": "SendStreamingMessage",
    "tasks/get": "GetTask",
    "tasks/cancel": "CancelTask",
    "tasks/resubscribe": "SubscribeToTask",
    # not offered (-32003 / -32004), named so that a 0.3 client gets A2A's error, not -32601
    "tasks/pushNotificationConfig/set": "CreateTaskPushNotificationConfig",
    "tasks/pushNotificationConfig/get": "GetTaskPushNotificationConfig",
    "tasks/pushNotificationConfig/list": "ListTaskPushNotificationConfigs",
    "tasks/pushNotificationConfig/delete": "DeleteTaskPushNotificationConfig",
    "agent/getAuthenticatedExtendedCard": "GetExtendedAgentCard",
}
TERMINAL: Final = frozenset({"completed", "canceled", "failed", "rejected"})


def is_v03(version: str) -> bool:
    """A missing or empty A2A-Version means 0.3 (A2A §3.6); patch numbers are ignored."""
    value = version.strip()
    return not value or ".".join(value.split(".")[:2]) == VERSION


# --- 0.3 requests (strict: unknown members are refused, as for 1.0) ------------------------------


class _In(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True, rename="camel"):
    pass


class FileContent(_In, frozen=True):
    uri: str | UnsetType = UNSET
    bytes_: str | UnsetType = msgspec.field(default=UNSET, name="bytes")
    mime_type: str | None = None
    name: str | None = None

    def __post_init__(self) -> None:
        check_file_content(
            None if self.uri is UNSET else self.uri,
            None if self.bytes_ is UNSET else self.bytes_,
        )


class TextPart(_In, frozen=True, tag_field="kind", tag="text"):
    text: str
    metadata: dict[str, Any] | None = None


class DataPart(_In, frozen=True, tag_field="kind", tag="data"):
    data: dict[str, Any]
    metadata: dict[str, Any] | None = None


class FilePart(_In, frozen=True, tag_field="kind", tag="file"):
    file: FileContent
    metadata: dict[str, Any] | None = None


Part = TextPart | DataPart | FilePart


class Message(_In, frozen=True):
    message_id: str
    role: Literal["user", "agent"]
    parts: Annotated[list[Part], Meta(min_length=1)]
    kind: Literal["message"] = "message"
    context_id: str | None = None
    task_id: str | None = None
    metadata: dict[str, Any] | None = None
    extensions: list[str] | None = None
    reference_task_ids: list[str] | None = None


class Configuration(_In, frozen=True):
    accepted_output_modes: list[str] | None = None
    history_length: int | None = None
    blocking: bool | None = None
    push_notification_config: Any = None


class SendParams(_In, frozen=True):
    message: Message
    configuration: Configuration | None = None
    metadata: dict[str, Any] | None = None


class TaskQuery(_In, frozen=True):
    id: str
    history_length: int | None = None
    metadata: dict[str, Any] | None = None


class TaskId(_In, frozen=True):
    id: str
    metadata: dict[str, Any] | None = None


_PARAMS: Final[Mapping[str, type[_In]]] = {
    "message/send": SendParams,
    "message/stream": SendParams,
    "tasks/get": TaskQuery,
    "tasks/cancel": TaskId,
    "tasks/resubscribe": TaskId,
}
_DECODERS: Final[Mapping[type[_In], Callable[[bytes], Any]]] = {
    cls: msgspec.json.Decoder(cls).decode for cls in set(_PARAMS.values())
}
_ENCODER: Final = msgspec.json.Encoder()


def _part(part: Part) -> dict[str, Any]:
    out: dict[str, Any]
    if isinstance(part, TextPart):
        out = {"text": part.text}
    elif isinstance(part, DataPart):
        # 0.3 data parts are JSON objects by definition
        out = {"data": part.data, "mediaType": "application/json"}
    else:
        file = part.file
        out = file_part(
            file.uri if file.uri is not UNSET else None,
            file.bytes_ if file.bytes_ is not UNSET else None,
            file.mime_type,
            file.name,
        )
    if part.metadata is not None:
        out["metadata"] = part.metadata
    return out


def _message(message: Message) -> dict[str, Any]:
    out: dict[str, Any] = {
        "messageId": message.message_id,
        "role": "ROLE_USER" if message.role == "user" else "ROLE_AGENT",
        "parts": [_part(part) for part in message.parts],
    }
    optional = {
        "contextId": message.context_id,
        "taskId": message.task_id,
        "metadata": message.metadata,
        "extensions": message.extensions,
        "referenceTaskIds": message.reference_task_ids,
    }
    out.update({name: value for name, value in optional.items() if value is not None})
    return out


def to_v10_params(method: str, raw: bytes) -> bytes:
    """The 1.0 params JSON for a 0.3 request's params, or -32602 naming the 0.3 path."""
    try:
        params = _DECODERS[_PARAMS[method]](raw)
    except msgspec.ValidationError as exc:
        raise validation_error(exc, root="params") from None
    out: dict[str, Any]
    if isinstance(params, SendParams):
        out = {"message": _message(params.message)}
        config = params.configuration
        if config is not None:
            translated: dict[str, Any] = {
                "acceptedOutputModes": config.accepted_output_modes,
                "historyLength": config.history_length,
                "returnImmediately": None if config.blocking is None else not config.blocking,
                "taskPushNotificationConfig": config.push_notification_config,
            }
            out["configuration"] = {k: v for k, v in translated.items() if v is not None}
        if params.metadata is not None:
            out["metadata"] = params.metadata
    elif isinstance(params, TaskQuery):
        out = {"id": params.id}
        if params.history_length is not None:
            out["historyLength"] = params.history_length
    else:
        assert isinstance(params, TaskId)  # noqa: S101 - the table above has three types
        out = {"id": params.id}
    return _ENCODER.encode(out)


# --- 1.0 results → 0.3 ----------------------------------------------------------------------------


def state(value: str) -> str:
    """TASK_STATE_INPUT_REQUIRED → input-required; UNSPECIFIED → unknown."""
    name = value.removeprefix("TASK_STATE_").lower().replace("_", "-")
    return "unknown" if name == "unspecified" else name


def part(value: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any]
    if "text" in value:
        out = {"kind": "text", "text": value["text"]}
    elif "data" in value:
        data = value["data"]
        out = {"kind": "data", "data": data if isinstance(data, dict) else {"value": data}}
    else:
        file: dict[str, Any] = (
            {"uri": value["url"]} if "url" in value else {"bytes": value.get("raw", "")}
        )
        if "mediaType" in value:
            file["mimeType"] = value["mediaType"]
        if "filename" in value:
            file["name"] = value["filename"]
        out = {"kind": "file", "file": file}
    if "metadata" in value:
        out["metadata"] = value["metadata"]
    return out


def message(value: Mapping[str, Any]) -> dict[str, Any]:
    out = {
        "kind": "message",
        **{k: v for k, v in value.items() if k not in ("role", "parts")},
        "role": "user" if value.get("role") == "ROLE_USER" else "agent",
        "parts": [part(item) for item in value.get("parts", ())],
    }
    return out


def status(value: Mapping[str, Any]) -> dict[str, Any]:
    out = {**value, "state": state(value["state"])}
    if "message" in value:
        out["message"] = message(value["message"])
    return out


def task(value: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {"kind": "task", **value, "status": status(value["status"])}
    if "history" in value:
        out["history"] = [message(item) for item in value["history"]]
    if "artifacts" in value:
        out["artifacts"] = [
            {**artifact, "parts": [part(item) for item in artifact.get("parts", ())]}
            for artifact in value["artifacts"]
        ]
    return out


def result(method: str, value: Any) -> Any:
    """A 1.0 unary result (as builtins) in its 0.3 shape: Task and Message come bare."""
    if method == "SendMessage":
        if "task" in value:
            return task(value["task"])
        return message(value["message"])
    return task(value)


def stream_result(value: Mapping[str, Any]) -> dict[str, Any]:
    """A 1.0 StreamResponse as the 0.3 event: Task, Message or a status-update with `final`."""
    if "task" in value:
        return task(value["task"])
    if "message" in value:
        return message(value["message"])
    update = value["statusUpdate"]
    mapped = status(update["status"])
    return {
        "kind": "status-update",
        **{k: v for k, v in update.items() if k != "status"},
        "status": mapped,
        "final": mapped["state"] in TERMINAL,
    }


_NAMES_V10: Final[Mapping[str, str]] = {target: name for name, target in METHODS.items()}
# a 1.0 file part's members, and where the 0.3 (and 0.1) part keeps them
FILE_MEMBERS: Final[Mapping[str, str]] = {
    "raw": "file.bytes",
    "url": "file.uri",
    "mediaType": "file.mimeType",
    "filename": "file.name",
}
_PARTS: Final = "params.message.parts["


class Words(errors.Words):
    """The 0.3 words of a message: 0.3 method names and states, a file part's 0.3 members."""

    def method(self, name: str) -> str:
        return _NAMES_V10.get(name, name)

    def state(self, value: str) -> str:
        return state(value)

    def field(self, path: str) -> str:
        head, _, member = path.rpartition(".")
        index = head.removeprefix(_PARTS).removesuffix("]")
        if member in FILE_MEMBERS and head.startswith(_PARTS) and index.isdigit():
            return f"{head}.{FILE_MEMBERS[member]}"
        return path


WORDS: Final = Words()


def error(value: Mapping[str, Any]) -> dict[str, Any]:
    """A 1.0 error object (said in a generation's words) in the 0.3 form: `data` is a plain
    object (0.3 had no ErrorInfo array) with the ErrorInfo's members and the BadRequest's field
    violations."""
    info, *rest = value["data"]
    data: dict[str, Any] = {"reason": info["reason"], "domain": info["domain"]}
    if info["metadata"]:
        data["metadata"] = info["metadata"]
    violations = [v for extra in rest for v in extra.get("fieldViolations", ())]
    if violations:
        data["fieldViolations"] = violations
    return {"code": value["code"], "message": value["message"], "data": data}
