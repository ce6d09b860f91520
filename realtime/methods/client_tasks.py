"""The task ids A2A 0.1 clients choose, bound to the server's tasks (decisions 111, 116).

Per principal, each 0.1 id has a record `{digest, taskId?}` (`TaskStore.claim_client_task`),
created before the first SendMessage and bound to its task after; the derived messageId
(`a2a/v01.message_id`) makes a repeated request replay that task. A known id with another
message is -32004; an id without a bound task is -32001 for reads. Nothing here runs before the
call's params are valid.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Awaitable, Callable
from typing import Any, Final, NoReturn

import msgspec
import rfc8785

from realtime.a2a import v01
from realtime.errors import (
    PushNotificationNotSupported,
    ServiceError,
    TaskNotFound,
    UnsupportedOperation,
    task_state,
)
from realtime.methods.context import Call, TaskDeps
from realtime.methods.streaming import TaskStream
from realtime.store import keys

# the method's handler, bound to its family's dependencies (`rpc/registry`)
Handler = Callable[[Call[Any]], Awaitable[Any]]

_SORTED: Final = msgspec.json.Encoder(order="sorted")


@dataclasses.dataclass(slots=True)
class TaskIds:
    """The task a 0.1 call is about: the client's id, and the server's once it is known."""

    client: str | None = None
    server: str | None = None


def digest(params: v01.SendParams) -> str:
    """What makes a tasks/send a retry of an earlier one: sha256 over the RFC 8785 JSON of its
    sessionId, message, pushNotification and metadata (null is absent; ignored members are not
    part of it). Values JCS cannot write (integers beyond 2^53) fall back to sorted JSON."""
    sent = {
        "sessionId": params.session_id,
        "message": params.message,
        "pushNotification": params.push_notification,
        "metadata": params.metadata,
    }
    value = msgspec.to_builtins({k: v for k, v in sent.items() if v is not None})
    try:
        canonical = rfc8785.dumps(value)
    except rfc8785.CanonicalizationError:
        canonical = b"sorted:" + _SORTED.encode(value)
    return "sha256:" + hashlib.sha256(canonical).hexdigest()


async def send(
    deps: TaskDeps,
    handler: Handler,
    call: Call[Any],
    request: v01.SendParams,
    ids: TaskIds,
) -> Any:
    """tasks/send, tasks/sendSubscribe: `handler` (SendMessage's or SendStreamingMessage's)
    through the id map; `ids.server` is set once the task is known."""
    reads, ledger = deps.reads, deps.ledger
    owner = call.principal.key
    request_digest = digest(request)
    ttl = deps.settings.task_ttl_s + keys.IDEMPOTENCY_GRACE_S  # the messageId's
    record = await ledger.claim_client_task(owner, request.id, request_digest, ttl_s=ttl)
    if record is not None and record.d != request_digest:
        raise await follow_up(deps, owner, request.id, record.t)
    try:
        result = await handler(call)
    except ServiceError:
        # a task may exist all the same (-31012 while provisioning goes on): bind it; else
        # the id is free again for a corrected request
        found = await reads.message_task(owner, v01.message_id(request.id))
        if found is not None:
            ids.server = found  # its error may name it: it is the 0.1 id's task now
            await ledger.bind_client_task(owner, request.id, request_digest, found, ttl_s=ttl)
        elif record is None or record.t is None:
            await ledger.release_client_task(owner, request.id, request_digest)
        raise
    task_id: str = result.task_id if isinstance(result, TaskStream) else result.task.id
    ids.server = task_id
    if record is None or record.t != task_id:
        await ledger.bind_client_task(owner, request.id, request_digest, task_id, ttl_s=ttl)
    return result


async def follow_up(
    deps: TaskDeps, owner: str, client_id: str, task_id: str | None
) -> UnsupportedOperation:
    """-32004 for a known 0.1 id with a new message (decision 111): nothing is stored."""
    reads = deps.reads
    task_id = task_id or await reads.message_task(owner, v01.message_id(client_id))
    state = "TASK_STATE_SUBMITTED"  # the first request for this id is still under way
    if task_id is not None:
        record = await reads.get(task_id)
        mine = record is not None and record.owner == owner
        state = record.task.status.state if record and mine else "TASK_STATE_UNSPECIFIED"
    return UnsupportedOperation(
        f"Task {client_id} exists already and A2A 0.1 cannot add a message to it (this "
        "message differs from the one that created it). Start a new task with a new `id` "
        "(the same `sessionId` keeps the conversation), or answer the task's requirement "
        "over A2A 1.0 with ContinueTask or aim.realtime.SendInteraction.",
        details={"taskId": client_id, "state": task_state(state)},
    )


async def read(
    deps: TaskDeps, handler: Handler, call: Call[Any], request: v01.TaskId, ids: TaskIds
) -> Any:
    """tasks/get, tasks/cancel, tasks/resubscribe: `handler` for the task the 0.1 id is bound
    to (the call's params name a placeholder until then)."""
    record = await deps.reads.client_task(call.principal.key, request.id)
    if record is None or record.t is None:
        raise TaskNotFound(request.id)
    ids.server = record.t
    params = msgspec.structs.replace(call.params, id=record.t)
    return await handler(dataclasses.replace(call, params=params))


async def push_notifications(call: Call[Any]) -> NoReturn:
    """tasks/pushNotification/set and /get (their params unread): this agent sends none."""
    raise PushNotificationNotSupported(
        f"{call.method}: this agent sends no push notifications (its card says "
        "pushNotifications: false); follow a task with tasks/sendSubscribe or "
        "tasks/resubscribe, or read it with tasks/get.",
        details={"method": call.method},
    )
