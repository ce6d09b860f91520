"""A2A 1.0 wire types the service sends (ProtoJSON: camelCase, enums by name, defaults left out).

Outbound types are lenient about what they hold and omit unset members, as ProtoJSON does.
Inbound request parameters live in `params.py` and are strict.
"""

from __future__ import annotations

from typing import Any, Final, Literal

import msgspec
from msgspec import UNSET, UnsetType

from realtime.timestamps import timestamp as timestamp  # the wire's date-time format

TaskState = Literal[
    "TASK_STATE_SUBMITTED",
    "TASK_STATE_WORKING",
    "TASK_STATE_COMPLETED",
    "TASK_STATE_FAILED",
    "TASK_STATE_CANCELED",
    "TASK_STATE_INPUT_REQUIRED",
    "TASK_STATE_REJECTED",
    "TASK_STATE_AUTH_REQUIRED",
]
Role = Literal["ROLE_USER", "ROLE_AGENT"]

REALTIME_EXTENSION: Final = "urn:aim:a2a:realtime:v1"


class Wire(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True, rename="camel"):
    """Base of outbound wire objects."""


class Part(Wire, frozen=True):
    text: str | UnsetType = UNSET
    raw: str | UnsetType = UNSET
    url: str | UnsetType = UNSET
    data: Any | UnsetType = UNSET
    media_type: str | UnsetType = UNSET
    filename: str | UnsetType = UNSET
    metadata: Any | UnsetType = UNSET


class Message(Wire, frozen=True):
    message_id: str
    role: Role
    parts: list[Part]
    context_id: str | UnsetType = UNSET
    task_id: str | UnsetType = UNSET
    metadata: Any | UnsetType = UNSET
    extensions: list[str] | UnsetType = UNSET
    reference_task_ids: list[str] | UnsetType = UNSET


class TaskStatus(Wire, frozen=True):
    state: TaskState
    timestamp: str
    message: Message | UnsetType = UNSET


class Artifact(Wire, frozen=True):
    artifact_id: str
    parts: list[Part]
    name: str | UnsetType = UNSET
    description: str | UnsetType = UNSET
    metadata: Any | UnsetType = UNSET
    extensions: list[str] | UnsetType = UNSET


class Task(Wire, frozen=True):
    id: str
    context_id: str
    status: TaskStatus
    artifacts: list[Artifact] | UnsetType = UNSET
    history: list[Message] | UnsetType = UNSET
    metadata: dict[str, Any] | UnsetType = UNSET


class SendMessageResult(Wire, frozen=True):
    task: Task


class ListTasksResult(Wire, frozen=True):
    # required members: always emitted, `nextPageToken` as "" on the last page
    tasks: list[Task]
    next_page_token: str
    page_size: int
    total_size: int


TERMINAL_STATES: Final[frozenset[str]] = frozenset(
    {"TASK_STATE_COMPLETED", "TASK_STATE_FAILED", "TASK_STATE_CANCELED", "TASK_STATE_REJECTED"}
)
