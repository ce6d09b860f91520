"""A2A task methods: SendMessage without a realtime part, GetTask, ListTasks (CancelTask is in
`sessions`: only a realtime task can be canceled)."""

from __future__ import annotations

import base64
import binascii
from typing import Any, Final

import msgspec
from msgspec import UNSET

from realtime.a2a import params as p
from realtime.a2a import types as wire
from realtime.errors import TaskNotFound, invalid_params
from realtime.methods.context import Call, Services, timestamp
from realtime.store.records import TaskRecord
from state_machines import Accepted
from state_machines import task as lifecycle

DEFAULT_PAGE_SIZE: Final = 50

REALTIME_ONLY_TEXT: Final = (
    "This agent only starts realtime voice/video sessions and does not chat in text. "
    "Send a message with a data part (mediaType application/json) whose data has "
    '"operation": "session.create", and activate the extension urn:aim:a2a:realtime:v1 '
    "in the A2A-Extensions header."
)


def to_wire_part(part: p.Part) -> wire.Part:
    return wire.Part(
        text=part.text,
        raw=part.raw,
        url=part.url,
        data=part.data,
        media_type=part.media_type,
        filename=part.filename,
        metadata=part.metadata,
    )


def user_message(message: p.Message, *, task_id: str, context_id: str) -> wire.Message:
    """The caller's message as it joins the task history (ids filled in by the server)."""
    return wire.Message(
        message_id=message.message_id,
        role="ROLE_USER",
        parts=[to_wire_part(part) for part in message.parts],
        context_id=context_id,
        task_id=task_id,
        metadata=message.metadata,
        extensions=message.extensions,
    )


def view(task: wire.Task, history_length: int | None, *, artifacts: bool = True) -> wire.Task:
    """The task as a caller asked to see it (historyLength, artifacts)."""
    history = task.history
    if history_length is not None and history is not UNSET:
        history = history[max(0, len(history) - history_length) :] if history_length else UNSET
        if history is not UNSET and not history:
            history = UNSET
    return msgspec.structs.replace(
        task, history=history, artifacts=task.artifacts if artifacts else UNSET
    )


async def load_own_task(services: Services, owner: str, task_id: str) -> TaskRecord:
    """The caller's task, or -32001 exactly as for an unknown id."""
    record = await services.task_store.get(task_id)
    if record is None or record.owner != owner:
        raise TaskNotFound(task_id)
    return record


async def send_message_rejected(
    services: Services,
    call: Call[p.SendParams],
    *,
    reason: dict[str, Any] | None = None,
    text: str = REALTIME_ONLY_TEXT,
) -> wire.SendMessageResult:
    """A persisted REJECTED task explaining why (profile §3): by default, a message without a
    session.create part (`realtime_only`)."""
    params = call.params
    owner = call.principal.key
    config = params.configuration
    history_length = config.history_length if config is not UNSET else None
    task_id = services.new_id()
    now_ms = services.now_ms()
    ttl = services.settings.task_ttl_s
    earlier = await services.task_store.claim_message(
        owner, params.message.message_id, task_id, score_ms=now_ms, ttl_s=ttl
    )
    if earlier is not None:
        record = await services.task_store.get(earlier)
        if record is not None:
            return wire.SendMessageResult(task=view(record.task, history_length))
        task_id = earlier  # the first attempt stopped before writing its task: finish it
    context_id = params.message.context_id or services.new_id()
    outcome = lifecycle.created("reject")
    if not isinstance(outcome, Accepted):  # (SUBMITTED, reject) is in the table
        raise RuntimeError(f"task lifecycle refused a new rejected task: {outcome}")
    status_message = wire.Message(
        message_id=services.new_id(),
        role="ROLE_AGENT",
        parts=[wire.Part(text=text), wire.Part(data=reason or {"reason": "realtime_only"})],
        context_id=context_id,
        task_id=task_id,
    )
    task = wire.Task(
        id=task_id,
        context_id=context_id,
        status=wire.TaskStatus(
            state=outcome.state.state, timestamp=timestamp(now_ms), message=status_message
        ),
        history=[user_message(params.message, task_id=task_id, context_id=context_id)],
    )
    record = TaskRecord(
        owner=owner,
        version=outcome.state.version,
        created_at=timestamp(now_ms),
        status_ms=now_ms,
        task=task,
    )
    await services.task_store.put(record, ttl_s=ttl)
    return wire.SendMessageResult(task=view(task, history_length))


async def get_task(services: Services, call: Call[p.TaskParams]) -> wire.Task:
    record = await load_own_task(services, call.principal.key, call.params.id)
    return view(record.task, call.params.history_length)


class _Cursor(msgspec.Struct, array_like=True, forbid_unknown_fields=True):
    status_ms: int
    task_id: str


_CURSOR_DECODER: Final = msgspec.json.Decoder(_Cursor)


def _encode_cursor(record: TaskRecord) -> str:
    raw = msgspec.json.encode(_Cursor(record.status_ms, record.task.id))
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _decode_cursor(token: str) -> _Cursor:
    try:
        raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
        return _CURSOR_DECODER.decode(raw)
    except (binascii.Error, ValueError, msgspec.DecodeError):
        raise invalid_params(
            "params.pageToken",
            "not a page token this server issued; pass the nextPageToken of the previous page",
        ) from None


def _sort_key(record: TaskRecord) -> tuple[int, str]:
    return (record.status_ms, record.task.id)


async def list_tasks(services: Services, call: Call[p.ListParams]) -> wire.ListTasksResult:
    """The caller's tasks, newest status first (ties: task id descending), cursor-paged."""
    params = call.params
    page_size = params.page_size or DEFAULT_PAGE_SIZE
    cursor = _decode_cursor(params.page_token) if params.page_token else None
    oldest_ms = services.now_ms() - services.settings.task_ttl_s * 1000
    records = await services.task_store.owner_tasks(call.principal.key, newer_than_ms=oldest_ms)
    after_ms = (
        int(params.status_timestamp_after.timestamp() * 1000)
        if params.status_timestamp_after is not None
        else None
    )
    matches = sorted(
        (
            record
            for record in records
            if (params.context_id is None or record.task.context_id == params.context_id)
            and (params.status is None or record.task.status.state == params.status)
            and (after_ms is None or record.status_ms >= after_ms)
        ),
        key=_sort_key,
        reverse=True,
    )
    start = 0
    if cursor is not None:
        position = (cursor.status_ms, cursor.task_id)
        start = next(
            (i for i, record in enumerate(matches) if _sort_key(record) < position), len(matches)
        )
    page = matches[start : start + page_size]
    more = start + page_size < len(matches)
    return wire.ListTasksResult(
        tasks=[
            view(record.task, params.history_length, artifacts=params.include_artifacts)
            for record in page
        ],
        next_page_token=_encode_cursor(page[-1]) if more and page else "",
        page_size=page_size,
        total_size=len(matches),
    )
