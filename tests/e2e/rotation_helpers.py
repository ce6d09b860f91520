"""A session whose agents rotate (profile §23), driven through the provider API with each agent's
own token, against the LiveKit stand-in's simulated worker and the service's own clock."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

from livekit import api

from realtime.timestamps import timestamp
from tests.e2e.agent_operation_helpers import data_to_agent, provider_call
from tests.e2e.agent_presence_helpers import World, ours, room, until
from tests.e2e.realtime_helpers import call, create_part, create_session, new_id, session_of
from tests.e2e.webhook_helpers import get, join

INTERACTIONS = ["text", "confirmation"]
MARGIN_S = 30  # AIM_AGENT_ROTATE_MARGIN_S's default
GRACE_S = 10  # AIM_AGENT_LEAVE_GRACE_S's default


@dataclass(frozen=True)
class Agent:
    """One agent of the session: its dispatch, its job (once started) and its provider token."""

    dispatch: api.AgentDispatch
    generation: int
    token: str
    identity: str = ""

    async def call(self, world: World, session_id: str, method: str, **params: Any) -> dict:
        _, body, _ = await provider_call(
            world.http, self.token, method, sessionId=session_id, **params
        )
        return body


def agent_of(dispatch: api.AgentDispatch, identity: str = "") -> Agent:
    meta = json.loads(dispatch.metadata)
    return Agent(dispatch, int(meta.get("agentGeneration", 1)), meta["providerToken"], identity)


async def live_session(world: World) -> tuple[str, str, Agent]:
    """A session with a device in the room and its first agent joined: (session id, device
    endpoint id, the agent)."""
    part = create_part(
        requested={
            "mediaBinding": "livekit-webrtc-v1",
            "audio": "bidirectional",
            "userVideoSources": [],
            "agentVideoSources": [],
            "interactions": INTERACTIONS,
        }
    )
    created = await create_session(world.http, part=part)
    session_id = str(session_of(created["result"]["task"])["sessionId"])
    caps = {
        "audioInput": True,
        "audioOutput": True,
        "camera": False,
        "screen": False,
        "interactions": INTERACTIONS,
    }
    registered = await call(
        world.http,
        "RegisterEndpoint",
        sessionId=session_id,
        sessionEpoch=1,
        commandId=new_id(),
        clientEndpointKey="phone",
        capabilities=caps,
    )
    phone: str = registered["result"]["endpoint"]["endpointId"]
    answer = await join(world.http, session_id, phone, 1)
    world.livekit.connect(answer["result"]["media"]["token"])
    [dispatch] = ours(world.livekit, session_id)
    first = await start(world, session_id, dispatch)
    await until(world, session_id, lambda s: s["state"] == "active")
    return session_id, phone, first


async def start(world: World, session_id: str, dispatch: api.AgentDispatch) -> Agent:
    """The worker takes `dispatch`: its job starts, its agent joins the room."""
    job = world.livekit.start_job(dispatch.id)
    agent = agent_of(dispatch, job.state.participant_identity)
    await until(
        world,
        session_id,
        lambda s: (
            s["agent"].get("identity") == agent.identity
            and s["agent"].get("generation", 1) == agent.generation
        ),
    )
    return agent


def ahead(world: World, seconds: float) -> str:
    """The service's time `seconds` from now, as RFC 3339."""
    return timestamp(int((world.clock() + seconds) * 1000))


def ahead_of_now(seconds: float) -> str:
    """Real time `seconds` from now, as RFC 3339 (a service on the real clock)."""
    return timestamp(int((time.time() + seconds) * 1000))


async def report_deadline(
    world: World, session_id: str, agent: Agent, seconds: float, reason: str = "provider_cap"
) -> dict:
    body = await deadline_call(world, session_id, agent, ahead(world, seconds), reason=reason)
    assert "result" in body, body
    return body


async def deadline_call(
    world: World,
    session_id: str,
    agent: Agent,
    deadline: str,
    *,
    reason: str = "planned",
    epoch: int = 1,
) -> dict:
    """The agent's ReportDeadline as sent, its answer as it came (a result or an error)."""
    return await agent.call(
        world, session_id, "ReportDeadline", sessionEpoch=epoch, deadline=deadline, reason=reason
    )


async def successor_dispatched(world: World, session_id: str, generation: int) -> api.AgentDispatch:
    """Our dispatch of the agent of `generation`, once it is made."""
    found = await until_dispatches(
        world, session_id, lambda d: any(agent_of(x).generation == generation for x in d)
    )
    return next(d for d in found if agent_of(d).generation == generation)


async def until_dispatches(world: World, session_id: str, check: Any) -> list[api.AgentDispatch]:
    found: list[api.AgentDispatch] = []

    def holds(_: dict) -> bool:
        found[:] = ours(world.livekit, session_id)
        return bool(check(found))

    await until(world, session_id, holds)
    return found


async def interact(world: World, session_id: str, text: str) -> str:
    """The user's input.text (epoch 1): its commandId."""
    command_id = new_id()
    body = await call(
        world.http,
        "SendInteraction",
        sessionId=session_id,
        sessionEpoch=1,
        commandId=command_id,
        type="input.text",
        payload={"text": text},
    )
    assert "result" in body, body
    return command_id


def delivered_to(world: World, session_id: str) -> dict[str, list[str]]:
    """Each input.text's commandId → the agents its data message went to, in order."""
    found: dict[str, list[str]] = {}
    for request in world.livekit.data_messages:
        if request.room != room(session_id):
            continue
        body = json.loads(request.data)
        if body["type"] == "input.text":
            found.setdefault(body["commandId"], []).extend(request.destination_identities)
    return found


def told_to_leave(world: World, session_id: str) -> list[dict]:
    return data_to_agent(world.livekit, room(session_id), "agent.leave")


async def session_now(world: World, session_id: str) -> dict:
    return await get(world.http, session_id)


def rotation_counts(world: World) -> dict[str, float]:
    """`aim.agent.rotations` by outcome, and the number of seams recorded (`seams`)."""
    data = world.metrics.get_metrics_data()
    found: dict[str, float] = {}
    for resource in data.resource_metrics if data else []:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                if metric.name == "aim.agent.rotations":
                    for point in metric.data.data_points:
                        found[str(point.attributes["outcome"])] = point.value
                if metric.name == "aim.agent.rotation.seam":
                    found["seams"] = sum(p.count for p in metric.data.data_points)
    return found
