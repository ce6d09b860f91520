"""Tasks: read one, list an owner's, and the write of a task that has no session (SendMessage
refused: a REJECTED task). A realtime session's task is written by the session's commit.

Atomicity: the owner-side step of SendMessage (claim the message id, index the task) is one Lua
script on the owner's slot; the task itself is one SET on the task's slot. The index is written
first and read tolerantly (an id whose task is missing is skipped), so a crash between the two
steps leaves nothing a retry of the same message does not repair.
"""

from __future__ import annotations

from collections.abc import Sequence

from realtime.store import keys
from realtime.store.records import TASK_DECODER, TASK_ENCODER, TaskRecord
from realtime.store.redis_client import RedisClient, text, translated_errors


class TaskStore:
    """The door to stored tasks."""

    def __init__(self, redis: RedisClient) -> None:
        self._client = redis.client
        self._claim = redis.scripts.claim_message

    async def get(self, task_id: str) -> TaskRecord | None:
        """The task (one round trip), whoever owns it; None when there is none."""
        async with translated_errors():
            raw = await self._client.get(keys.task_key(task_id))
        return None if raw is None else TASK_DECODER.decode(raw)

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
        records = [TASK_DECODER.decode(raw) for raw in raws if raw is not None]
        return [record for record in records if record.owner == owner]
