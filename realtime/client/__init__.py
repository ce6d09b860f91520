"""Python client of the AIM realtime service: `AimClient` and `Session` for devices,
`AgentSession` for agent workers. Needs httpx only (`pip install 'aim-realtime[client]'`);
importing it loads nothing of the service. Reference: docs/python-client.md."""

from realtime.client.agent import AgentSession
from realtime.client.client import AimClient
from realtime.client.dispatch import (
    TOPIC,
    AgentMessageError,
    AgentMetadataError,
    DispatchMetadata,
    InteractionMessage,
    OperationUpdate,
)
from realtime.client.errors import (
    AimError,
    AuthError,
    AuthMisconfiguredError,
    CommandConflictError,
    InvalidParamsError,
    InvalidStateError,
    LimitExceededError,
    NotFoundError,
    StaleEpochError,
    SupersededError,
    TokenExpiredError,
    UnavailableError,
    Violation,
)
from realtime.client.events import (
    AnyEvent,
    Capabilities,
    Ended,
    Event,
    Interaction,
    JoinResult,
    Rebound,
    Requirement,
    StateChanged,
    StreamFailed,
    Superseded,
    Update,
)
from realtime.client.rpc import RetryPolicy
from realtime.client.session import Session

__all__ = [
    "TOPIC",
    "AgentMessageError",
    "AgentMetadataError",
    "AgentSession",
    "AimClient",
    "AimError",
    "AnyEvent",
    "AuthError",
    "AuthMisconfiguredError",
    "Capabilities",
    "CommandConflictError",
    "DispatchMetadata",
    "Ended",
    "Event",
    "Interaction",
    "InteractionMessage",
    "InvalidParamsError",
    "InvalidStateError",
    "JoinResult",
    "LimitExceededError",
    "NotFoundError",
    "OperationUpdate",
    "Rebound",
    "Requirement",
    "RetryPolicy",
    "Session",
    "StaleEpochError",
    "StateChanged",
    "StreamFailed",
    "Superseded",
    "SupersededError",
    "TokenExpiredError",
    "UnavailableError",
    "Update",
    "Violation",
]
