"""Tasks: read one, list an owner's, and the write of a task that has no session (SendMessage
refused: a REJECTED task). A realtime session's task is written by the session's commit.

Atomicity: the owner-side step of SendMessage (claim the message id, index the task) is one Lua
script on the owner's slot; the task itself is one SET on the task's slot. The index is written
first and read tolerantly (an id whose task is missing is skipped), so a crash between the two
steps leaves nothing a retry of the same message does not repair.

The A2A 0.1 id map (`ClientTask` records, one key per principal and client task id) lives here
too: it is one more owner-side index of tasks, beside the messageId claims it relies on.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

import msgspec

from realtime.store import keys
from realtime.store.records import TASK_ENCODER, TaskRecord, decode_task
from realtime.store.redis_client import RedisClient, text, translated_errors


class ClientTask(msgspec.Struct, frozen=True, omit_defaults=True):
    """An A2A 0.1 task id's record: the digest of the request that created it and, once that
    request has a task, the task's id."""

    d: str  # the creating request's digest
    t: str | None = None  # the server's task id: None while the first request is under way


_CLIENT_TASK: Final = msgspec.json.Decoder(ClientTask)
_ENCODER: Final = msgspec.json.Encoder()
_CLAIM_ATTEMPTS: Final = 3


class TaskStore:
    """The door to stored tasks."""

    def __init__(self, redis: RedisClient) -> None:
        self._client = redis.client
        self._claim = redis.scripts.claim_message
        self._compare_and_delete = redis.scripts.release_lease

    async def get(self, task_id: str) -> TaskRecord | None:
        """The task (one round trip), whoever owns it; None when there is none."""
        async with translated_errors():
            raw = await self._client.get(keys.task_key(task_id))
        return None if raw is None else decode_task(raw)

    async def claim_message(
        self, owner: str, message_id: str, task_id: str, *, score_ms: int, ttl_s: int
    ) -> str | None:
        """Bind `message_id` to `task_id` and index it; the earlier task id when already bound."""
        async with translated_errors():
            existing = await self._claim(
                keys=[keys.owner_message_key(owner, message_id), keys.owner_tasks_key(owner)],
                args=[task_id, ttl_s + keys.IDEMPOTENCY_GRACE_S, score_ms],
            )
        return None if existing is None else text(existing)

    async def put(self, record: TaskRecord, *, ttl_s: int) -> None:
        """Write the task (its own slot); `claim_message` has indexed it already."""
        record.check_writable()
        async with translated_errors():
            await self._client.set(
                keys.task_key(record.task.id), TASK_ENCODER.encode(record), ex=ttl_s
            )

    async def owner_tasks(self, owner: str, *, newer_than_ms: int) -> list[TaskRecord]:
        """Every live task of `owner` (index entries older than the retention are pruned)."""
        index = keys.owner_tasks_key(owner)
        async with translated_errors():
            await self._client.zremrangebyscore(index, "-inf", f"({newer_than_ms}")
            # the newest LIST_LIMIT by status time: bounds the memory and time of one ListTasks
            ids: Sequence[bytes] = await self._client.zrevrange(index, 0, keys.LIST_LIMIT - 1)
            if not ids:
                return []
            pipe = self._client.pipeline(transaction=False)
            for task_id in ids:
                pipe.get(keys.task_key(text(task_id)))
            raws = await pipe.execute()
        records = [decode_task(raw) for raw in raws if raw is not None]
        return [record for record in records if record.owner == owner]

    async def message_task(self, owner: str, message_id: str) -> str | None:
        """The task `message_id` created for `owner` (its SendMessage claim), if any."""
        async with translated_errors():
            raw = await self._client.get(keys.owner_message_key(owner, message_id))
        return None if raw is None else text(raw).split(" ", 1)[0]

    async def client_task(self, owner: str, client_task_id: str) -> ClientTask | None:
        """The record of an A2A 0.1 task id of `owner`."""
        async with translated_errors():
            raw = await self._client.get(keys.owner_client_task_key(owner, client_task_id))
        return None if raw is None else _CLIENT_TASK.decode(raw)

    async def claim_client_task(
        self, owner: str, client_task_id: str, digest: str, *, ttl_s: int
    ) -> ClientTask | None:
        """Create the record `{digest}` of a new 0.1 task id (None), or return the one that is
        there: SET NX, so of concurrent first requests exactly one creates it."""
        key = keys.owner_client_task_key(owner, client_task_id)
        value = _ENCODER.encode(ClientTask(digest))
        async with translated_errors():
            for _ in range(_CLAIM_ATTEMPTS):
                if await self._client.set(key, value, nx=True, ex=ttl_s):
                    return None
                raw = await self._client.get(key)
                if raw is not None:  # else released in between: claim again
                    return _CLIENT_TASK.decode(raw)
        return ClientTask(digest)  # released and re-claimed three times over: a retry of ours

    async def bind_client_task(
        self, owner: str, client_task_id: str, digest: str, task_id: str, *, ttl_s: int
    ) -> None:
        """Point a 0.1 task id at the task its request created."""
        key = keys.owner_client_task_key(owner, client_task_id)
        async with translated_errors():
            await self._client.set(key, _ENCODER.encode(ClientTask(digest, task_id)), ex=ttl_s)

    async def release_client_task(self, owner: str, client_task_id: str, digest: str) -> None:
        """Forget a 0.1 task id whose request created no task, unless it has been bound since
        (compare and delete, one script)."""
        key = keys.owner_client_task_key(owner, client_task_id)
        async with translated_errors():
            await self._compare_and_delete(keys=[key], args=[_ENCODER.encode(ClientTask(digest))])
