"""The one translation from errors to JSON-RPC: code, ErrorInfo domain and reason, HTTP status.

A2A 1.0 error objects: `{code, message, data}` with `data` an array of ProtoJSON `Any` objects,
a `google.rpc.ErrorInfo` first (its `metadata` string-valued), then a `google.rpc.BadRequest`
when fields are named (profile §12).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final, NamedTuple

from realtime import errors as e

A2A_DOMAIN: Final = "a2a-protocol.org"
AIM_DOMAIN: Final = "urn:aim:a2a:realtime:v1"
JSONRPC_DOMAIN: Final = "jsonrpc.org"
ERROR_INFO_TYPE: Final = "type.googleapis.com/google.rpc.ErrorInfo"
BAD_REQUEST_TYPE: Final = "type.googleapis.com/google.rpc.BadRequest"


class Row(NamedTuple):
    code: int
    domain: str
    reason: str
    # HTTP status: 200 for every JSON-RPC error but these (decision 204: a refusal by a limit
    # is 429 with Retry-After, an allowance used up 402, as on the operator API)
    status: int = 200


# the most specific class of an error picks its row (BodyTooLarge before InvalidRequest)
TABLE: Final[Mapping[type[e.ServiceError], Row]] = {
    e.ParseError: Row(-32700, JSONRPC_DOMAIN, "PARSE_ERROR"),
    e.BodyTooLarge: Row(-32600, JSONRPC_DOMAIN, "INVALID_REQUEST", 413),
    e.InvalidRequest: Row(-32600, JSONRPC_DOMAIN, "INVALID_REQUEST"),
    e.MethodNotFound: Row(-32601, JSONRPC_DOMAIN, "METHOD_NOT_FOUND"),
    e.InvalidParams: Row(-32602, JSONRPC_DOMAIN, "INVALID_PARAMS"),
    e.InternalError: Row(-32603, JSONRPC_DOMAIN, "INTERNAL_ERROR"),
    e.TaskNotFound: Row(-32001, A2A_DOMAIN, "TASK_NOT_FOUND"),
    e.TaskNotCancelable: Row(-32002, A2A_DOMAIN, "TASK_NOT_CANCELABLE"),
    e.PushNotificationNotSupported: Row(-32003, A2A_DOMAIN, "PUSH_NOTIFICATION_NOT_SUPPORTED"),
    e.UnsupportedOperation: Row(-32004, A2A_DOMAIN, "UNSUPPORTED_OPERATION"),
    e.ContentTypeNotSupported: Row(-32005, A2A_DOMAIN, "CONTENT_TYPE_NOT_SUPPORTED"),
    e.ExtensionSupportRequired: Row(-32008, A2A_DOMAIN, "EXTENSION_SUPPORT_REQUIRED"),
    e.VersionNotSupported: Row(-32009, A2A_DOMAIN, "VERSION_NOT_SUPPORTED"),
    e.SessionNotFound: Row(-31001, AIM_DOMAIN, "SESSION_NOT_FOUND"),
    e.StaleEpoch: Row(-31002, AIM_DOMAIN, "STALE_EPOCH"),
    e.InvalidState: Row(-31003, AIM_DOMAIN, "INVALID_STATE"),
    e.CommandConflict: Row(-31004, AIM_DOMAIN, "COMMAND_CONFLICT"),
    e.CommandNotFound: Row(-31005, AIM_DOMAIN, "COMMAND_NOT_FOUND"),
    e.OperationNotFound: Row(-31006, AIM_DOMAIN, "OPERATION_NOT_FOUND"),
    e.VersionMismatch: Row(-31007, AIM_DOMAIN, "VERSION_MISMATCH"),
    e.RequirementMismatch: Row(-31008, AIM_DOMAIN, "REQUIREMENT_MISMATCH"),
    e.CapabilityUnavailable: Row(-31009, AIM_DOMAIN, "CAPABILITY_UNAVAILABLE"),
    e.EndpointNotFound: Row(-31010, AIM_DOMAIN, "ENDPOINT_NOT_FOUND"),
    e.LimitExceeded: Row(-31011, AIM_DOMAIN, "LIMIT_EXCEEDED", 429),
    e.AllowanceExhausted: Row(-31013, AIM_DOMAIN, "ALLOWANCE_EXHAUSTED", 402),
    e.Unavailable: Row(-31012, AIM_DOMAIN, "UPSTREAM_UNAVAILABLE"),
    # the profile's code and reason; its metadata says `retryable: false` and what to set
    e.NotConfigured: Row(-31012, AIM_DOMAIN, "UPSTREAM_UNAVAILABLE"),
}
# A2A defines no JSON-RPC code for authentication (it travels as HTTP 401/403 with a JSON-RPC
# body); -32001..-32099 belong to A2A, so these live in the AIM range
AUTH_ROWS: Final[Mapping[int, Row]] = {
    401: Row(-31401, AIM_DOMAIN, "UNAUTHENTICATED", 401),
    403: Row(-31403, AIM_DOMAIN, "PERMISSION_DENIED", 403),
}


def row(error: e.ServiceError) -> Row:
    if isinstance(error, e.AuthError):
        return AUTH_ROWS[error.status]
    for cls in type(error).__mro__:
        found = TABLE.get(cls)
        if found is not None:
            return found
    raise LookupError(f"no JSON-RPC row for {type(error).__name__}")  # a bug: every leaf has one


def code_of(error: e.ServiceError) -> int:
    return row(error).code


def error_object(error: e.ServiceError, words: e.Words = e.V10_WORDS) -> dict[str, Any]:
    """The JSON-RPC error object with A2A 1.0 `data` (ErrorInfo, then BadRequest), its message,
    metadata and violations said in `words` (a generation's; 1.0's by default)."""
    found = row(error)
    data: list[dict[str, Any]] = [
        {
            "@type": ERROR_INFO_TYPE,
            "reason": found.reason,
            "domain": found.domain,
            "metadata": {k: _as_metadata_value(v, words) for k, v in error.details.items()},
        }
    ]
    if error.violations:
        data.append(
            {
                "@type": BAD_REQUEST_TYPE,
                "fieldViolations": [
                    {"field": words.field(field), "description": words.text(description)}
                    for field, description in error.violations
                ],
            }
        )
    return {"code": found.code, "message": words.text(error.text), "data": data}


def _as_metadata_value(value: object, words: e.Words) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list | tuple | set | frozenset):
        return ",".join(str(words.say(item)) for item in value)
    return str(words.say(value))
