"""The functional core's curated exports are pinned: adding or dropping a name is a decision."""

from __future__ import annotations

import state_machines

EXPORTS = (
    "Accepted",
    "AgentDispatched",
    "AgentJobEnded",
    "AgentJobStarted",
    "AgentStartTimeout",
    "AnyEvent",
    "AppendHistory",
    "Cancel",
    "Capabilities",
    "CreateRoom",
    "DeleteDispatch",
    "DeleteRoom",
    "DispatchAgent",
    "End",
    "Endpoint",
    "EndpointState",
    "EpochBump",
    "GraceExpired",
    "IdleTimeout",
    "Join",
    "MaxDuration",
    "MediaSide",
    "MediaSource",
    "MediaSources",
    "MintJoinToken",
    "Operation",
    "OperationEvent",
    "OperationState",
    "OutboxEffect",
    "ParticipantJoined",
    "ParticipantLeft",
    "Provisioned",
    "ProvisioningFailed",
    "ProvisioningTimeout",
    "RegisterEndpoint",
    "RejectReason",
    "Rejected",
    "RemoveParticipant",
    "Requested",
    "Requirement",
    "RoomDeleted",
    "RoomLost",
    "SendData",
    "Session",
    "SessionEvent",
    "SessionState",
    "SourceState",
    "TaskCore",
    "UpdatePermissions",
    "decide",
)


def test_the_core_exports_exactly_its_curated_names() -> None:
    assert tuple(state_machines.__all__) == EXPORTS


def test_every_export_is_defined() -> None:
    missing = [name for name in EXPORTS if not hasattr(state_machines, name)]
    assert missing == []


def test_the_entry_is_the_decide_function_of_the_core() -> None:
    from state_machines.core import decide

    assert state_machines.decide is decide
