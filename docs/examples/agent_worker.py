"""A minimal agent worker for the AIM realtime service, written against livekit-agents 1.8.9.

It registers with LiveKit under the agent name the service dispatches (`AIM_AGENT_NAME`,
default `aim-realtime-agent`), so LiveKit gives it a job for every session room the service
creates. For each job it reads the dispatch metadata the service wrote, joins the room, reports
its state over the provider API and asks the user to confirm one action. The provider API is
JSON-RPC 2.0 at `providerUrl`: see "Provider API (`POST /provider`)" in docs/protocol.md for
every method, its params and its errors. A sketch, not a product: no speech, no model, no tools.

    pip install "livekit-agents==1.8.9" httpx
    export LIVEKIT_URL=ws://127.0.0.1:7880 LIVEKIT_API_KEY=devkey LIVEKIT_API_SECRET=secret
    python -m livekit.agents start docs/examples/agent_worker.py

docs/local-livekit.md runs it next to `livekit-server --dev` and the service.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
import os
import uuid
from typing import Any

import httpx
from livekit import rtc
from livekit.agents import AgentServer, AutoSubscribe, JobContext, cli

# the service's AIM_AGENT_NAME; a worker with a name is dispatched only explicitly, as the
# service does (one dispatch per room), never automatically to every room
AGENT_NAME = os.environ.get("AIM_AGENT_NAME", "aim-realtime-agent")
# the topic of the service's data messages to the agent (docs/protocol.md, SendInteraction)
DATA_TOPIC = "aim.realtime.v1"
CONFIRMATION_TTL_S = 60  # expiresInSeconds of the request; the service's default is 120 s

log = logging.getLogger("aim-agent-worker")
server = AgentServer()


class ProviderError(Exception):
    """A JSON-RPC error from /provider: same codes and shapes as /a2a (docs/protocol.md)."""

    def __init__(self, error: dict[str, Any]) -> None:
        super().__init__(f"{error.get('code')}: {error.get('message')}")
        self.code = error.get("code")


class Provider:
    """The provider API of one session, authorized by the session's provider token."""

    def __init__(self, metadata: dict[str, Any]) -> None:
        self.url: str = metadata["providerUrl"]  # AIM_PROVIDER_BASE_URL (or public URL) + /provider
        self.session_id: str = metadata["sessionId"]
        # the epoch of the room this agent was dispatched to; a handoff between the user's
        # devices raises the session's epoch but keeps the room, and calls carrying any epoch
        # since the room was provisioned are accepted
        self.epoch: int = metadata["sessionEpoch"]
        self._http = httpx.AsyncClient(
            headers={"Authorization": f"Bearer {metadata['providerToken']}"}, timeout=10.0
        )
        self._ids = itertools.count(1)

    async def call(self, method: str, **params: Any) -> dict[str, Any]:
        """One `aim.provider.<method>` call. A retry sends the same body, so a RequestOperation
        or UpdateOperation keeps its requestId and is carried out once (exactly-once)."""
        body = {
            "jsonrpc": "2.0",
            "id": next(self._ids),
            "method": f"aim.provider.{method}",
            "params": {"sessionId": self.session_id, **params},
        }
        for attempt in range(3):
            try:
                reply: dict[str, Any] = (await self._http.post(self.url, json=body)).json()
                break
            except httpx.TransportError:
                if attempt == 2:
                    raise
                await asyncio.sleep(0.5 * 2**attempt)
        if "error" in reply:
            raise ProviderError(reply["error"])
        result: dict[str, Any] = reply["result"]
        return result

    async def report_state(self, state: str) -> None:
        """joined | listening | thinking | speaking | left; GetSession shows it as agent.state."""
        await self.call("ReportAgentState", sessionEpoch=self.epoch, state=state)

    async def request_confirmation(
        self, title: str, tool: str, arguments: dict[str, Any]
    ) -> dict[str, Any]:
        """Ask the user to confirm an action: the task goes to TASK_STATE_INPUT_REQUIRED and the
        operation waits in `awaiting_confirmation` until the user answers (ContinueTask, or
        SendInteraction `operation.confirm` / `operation.cancel`) or the requirement expires."""
        result = await self.call(
            "RequestOperation",
            sessionEpoch=self.epoch,
            requestId=str(uuid.uuid4()),
            kind="action",
            action={"title": title, "tool": tool, "arguments": arguments},
            confirmation="required",
            expiresInSeconds=CONFIRMATION_TTL_S,
        )
        operation: dict[str, Any] = result["operation"]
        return operation

    async def finish(self, operation_id: str, result: dict[str, Any]) -> None:
        """Report a confirmed (`running`) operation done; `failed` with `error` is the other end."""
        await self.call(
            "UpdateOperation",
            requestId=str(uuid.uuid4()),
            operationId=operation_id,
            state="succeeded",
            result=result,
        )

    async def aclose(self) -> None:
        await self._http.aclose()


@server.rtc_session(agent_name=AGENT_NAME)
async def entrypoint(ctx: JobContext) -> None:
    # {sessionId, sessionEpoch, taskId, retention, requested, providerUrl, providerToken}
    metadata = json.loads(ctx.job.metadata)
    provider = Provider(metadata)
    updates: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
    seen: set[str] = set()

    @ctx.room.on("data_received")
    def on_data(packet: rtc.DataPacket) -> None:
        # the service's messages: {type, commandId, sessionEpoch, payload}, sent at least once
        # (de-duplicate by commandId): the user's interactions (input.text, visual.select,
        # response.interrupt, media.*) and operation.update whenever an operation is resolved
        if packet.topic != DATA_TOPIC:
            return
        message = json.loads(packet.data)
        if message["commandId"] in seen:
            return
        seen.add(message["commandId"])
        if message.get("type") == "operation.update":
            updates.put_nowait(message["payload"])
        else:
            log.info("session %s: %s %s", provider.session_id, message["type"], message["payload"])

    async def leave() -> None:
        try:
            await provider.report_state("left")
        except (ProviderError, httpx.HTTPError) as exc:  # the session may be over already
            log.info("could not report left: %s", exc)
        await provider.aclose()

    ctx.add_shutdown_callback(leave)
    await ctx.connect(auto_subscribe=AutoSubscribe.AUDIO_ONLY)
    await provider.report_state("joined")
    await provider.report_state("listening")

    operation = await provider.request_confirmation(
        "Book a table for two", "reservations.book", {"people": 2}
    )
    operation_id = operation["operationId"]
    log.info("waiting for the user to confirm operation %s", operation_id)
    try:
        # the service tells the agent of the answer, or of the expiry, by data message; that
        # needs the room's participant_joined webhook for this agent (docs/local-livekit.md)
        async with asyncio.timeout(CONFIRMATION_TTL_S + 10):
            while (update := await updates.get())["operationId"] != operation_id:
                pass
    except TimeoutError:
        log.warning("no answer to operation %s", operation_id)
        return
    if update["state"] == "running":  # confirmed: carry it out, then say how it went
        await provider.report_state("thinking")
        await provider.finish(operation_id, {"booked": True, "people": 2})
        await provider.report_state("listening")
    else:  # canceled (the user said no) or expired
        log.info("operation %s ended %s", operation_id, update["state"])


if __name__ == "__main__":
    # `python docs/examples/agent_worker.py dev|start`: livekit-agents' own command line, which
    # 1.8 deprecates in favour of `python -m livekit.agents start <file>` and `lk agent ...`
    cli.run_app(server)
