"""What a method handler receives: its family's dependencies, built once by `create_app`, and
the call being served.

A handler gets what its family uses and no more. State changes go through the engine layer
(`Engine`: a session's commits and its create claim; `Ledger`: the writes no commit carries);
stores are read through the narrow ports below, which the stores satisfy as they are (a
contract forbids `realtime.methods` to import the store modules that write).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Generic, Protocol, TypeVar

from realtime.a2a.params import Params
from realtime.a2a.types import timestamp
from realtime.auth import Principal
from realtime.engine.admission import Admission
from realtime.engine.core import Engine
from realtime.engine.ledger import Ledger
from realtime.fanout import EventHub, StreamSlots
from realtime.settings import Settings
from realtime.store.deliveries import Listing
from realtime.store.events import EventStore
from realtime.store.indexes import Indexed
from realtime.store.operator_reads import OperatorReads
from realtime.store.records import ClientTask, CommandOutcome, Loaded, TaskRecord
from realtime.store.timeline import Recorder
from realtime.worker.runner import Runner

P = TypeVar("P", bound=Params)

__all__ = [
    "Call",
    "Commands",
    "MethodDeps",
    "OperatorDeps",
    "ProviderDeps",
    "SessionDeps",
    "StreamDeps",
    "TaskDeps",
    "timestamp",
]

Clock = Callable[[], float]
NewId = Callable[[], str]


def new_id() -> str:
    return str(uuid.uuid4())


# --- the read ports (`SessionStore`, `TaskStore`, `DeliveryStore` satisfy them) -----------------


class SessionReads(Protocol):
    async def load(
        self, session_id: str, command_id: str | None = None, *, with_outbox: bool = False
    ) -> Loaded: ...

    async def outcome(self, session_id: str, command_id: str) -> CommandOutcome | None: ...

    async def saved_context(self, session_id: str) -> bytes | None: ...


class TaskReads(Protocol):
    async def get(self, task_id: str) -> TaskRecord | None: ...

    async def index(self, owner: str, *, now_ms: int, ttl_s: int, limit: int) -> list[Indexed]: ...

    async def tasks(self, owner: str, task_ids: list[str]) -> list[TaskRecord]: ...

    async def message_task(self, owner: str, message_id: str) -> str | None: ...

    async def client_task(self, owner: str, client_task_id: str) -> ClientTask | None: ...


class DeliveryReads(Protocol):
    async def listing(self, session_id: str) -> Listing: ...


# --- each family's dependencies -------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Commands:
    """What applies a command or an event (`methods/commands`): the engine, the runner that
    starts the effects a commit stored, the timeline's notes of what no commit carries, and the
    settings a join token is signed with. LiveKit's webhooks get this and nothing else."""

    settings: Settings
    engine: Engine
    runner: Runner
    notes: Recorder


@dataclass(frozen=True, slots=True)
class TaskDeps:
    """The task methods (GetTask, ListTasks, a refused SendMessage) and A2A 0.1's id map."""

    settings: Settings
    reads: TaskReads
    ledger: Ledger  # a REJECTED task, the 0.1 ids
    clock: Clock = time.time
    new_id: NewId = field(default=new_id)

    def now_ms(self) -> int:
        return int(self.clock() * 1000)


@dataclass(frozen=True, slots=True)
class SessionDeps:
    """The session methods, SendMessage, ContinueTask, CancelTask and GetCommand."""

    settings: Settings
    commands: Commands
    sessions: SessionReads
    tasks: TaskDeps  # the task reads, and SendMessage's refusals
    clock: Clock = time.time
    new_id: NewId = field(default=new_id)

    def now_ms(self) -> int:
        return int(self.clock() * 1000)


@dataclass(frozen=True, slots=True)
class StreamDeps:
    """SendStreamingMessage and SubscribeToTask."""

    settings: Settings
    sessions: SessionDeps  # SendStreamingMessage sends as SendMessage does
    events: EventStore  # the event streams' reads
    hub: EventHub
    slots: StreamSlots  # the open streams' caps
    clock: Clock = time.time


@dataclass(frozen=True, slots=True)
class MethodDeps:
    """What the A2A dispatchers route with: each family's dependencies (a handler gets its
    family's, `rpc/registry`)."""

    tasks: TaskDeps
    sessions: SessionDeps
    streams: StreamDeps


@dataclass(frozen=True, slots=True)
class ProviderDeps:
    """The provider API (`methods/provider`)."""

    settings: Settings
    commands: Commands
    sessions: SessionReads
    clock: Clock = time.time
    new_id: NewId = field(default=new_id)

    def now_ms(self) -> int:
        return int(self.clock() * 1000)


@dataclass(frozen=True, slots=True)
class OperatorDeps:
    """The operator API (`methods/operator_views`, `methods/operator_deliveries`)."""

    settings: Settings
    reads: OperatorReads
    sessions: SessionReads
    deliveries: DeliveryReads
    ledger: Ledger  # a redelivery
    admission: Admission  # a tenant's limits and its standing against them
    clock: Clock = time.time

    def now_ms(self) -> int:
        return int(self.clock() * 1000)


@dataclass(frozen=True, slots=True)
class Call(Generic[P]):
    """One authenticated, validated JSON-RPC call."""

    method: str
    principal: Principal
    params: P
    extensions: frozenset[str]
    # SSE reconnects: the stream entry id the client saw last (streaming methods only)
    last_event_id: str | None = None
