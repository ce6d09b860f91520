"""Tasks: read one, list an owner's, and the write of a task that has no session (SendMessage
refused: a REJECTED task). A realtime session's task is written by the session's commit.

Atomicity: the owner-side step of SendMessage (claim the message id, check the limit of held
tasks, index the task) is one Lua script on the owner's slot; the task itself is one SET on the
task's slot. The index is written first and read tolerantly (an id whose task is missing is
skipped), so a crash between the two steps leaves nothing a retry of the same message does not
repair.

The owner's task index carries what ListTasks sorts and filters on (status time, state,
contextId: `indexes.TaskInfo`), so a listing reads the index and then only its page's tasks.

The A2A 0.1 id map (`records.ClientTask` records, one key per principal and client task id)
lives here too: it is one more owner-side index of tasks, beside the messageId claims it relies
on. The methods write through `engine/ledger.Ledger`, never through this door.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final, Literal, NamedTuple

import msgspec

from realtime.store import keys
from realtime.store.indexes import Indexed, TaskInfo, decode_task_info, encode_task_info
from realtime.store.records import TASK_ENCODER, ClientTask, TaskRecord, decode_task
from realtime.store.redis_client import RedisClient, text, translated_errors


class Claim(NamedTuple):
    """What a SendMessage claim did: `claimed` (index it, write it), `earlier` (the task the
    message id created before: `task_id`), or `limit` (the owner holds as many tasks as it may;
    `expires_ms`: when the first of them expires, None when none will)."""

    status: Literal["claimed", "earlier", "limit"]
    task_id: str | None = None
    expires_ms: int | None = None


_CLIENT_TASK: Final = msgspec.json.Decoder(ClientTask)
_ENCODER: Final = msgspec.json.Encoder()
_CLAIM_ATTEMPTS: Final = 3


class TaskStore:
    """The door to stored tasks."""

    def __init__(self, redis: RedisClient) -> None:
        self._client = redis.client
        self._claim = redis.scripts.claim_message
        self._list = redis.scripts.list_tasks
        self._compare_and_delete = redis.scripts.release_lease

    async def get(self, task_id: str) -> TaskRecord | None:
        """The task (one round trip), whoever owns it; None when there is none."""
        async with translated_errors():
            raw = await self._client.get(keys.task_key(task_id))
        return None if raw is None else decode_task(raw)

    async def claim_message(
        self,
        owner: str,
        message_id: str,
        task_id: str,
        info: TaskInfo,
        *,
        now_ms: int,
        task_ttl_s: int,
        ttl_s: int,
        limit: int,
    ) -> Claim:
        """Bind `message_id` to the REJECTED task `task_id` (kept `ttl_s`, its status at
        `now_ms`) and index it with `info`, unless the message id is bound already or the
        owner holds `limit` tasks (those expired by `now_ms` and `task_ttl_s` do not count)."""
        async with translated_errors():
            reply = await self._claim(
                keys=[
                    keys.owner_message_key(owner, message_id),
                    *keys.owner_task_index_keys(owner),
                ],
                args=[
                    task_id,
                    ttl_s,
                    now_ms,
                    now_ms,
                    task_ttl_s * 1000,
                    limit,
                    now_ms + ttl_s * 1000,
                    encode_task_info(info),
                    task_ttl_s + keys.IDEMPOTENCY_GRACE_S,
                ],
            )
        status = text(reply[0])
        if status == "earlier":
            return Claim("earlier", task_id=text(reply[1]))
        if status == "limit":
            expires = text(reply[1])
            return Claim("limit", expires_ms=int(expires) if expires else None)
        return Claim("claimed")

    async def put(self, record: TaskRecord, *, ttl_s: int) -> None:
        """Write the task (its own slot); `claim_message` has indexed it already."""
        record.check_writable()
        async with translated_errors():
            await self._client.set(
                keys.task_key(record.task.id), TASK_ENCODER.encode(record), ex=ttl_s
            )

    async def index(self, owner: str, *, now_ms: int, ttl_s: int, limit: int) -> list[Indexed]:
        """The newest `limit` tasks of `owner`'s index, newest status first (ties: task id
        descending), pruned of those that expired; no task is read but the few indexed before
        the index carried their info."""
        async with translated_errors():
            listed, infos = await self._list(
                keys=keys.owner_task_index_keys(owner), args=[now_ms, ttl_s * 1000, limit]
            )
        entries: list[Indexed] = []
        unindexed: list[tuple[str, int]] = []
        for position, raw in enumerate(infos):
            task_id, status_ms = text(listed[2 * position]), int(listed[2 * position + 1])
            if raw is None:
                unindexed.append((task_id, status_ms))
            else:
                entries.append(Indexed(task_id, status_ms, decode_task_info(raw)))
        if unindexed:  # indexed by an earlier release: learn the info from the tasks
            records = await self.tasks(owner, [task_id for task_id, _ in unindexed])
            found = {record.task.id: record for record in records}
            for task_id, status_ms in unindexed:
                if (record := found.get(task_id)) is not None:
                    info = TaskInfo(record.task.status.state, record.task.context_id)
                    entries.append(Indexed(task_id, status_ms, info))
        entries.sort(key=lambda entry: (entry.status_ms, entry.task_id), reverse=True)
        return entries

    async def tasks(self, owner: str, task_ids: Sequence[str]) -> list[TaskRecord]:
        """The tasks of `owner` among `task_ids`, in that order (one round trip; an expired
        one is left out)."""
        if not task_ids:
            return []
        async with translated_errors():
            pipe = self._client.pipeline(transaction=False)
            for task_id in task_ids:
                pipe.get(keys.task_key(task_id))
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
