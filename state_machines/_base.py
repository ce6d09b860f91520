"""Shared vocabulary of the functional core: outcomes of `decide`, rejection reasons.

`decide(state, event, *, now) -> Accepted | Rejected` everywhere. A rejection is a value, never an
exception, and it carries what the caller needs to understand it (the state it met and the events
that state allows). The core has no clock, no ids and no randomness: the shell passes them in.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Generic, TypeVar

import msgspec

from state_machines.effects import AppendHistory, MintJoinToken, OutboxEffect

S = TypeVar("S")


class RejectReason(StrEnum):
    """Why an event was refused; the shell maps each to one JSON-RPC error."""

    INVALID_STATE = "invalid_state"
    STALE_EPOCH = "stale_epoch"
    VERSION_MISMATCH = "version_mismatch"
    REQUIREMENT_MISMATCH = "requirement_mismatch"
    CAPABILITY_UNAVAILABLE = "capability_unavailable"
    ENDPOINT_NOT_FOUND = "endpoint_not_found"
    OPERATION_NOT_FOUND = "operation_not_found"
    LIMIT_EXCEEDED = "limit_exceeded"
    INVALID_PARAMS = "invalid_params"  # `missing` names the parameter, `detail` what is wrong
    AGENT_REPLACED = "agent_replaced"  # a write of an agent a later generation took over from


class Accepted(msgspec.Struct, Generic[S], frozen=True):
    """The event applies: the new state, and what the shell must do about it, by kind.

    - `outbox`: LiveKit calls, stored in the commit and carried out after it by the runner;
    - `token`: the join token the shell signs into the command's result (never stored);
    - `history`: messages appended to the task history in the same commit.

    One shape for every machine: the endpoint, operation, media and task machines only ever
    fill `state` (they have no effects of their own); a session decision fills the rest.
    """

    state: S
    outbox: tuple[OutboxEffect, ...] = ()
    token: MintJoinToken | None = None
    history: tuple[AppendHistory, ...] = ()

    @property
    def has_effects(self) -> bool:
        """Whether the shell has anything to do besides storing `state`."""
        return bool(self.outbox or self.history) or self.token is not None


class Rejected(msgspec.Struct, frozen=True):
    """The event does not apply; nothing changed.

    The defaulted fields carry the `data` of specific errors: `current_epoch` and `epoch_reason`
    (superseded | rebound | ended | ahead) for STALE_EPOCH, `missing` for REQUIREMENT_MISMATCH /
    CAPABILITY_UNAVAILABLE, `limit` (the name of the limit) and `retry_after` (seconds until
    it allows the event again; 0: waiting does not help) for LIMIT_EXCEEDED, `current_version`
    (the task's) for VERSION_MISMATCH, `current_version` the serving agent's generation for
    AGENT_REPLACED.
    """

    reason: RejectReason
    state: str
    allowed: tuple[str, ...] = ()
    detail: str = ""
    current_epoch: int = 0
    epoch_reason: str = ""
    missing: tuple[str, ...] = ()
    limit: str = ""
    current_version: int = 0
    retry_after: int = 0
