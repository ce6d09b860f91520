"""Sessions and operations in the pure core, built as a user and an agent would make them: a
live session (provisioned, a device joined, the agent in the room), the agent's request for a
confirmation, the user's answer."""

from __future__ import annotations

import json

from state_machines import Accepted, Rejected, decide
from state_machines import provider as agent
from state_machines.endpoint import Capabilities
from state_machines.interactions import Resolve
from state_machines.operation import Requirement
from state_machines.session import (
    Join,
    ParticipantJoined,
    Provisioned,
    RegisterEndpoint,
    Requested,
    Session,
    new_session,
)

T0 = "2026-01-01T00:00:00.000Z"
T1 = "2026-01-01T00:00:01.000Z"
DIGEST = "sha256:" + "a" * 64
OTHER = "sha256:" + "b" * 64
CAPS = Capabilities(True, True, True, False, ("text", "confirmation"))
# a device with audio both ways and text, no camera, no screen
AUDIO_TEXT = Capabilities(
    audio_input=True, audio_output=True, camera=False, screen=False, interactions=("text",)
)


def run(session: Session, *events: object) -> Session:
    for event in events:
        outcome = step(session, event)
        assert isinstance(outcome, Accepted), outcome
        session = outcome.state
    return session


def step(session: Session, event: object) -> Accepted[Session] | Rejected:
    return decide(session, event, now=T1)  # type: ignore[arg-type]


TEXT_ONLY = Requested(user_video_sources=(), agent_video_sources=(), interactions=("text",))


def created(
    requested: Requested = TEXT_ONLY,
    *,
    required: tuple[str, ...] = ("audio",),
    transcript: str = "off",
    now: str = T0,
) -> Session:
    """A session as the service creates it (provisioning): ids s1, t1, c1 and cs1."""
    return new_session(
        requested=requested,
        required_capabilities=required,
        transcript=transcript,  # type: ignore[arg-type]
        now=now,
        session_id="s1",
        task_id="t1",
        context_id="c1",
        client_session_id="cs1",
    ).state


def live(
    *,
    interactions: tuple[str, ...] = ("text", "confirmation"),
    transcript: str = "off",
    caps: Capabilities = CAPS,
    agent_joined: bool = True,
    agent_sources: tuple[str, ...] = ("screen",),
) -> Session:
    """Provisioned, the phone's endpoint joined and in the room, the agent too unless not
    `agent_joined`; the user may send camera and screen, the agent `agent_sources`."""
    requested = Requested(("camera", "screen"), agent_sources, interactions)
    session = run(
        created(requested, required=(), transcript=transcript),
        Provisioned(1),
        RegisterEndpoint(1, "ep-a", "phone", caps, 8),
        Join(1, "ep-a"),
        ParticipantJoined(1, "ep-a", False),
    )
    return run(session, ParticipantJoined(1, "agent-1", True)) if agent_joined else session


def ask(op: str = "op-1", req: str = "req-1", **overrides: object) -> agent.RequestOperation:
    fields: dict[str, object] = {
        "epoch": 1,
        "room_epoch": 1,
        "operation_id": op,
        "kind": "action",
        "action_json": json.dumps({"title": "Book"}),
        "requirement": Requirement(
            requirement_id=req, action_digest=DIGEST, expires_at="2026-01-01T00:02:00.000Z"
        ),
    }
    fields.update(overrides)
    return agent.RequestOperation(**fields)  # type: ignore[arg-type]


def confirm(op: str = "op-1", req: str = "req-1", digest: str = DIGEST, **kw: object) -> Resolve:
    return Resolve(
        command_id="c-1",
        decision="confirm",
        via="interaction",
        epoch=1,
        operation_id=op,
        requirement_id=req,
        action_digest=digest,
        **kw,  # type: ignore[arg-type]
    )
