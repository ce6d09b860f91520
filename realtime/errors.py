"""Errors as values, translated to JSON-RPC in exactly one table.

The tree::

    RpcError                       anything the caller sees as a JSON-RPC error object
      code/name/message            one row of ERRORS: code, ErrorInfo domain and reason
      metadata                     string-valued details (ErrorInfo.metadata)
      violations                   field path → description (google.rpc.BadRequest)

Exceptions other than RpcError that escape a handler are bugs or infrastructure faults; the
dispatcher answers them with -32603 (or -31012 for an unreachable upstream) and never leaks text.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

A2A_DOMAIN: Final = "a2a-protocol.org"
AIM_DOMAIN: Final = "urn:aim:a2a:realtime:v1"
JSONRPC_DOMAIN: Final = "jsonrpc.org"

ERROR_INFO_TYPE: Final = "type.googleapis.com/google.rpc.ErrorInfo"
BAD_REQUEST_TYPE: Final = "type.googleapis.com/google.rpc.BadRequest"

# name → (code, domain, reason)
ERRORS: Final[Mapping[str, tuple[int, str, str]]] = {
    "ParseError": (-32700, JSONRPC_DOMAIN, "PARSE_ERROR"),
    "InvalidRequest": (-32600, JSONRPC_DOMAIN, "INVALID_REQUEST"),
    "MethodNotFound": (-32601, JSONRPC_DOMAIN, "METHOD_NOT_FOUND"),
    "InvalidParams": (-32602, JSONRPC_DOMAIN, "INVALID_PARAMS"),
    "InternalError": (-32603, JSONRPC_DOMAIN, "INTERNAL_ERROR"),
    "TaskNotFound": (-32001, A2A_DOMAIN, "TASK_NOT_FOUND"),
    "TaskNotCancelable": (-32002, A2A_DOMAIN, "TASK_NOT_CANCELABLE"),
    "PushNotificationNotSupported": (-32003, A2A_DOMAIN, "PUSH_NOTIFICATION_NOT_SUPPORTED"),
    "UnsupportedOperation": (-32004, A2A_DOMAIN, "UNSUPPORTED_OPERATION"),
    "ContentTypeNotSupported": (-32005, A2A_DOMAIN, "CONTENT_TYPE_NOT_SUPPORTED"),
    "ExtensionSupportRequired": (-32008, A2A_DOMAIN, "EXTENSION_SUPPORT_REQUIRED"),
    "VersionNotSupported": (-32009, A2A_DOMAIN, "VERSION_NOT_SUPPORTED"),
    "SessionNotFound": (-31001, AIM_DOMAIN, "SESSION_NOT_FOUND"),
    "StaleEpoch": (-31002, AIM_DOMAIN, "STALE_EPOCH"),
    "InvalidState": (-31003, AIM_DOMAIN, "INVALID_STATE"),
    "CommandConflict": (-31004, AIM_DOMAIN, "COMMAND_CONFLICT"),
    "CommandNotFound": (-31005, AIM_DOMAIN, "COMMAND_NOT_FOUND"),
    "OperationNotFound": (-31006, AIM_DOMAIN, "OPERATION_NOT_FOUND"),
    "VersionMismatch": (-31007, AIM_DOMAIN, "VERSION_MISMATCH"),
    "RequirementMismatch": (-31008, AIM_DOMAIN, "REQUIREMENT_MISMATCH"),
    "CapabilityUnavailable": (-31009, AIM_DOMAIN, "CAPABILITY_UNAVAILABLE"),
    "EndpointNotFound": (-31010, AIM_DOMAIN, "ENDPOINT_NOT_FOUND"),
    "LimitExceeded": (-31011, AIM_DOMAIN, "LIMIT_EXCEEDED"),
    "UpstreamUnavailable": (-31012, AIM_DOMAIN, "UPSTREAM_UNAVAILABLE"),
    # A2A defines no JSON-RPC code for authentication (they travel as HTTP 401/403 with a
    # JSON-RPC body); -32001..-32099 belong to A2A, so these live in the AIM range
    "Unauthenticated": (-31401, AIM_DOMAIN, "UNAUTHENTICATED"),
    "PermissionDenied": (-31403, AIM_DOMAIN, "PERMISSION_DENIED"),
}


class RpcError(Exception):
    """A JSON-RPC error the caller should see. Build it with the name of a row of ERRORS."""

    def __init__(
        self,
        name: str,
        message: str,
        *,
        metadata: Mapping[str, object] | None = None,
        violations: Sequence[tuple[str, str]] = (),
    ) -> None:
        super().__init__(message)
        self.name = name
        self.code, self.domain, self.reason = ERRORS[name]
        self.message = message
        self.metadata = {k: _as_metadata_value(v) for k, v in (metadata or {}).items()}
        self.violations = tuple(violations)

    def to_object(self) -> dict[str, Any]:
        """The JSON-RPC error object with A2A 1.0 `data` (ErrorInfo, then BadRequest)."""
        data: list[dict[str, Any]] = [
            {
                "@type": ERROR_INFO_TYPE,
                "reason": self.reason,
                "domain": self.domain,
                "metadata": self.metadata,
            }
        ]
        if self.violations:
            data.append(
                {
                    "@type": BAD_REQUEST_TYPE,
                    "fieldViolations": [
                        {"field": field, "description": description}
                        for field, description in self.violations
                    ],
                }
            )
        return {"code": self.code, "message": self.message, "data": data}


def _as_metadata_value(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list | tuple | set | frozenset):
        return ",".join(str(item) for item in value)
    return str(value)


def invalid_params(field: str, description: str) -> RpcError:
    """-32602 naming the offending JSON path."""
    return RpcError(
        "InvalidParams",
        f"Invalid params: {field}: {description}",
        violations=[(field, description)],
    )


def invalid_request(description: str, field: str | None = None) -> RpcError:
    """-32600 for an envelope that is not a valid JSON-RPC 2.0 request."""
    return RpcError(
        "InvalidRequest",
        f"Invalid JSON-RPC request: {description}",
        violations=[(field, description)] if field else (),
    )


def task_not_found(task_id: str) -> RpcError:
    return RpcError(
        "TaskNotFound",
        f"Task {task_id} was not found. Check the id; tasks are visible only to their owner.",
        metadata={"taskId": task_id},
    )
