"""What goes wrong for a caller, as a tree of classes. The layer that knows a failure raises it;
the rpc boundary translates it to JSON-RPC in exactly one table (`realtime/rpc/errors.py`).

The tree::

    ServiceError                   message: a sentence the caller can act on; details: the
     │                             data of the error (string-valued in ErrorInfo.metadata)
     ├── BadRequest                the request cannot be served as it was sent
     │    ├── ParseError               the body is not JSON (RFC 8259)
     │    ├── InvalidRequest           not a JSON-RPC 2.0 request
     │    │    └── BodyTooLarge        over the size limit (HTTP 413)
     │    ├── MethodNotFound
     │    ├── InvalidParams            violations: (field path, description) pairs
     │    ├── VersionNotSupported      the A2A-Version header
     │    ├── ExtensionSupportRequired the A2A-Extensions header
     │    └── ContentTypeNotSupported
     ├── NotFound                  nothing by that id for this caller
     │    ├── TaskNotFound, SessionNotFound, EndpointNotFound, OperationNotFound,
     │    └── CommandNotFound
     ├── Refused                   the state does not allow it now
     │    ├── InvalidState, StaleEpoch, VersionMismatch, RequirementMismatch,
     │    ├── CapabilityUnavailable, TaskNotCancelable, UnsupportedOperation,
     │    └── PushNotificationNotSupported
     ├── CommandConflict           an id reused with other params
     ├── LimitExceeded             retry_after: seconds, when waiting helps (HTTP 429)
     ├── AllowanceExhausted        a tenant's session minutes of the day or month are used
     │                             up: waiting helps only once it resets (HTTP 402)
     ├── Unavailable               service: the upstream (redis | livekit) that failed; retry
     │    └── NotConfigured        the service is not configured for it (unset: the variables);
     │                             not retryable
     ├── InternalError             a bug: logged, never leaked

     └── AuthError                 401 or 403, with the WWW-Authenticate challenge (RFC 6750);
                                   a 401 says why in details["reason"] (`AuthCause`)

Any other exception that escapes a handler is a bug, answered as InternalError.

A message is text with terms in it (`Text`): the words that each A2A generation says its own way
(a method's name, a task state, a task id, a params path) are `Term`s, and each generation's
`Words` render them, in the message, in `details` and in the violations. The 1.0 words are the
values as they are (`Words`); a codec brings its generation's (`a2a/v03`, `a2a/v01`).
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Mapping, Sequence
from typing import Final, Literal

Service = Literal["redis", "livekit"]
AuthReason = Literal[
    "missing_credentials", "invalid_token", "invalid_request", "insufficient_scope"
]
# why a 401: ErrorInfo metadata `reason`, so a client acts on data, not on the message
AuthCause = Literal[
    "missing_token",  # no Authorization header, or not the Bearer scheme: send one
    "malformed_token",  # not one well-formed JWT (two headers, garbage): the app's token is wrong
    "token_expired",  # exp passed: get a new token (the one cause a refresh cures)
    "token_not_yet_valid",  # nbf or iat in the future: clocks disagree
    "invalid_signature",  # not signed by a configured key, or an algorithm not accepted
    "unknown_key",  # its kid is not in the issuer's key set (or it names none)
    "keys_unavailable",  # the issuer's key set could not be fetched: retry later
    "invalid_audience",  # aud missing or not this service's
    "invalid_issuer",  # iss missing or not the configured issuer
    "invalid_claims",  # sub, tenant, scope, times or lifetime unusable
]
REALM: Final = "aim-realtime"
SERVER_GOING_AWAY: Final = "The server is shutting down; reconnect."


class Kind(enum.Enum):
    METHOD = "method"  # a 1.0 method name: GetTask
    STATE = "state"  # a 1.0 TaskState: TASK_STATE_WORKING
    TASK = "task"  # a task id, as the service knows it
    FIELD = "field"  # a path into the 1.0 params: params.message.parts[0].raw


@dataclasses.dataclass(frozen=True, slots=True)
class Term:
    """A word of a message that a protocol generation says its own way."""

    kind: Kind
    value: str


def method_name(name: str) -> Term:
    return Term(Kind.METHOD, name)


def task_state(value: str) -> Term:
    return Term(Kind.STATE, value)


def task_ref(task_id: str) -> Term:
    return Term(Kind.TASK, task_id)


def params_path(path: str) -> Term:
    return Term(Kind.FIELD, path)


Text = tuple[str | Term, ...]


class Words:
    """How a generation says a message's terms: A2A 1.0's words, the values as they are.
    A subclass overrides the kinds its generation names differently."""

    def method(self, name: str) -> str:
        return name

    def state(self, value: str) -> str:
        return value

    def task(self, task_id: str) -> str:
        return task_id

    def field(self, path: str) -> str:
        return path

    def say(self, value: object) -> object:
        """A term in these words; any other value as it is."""
        if not isinstance(value, Term):
            return value
        match value.kind:
            case Kind.METHOD:
                return self.method(value.value)
            case Kind.STATE:
                return self.state(value.value)
            case Kind.TASK:
                return self.task(value.value)
            case Kind.FIELD:
                return self.field(value.value)

    def text(self, text: str | Text) -> str:
        if isinstance(text, str):
            return text
        return "".join(str(self.say(item)) for item in text)


V10_WORDS: Final = Words()


class ServiceError(Exception):
    """An error the caller sees: `text` its message (`message`, in 1.0 words), `details` the
    error's data (values may be terms), `violations` (params path, description) pairs."""

    def __init__(
        self,
        message: str | Text,
        *,
        details: Mapping[str, object] | None = None,
        violations: Sequence[tuple[str, str | Text]] = (),
    ) -> None:
        self.text: Text = (message,) if isinstance(message, str) else message
        self.message = V10_WORDS.text(self.text)
        super().__init__(self.message)
        self.details: Mapping[str, object] = details or {}
        self.violations = tuple(violations)


class BadRequest(ServiceError):
    """The request cannot be served as it was sent."""


class ParseError(BadRequest):
    """The body is not JSON (RFC 8259)."""

    def __init__(self) -> None:
        super().__init__("The request body is not valid JSON (RFC 8259).")


class InvalidRequest(BadRequest):
    """Not a JSON-RPC 2.0 request."""

    def __init__(self, description: str, field: str | None = None) -> None:
        super().__init__(
            f"Invalid JSON-RPC request: {description}",
            violations=[(field, description)] if field else (),
        )


class BodyTooLarge(InvalidRequest):
    """The body exceeds the size limit."""

    def __init__(self, limit: int) -> None:
        super().__init__(f"the body exceeds {limit} bytes")


class MethodNotFound(BadRequest):
    """No such method (on this endpoint, or in this A2A version)."""


class InvalidParams(BadRequest):
    """The params fail validation; each violation names its JSON path."""


class VersionNotSupported(BadRequest):
    """The A2A-Version header names no version served for this request."""


class ExtensionSupportRequired(BadRequest):
    """The method needs an extension the A2A-Extensions header did not list."""


class ContentTypeNotSupported(BadRequest):
    """A part's media type is not one the agent accepts."""


class NotFound(ServiceError):
    """Nothing by that id for this caller (foreign ids are answered the same)."""


class TaskNotFound(NotFound):
    def __init__(self, task_id: str) -> None:
        super().__init__(
            (
                "Task ",
                task_ref(task_id),
                " was not found. Check the id; tasks are visible only to their owner.",
            ),
            details={"taskId": task_ref(task_id)},
        )


class SessionNotFound(NotFound):
    def __init__(self, session_id: str) -> None:
        super().__init__(
            f"Session {session_id} was not found. Check the id; sessions are visible only to "
            "their owner.",
            details={"sessionId": session_id},
        )


class EndpointNotFound(NotFound):
    """JoinSession with an endpointId the session does not have."""


class OperationNotFound(NotFound):
    """An operationId the session does not have."""


class CommandNotFound(NotFound):
    """GetCommand of a command that was never applied."""


class Refused(ServiceError):
    """The request is valid, but the state does not allow it now."""


class InvalidState(Refused):
    """The state machine refuses the command (details: state, allowed)."""


class StaleEpoch(Refused):
    """The sessionEpoch is not current (details: currentEpoch, state, reason)."""


class VersionMismatch(Refused):
    """ContinueTask answered a stale task version (details: currentVersion)."""


class RequirementMismatch(Refused):
    """The answer does not match the open requirement (details: requirementId)."""


class CapabilityUnavailable(Refused):
    """A class or source that was not requested or offered (details: missing)."""


class TaskNotCancelable(Refused):
    """CancelTask of a task that is ending or over."""


class UnsupportedOperation(Refused):
    """An A2A operation this agent cannot carry out for this task."""


class PushNotificationNotSupported(Refused):
    """The card says pushNotifications: false."""


class CommandConflict(ServiceError):
    """A commandId (or clientSessionId, requestId) reused with other params."""


Scope = Literal["tenant", "principal"]


class LimitExceeded(ServiceError):
    """A limit was reached; `retry_after` seconds is when trying again may help. A limit of
    live sessions or starts also says how many it `allowed`, the `count` reached and its
    `scope` (profile §24)."""

    def __init__(
        self,
        message: str | Text,
        *,
        limit: str,
        retry_after: int | None = None,
        allowed: int | None = None,
        count: int | None = None,
        scope: Scope | None = None,
    ) -> None:
        said = {"allowed": allowed, "count": count, "scope": scope}
        details: dict[str, object] = {"limit": limit}
        details.update({name: value for name, value in said.items() if value is not None})
        if retry_after is not None:
            details["retryAfterSeconds"] = retry_after
        super().__init__(message, details=details)
        self.limit = limit
        self.retry_after = retry_after


class AllowanceExhausted(ServiceError):
    """The tenant used its session minutes of the day or the month (`allowance`, whose
    `allowed` minutes the `used` ones reached): no session starts before it resets, at
    `resets_at` (RFC 3339), `resets_in` seconds from now (profile §24)."""

    def __init__(
        self,
        message: str | Text,
        *,
        allowance: str,
        allowed: int,
        used: int,
        resets_at: str,
        resets_in: int,
    ) -> None:
        super().__init__(
            message,
            details={
                "allowance": allowance,
                "allowed": allowed,
                "used": used,
                "scope": "tenant",
                "resetsAt": resets_at,
                "resetsInSeconds": resets_in,
            },
        )
        self.allowance = allowance


class Unavailable(ServiceError):
    """An upstream (`service`) is unreachable or overloaded: retrying the same request is safe."""

    def __init__(self, message: str | Text, *, service: Service) -> None:
        super().__init__(message, details={"service": service, "retryable": True})
        self.service: Service = service


class NotConfigured(Unavailable):
    """The service is not configured for an upstream (`service`): `unset` names the variables
    its operator sets. The same request fails the same way until then, so it is not retryable
    (`retryable: false`, where `Unavailable` says true)."""

    def __init__(self, message: str | Text, *, service: Service, unset: Sequence[str]) -> None:
        super().__init__(message, service=service)
        self.details = {"service": service, "retryable": False, "unset": tuple(unset)}
        self.unset = tuple(unset)


class InternalError(ServiceError):
    """A bug; the message never carries its text."""

    def __init__(self, message: str = "") -> None:
        super().__init__(
            message
            or "The server failed to process the request; it has been logged. Retrying is "
            "safe for requests that carry a commandId, messageId, requestId or itemId."
        )


def invalid_params(path: str, description: str | Text) -> InvalidParams:
    """-32602 naming the offending JSON path (of the 1.0 params, or the request's own)."""
    described = (description,) if isinstance(description, str) else description
    return InvalidParams(
        ("Invalid params: ", params_path(path), ": ", *described), violations=[(path, description)]
    )


class AuthError(ServiceError):
    """A 401 or 403 answer, with the `WWW-Authenticate` value RFC 6750 asks for (`reason`, its
    error code) and, for a 401, why in data (`cause`, ErrorInfo metadata `reason`)."""

    def __init__(
        self,
        status: Literal[401, 403],
        reason: AuthReason,
        message: str,
        *,
        required_scope: str | None = None,
        cause: AuthCause | None = None,
    ) -> None:
        details: dict[str, object] = {}
        if required_scope:
            details["scope"] = required_scope
        if cause is not None:
            details["reason"] = cause
        super().__init__(message, details=details)
        self.status = status
        self.reason = reason
        self.cause = cause
        self.required_scope = required_scope
        self.www_authenticate = _challenge(reason, message, required_scope)


def _challenge(reason: AuthReason, message: str, scope: str | None) -> str:
    base = f'Bearer realm="{REALM}"'
    match reason:
        case "invalid_token" | "invalid_request":
            return f'{base}, error="{reason}", error_description="{_header_safe(message)}"'
        case "insufficient_scope":
            return f'{base}, error="insufficient_scope", scope="{_header_safe(scope or "")}"'
        case "missing_credentials":
            return base  # no credentials: RFC 6750 §3.1 says no error attribute


def _header_safe(text: str) -> str:
    # RFC 6750 allows only printable ASCII without '"' and '\' inside these quoted values
    return "".join(c if " " <= c <= "~" and c not in '"\\' else "'" for c in text)
