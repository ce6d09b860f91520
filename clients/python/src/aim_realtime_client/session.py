"""One realtime session as a device sees it: its state, its commands, its events.

Every mutating call mints one commandId when it is called; the caller's retries send the same
body, so a command applies once whatever the network did. `epoch` is the newest epoch the
service showed; commands carry the newest one that is vetted: one from a session object
(GetSession, a command result: its endpoints say whether this device was superseded) or an
error's `currentEpoch`. An epoch the stream shows past the one this device joined at is vetted
with GetSession first; while that check fails it stays pending, and the next command makes it
before it is sent. EndSession carries no epoch. Once another device took the session over,
commands raise SupersededError without being sent, until `join()` takes it back (EndSession
stays allowed: any device may end it).

The session's `state` comes from the stream while it runs (its frames come in order and carry
no `version`); GetSession and command results set it only while no stream runs.

Events reach the app two ways, from one emit: listeners (`on`, `once`, `off`) and iterators
(`events()`). Listening starts the stream: the first `on`, `once` or `events()` starts
following the task (`follow()` starts it without listening); `close()` stops it.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any, Final, Literal, TypeVar

from aim_realtime_client.errors import AimError, StaleEpochError, SupersededError
from aim_realtime_client.events import (
    EVENT_NAMES,
    AnyEvent,
    Capabilities,
    Ended,
    Events,
    Interaction,
    JoinResult,
    Requirement,
    StreamFailed,
    Superseded,
    requirement_in,
)
from aim_realtime_client.follow import INPUT_REQUIRED, Follower
from aim_realtime_client.listeners import Listeners
from aim_realtime_client.rpc import REALTIME, Link

POLL_S: Final = 0.25
MAX_UNREAD: Final = 1000  # events an iterator of events() holds unread, at most
# a listener takes the event class of the name it listens to (Requirement for "requirement"),
# or any event
EventT = TypeVar("EventT", bound=AnyEvent)


class Session:
    """Made by `AimClient.create_session` or `AimClient.resume_session`."""

    def __init__(
        self,
        link: Link,
        *,
        session_id: str,
        task_id: str,
        endpoint_key: str,
        capabilities: Capabilities,
    ) -> None:
        self.link = link
        self.session_id = session_id
        self.task_id = task_id
        self.endpoint_key = endpoint_key
        self.capabilities = capabilities
        self.state = ""
        self.epoch = 0
        self.task_state = ""
        self.task_version = 0
        # the agent's state as the stream last named it (`rotating` during a rotation)
        self.agent_state: str | None = None
        self.agent_generation: int | None = None  # the serving agent's, as the stream named it
        self.endpoint_id: str | None = None
        self.requirement: Requirement | None = None
        self.info: dict[str, Any] = {}  # the newest session object (GetSession, a command)
        self.version = 0
        self.joined_epoch: int | None = None
        self.registered_epoch: int | None = None
        self.requirements: dict[str, Requirement] = {}  # by operationId, as the stream showed
        self.ended: Ended | None = None
        self._superseded = False
        self._command_epoch = 0  # the epoch commands carry: the newest vetted one
        self._unvetted: int | None = None  # an epoch the stream showed, not checked yet
        self._vetting = asyncio.Lock()
        self._subscribers: list[tuple[asyncio.Queue[AnyEvent | None], bool]] = []
        self._listeners = Listeners(EVENT_NAMES, "the session")
        self._follower = Follower(self)

    def __repr__(self) -> str:
        return f"Session({self.session_id}, {self.state}, epoch {self.epoch})"

    @property
    def superseded(self) -> bool:
        return self._superseded

    @property
    def following(self) -> bool:
        """True while the stream runs (it, not GetSession or a result, sets `state` then)."""
        return self._follower.running

    # ---- what the session learns ---------------------------------------------------------
    def apply_session(self, session: Any) -> None:
        """A session object from GetSession or a command result (older versions ignored)."""
        if not isinstance(session, dict):
            return
        version = int(session.get("version", 0))
        if version < self.version:
            return
        self.version, self.info = version, session
        if not self.following:
            self.state = str(session.get("state", self.state))
        epoch = int(session.get("sessionEpoch", 0))
        self.epoch = max(self.epoch, epoch)
        if self.joined_epoch is not None and self.endpoint_id is not None:
            for endpoint in session.get("endpoints") or ():
                mine = endpoint.get("endpointId") == self.endpoint_id
                if mine and endpoint.get("state") == "superseded":
                    self.mark_superseded(self.epoch)
        self.observe_epoch(epoch)

    def apply_task(self, task: Mapping[str, Any]) -> None:
        """A Task read with GetTask: its state, its version, and the requirement it shows
        when it is TASK_STATE_INPUT_REQUIRED (kept as the stream's would be)."""
        status = task.get("status") or {}
        meta = (task.get("metadata") or {}).get(REALTIME) or {}
        self.task_state = str(status.get("state", self.task_state))
        self.task_version = int(meta.get("taskVersion", self.task_version))
        asked = requirement_in(status) if self.task_state == INPUT_REQUIRED else None
        self.requirement = asked
        if asked is not None:
            self.requirements[asked.operation_id] = asked

    def observe_epoch(self, epoch: int, *, vetted: bool = True) -> None:
        """An epoch the service reported: shown in `epoch` at once; carried by commands once
        vetted, else pending until `vet()` reads GetSession."""
        self.epoch = max(self.epoch, epoch)
        if not vetted:
            if epoch > self._command_epoch:
                self._unvetted = max(self._unvetted or 0, epoch)
            return
        self._command_epoch = max(self._command_epoch, epoch)
        if self._unvetted is not None and self._unvetted <= self._command_epoch:
            self._unvetted = None

    def needs_vetting(self, epoch: int) -> bool:
        """An epoch past the vetted one, seen by a device that joined and is not superseded:
        another device may have taken over."""
        joined = self.joined_epoch is not None and not self._superseded
        return joined and epoch > self._command_epoch

    async def vet(self) -> None:
        """The pending check, if any: GetSession marks the session superseded if this endpoint
        is, and vets its epoch. A failure is raised and leaves the check pending."""
        async with self._vetting:
            if self._unvetted is not None:
                await self.refresh()

    def mark_superseded(self, epoch: int) -> None:
        if not self._superseded:
            self._superseded = True
            self.emit(Superseded(epoch))

    def emit(self, event: AnyEvent) -> None:
        """`event` to every iterator of `events()` and every listener of its name."""
        for entry in list(self._subscribers):
            queue, updates = entry
            if not updates and event.name == Events.UPDATE:
                continue
            if queue.qsize() >= MAX_UNREAD:  # nobody reads it: it ends, saying why
                while not queue.empty():
                    queue.get_nowait()
                behind = AimError(
                    f"events() held {MAX_UNREAD} events nobody read; it ended",
                    reason="EVENTS_UNREAD",
                )
                queue.put_nowait(StreamFailed(behind))
                self._subscribers.remove(entry)
                continue
            queue.put_nowait(event)
        self._listeners.call(event.name, event)

    # ---- events ----------------------------------------------------------------------------
    def on(self, name: str, fn: Callable[[EventT], object]) -> Callable[[], None]:
        """Call `fn(event)` for every event named `name` (an `Events` constant) from now on.
        `fn` is a plain function, called at once, or an async one, run as a task; what it
        raises goes to the loop's exception handler and stops neither the stream nor the
        other listeners. Listening starts the stream (as `follow()`). Returns a function that
        removes `fn` (as `off`). A name that is not an event's raises ValueError."""
        self._listeners.add(name, fn)
        self._follower.start()
        return lambda: self.off(name, fn)

    def once(self, name: str, fn: Callable[[EventT], object]) -> Callable[[], None]:
        """As `on`, but `fn` is called at most once: it is removed before it is called."""
        self._listeners.add(name, fn, once=True)
        self._follower.start()
        return lambda: self.off(name, fn)

    def off(self, name: str, fn: Callable[[EventT], object]) -> None:
        """`fn` no longer listens to `name` (nothing happens if it did not). The stream goes
        on: `close()` stops it."""
        self._listeners.remove(name, fn)

    def follow(self) -> None:
        """Start following the task's stream without listening (`on`, `once` and `events()`
        start it too); while it runs a second call does nothing. After a `StreamFailed` it
        follows again, resuming after the last event it got; after `Ended` it does nothing."""
        self._follower.start()

    async def events(self, *, updates: bool = False) -> AsyncIterator[AnyEvent]:
        """Every event from now on; the first subscription starts the stream (listening starts
        it). Ends after `Ended`, after a `StreamFailed`, or at `close()`. `updates`: also every
        raw frame. An iterator made after the end yields the `Ended` alone. One that holds
        more than MAX_UNREAD (1000) events nobody read ends with a `StreamFailed` whose error's
        reason is EVENTS_UNREAD."""
        if self.ended is not None:
            yield self.ended
            return
        queue: asyncio.Queue[AnyEvent | None] = asyncio.Queue()
        entry = (queue, updates)
        self._subscribers.append(entry)
        self._follower.start()
        try:
            while (event := await queue.get()) is not None:
                yield event
                if event.name in (Events.ENDED, Events.ERROR):
                    return
        finally:
            if entry in self._subscribers:
                self._subscribers.remove(entry)

    def end_subscriptions(self) -> None:
        for queue, _ in list(self._subscribers):
            queue.put_nowait(None)

    async def close(self) -> None:
        """Stop the stream (sends no command); iterators of `events()` end. Listeners stay:
        the next `on`, `once`, `events()` or `follow()` starts the stream again."""
        await self._follower.stop()
        self.end_subscriptions()

    # ---- commands --------------------------------------------------------------------------
    async def command(
        self, method: str, params: Mapping[str, Any], *, epoch: bool = True, guard: bool = True
    ) -> dict[str, Any]:
        if epoch:
            await self.vet()
        if guard:
            self.check_not_superseded(f"aim.realtime.{method}")
        body: dict[str, Any] = {"sessionId": self.session_id}
        if epoch:
            body["sessionEpoch"] = self._command_epoch
        body["commandId"] = str(uuid.uuid4())
        body.update(params)
        try:
            result: dict[str, Any] = await self.link.rpc.call(f"aim.realtime.{method}", body)
        except StaleEpochError as stale:
            if stale.current_epoch is not None:
                self.observe_epoch(stale.current_epoch)
            if isinstance(stale, SupersededError):
                self.mark_superseded(stale.current_epoch or self.epoch)
            raise
        result["_commandId"] = body["commandId"]
        self.apply_session(result.get("session"))
        return result

    def check_not_superseded(self, method: str) -> None:
        """SupersededError, without a request, while another device holds the session."""
        if self._superseded:
            raise SupersededError(
                "another device took this session over; join() again to take it back",
                code=-31002,
                reason="STALE_EPOCH",
                method=method,
                metadata={"currentEpoch": str(self.epoch), "reason": "superseded"},
            )

    async def refresh(self) -> dict[str, Any]:
        """GetSession: the whole session object now (also kept in `info`)."""
        got = await self.link.rpc.call("aim.realtime.GetSession", {"sessionId": self.session_id})
        session: dict[str, Any] = got["session"]
        self.apply_session(session)
        return session

    async def wait_ready(self, timeout_ms: int | None = None) -> str:
        """Poll GetSession while the session is `provisioning`; the state it left it for."""
        limit = self.link.ready_timeout_ms if timeout_ms is None else timeout_ms
        deadline = time.monotonic() + limit / 1000
        while (state := str((await self.refresh())["state"])) == "provisioning":
            if time.monotonic() > deadline:
                raise AimError(
                    f"the session is still provisioning after {limit / 1000:g} s",
                    reason="TIMEOUT",
                    method="aim.realtime.GetSession",
                )
            await asyncio.sleep(POLL_S)
        return state

    async def register(self) -> dict[str, Any]:
        """RegisterEndpoint with this device's key and capabilities: the endpoint object."""
        result = await self.command(
            "RegisterEndpoint",
            {"clientEndpointKey": self.endpoint_key, "capabilities": self.capabilities.wire()},
        )
        endpoint: dict[str, Any] = result["endpoint"]
        self.endpoint_id = str(endpoint["endpointId"])
        self.registered_epoch = int(result["session"]["sessionEpoch"])
        return endpoint

    async def join(self) -> JoinResult:
        """RegisterEndpoint (when not registered at this epoch) then JoinSession: the LiveKit
        URL and token. Waits while the session is provisioning. After `Superseded`, this is
        how the device takes the session back (a handoff to it)."""
        if self.state in ("", "provisioning"):
            await self.wait_ready()
        await self.vet()
        stale = self.registered_epoch != self._command_epoch
        if self.endpoint_id is None or stale or self._superseded:
            await self._register_to_join()
        result = await self.command("JoinSession", {"endpointId": self.endpoint_id}, guard=False)
        media, session = result["media"], result["session"]
        self.joined_epoch = self.registered_epoch = int(session["sessionEpoch"])
        self._superseded = False
        return JoinResult(
            url=media["url"],
            token=media["token"],
            room=media["room"],
            expires_at=media["expiresAt"],
            epoch=self.joined_epoch,
            identity=media.get("identity", ""),
            endpoint_id=str(self.endpoint_id),
            command_id=result["_commandId"],
        )

    async def _register_to_join(self) -> None:
        self.joined_epoch = None  # a superseded device registers again before it joins
        self._superseded = False
        await self.register()

    async def send_interaction(self, type: str, payload: Mapping[str, Any]) -> Interaction:
        """SendInteraction: `type` (input.text, visual.select, …) with its payload."""
        result = await self.command("SendInteraction", {"type": type, "payload": dict(payload)})
        accepted = result["interaction"]
        interaction = Interaction(
            command_id=accepted["commandId"],
            type=accepted["type"],
            accepted_at=accepted["acceptedAt"],
            operation=result.get("operation"),
        )
        self.emit(interaction)
        return interaction

    async def send_text(self, text: str) -> Interaction:
        return await self.send_interaction("input.text", {"text": text})

    async def confirm(
        self,
        operation_id: str,
        decision: Literal["approve", "deny"],
        *,
        via: Literal["interaction", "task"] = "interaction",
        text: str | None = None,
    ) -> dict[str, Any]:
        """Answer the agent's requirement for `operation_id`: the operation afterwards.
        `via="task"` answers with A2A ContinueTask (`text` joins the message)."""
        if decision not in ("approve", "deny"):
            raise ValueError("decision is 'approve' or 'deny'")
        if via == "task":
            return await self._continue_task(operation_id, decision, text)
        if decision == "deny":
            result = await self.send_interaction("operation.cancel", {"operationId": operation_id})
        else:
            asked = self.requirements.get(operation_id) or await self._requirement(operation_id)
            result = await self.send_interaction(
                "operation.confirm",
                {
                    "operationId": operation_id,
                    "requirementId": asked.requirement_id,
                    "actionDigest": asked.action_digest,
                },
            )
        if result.operation is not None:
            return result.operation
        return await self.operation(operation_id)

    async def operation(self, operation_id: str) -> dict[str, Any]:
        got = await self.link.rpc.call(
            "aim.realtime.GetOperation", {"sessionId": self.session_id, "operationId": operation_id}
        )
        operation: dict[str, Any] = got["operation"]
        return operation

    async def _requirement(self, operation_id: str) -> Requirement:
        """The open requirement of an operation the stream has not shown (yet)."""
        task = await self.link.rpc.call("GetTask", {"id": self.task_id, "historyLength": 0})
        shown = requirement_in(task.get("status") or {})
        if shown is not None and shown.operation_id == operation_id:
            return shown
        operation = await self.operation(operation_id)
        asked = operation.get("requirement") or {}
        version = task.get("metadata", {}).get(REALTIME, {}).get("taskVersion", 0)
        return Requirement(
            operation_id=operation_id,
            requirement_id=str(asked.get("requirementId", "")),
            action=asked.get("action") or {},
            action_digest=str(asked.get("actionDigest", "")),
            expected_version=int(version),
        )

    async def _continue_task(
        self, operation_id: str, decision: str, text: str | None
    ) -> dict[str, Any]:
        await self.vet()
        self.check_not_superseded("ContinueTask")
        asked = self.requirements.get(operation_id)
        if asked is None or self.requirement != asked:
            asked = await self._requirement(operation_id)
        parts: list[dict[str, Any]] = [{"text": text}] if text else []
        parts.append({"data": {"decision": decision}, "mediaType": "application/json"})
        await self.link.rpc.call(
            "ContinueTask",
            {
                "id": self.task_id,
                "requirementId": asked.requirement_id,
                "expectedVersion": asked.expected_version,
                "actionDigest": asked.action_digest,
                "message": {
                    "messageId": str(uuid.uuid4()),
                    "role": "ROLE_USER",
                    "taskId": self.task_id,
                    "parts": parts,
                },
                "historyLength": 0,
            },
        )
        return await self.operation(operation_id)

    async def end(self, reason: str = "ended by the app") -> dict[str, Any]:
        """EndSession (no epoch): the session afterwards, `ending`."""
        result = await self.command("EndSession", {"reason": reason}, epoch=False, guard=False)
        session: dict[str, Any] = result["session"]
        return session
