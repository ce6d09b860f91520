"""docs/examples/agent_worker.py run without livekit-agents: the few parts of `livekit.agents`
and `livekit.rtc` it uses, played by small stand-ins (a job's context and room, a chat context,
the worker's registration), so that its entrypoint runs against the served service and the
LiveKit stand-in. The job's room is fed the data messages the service sent to the job's agent,
as LiveKit would deliver them."""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import json
import sys
import types
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from livekit import api

from tests.clocks import Clock
from tests.e2e.agent_presence_helpers import World, room

WORKER = Path(__file__).resolve().parents[2] / "docs" / "examples" / "agent_worker.py"
STOP_S = 5.0  # how long a job has to stop once shut down


@dataclass(frozen=True)
class DataPacket:
    """`livekit.rtc.DataPacket`: what `data_received` hands a handler."""

    data: bytes
    topic: str | None


class Room:
    """`livekit.rtc.Room`: the handlers the worker registers."""

    def __init__(self) -> None:
        self.handlers: dict[str, list[Callable[..., Any]]] = {}

    def on(self, event: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        def register(handler: Callable[..., Any]) -> Callable[..., Any]:
            self.handlers.setdefault(event, []).append(handler)
            return handler

        return register

    def emit(self, event: str, *args: Any) -> None:
        for handler in self.handlers.get(event, []):
            handler(*args)


@dataclass(frozen=True)
class Job:
    metadata: str


@dataclass
class JobContext:
    """`livekit.agents.JobContext`: the job, its room, connect, shutdown and its callbacks."""

    job: Job
    room: Room = field(default_factory=Room)
    connected: bool = False
    shutdown_reason: str | None = None
    shut: asyncio.Event = field(default_factory=asyncio.Event)
    callbacks: list[Callable[[], Awaitable[None]]] = field(default_factory=list)

    async def connect(self, auto_subscribe: str = "subscribe_all") -> None:
        self.connected = True

    def shutdown(self, reason: str = "") -> None:
        self.shutdown_reason = reason
        self.shut.set()

    def add_shutdown_callback(self, callback: Callable[[], Awaitable[None]]) -> None:
        self.callbacks.append(callback)


class ChatContext:
    """`livekit.agents.llm.ChatContext` of text messages, with its dict form."""

    def __init__(self, items: list[dict[str, Any]] | None = None) -> None:
        self.items = list(items or [])

    @classmethod
    def empty(cls) -> ChatContext:
        return cls()

    def add_message(self, *, role: str, content: str) -> dict[str, Any]:
        item = {"type": "message", "role": role, "content": [content]}
        self.items.append(item)
        return item

    def to_dict(self, **_excluded: bool) -> dict[str, Any]:
        return {"items": [dict(item) for item in self.items]}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ChatContext:
        return cls(data["items"])

    def said(self) -> list[tuple[str, str]]:
        return [(item["role"], item["content"][0]) for item in self.items]


class AgentServer:
    """`livekit.agents.AgentServer`: the entrypoint registered for the agent name."""

    def __init__(self) -> None:
        self.entrypoint: Callable[[JobContext], Awaitable[None]] | None = None
        self.agent_name = ""

    def rtc_session(self, *, agent_name: str) -> Callable[[Any], Any]:
        def register(entrypoint: Any) -> Any:
            self.entrypoint, self.agent_name = entrypoint, agent_name
            return entrypoint

        return register


def stand_in_modules() -> dict[str, types.ModuleType]:
    agents = types.ModuleType("livekit.agents")
    agents.AgentServer = AgentServer  # type: ignore[attr-defined]
    agents.AutoSubscribe = types.SimpleNamespace(AUDIO_ONLY="audio_only")  # type: ignore[attr-defined]
    agents.JobContext = JobContext  # type: ignore[attr-defined]
    agents.cli = types.SimpleNamespace(run_app=lambda server: None)  # type: ignore[attr-defined]
    agents.llm = types.SimpleNamespace(ChatContext=ChatContext)  # type: ignore[attr-defined]
    rtc = types.ModuleType("livekit.rtc")
    rtc.DataPacket = DataPacket  # type: ignore[attr-defined]
    return {"livekit.agents": agents, "livekit.rtc": rtc}


class ClockTime(datetime):
    """`datetime` whose `now` is the service's clock: the worker and the service agree on the
    time however far the test moved it."""

    clock: Clock

    @classmethod
    def now(cls, tz: Any = None) -> ClockTime:  # type: ignore[override]
        return cls.fromtimestamp(cls.clock(), tz or UTC)


@contextlib.contextmanager
def worker_module(clock: Clock, cap_s: int) -> Iterator[types.ModuleType]:
    """The example imported with the stand-ins, its model sessions capped at `cap_s`."""
    saved = {name: sys.modules.get(name) for name in stand_in_modules()}
    sys.modules.update(stand_in_modules())
    try:
        spec = importlib.util.spec_from_file_location("aim_agent_worker_example", WORKER)
        assert spec is not None
        assert spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        for name, was in saved.items():
            if was is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = was
    module.MODEL_SESSION_CAP_S = cap_s
    module.datetime = type("ClockTime", (ClockTime,), {"clock": staticmethod(clock)})
    yield module


@dataclass
class RunningJob:
    """One job of the example worker: its context, its entrypoint's task, the data messages
    delivered to it so far."""

    ctx: JobContext
    task: asyncio.Task[None]
    identity: str
    delivered: int = 0
    ended: bool = False

    def deliver(
        self, world: World, session_id: str, *, skip: Callable[[dict], bool] | None = None
    ) -> None:
        """Every data message the service sent this job's agent since the last delivery, in
        order, into its room's `data_received` (but those `skip` says to lose)."""
        sent = world.livekit.data_messages
        for request in sent[self.delivered :]:
            if request.room != room(session_id) or self.identity not in (
                request.destination_identities or [self.identity]
            ):
                continue
            if skip is not None and skip(json.loads(request.data)):
                continue
            self.ctx.room.emit("data_received", DataPacket(request.data, request.topic))
        self.delivered = len(sent)

    async def stopped(self) -> str | None:
        """Once the job shut itself down: its entrypoint cancelled, its shutdown callbacks
        run, as the LiveKit Agents runtime does. The reason it gave."""
        async with asyncio.timeout(STOP_S):
            await self.ctx.shut.wait()
        await end(self)
        return self.ctx.shutdown_reason


async def end(job: RunningJob) -> None:
    if job.ended:
        return
    job.ended = True
    job.task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await job.task
    for callback in job.ctx.callbacks:
        await callback()


@contextlib.asynccontextmanager
async def jobs(module: types.ModuleType, world: World) -> AsyncIterator[Callable[..., RunningJob]]:
    """Runs the example's entrypoint for a started job (its dispatch and its agent's identity),
    with the service's provider API as served here; every job still running ends at the end."""
    running: list[RunningJob] = []
    base = str(world.http.base_url).rstrip("/")

    def run(dispatch: api.AgentDispatch, identity: str) -> RunningJob:
        metadata = {**json.loads(dispatch.metadata), "providerUrl": f"{base}/provider"}
        ctx = JobContext(Job(json.dumps(metadata)))
        task = asyncio.create_task(module.server.entrypoint(ctx))
        job = RunningJob(ctx, task, identity)
        running.append(job)
        return job

    try:
        yield run
    finally:
        for job in running:
            await end(job)
