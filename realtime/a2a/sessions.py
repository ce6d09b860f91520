"""Wire views of realtime objects (profile §4): Session, Endpoint, Command, join media."""

from __future__ import annotations

from typing import Any, Final, Literal

import msgspec
from msgspec import UNSET, UnsetType

from realtime.a2a.projection import shown_agent_state
from realtime.a2a.types import Wire
from state_machines import Endpoint as EndpointSnapshot
from state_machines import Operation as OperationSnapshot
from state_machines import Session as SessionSnapshot
from state_machines import operation as operations

MEDIA_BINDING: Final = "livekit-webrtc-v1"  # params.py spells it once more, as a Literal


class Capabilities(Wire, frozen=True):
    audio_input: bool
    audio_output: bool
    camera: bool
    screen: bool
    interactions: list[str]


class Endpoint(Wire, frozen=True):
    endpoint_id: str
    client_endpoint_key: str
    capabilities: Capabilities
    state: str
    registered_at: str
    identity: str
    joined_at: str | UnsetType = UNSET


class SourceStates(Wire, frozen=True):
    camera: str
    screen: str


class Sources(Wire, frozen=True):
    user: SourceStates
    agent: SourceStates


class Media(Wire, frozen=True):
    binding: str
    url: str
    room: str
    sources: Sources


class Rotation(Wire, frozen=True):
    """A successor under way (profile §23): its generation, why, the serving agent's deadline."""

    to_generation: int
    reason: str
    deadline: str | None = None


class Agent(Wire, frozen=True):
    """The agent's presence: its state (`rotating` while a successor is under way: nothing for
    the app to do), the identity it joined with, which dispatch into the room is current (1,
    then 2, … once replaced), the job LiveKit started for it, and its generation among the
    session's agents (profile §23)."""

    state: str
    dispatch_attempt: int
    generation: int = 1
    identity: str | None = None
    job_id: str | UnsetType = UNSET
    rotation: Rotation | UnsetType = UNSET


class Requested(Wire, frozen=True):
    media_binding: str
    audio: str
    user_video_sources: list[str]
    agent_video_sources: list[str]
    interactions: list[str]


class Retention(Wire, frozen=True):
    transcript: str
    summary: Literal["off"] = "off"


class Session(Wire, frozen=True):
    session_id: str
    task_id: str
    context_id: str
    client_session_id: str
    session_epoch: int
    state: str
    version: int
    created_at: str
    updated_at: str
    requested: Requested
    required_capabilities: list[str]
    recording: str
    retention: Retention
    media: Media
    agent: Agent
    endpoints: list[Endpoint]
    pending_operation_ids: list[str]
    ended_at: str | UnsetType = UNSET
    end_reason: str | UnsetType = UNSET
    active_endpoint_id: str | UnsetType = UNSET


class JoinMediaView(Wire, frozen=True):
    """`media` of a JoinSession result: where and how the endpoint joins the room."""

    binding: str
    url: str
    room: str
    identity: str
    token: str
    expires_at: str


class JoinResult(Wire, frozen=True):
    """The JoinSession result. Its outcome is stored with an empty `media.token` (tokens are
    not stored, profile §6): every reply signs the stored claims into it again."""

    session: msgspec.Raw
    endpoint: msgspec.Raw
    media: JoinMediaView


def endpoint_view(endpoint: EndpointSnapshot) -> Endpoint:
    caps = endpoint.capabilities
    return Endpoint(
        endpoint_id=endpoint.endpoint_id,
        client_endpoint_key=endpoint.client_endpoint_key,
        capabilities=Capabilities(
            audio_input=caps.audio_input,
            audio_output=caps.audio_output,
            camera=caps.camera,
            screen=caps.screen,
            interactions=list(caps.interactions),
        ),
        state=endpoint.state,
        registered_at=endpoint.registered_at,
        identity=endpoint.endpoint_id,
        joined_at=endpoint.joined_at if endpoint.joined_at is not None else UNSET,
    )


def session_view(session: SessionSnapshot, *, version: int, media_url: str) -> Session:
    """The Session object of profile §4 for snapshot `session` at `version`."""
    return Session(
        session_id=session.session_id,
        task_id=session.task_id,
        context_id=session.context_id,
        client_session_id=session.client_session_id,
        session_epoch=session.epoch,
        state=session.state,
        version=version,
        created_at=session.created_at,
        updated_at=session.updated_at,
        ended_at=session.ended_at if session.ended_at is not None else UNSET,
        end_reason=session.end_reason if session.end_reason is not None else UNSET,
        requested=Requested(
            media_binding=MEDIA_BINDING,
            audio="bidirectional",
            user_video_sources=list(session.requested.user_video_sources),
            agent_video_sources=list(session.requested.agent_video_sources),
            interactions=list(session.requested.interactions),
        ),
        required_capabilities=list(session.required_capabilities),
        recording="off",
        retention=Retention(transcript=session.transcript),
        media=Media(
            binding=MEDIA_BINDING,
            url=media_url,
            room=session.room,
            sources=Sources(
                user=SourceStates(
                    camera=session.media.user_camera, screen=session.media.user_screen
                ),
                agent=SourceStates(
                    camera=session.media.agent_camera, screen=session.media.agent_screen
                ),
            ),
        ),
        agent=agent_view(session),
        active_endpoint_id=(
            session.active_endpoint_id if session.active_endpoint_id is not None else UNSET
        ),
        endpoints=[endpoint_view(endpoint) for endpoint in session.endpoints],
        pending_operation_ids=[
            op.operation_id for op in session.operations if not operations.is_terminal(op.state)
        ],
    )


def agent_view(session: SessionSnapshot) -> Agent:
    """The agent as clients see it: `rotating` while a successor is under way (the serving
    agent still answers; the session stays as it is)."""
    rotation = session.rotation
    deadline = session.agent_deadline
    return Agent(
        state=shown_agent_state(session.agent_state, rotating=rotation is not None),
        dispatch_attempt=session.agent_attempt,
        generation=session.agent_generation,
        identity=session.agent_identity,
        job_id=session.agent_job.job_id if session.agent_job is not None else UNSET,
        rotation=(
            Rotation(
                to_generation=rotation.generation,
                reason=rotation.reason,
                deadline=deadline.at if deadline is not None else None,
            )
            if rotation is not None
            else UNSET
        ),
    )


def to_builtins(value: Any) -> Any:
    return msgspec.to_builtins(value)


class RequirementView(Wire, frozen=True):
    requirement_id: str
    action: Any
    action_digest: str
    expires_at: str


class MediaTargetView(Wire, frozen=True):
    side: str
    source: str


class OperationView(Wire, frozen=True):
    operation_id: str
    session_id: str
    kind: str
    state: str
    created_at: str
    updated_at: str
    created_by: str
    requirement: RequirementView | UnsetType = UNSET
    media: MediaTargetView | UnsetType = UNSET
    result: Any | UnsetType = UNSET
    error: Any | UnsetType = UNSET


def operation_view(session_id: str, op: OperationSnapshot) -> OperationView:
    """The Operation object of profile §4."""
    asked = op.requirement
    action = msgspec.json.decode(op.action_json) if op.action_json else None
    return OperationView(
        operation_id=op.operation_id,
        session_id=session_id,
        kind=op.kind,
        state=op.state,
        created_at=op.created_at,
        updated_at=op.updated_at,
        created_by=op.created_by,
        requirement=(
            RequirementView(
                requirement_id=asked.requirement_id,
                action=action,
                action_digest=asked.action_digest,
                expires_at=asked.expires_at,
            )
            if asked is not None
            else UNSET
        ),
        media=(
            MediaTargetView(side=op.media_side, source=op.media_source)
            if op.media_side is not None and op.media_source is not None
            else UNSET
        ),
        result=_present(op.result_json),
        error=_present(op.error_json),
    )


def _present(value_json: str | None) -> Any:
    """A stored JSON value, or UNSET (left out) when there is none."""
    if value_json is None or value_json == "null":
        return UNSET
    return msgspec.json.decode(value_json)
