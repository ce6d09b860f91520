"""From the task's stream to a session's events.

Each frame updates the session (state, epoch, task state and version, the open requirement)
and yields the events it implies, in this order: `update` (raw, opt-in), `superseded` or
`rebound`, `state`, `agent` (when the frame names the agent's state and it changed),
`requirement`, and `ended` after the terminal frame.

A frame whose epoch passed the epoch this device joined at, while the session is not
provisioning, may mean another device took over: the session shows the new epoch, but its
commands carry it only once GetSession said this endpoint is not `superseded` (else the session
is marked superseded). If GetSession fails, the check stays pending: the next frame, or the
next command before it is sent, makes it again. A new epoch while provisioning is a rebind:
the app joins again. A -32004 answer on a task that GetTask shows terminal is the end; on one
that is not, the stream fails.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any, Final, Protocol

from aim_realtime_client.errors import AimError
from aim_realtime_client.events import (
    AgentChanged,
    AnyEvent,
    Ended,
    Rebound,
    Requirement,
    StateChanged,
    StreamFailed,
    Update,
)
from aim_realtime_client.events import requirement_in as _requirement_in
from aim_realtime_client.rpc import REALTIME, Link
from aim_realtime_client.stream import TERMINAL_TASK_STATES, Frame, TaskStream


class Followed(Protocol):
    """What the follower reads and sets of the session it follows (`Session` is one): values
    and the events it emits; it never calls the session's commands."""

    link: Link
    task_id: str
    state: str
    epoch: int
    task_state: str
    task_version: int
    agent_state: str | None
    agent_generation: int | None
    joined_epoch: int | None
    registered_epoch: int | None
    requirement: Requirement | None
    requirements: dict[str, Requirement]
    ended: Ended | None
    info: dict[str, Any]

    def emit(self, event: AnyEvent) -> None: ...
    def needs_vetting(self, epoch: int) -> bool: ...
    def observe_epoch(self, epoch: int, *, vetted: bool = True) -> None: ...
    async def vet(self) -> None: ...
    async def refresh(self) -> dict[str, Any]: ...


INPUT_REQUIRED: Final = "TASK_STATE_INPUT_REQUIRED"


class Follower:
    """Runs one session's stream in a task while anyone listens (and until it ends)."""

    def __init__(self, session: Followed) -> None:
        self.session = session
        self.task: asyncio.Task[None] | None = None
        self.stream: TaskStream | None = None
        self._last: tuple[str, int, str, int] | None = None
        self._requirements_seen: set[str] = set()
        self._rebound_epochs: set[int] = set()

    @property
    def running(self) -> bool:
        return self.task is not None and not self.task.done()

    def start(self) -> None:
        """Start following, or follow again after the stream failed (resuming after the last
        event it got)."""
        if self.session.ended is not None:
            return
        if self.task is None or self.task.done():
            self.task = asyncio.create_task(self._run(), name=f"aim-stream-{self.session.task_id}")

    async def stop(self) -> None:
        if self.task is not None and not self.task.done():
            self.task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.task

    async def _run(self) -> None:
        session = self.session
        link = session.link
        if self.stream is None:
            self.stream = TaskStream(
                link.rpc,
                session.task_id,
                backoff=link.stream_backoff,
                idle_timeout_s=link.stream_idle_timeout_s,
            )
        try:
            async for frame in self.stream.frames():
                session.emit(Update(frame.event_id, frame.result))
                await self.apply(frame)
                if frame.terminal:
                    break
            await self._ended()
        except AimError as error:
            session.emit(StreamFailed(error))

    async def apply(self, frame: Frame) -> None:
        session = self.session
        body = frame.body
        meta: dict[str, Any] = (body.get("metadata") or {}).get(REALTIME) or {}
        state = str(meta.get("sessionState", session.state))
        epoch = int(meta.get("sessionEpoch", session.epoch))
        if state == "provisioning" and epoch > 1 and epoch not in self._rebound_epochs:
            self._rebound_epochs.add(epoch)
            session.joined_epoch = session.registered_epoch = None  # join() again
            session.emit(Rebound(epoch))
        if state != "provisioning" and session.needs_vetting(epoch):
            session.observe_epoch(epoch, vetted=False)
            with contextlib.suppress(AimError):  # still pending: asked again before a command
                await session.vet()  # marks the session superseded if this endpoint is
        else:
            session.observe_epoch(epoch)
        session.state = state
        status: dict[str, Any] = body.get("status") or {}
        session.task_state = str(status.get("state", session.task_state))
        session.task_version = int(meta.get("taskVersion", session.task_version))
        now = (session.state, session.epoch, session.task_state, session.task_version)
        if now != self._last:
            self._last = now
            session.emit(StateChanged(*now))
        _agent(session, meta)
        if session.task_state != INPUT_REQUIRED:
            session.requirement = None
            return
        asked = _requirement_in(status)
        session.requirement = asked
        if asked is not None:
            session.requirements[asked.operation_id] = asked
            if asked.requirement_id not in self._requirements_seen:
                self._requirements_seen.add(asked.requirement_id)
                session.emit(asked)

    async def _ended(self) -> None:
        """The task is terminal: `ended`, with the end reason GetSession gives. After a -32004
        (no terminal frame seen), GetTask says whether it is; if not, the stream failed."""
        session = self.session
        with contextlib.suppress(AimError):
            await session.refresh()
        if session.task_state not in TERMINAL_TASK_STATES:
            with contextlib.suppress(AimError):
                task = await session.link.rpc.call(
                    "GetTask", {"id": session.task_id, "historyLength": 0}
                )
                meta = (task.get("metadata") or {}).get(REALTIME) or {}
                session.state = str(meta.get("sessionState", session.state))
                session.task_state = str(task.get("status", {}).get("state", ""))
        refusal = self.stream.refusal if self.stream is not None else None
        if refusal is not None and session.task_state not in TERMINAL_TASK_STATES:
            session.emit(StreamFailed(refusal))
            return
        reason = session.info.get("endReason")
        session.ended = Ended(
            session.state, session.task_state, str(reason) if reason is not None else None
        )
        session.emit(session.ended)


def _agent(session: Followed, meta: dict[str, Any]) -> None:
    """`agent` when the frame names the agent's state and it, or the serving generation,
    changed; `rotated_from` on the first frame of a new generation after `rotating`."""
    state = meta.get("agentState")
    if not isinstance(state, str):
        return
    generation = _generation(meta.get("agentGeneration"))
    before = session.agent_generation
    if (state, generation) == (session.agent_state, before):
        return
    rotated = session.agent_state == "rotating" and None not in (generation, before)
    session.agent_state, session.agent_generation = state, generation
    session.emit(
        AgentChanged(
            state,
            generation,
            _generation(meta.get("successorGeneration")),
            before if rotated and generation != before else None,
        )
    )


def _generation(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None
