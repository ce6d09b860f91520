"""The simulated agent of the local LiveKit for development (docs/agents.md's contract, without
a model): once its job started and it joined the room, it reports its state through the
service's provider API, and it acts on the data messages the service sends it.

- `input.text`: it "answers" (its state goes `thinking`, `speaking`, then `listening`) and
  acknowledges the interaction. A text `/confirm <title>` also makes it ask for an action that
  needs the user's confirmation (`aim.provider.RequestOperation`).
- `operation.update` `running` (the user confirmed): it carries the action out at once
  (`aim.provider.UpdateOperation` `succeeded`).

Every data message is taken once (by commandId). A provider call that fails is logged and not
retried: this is a development aid, not an agent worker (docs/examples/agent_worker.py is one).
"""

from __future__ import annotations

import asyncio
import json
import logging
import uuid
from typing import Any, Final

import aiohttp

log = logging.getLogger(__name__)

TOPIC: Final = "aim.realtime.v1"  # the service's data messages (docs/agents.md)
CONFIRM: Final = "/confirm "  # an input.text asking the agent to request a confirmation
CALL_TIMEOUT_S: Final = 10.0
SEEN_MAX: Final = 1000  # commandIds remembered, to take each message once


class SimulatedAgent:
    """The agent of one job, talking to the service that dispatched it (its job's metadata:
    `providerUrl`, `providerToken`, `sessionId`, `sessionEpoch`)."""

    def __init__(self, identity: str, metadata: str) -> None:
        self.identity = identity
        try:
            found = json.loads(metadata) if metadata else {}
        except ValueError:
            found = {}
        self.meta: dict[str, Any] = found if isinstance(found, dict) else {}
        self.seen: list[str] = []
        self.calls: list[tuple[str, dict[str, Any]]] = []  # what it asked the service, in order
        self._tasks: set[asyncio.Task[None]] = set()

    @property
    def serves(self) -> bool:
        """Whether its job came from the service (else it stays silent, as an agent of another
        app would)."""
        return all(isinstance(self.meta.get(k), str) for k in ("providerUrl", "providerToken"))

    def joined(self) -> None:
        """It is in the room: it says so, then listens."""
        self._spawn(self._states("joined", "listening"))

    def receive(self, data: bytes, topic: str) -> None:
        """A data message the service sent it."""
        if topic != TOPIC or not self.serves:
            return
        try:
            message = json.loads(data)
        except ValueError:
            return
        if not isinstance(message, dict) or not isinstance(message.get("commandId"), str):
            return
        command_id = message["commandId"]
        if command_id in self.seen:
            return
        self.seen = [*self.seen[-(SEEN_MAX - 1) :], command_id]
        found = message.get("payload")
        payload: dict[str, Any] = found if isinstance(found, dict) else {}
        kind = message.get("type")
        if kind == "input.text":
            self._spawn(self._answer(command_id, str(payload.get("text", ""))))
        elif kind == "operation.update" and payload.get("state") == "running":
            self._spawn(self._carry_out(str(payload.get("operationId", ""))))

    def cancel(self) -> None:
        """It left: what it was saying stops."""
        for task in list(self._tasks):
            task.cancel()

    async def close(self) -> None:
        self.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _answer(self, command_id: str, text: str) -> None:
        await self._states("thinking", "speaking")
        await self._call("aim.provider.AckInteractions", {"commandIds": [command_id]})
        if text.startswith(CONFIRM) and text[len(CONFIRM) :].strip():
            action = {"title": text[len(CONFIRM) :].strip()[:200]}
            await self._call(
                "aim.provider.RequestOperation",
                {
                    "requestId": str(uuid.uuid4()),
                    "kind": "action",
                    "action": action,
                    "confirmation": "required",
                },
            )
        await self._states("listening")

    async def _carry_out(self, operation_id: str) -> None:
        await self._call(
            "aim.provider.UpdateOperation",
            {
                "requestId": str(uuid.uuid4()),
                "operationId": operation_id,
                "state": "succeeded",
                "result": {"done": True},
            },
            epoch=False,
        )

    async def _states(self, *states: str) -> None:
        for state in states:
            await self._call("aim.provider.ReportAgentState", {"state": state})

    async def _call(self, method: str, params: dict[str, Any], *, epoch: bool = True) -> None:
        if not self.serves:
            return
        full = {"sessionId": self.meta.get("sessionId"), **params}
        if epoch:
            full["sessionEpoch"] = self.meta.get("sessionEpoch")
        self.calls.append((method, full))
        body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": full}
        headers = {"Authorization": f"Bearer {self.meta['providerToken']}"}
        timeout = aiohttp.ClientTimeout(total=CALL_TIMEOUT_S)
        try:
            async with (
                aiohttp.ClientSession(timeout=timeout) as http,
                http.post(self.meta["providerUrl"], json=body, headers=headers) as reply,
            ):
                answer = await reply.json(content_type=None)
        except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
            log.warning("simulated agent %s: %s failed: %s", self.identity, method, exc)
            return
        if isinstance(answer, dict) and "error" in answer:
            error = answer["error"]
            log.warning(
                "simulated agent %s: %s refused: %s",
                self.identity,
                method,
                error.get("message") if isinstance(error, dict) else error,
            )

    def _spawn(self, work: Any) -> None:
        task = asyncio.get_running_loop().create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
