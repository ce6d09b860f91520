"""Core rejections as the errors a client acts on (profile §6, §12). Rejections are values in
`state_machines`; this turns each reason into its class of `realtime.errors`, with a message
that says what to do; `realtime/rpc/errors.py` gives each class its JSON-RPC code."""

from __future__ import annotations

from realtime.errors import (
    CapabilityUnavailable,
    EndpointNotFound,
    InvalidState,
    LimitExceeded,
    OperationNotFound,
    RequirementMismatch,
    ServiceError,
    StaleEpoch,
    VersionMismatch,
    invalid_params,
)
from state_machines import Rejected, RejectReason, Session


def reject(rejection: Rejected, session: Session) -> ServiceError:
    """The error a rejection is for the caller."""
    reason = rejection.reason
    if reason is RejectReason.STALE_EPOCH:
        return StaleEpoch(
            f"sessionEpoch is not current (the session is at epoch {rejection.current_epoch}, "
            f"reason: {rejection.epoch_reason}). Reload the session with GetSession.",
            details={
                "currentEpoch": rejection.current_epoch,
                "state": rejection.state,
                "reason": rejection.epoch_reason,
            },
        )
    if reason is RejectReason.AGENT_REPLACED:
        return StaleEpoch(
            f"This agent can no longer write: {rejection.detail}. From the handover on, only "
            "the serving agent writes; the operations this agent created stay valid and its "
            "successor finishes them. Leave the room.",
            details={
                "currentEpoch": rejection.current_epoch,
                "state": rejection.state,
                "reason": "agent_replaced",
                "agentGeneration": rejection.current_version,
            },
        )
    if reason is RejectReason.INVALID_PARAMS:
        return invalid_params(f"params.{rejection.missing[0]}", rejection.detail)
    if reason is RejectReason.ENDPOINT_NOT_FOUND:
        return EndpointNotFound(
            "No such endpoint in this session; register the device with RegisterEndpoint.",
        )
    if reason is RejectReason.LIMIT_EXCEEDED:
        return LimitExceeded(
            f"Limit reached: {rejection.limit}. {rejection.detail}".strip(),
            limit=rejection.limit,
            retry_after=rejection.retry_after or None,
        )
    if reason is RejectReason.OPERATION_NOT_FOUND:
        return OperationNotFound(
            f"No such operation in this session ({rejection.detail}). Check the operationId "
            "with GetSession's pendingOperationIds.",
        )
    if reason is RejectReason.REQUIREMENT_MISMATCH:
        metadata = {"requirementId": rejection.missing[0]} if rejection.missing else {}
        return RequirementMismatch(
            f"The answer does not match the open requirement: {rejection.detail}. Read the "
            "task's status message (or GetOperation) for the open requirementId and actionDigest.",
            details=metadata,
        )
    if reason is RejectReason.VERSION_MISMATCH:
        return VersionMismatch(
            f"expectedVersion is stale: {rejection.detail}. Fetch the task again and answer the "
            "requirement it shows now.",
            details={"currentVersion": rejection.current_version},
        )
    if reason is RejectReason.CAPABILITY_UNAVAILABLE:
        return CapabilityUnavailable(
            f"Not available: {', '.join(rejection.missing)}.",
            details={"missing": rejection.missing},
        )
    return InvalidState(
        f"Not allowed while {rejection.state}: {rejection.detail}. "
        f"Allowed now: {', '.join(rejection.allowed) or 'nothing'}.",
        details={"state": rejection.state, "allowed": rejection.allowed},
    )
