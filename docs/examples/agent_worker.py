"""A minimal agent worker for the AIM realtime service, written against livekit-agents 1.8.9.

It registers with LiveKit under the agent name the service dispatches (`AIM_AGENT_NAME`,
default `aim-realtime-agent`), so LiveKit gives it a job for every session room the service
creates. For each job it reads the dispatch metadata the service wrote, joins the room, reports
its state over the provider API, keeps a chat context of what was said, and asks the user to
confirm one action. It talks to the service through the project's agent helper,
`aim_realtime_client.AgentSession` (docs/python-client.md): it checks the metadata, retries the
provider calls with their requestId (exactly once), and takes each data message of the service
once. The provider API itself is "Provider API (`POST /provider`)" in docs/protocol.md.

It also survives its model's time cap (docs/agents.md, rotation): with `MODEL_SESSION_CAP_S`
set (a realtime model's connection lasts at most that long), it reports its deadline when it
starts; it saves its chat context after every turn; when the service brings in its successor
it leaves on `agent.leave`; and a successor (a job whose metadata says `successorOf`) starts
from the saved chat context and the messages its predecessor had not acknowledged. The user
notices nothing. A sketch, not a product: no speech, no model (it echoes), no tools.

    pip install "livekit-agents==1.8.9" -e clients/python   # from the service's checkout
    export LIVEKIT_URL=ws://127.0.0.1:7880 LIVEKIT_API_KEY=devkey LIVEKIT_API_SECRET=secret
    export MODEL_SESSION_CAP_S=3600   # e.g. a realtime model whose sessions end after an hour
    python -m livekit.agents start docs/examples/agent_worker.py

docs/local-livekit.md runs it next to `livekit-server --dev` and the service.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
from datetime import UTC, datetime, timedelta

from livekit import rtc
from livekit.agents import AgentServer, AutoSubscribe, JobContext, cli, llm

from aim_realtime_client import (
    AgentReplacedError,
    AgentSession,
    AimError,
    InteractionMessage,
    LeaveNow,
    OperationUpdate,
)

# the service's AIM_AGENT_NAME; a worker with a name is dispatched only explicitly, as the
# service does (one dispatch per room), never automatically to every room
AGENT_NAME = os.environ.get("AIM_AGENT_NAME", "aim-realtime-agent")
CONFIRMATION_TTL_S = 60  # expiresInSeconds of the request; the service's default is 120 s
# how long this worker's model connection lasts at most (0: no cap, no rotation)
MODEL_SESSION_CAP_S = int(os.environ.get("MODEL_SESSION_CAP_S", "0"))
CONTEXT_BYTES = 64 * 1024  # what the service keeps of a saved context at most

log = logging.getLogger("aim-agent-worker")
server = AgentServer()


def saved(chat: llm.ChatContext) -> str:
    """The chat context as JSON within the service's bound: the newest items that fit."""
    items = chat.to_dict(exclude_image=True, exclude_audio=True)["items"]
    while items:
        text = json.dumps({"items": items}, separators=(",", ":"))
        if len(text.encode()) <= CONTEXT_BYTES:
            return text
        items = items[1:]  # the oldest goes first
    return '{"items":[]}'


@server.rtc_session(agent_name=AGENT_NAME)
async def entrypoint(ctx: JobContext) -> None:
    # {sessionId, sessionEpoch, taskId, retention, requested, providerUrl, providerToken,
    # agentGeneration, successorOf?}, checked member by member (AgentMetadataError names what
    # is wrong)
    agent = AgentSession.from_metadata(ctx.job.metadata)
    updates: asyncio.Queue[OperationUpdate] = asyncio.Queue()
    heard: asyncio.Queue[InteractionMessage] = asyncio.Queue()
    chat = llm.ChatContext.empty()

    @ctx.room.on("data_received")
    def on_data(packet: rtc.DataPacket) -> None:
        # the service's messages on topic aim.realtime.v1, sent at least once: receive() gives
        # each once (None for repeats and other topics): the user's interactions (input.text,
        # visual.select, response.interrupt, media.*), operation.update whenever an operation
        # is resolved (also, on joining, for those resolved before), and agent.leave once a
        # successor took over
        message = agent.receive(packet.data, packet.topic)
        if isinstance(message, OperationUpdate):
            updates.put_nowait(message)
        elif isinstance(message, InteractionMessage):
            heard.put_nowait(message)
        elif isinstance(message, LeaveNow):
            log.info("generation %d takes over: leaving", message.successor_generation)
            ctx.shutdown(reason="rotated")

    async def converse() -> None:
        """Each message into the chat context, acknowledged once it is there (so no successor
        is given it again), an answer, and the context saved for a successor."""
        while True:
            message = await heard.get()
            if message.type != "input.text":
                await agent.ack(message.command_id)
                continue
            chat.add_message(role="user", content=message.payload["text"])
            await agent.ack(message.command_id)
            chat.add_message(role="assistant", content=f"You said: {message.payload['text']}")
            await agent.save_context(saved(chat))

    async def leave() -> None:
        try:
            await agent.report_state("left")
        except AimError as exc:  # the session may be over, or a successor serves already
            log.info("could not report left: %s", exc)
        await agent.aclose()

    ctx.add_shutdown_callback(leave)
    await ctx.connect(auto_subscribe=AutoSubscribe.AUDIO_ONLY)
    # joined: for a successor this is the handover (it serves from now on); what it takes over
    handover = await agent.start("joined")
    if handover.context is not None:
        chat = llm.ChatContext.from_dict(json.loads(handover.context))
        log.info("took over from generation %s: %d items", agent.successor_of, len(chat.items))
    for message in handover.interactions:  # said to the predecessor, never acknowledged
        heard.put_nowait(message)
    if MODEL_SESSION_CAP_S:
        # a model session opened now ends at the cap: the service brings a successor in first
        deadline = datetime.now(UTC) + timedelta(seconds=MODEL_SESSION_CAP_S)
        await agent.report_deadline(deadline, "provider_cap")
    await agent.report_state("listening")
    talking = asyncio.create_task(converse())

    if agent.successor_of is None:  # the first agent asks; a successor finishes what it asked
        await confirm_a_booking(agent, updates)
    else:
        for operation in handover.operations:
            if operation["state"] == "running":
                await finish(agent, operation["operationId"])
    try:
        await talking
    except AgentReplacedError as replaced:  # a write after the handover: leave
        log.info("generation %s serves now: leaving", replaced.agent_generation)
        ctx.shutdown(reason="rotated")


async def confirm_a_booking(agent: AgentSession, updates: asyncio.Queue[OperationUpdate]) -> None:
    operation = await agent.request_operation(
        action={"title": "Book a table for two", "tool": "reservations.book",
                "arguments": {"people": 2}},
        confirmation="required",
        expires_in_seconds=CONFIRMATION_TTL_S,
    )  # fmt: skip
    operation_id = operation["operationId"]
    log.info("waiting for the user to confirm operation %s", operation_id)
    for update in await agent.sync():  # answered before this worker listened
        updates.put_nowait(update)
    try:
        # the service tells the agent of the answer, or of the expiry, by data message; that
        # needs the room's participant_joined webhook for this agent (docs/local-livekit.md)
        async with asyncio.timeout(CONFIRMATION_TTL_S + 10):
            while (update := await updates.get()).operation_id != operation_id:
                pass
    except TimeoutError:
        log.warning("no answer to operation %s", operation_id)
        return
    if update.state == "running":  # confirmed: carry it out, then say how it went
        await finish(agent, operation_id)
    else:  # canceled (the user said no) or expired
        log.info("operation %s ended %s", operation_id, update.state)


async def finish(agent: AgentSession, operation_id: str) -> None:
    """Carry out a confirmed operation (one a predecessor asked for included)."""
    await agent.report_state("thinking")
    await agent.update_operation(operation_id, "succeeded", result={"booked": True, "people": 2})
    await agent.report_state("listening")


if __name__ == "__main__":
    # `python docs/examples/agent_worker.py dev|start`: livekit-agents' own command line, which
    # 1.8 deprecates in favour of `python -m livekit.agents start <file>` and `lk agent ...`
    cli.run_app(server)
