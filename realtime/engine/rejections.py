"""The one translation from a core rejection to a JSON-RPC error (and the not-found error every
session lookup shares). Rejections are values in `state_machines`; this table turns each reason
into the error a client acts on (profile §6, §12)."""

from __future__ import annotations

from realtime.errors import RpcError
from state_machines import Rejected, RejectReason, Session


def reject(rejection: Rejected, session: Session) -> RpcError:
    """The one translation from a core rejection to a JSON-RPC error."""
    reason = rejection.reason
    if reason is RejectReason.STALE_EPOCH:
        return RpcError(
            "StaleEpoch",
            f"sessionEpoch is not current (the session is at epoch {rejection.current_epoch}, "
            f"reason: {rejection.epoch_reason}). Reload the session with GetSession.",
            metadata={
                "currentEpoch": rejection.current_epoch,
                "state": rejection.state,
                "reason": rejection.epoch_reason,
            },
        )
    if reason is RejectReason.ENDPOINT_NOT_FOUND:
        return RpcError(
            "EndpointNotFound",
            "No such endpoint in this session; register the device with RegisterEndpoint.",
        )
    if reason is RejectReason.LIMIT_EXCEEDED:
        return RpcError(
            "LimitExceeded",
            f"Limit reached: {rejection.limit}. {rejection.detail}".strip(),
            metadata={"limit": rejection.limit},
        )
    if reason is RejectReason.OPERATION_NOT_FOUND:
        return RpcError(
            "OperationNotFound",
            f"No such operation in this session ({rejection.detail}). Check the operationId "
            "with GetSession's pendingOperationIds.",
        )
    if reason is RejectReason.REQUIREMENT_MISMATCH:
        metadata = {"requirementId": rejection.missing[0]} if rejection.missing else {}
        return RpcError(
            "RequirementMismatch",
            f"The answer does not match the open requirement: {rejection.detail}. Read the "
            "task's status message (or GetOperation) for the open requirementId and actionDigest.",
            metadata=metadata,
        )
    if reason is RejectReason.VERSION_MISMATCH:
        return RpcError(
            "VersionMismatch",
            f"expectedVersion is stale: {rejection.detail}. Fetch the task again and answer the "
            "requirement it shows now.",
            metadata={"currentVersion": rejection.current_version},
        )
    if reason is RejectReason.CAPABILITY_UNAVAILABLE:
        return RpcError(
            "CapabilityUnavailable",
            f"Not available: {', '.join(rejection.missing)}.",
            metadata={"missing": rejection.missing},
        )
    return RpcError(
        "InvalidState",
        f"Not allowed while {rejection.state}: {rejection.detail}. "
        f"Allowed now: {', '.join(rejection.allowed) or 'nothing'}.",
        metadata={"state": rejection.state, "allowed": rejection.allowed},
    )


def session_not_found(session_id: str) -> RpcError:
    return RpcError(
        "SessionNotFound",
        f"Session {session_id} was not found. Check the id; sessions are visible only to "
        "their owner.",
        metadata={"sessionId": session_id},
    )
