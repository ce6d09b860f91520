"""A minimal agent worker for the AIM realtime service, written against livekit-agents 1.8.9.

It registers with LiveKit under the agent name the service dispatches (`AIM_AGENT_NAME`,
default `aim-realtime-agent`), so LiveKit gives it a job for every session room the service
creates. For each job it reads the dispatch metadata the service wrote, joins the room, reports
its state over the provider API and asks the user to confirm one action. It talks to the
service through the project's agent helper, `realtime.client.AgentSession`
(docs/python-client.md): it checks the metadata, retries the provider calls with their
requestId (exactly once), and takes each data message of the service once. The provider API
itself is "Provider API (`POST /provider`)" in docs/protocol.md. A sketch, not a product: no
speech, no model, no tools.

    pip install "livekit-agents==1.8.9" "aim-realtime[client]"   # or the checkout: -e '.[client]'
    export LIVEKIT_URL=ws://127.0.0.1:7880 LIVEKIT_API_KEY=devkey LIVEKIT_API_SECRET=secret
    python -m livekit.agents start docs/examples/agent_worker.py

docs/local-livekit.md runs it next to `livekit-server --dev` and the service.
"""

from __future__ import annotations

import asyncio
import logging
import os

from livekit import rtc
from livekit.agents import AgentServer, AutoSubscribe, JobContext, cli

from realtime.client import AgentSession, AimError, InteractionMessage, OperationUpdate

# the service's AIM_AGENT_NAME; a worker with a name is dispatched only explicitly, as the
# service does (one dispatch per room), never automatically to every room
AGENT_NAME = os.environ.get("AIM_AGENT_NAME", "aim-realtime-agent")
CONFIRMATION_TTL_S = 60  # expiresInSeconds of the request; the service's default is 120 s

log = logging.getLogger("aim-agent-worker")
server = AgentServer()


@server.rtc_session(agent_name=AGENT_NAME)
async def entrypoint(ctx: JobContext) -> None:
    # {sessionId, sessionEpoch, taskId, retention, requested, providerUrl, providerToken},
    # checked member by member (AgentMetadataError names what is wrong)
    agent = AgentSession.from_metadata(ctx.job.metadata)
    updates: asyncio.Queue[OperationUpdate] = asyncio.Queue()

    @ctx.room.on("data_received")
    def on_data(packet: rtc.DataPacket) -> None:
        # the service's messages on topic aim.realtime.v1, sent at least once: receive() gives
        # each once (None for repeats and other topics): the user's interactions (input.text,
        # visual.select, response.interrupt, media.*) and operation.update whenever an
        # operation is resolved (also, on joining, for those resolved before)
        message = agent.receive(packet.data, packet.topic)
        if isinstance(message, OperationUpdate):
            updates.put_nowait(message)
        elif isinstance(message, InteractionMessage):
            log.info("session %s: %s %s", agent.session_id, message.type, message.payload)

    async def leave() -> None:
        try:
            await agent.report_state("left")
        except AimError as exc:  # the session may be over already
            log.info("could not report left: %s", exc)
        await agent.aclose()

    ctx.add_shutdown_callback(leave)
    await ctx.connect(auto_subscribe=AutoSubscribe.AUDIO_ONLY)
    await agent.report_state("joined")
    await agent.report_state("listening")

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
        await agent.report_state("thinking")
        await agent.update_operation(
            operation_id, "succeeded", result={"booked": True, "people": 2}
        )
        await agent.report_state("listening")
    else:  # canceled (the user said no) or expired
        log.info("operation %s ended %s", operation_id, update.state)


if __name__ == "__main__":
    # `python docs/examples/agent_worker.py dev|start`: livekit-agents' own command line, which
    # 1.8 deprecates in favour of `python -m livekit.agents start <file>` and `lk agent ...`
    cli.run_app(server)
