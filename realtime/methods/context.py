"""What a method handler receives: the services of the process and the call being served."""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from realtime.a2a.params import Params
from realtime.a2a.types import timestamp
from realtime.auth import Principal
from realtime.engine.core import Engine
from realtime.fanout import EventHub, StreamSlots
from realtime.metrics import Metrics
from realtime.settings import Settings
from realtime.store.cards import CardStore
from realtime.store.deliveries import DeliveryStore
from realtime.store.events import EventStore
from realtime.store.operator_reads import OperatorReads
from realtime.store.sessions import SessionStore
from realtime.store.tasks import TaskStore
from realtime.store.timeline import Recorder
from realtime.store.timers import TimerStore
from realtime.worker.runner import Runner

P = TypeVar("P", bound=Params)
log = logging.getLogger(__name__)

__all__ = ["Call", "Services", "timestamp"]


def _new_id() -> str:
    return str(uuid.uuid4())


@dataclass(frozen=True, slots=True)
class Services:
    """Long-lived collaborators, built once by `create_app`. The stores are the only doors to
    storage (the engine holds the same `SessionStore`, the hub the same `EventStore`)."""

    settings: Settings
    task_store: TaskStore
    session_store: SessionStore
    event_store: EventStore
    store_ready: Callable[[], Awaitable[bool]]  # whether Redis answers (readiness)
    engine: Engine
    runner: Runner
    hub: EventHub
    recorder: Recorder  # the operations timeline's entries that no commit carries
    operator_reads: OperatorReads  # the operator API's reads
    card_store: CardStore  # when the Agent Card last changed (its Last-Modified)
    timer_store: TimerStore  # the durable timers (the worker's)
    delivery_store: DeliveryStore  # the session events for the app's backend
    metrics: Metrics = field(default_factory=lambda: Metrics(None))
    streams: StreamSlots = field(default_factory=StreamSlots)  # the open SSE streams' caps
    clock: Callable[[], float] = time.time
    new_id: Callable[[], str] = field(default=_new_id)

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
