"""The events a session accepts (realtime-profile §5): client commands, LiveKit webhooks, timers.

Frozen, tagged values (`{"type": "Join", ...}`), so the shell can store or log one `SessionEvent`
union. Each maps to one event *name* in the session's transition table (`event_name`): a
participant event of the agent is `agent_joined` / `agent_left`, the others are about endpoints.

Epochs: `RegisterEndpoint` and `Join` carry the client's `sessionEpoch`. Provisioning events and
`RoomDeleted` carry the epoch of the room they concern (the epoch in its name). Participant events
carry the participant's epoch: for an endpoint, the `sessionEpoch` in its token metadata; for the
agent, the epoch of the room it was dispatched to. `GraceExpired` and `ProvisioningTimeout` carry
the epoch at which their timer was armed.

The agent's own events (`AgentDispatched`, `AgentJobStarted`, `AgentJobEnded`,
`AgentStartTimeout`) carry the epoch of the room and the `attempt` of the dispatch they concern:
the n-th dispatch of the agent into that room, written into its metadata and copied by LiveKit
into its job's.
"""

from __future__ import annotations

from typing import Literal, assert_never

import msgspec

from state_machines.endpoint import Capabilities

SessionEventName = Literal[
    "provisioned",
    "provisioning_failed",
    "provisioning_timeout",
    "register_endpoint",
    "join",
    "participant_joined",
    "participant_left",
    "agent_joined",
    "agent_left",
    "grace_expired",
    "idle_timeout",
    "max_duration",
    "room_lost",
    "end",
    "cancel",
    "room_deleted",
    "agent_dispatched",
    "agent_job_started",
    "agent_job_ended",
    "agent_start_timeout",
    "rotation_due",
    "agent_deadline",
    "leave_grace",
]


class Provisioned(msgspec.Struct, frozen=True, tag=True):
    """The room of `epoch` exists and the agent was dispatched into it."""

    epoch: int


class ProvisioningFailed(msgspec.Struct, frozen=True, tag=True):
    """Creating the room of `epoch` or dispatching the agent failed for good."""

    epoch: int
    reason: str


class ProvisioningTimeout(msgspec.Struct, frozen=True, tag=True):
    """Provisioning of `epoch` did not finish in time (the timer the shell arms: 15 s unless
    configured otherwise)."""

    epoch: int


class RegisterEndpoint(msgspec.Struct, frozen=True, tag=True):
    """aim.realtime.RegisterEndpoint; `endpoint_id` is used only for a new clientEndpointKey."""

    epoch: int
    endpoint_id: str
    client_endpoint_key: str
    capabilities: Capabilities
    max_endpoints: int


class Join(msgspec.Struct, frozen=True, tag=True):
    """aim.realtime.JoinSession by `endpoint_id`; a join that hands the session off is refused
    past `max_handoffs_per_minute` handoffs in the last minute (0: no bound)."""

    epoch: int
    endpoint_id: str
    max_handoffs_per_minute: int = 0


class ParticipantJoined(msgspec.Struct, frozen=True, tag=True):
    """Webhook participant_joined in the session's room."""

    epoch: int
    identity: str
    is_agent: bool


class ParticipantLeft(msgspec.Struct, frozen=True, tag=True):
    """Webhook participant_left / participant_connection_aborted."""

    epoch: int
    identity: str
    is_agent: bool


class GraceExpired(msgspec.Struct, frozen=True, tag=True):
    """The reconnect grace timer (60 s) of `endpoint_id`, armed at `epoch` by the session's
    `disconnect`-th drop, fired (-1: whichever drop is current)."""

    epoch: int
    endpoint_id: str
    disconnect: int = -1


class IdleTimeout(msgspec.Struct, frozen=True, tag=True):
    """No endpoint was active for the idle timeout (300 s) since the session became idle for
    the `idle`-th time (-1: whichever time it is now)."""

    idle: int = -1


class MaxDuration(msgspec.Struct, frozen=True, tag=True):
    """The session reached its maximum duration (3600 s)."""


class RoomLost(msgspec.Struct, frozen=True, tag=True):
    """Webhook room_finished for `room`."""

    room: str


class End(msgspec.Struct, frozen=True, tag=True):
    """aim.realtime.EndSession (no epoch: ending is always allowed)."""

    reason: str


class Cancel(msgspec.Struct, frozen=True, tag=True):
    """A2A CancelTask."""


class RoomDeleted(msgspec.Struct, frozen=True, tag=True):
    """The DeleteRoom effect for the room of `epoch` is done."""

    epoch: int


class AgentDispatched(msgspec.Struct, frozen=True, tag=True):
    """The replacement dispatch `attempt` into the room of `epoch` exists: LiveKit answered
    CreateDispatch (or listed it) with `dispatch_id`."""

    epoch: int
    attempt: int
    dispatch_id: str


class AgentJobStarted(msgspec.Struct, frozen=True, tag=True):
    """Webhook agent_job_started: a worker took job `job_id` of dispatch `attempt` in the room of
    `epoch`; its agent joins the room as `identity` ("" when LiveKit did not say)."""

    epoch: int
    attempt: int
    job_id: str
    identity: str = ""
    dispatch_id: str = ""


class AgentJobEnded(msgspec.Struct, frozen=True, tag=True):
    """Webhook agent_job_ended: job `job_id` of dispatch `attempt` in the room of `epoch` is over
    (done, failed, its worker gone, its dispatch deleted)."""

    epoch: int
    attempt: int
    job_id: str
    identity: str = ""


class AgentStartTimeout(msgspec.Struct, frozen=True, tag=True):
    """The start timer of dispatch `attempt` in the room of `epoch` fired
    (AIM_AGENT_START_TIMEOUT_S, doubled for each dispatch in a row that started no job)."""

    epoch: int
    attempt: int


class RotationDue(msgspec.Struct, frozen=True, tag=True):
    """The rotation timer of the serving agent of `generation` in the room of `epoch` fired:
    its `deadline` (RFC 3339; `reason` why) is near enough to dispatch its successor. Armed
    ahead of a deadline the agent reported, or by the configured rotation interval."""

    epoch: int
    generation: int
    deadline: str
    reason: Literal["provider_cap", "provider_goaway", "planned"]


class AgentDeadline(msgspec.Struct, frozen=True, tag=True):
    """The deadline `deadline` of the serving agent of `generation` in the room of `epoch`
    passed: with no successor in by now, the agent is lost."""

    epoch: int
    generation: int
    deadline: str


class LeaveGrace(msgspec.Struct, frozen=True, tag=True):
    """The grace after a handover ended: the predecessor `identity`, told to leave the room of
    `epoch`, is removed if it is still there."""

    epoch: int
    identity: str


AgentEvent = AgentDispatched | AgentJobStarted | AgentJobEnded | AgentStartTimeout

SessionEvent = (
    Provisioned
    | ProvisioningFailed
    | ProvisioningTimeout
    | RegisterEndpoint
    | Join
    | ParticipantJoined
    | ParticipantLeft
    | GraceExpired
    | IdleTimeout
    | MaxDuration
    | RoomLost
    | End
    | Cancel
    | RoomDeleted
    | AgentDispatched
    | AgentJobStarted
    | AgentJobEnded
    | AgentStartTimeout
    | RotationDue
    | AgentDeadline
    | LeaveGrace
)


def event_name(event: SessionEvent) -> SessionEventName:
    """The name under which `event` appears in the session's transition table."""
    match event:
        case Provisioned():
            return "provisioned"
        case ProvisioningFailed():
            return "provisioning_failed"
        case ProvisioningTimeout():
            return "provisioning_timeout"
        case RegisterEndpoint():
            return "register_endpoint"
        case Join():
            return "join"
        case ParticipantJoined():
            return "agent_joined" if event.is_agent else "participant_joined"
        case ParticipantLeft():
            return "agent_left" if event.is_agent else "participant_left"
        case GraceExpired():
            return "grace_expired"
        case IdleTimeout():
            return "idle_timeout"
        case MaxDuration():
            return "max_duration"
        case RoomLost():
            return "room_lost"
        case End():
            return "end"
        case Cancel():
            return "cancel"
        case RoomDeleted():
            return "room_deleted"
        case AgentDispatched():
            return "agent_dispatched"
        case AgentJobStarted():
            return "agent_job_started"
        case AgentJobEnded():
            return "agent_job_ended"
        case AgentStartTimeout():
            return "agent_start_timeout"
        case RotationDue():
            return "rotation_due"
        case AgentDeadline():
            return "agent_deadline"
        case LeaveGrace():
            return "leave_grace"
        case _:
            assert_never(event)
