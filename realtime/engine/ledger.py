"""The writes no session commit carries, beside the engine's commits: the methods and routes
write through here or through `Engine`, never through a store (a contract says so).

- a refused SendMessage: its messageId claimed and indexed, then its REJECTED task;
- A2A 0.1's id map: a client's task id claimed, bound to the server's task, or released;
- a redelivery of a session's events for the app's backend (the operator API);
- when the Agent Card's content was first served (its Last-Modified).

Each answers with what the store answered (values); nothing here decides.
"""

from __future__ import annotations

from realtime.settings import Settings
from realtime.store.cards import CardStore
from realtime.store.deliveries import DeliveryStore
from realtime.store.indexes import TaskInfo
from realtime.store.records import ClientTask, TaskRecord
from realtime.store.tasks import Claim, TaskStore


class Ledger:
    """The one door of the methods' and routes' writes that are no session's commit."""

    def __init__(
        self, settings: Settings, tasks: TaskStore, deliveries: DeliveryStore, cards: CardStore
    ) -> None:
        self._settings = settings
        self._tasks = tasks
        self._deliveries = deliveries
        self._cards = cards

    async def claim_message(
        self, owner: str, message_id: str, task_id: str, info: TaskInfo, *, now_ms: int
    ) -> Claim:
        """Bind a refused message's id to its REJECTED task and index it, within the tasks the
        owner may hold (kept AIM_REJECTED_TASK_TTL_S)."""
        settings = self._settings
        return await self._tasks.claim_message(
            owner,
            message_id,
            task_id,
            info,
            now_ms=now_ms,
            task_ttl_s=settings.task_ttl_s,
            ttl_s=settings.rejected_ttl_s,
            limit=settings.max_tasks_per_principal,
        )

    async def put_rejected(self, record: TaskRecord) -> None:
        """Write the REJECTED task `claim_message` indexed (kept AIM_REJECTED_TASK_TTL_S)."""
        await self._tasks.put(record, ttl_s=self._settings.rejected_ttl_s)

    async def claim_client_task(
        self, owner: str, client_task_id: str, digest: str, *, ttl_s: int
    ) -> ClientTask | None:
        """Claim an A2A 0.1 task id for a request (None), or the record already there."""
        return await self._tasks.claim_client_task(owner, client_task_id, digest, ttl_s=ttl_s)

    async def bind_client_task(
        self, owner: str, client_task_id: str, digest: str, task_id: str, *, ttl_s: int
    ) -> None:
        """Point an A2A 0.1 task id at the task its request created."""
        await self._tasks.bind_client_task(owner, client_task_id, digest, task_id, ttl_s=ttl_s)

    async def release_client_task(self, owner: str, client_task_id: str, digest: str) -> None:
        """Free an A2A 0.1 task id whose request created no task."""
        await self._tasks.release_client_task(owner, client_task_id, digest)

    async def redeliver(self, session_id: str, from_seq: int, now_ms: int) -> int:
        """Send a session's kept events again from `from_seq`; how many will be sent."""
        return await self._deliveries.redeliver(session_id, from_seq, now_ms)

    async def card_served(self, etag: str, now_s: int) -> int:
        """When the card with `etag` was first served (Unix s), stored now if it is new."""
        return await self._cards.modified(etag, now_s)
