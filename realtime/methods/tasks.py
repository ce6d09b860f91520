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
from realtime.errors import LimitExceeded, TaskNotFound, invalid_params
from realtime.methods.context import Call, TaskDeps, timestamp
from realtime.settings import Settings
from realtime.store.indexes import Indexed, TaskInfo
from realtime.store.records import TaskRecord
from state_machines import Accepted
from state_machines import task as lifecycle

DEFAULT_PAGE_SIZE: Final = 50
# a REJECTED task keeps the message it refused as sent up to this size (its parts, metadata and
# extensions), else only the first EXCERPT_CHARS characters of its text (decision 171)
KEPT_MESSAGE_BYTES: Final = 2048
EXCERPT_CHARS: Final = 256
_ENCODER: Final = msgspec.json.Encoder()

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


async def load_own_task(deps: TaskDeps, owner: str, task_id: str) -> TaskRecord:
    """The caller's task, or -32001 exactly as for an unknown id."""
    record = await deps.reads.get(task_id)
    if record is None or record.owner != owner:
        raise TaskNotFound(task_id)
    return record


def kept_message(message: p.Message, *, task_id: str, context_id: str) -> tuple[wire.Message, bool]:
    """The message as a REJECTED task's history keeps it, and whether it was cut: as sent when
    its parts and metadata are small, else an excerpt of its text (the task is kept, the
    message it refused need not be)."""
    kept = user_message(message, task_id=task_id, context_id=context_id)
    size = sum(p.part_bytes(part) for part in message.parts)
    if message.metadata is not UNSET:
        size += len(_ENCODER.encode(message.metadata))
    if message.extensions is not UNSET:
        size += sum(len(uri) for uri in message.extensions)
    if size <= KEPT_MESSAGE_BYTES:
        return kept, False
    text = "".join(part.text for part in message.parts if isinstance(part.text, str))
    excerpt = text[:EXCERPT_CHARS] if text else "[no text]"
    return msgspec.structs.replace(
        kept, parts=[wire.Part(text=excerpt)], metadata=UNSET, extensions=UNSET
    ), True


async def send_message_rejected(
    deps: TaskDeps,
    call: Call[p.SendParams],
    *,
    reason: dict[str, Any] | None = None,
    text: str = REALTIME_ONLY_TEXT,
) -> wire.SendMessageResult:
    """A REJECTED task explaining why (profile §3): by default, a message without a
    session.create part (`realtime_only`). It is kept for AIM_REJECTED_TASK_TTL_S, with the
    message (or an excerpt of a large one) in its history, and counts towards the tasks the
    principal may hold."""
    params = call.params
    settings = deps.settings
    owner = call.principal.key
    config = params.configuration
    history_length = config.history_length if config is not UNSET else None
    task_id = deps.new_id()
    now_ms = deps.now_ms()
    context_id = params.message.context_id or deps.new_id()
    outcome = lifecycle.created("reject")
    if not isinstance(outcome, Accepted):  # (SUBMITTED, reject) is in the table
        raise RuntimeError(f"task lifecycle refused a new rejected task: {outcome}")
    state = outcome.state.state
    claim = await deps.ledger.claim_message(
        owner, params.message.message_id, task_id, TaskInfo(state, context_id), now_ms=now_ms
    )
    if claim.status == "limit":
        raise tasks_limit(settings, claim.expires_ms, now_ms)
    if claim.status == "earlier":
        assert claim.task_id is not None  # noqa: S101 - an earlier claim names its task
        earlier = await deps.reads.get(claim.task_id)
        if earlier is not None:
            return wire.SendMessageResult(task=view(earlier.task, history_length))
        task_id = claim.task_id  # the first attempt stopped before writing its task: finish it
    history, cut = kept_message(params.message, task_id=task_id, context_id=context_id)
    if cut:
        text += (
            f" Your message was not kept: the task's history holds only the first "
            f"{EXCERPT_CHARS} characters of its text."
        )
    status_message = wire.Message(
        message_id=deps.new_id(),
        role="ROLE_AGENT",
        parts=[wire.Part(text=text), wire.Part(data=reason or {"reason": "realtime_only"})],
        context_id=context_id,
        task_id=task_id,
    )
    task = wire.Task(
        id=task_id,
        context_id=context_id,
        status=wire.TaskStatus(state=state, timestamp=timestamp(now_ms), message=status_message),
        history=[history],
    )
    record = TaskRecord(
        owner=owner,
        version=outcome.state.version,
        created_at=timestamp(now_ms),
        status_ms=now_ms,
        task=task,
    )
    await deps.ledger.put_rejected(record)
    return wire.SendMessageResult(task=view(task, history_length))


def tasks_limit(settings: Settings, expires_ms: int | None, now_ms: int) -> LimitExceeded:
    """-31011: the principal holds as many tasks as it may (until the first of them expires)."""
    limit = settings.max_tasks_per_principal
    wait_s = max(1, -(-(expires_ms - now_ms) // 1000)) if expires_ms is not None else None
    return LimitExceeded(
        f"You hold {limit} tasks, the most one principal may hold (AIM_MAX_TASKS_PER_PRINCIPAL); "
        + (
            f"the oldest expires in {wait_s} s. "
            if wait_s is not None
            else "none of them expires soon. "
        )
        + "Nothing was stored.",
        limit="tasks_per_principal",
        retry_after=wait_s,
    )


async def get_task(deps: TaskDeps, call: Call[p.TaskParams]) -> wire.Task:
    record = await load_own_task(deps, call.principal.key, call.params.id)
    return view(record.task, call.params.history_length)


class _Cursor(msgspec.Struct, array_like=True, forbid_unknown_fields=True):
    status_ms: int
    task_id: str


_CURSOR_DECODER: Final = msgspec.json.Decoder(_Cursor)


def _encode_cursor(entry: Indexed) -> str:
    raw = msgspec.json.encode(_Cursor(entry.status_ms, entry.task_id))
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


async def list_tasks(deps: TaskDeps, call: Call[p.ListParams]) -> wire.ListTasksResult:
    """The caller's tasks, newest status first (ties: task id descending), cursor-paged. The
    filters and the order are applied to the owner's task index; only the page's tasks are
    read."""
    params = call.params
    settings = deps.settings
    page_size = params.page_size or DEFAULT_PAGE_SIZE
    cursor = _decode_cursor(params.page_token) if params.page_token else None
    owner = call.principal.key
    entries = await deps.reads.index(
        owner,
        now_ms=deps.now_ms(),
        ttl_s=settings.task_ttl_s,
        limit=settings.max_tasks_per_principal,
    )
    after_ms = (
        int(params.status_timestamp_after.timestamp() * 1000)
        if params.status_timestamp_after is not None
        else None
    )
    matches = [
        entry
        for entry in entries
        if (params.context_id is None or entry.info.context_id == params.context_id)
        and (params.status is None or entry.info.state == params.status)
        and (after_ms is None or entry.status_ms >= after_ms)
    ]
    start = 0
    if cursor is not None:
        position = (cursor.status_ms, cursor.task_id)
        start = next(
            (i for i, entry in enumerate(matches) if (entry.status_ms, entry.task_id) < position),
            len(matches),
        )
    page = matches[start : start + page_size]
    more = start + page_size < len(matches)
    records = await deps.reads.tasks(owner, [entry.task_id for entry in page])
    return wire.ListTasksResult(
        tasks=[
            view(record.task, params.history_length, artifacts=params.include_artifacts)
            for record in records
        ],
        next_page_token=_encode_cursor(page[-1]) if more and page else "",
        page_size=page_size,
        total_size=len(matches),
    )
