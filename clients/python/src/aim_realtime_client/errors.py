"""Typed errors of the client: one class per kind of failure a caller handles differently.

An error comes from a JSON-RPC error object (`{code, message, data}`, data[0] a
`google.rpc.ErrorInfo`, maybe a `google.rpc.BadRequest`), from the HTTP answer around it
(status, `Retry-After`), or from the transport (no answer at all). `error_from_rpc` builds the
right class for a code; `code` is None for failures that carry no JSON-RPC code.
"""

from __future__ import annotations

import datetime
import email.utils
import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

# codes of the AIM realtime profile and of A2A (docs/protocol.md, Errors)
STALE_EPOCH: Final = -31002
INVALID_STATE: Final = -31003
COMMAND_CONFLICT: Final = -31004
LIMIT_EXCEEDED: Final = -31011
UPSTREAM_UNAVAILABLE: Final = -31012
ALLOWANCE_EXHAUSTED: Final = -31013
UNAUTHENTICATED: Final = -31401
PERMISSION_DENIED: Final = -31403
INVALID_PARAMS: Final = -32602
UNSUPPORTED_OPERATION: Final = -32004
NOT_FOUND_CODES: Final = frozenset({-32001, -31001, -31006, -31010, -31005})

# why a 401, in its ErrorInfo metadata `reason` (docs/protocol.md, Authentication)
TOKEN_EXPIRED: Final = "token_expired"  # noqa: S105 - a reason code, not a secret
# the 401s a new token from the same source does not cure: the app's or the service's
# configuration is wrong (another key, audience or issuer, a token that is no JWT, clocks)
MISCONFIGURED: Final = frozenset(
    {
        "malformed_token",
        "token_not_yet_valid",
        "invalid_signature",
        "unknown_key",
        "invalid_audience",
        "invalid_issuer",
        "invalid_claims",
    }
)

ERROR_INFO: Final = "type.googleapis.com/google.rpc.ErrorInfo"
BAD_REQUEST: Final = "type.googleapis.com/google.rpc.BadRequest"


@dataclass(frozen=True)
class Violation:
    """One `google.rpc.BadRequest` field violation: the JSON path and what is wrong there."""

    field: str
    description: str


class AimError(Exception):
    """A call that failed. `code` is the JSON-RPC code (None when there is none: no answer, an
    HTTP answer that is not JSON-RPC, a session that could not be started), `reason` the
    ErrorInfo reason ("" if none), `metadata` its string map, `data` the error's whole `data`
    list, `retry_after_ms` the advice of `Retry-After` / `retryAfterSeconds` (None without),
    `http_status` the HTTP status (None without an answer) and `method` the JSON-RPC method
    that failed ("" for none)."""

    def __init__(
        self,
        message: str,
        *,
        code: int | None = None,
        reason: str = "",
        metadata: Mapping[str, str] | None = None,
        data: list[Any] | None = None,
        retry_after_ms: int | None = None,
        http_status: int | None = None,
        method: str = "",
    ) -> None:
        super().__init__(message)
        self.message = message
        self.code = code
        self.reason = reason
        self.metadata: dict[str, str] = dict(metadata or {})
        self.data: list[Any] = list(data or [])
        self.retry_after_ms = retry_after_ms
        self.http_status = http_status
        self.method = method

    @property
    def retryable(self) -> bool:
        """True when sending the very same request again may succeed (a -31012 whose metadata
        says `retryable: "false"`, a service not configured for LiveKit, is not)."""
        if self.code == UPSTREAM_UNAVAILABLE:
            return self.metadata.get("retryable") != "false"
        return self.code == LIMIT_EXCEEDED and self.retry_after_ms is not None

    def __repr__(self) -> str:
        return f"{type(self).__name__}(code={self.code}, reason={self.reason!r}, {self.message!r})"


class StaleEpochError(AimError):
    """-31002: the command carried an epoch that is not the session's current one."""

    @property
    def current_epoch(self) -> int | None:
        value = self.metadata.get("currentEpoch", "")
        return int(value) if value.isdigit() else None

    @property
    def stale_reason(self) -> str:
        """superseded | rebound | ended | ahead."""
        return self.metadata.get("reason", "")


class SupersededError(StaleEpochError):
    """Another device took the session over; join() again to take it back."""


class AgentReplacedError(StaleEpochError):
    """An agent's write after a later generation took over from it (a rotation's handover,
    or a replacement): it should leave the room; its reads still answer."""

    @property
    def agent_generation(self) -> int | None:
        """The generation serving the session now."""
        value = self.metadata.get("agentGeneration", "")
        return int(value) if value.isdigit() else None


class InvalidStateError(AimError):
    """-31003: the state machine does not allow it now (`metadata.state`, `allowed`)."""


class NotFoundError(AimError):
    """-32001, -31001, -31005, -31006, -31010: nothing by that id for this caller."""


class CommandConflictError(AimError):
    """-31004: an id reused with other params."""


class LimitExceededError(AimError):
    """-31011: a limit was reached (`metadata.limit`; a tenant's or a principal's live
    sessions or starts also say `allowed`, `count` and `scope`); `retry_after_ms` when waiting
    helps."""


class AllowanceExhaustedError(AimError):
    """-31013: the tenant used up its session minutes of the UTC day or month
    (`metadata.allowance`); no session starts before `resets_at` (RFC 3339). Not retryable:
    unlike a `LimitExceededError`, waiting seconds does not help."""

    @property
    def allowance(self) -> str:
        return self.metadata.get("allowance", "")

    @property
    def resets_at(self) -> str | None:
        return self.metadata.get("resetsAt")


class UnavailableError(AimError):
    """-31012 (an upstream of the service is unreachable), or no usable answer after the last
    attempt (`code` None: the transport failed, or an HTTP 502/503/504 without JSON-RPC).
    Retryable, but for a -31012 whose metadata says `retryable: "false"` (`unset` names what
    the service's operator must configure)."""

    @property
    def retryable(self) -> bool:
        return self.metadata.get("retryable") != "false"


class AuthError(AimError):
    """-31401 / -31403 (HTTP 401 / 403): get a token that is valid and has the scope.
    `auth_reason` says why a 401 (its metadata `reason`; "" when none): `token_expired` is a
    `TokenExpiredError`, a misconfiguration an `AuthMisconfiguredError`; `missing_token`,
    `keys_unavailable` (the service cannot read its issuer's keys) and 403s stay `AuthError`."""

    @property
    def auth_reason(self) -> str:
        return self.metadata.get("reason", "")


class TokenExpiredError(AuthError):
    """401 `token_expired`: the token's `exp` has passed; get a new one. With a token function
    the caller asks it again, once, and sends the call again before raising this."""


class AuthMisconfiguredError(AuthError):
    """401 that a new token from the same source will not cure (`auth_reason`: invalid_signature,
    unknown_key, invalid_audience, invalid_issuer, invalid_claims, malformed_token,
    token_not_yet_valid): the token's issuer, audience, key or clock does not match the
    service's configuration; retrying does not help."""


class InvalidParamsError(AimError):
    """-32602: `violations` say which fields are wrong."""

    def __init__(self, message: str, *, violations: tuple[Violation, ...] = (), **kw: Any):
        super().__init__(message, **kw)
        self.violations = violations


class RedirectError(AimError):
    """The service's URL answered a redirect (`reason="REDIRECT"`): not followed, since that
    would send the call's body and token to another URL, and not retried."""


_CLASSES: Final[dict[int, type[AimError]]] = {
    STALE_EPOCH: StaleEpochError,
    INVALID_STATE: InvalidStateError,
    COMMAND_CONFLICT: CommandConflictError,
    LIMIT_EXCEEDED: LimitExceededError,
    ALLOWANCE_EXHAUSTED: AllowanceExhaustedError,
    UPSTREAM_UNAVAILABLE: UnavailableError,
    UNAUTHENTICATED: AuthError,
    PERMISSION_DENIED: AuthError,
    INVALID_PARAMS: InvalidParamsError,
    **dict.fromkeys(NOT_FOUND_CODES, NotFoundError),
}


def _auth_class(reason: str) -> type[AuthError]:
    if reason == TOKEN_EXPIRED:
        return TokenExpiredError
    return AuthMisconfiguredError if reason in MISCONFIGURED else AuthError


def retry_after_ms(
    header: str | None, metadata: Mapping[str, str], *, now: Callable[[], float] = time.time
) -> int | None:
    """Milliseconds from `Retry-After` (delay-seconds, or an HTTP-date: the time until then,
    0 once it passed, by the clock `now`) or `retryAfterSeconds`, else None."""
    for value, dated in ((header, True), (metadata.get("retryAfterSeconds"), False)):
        if value is None:
            continue
        try:
            seconds = float(value.strip())
        except ValueError:
            if dated and (date := _http_date(value)) is not None:
                return max(0, int((date - now()) * 1000))
            continue  # garbage: no advice
        if math.isfinite(seconds) and seconds >= 0:
            return int(seconds * 1000)
    return None


def _http_date(value: str) -> float | None:
    """An HTTP-date (`Sun, 06 Nov 1994 08:49:37 GMT`, or the obsolete forms) as a POSIX
    time, else None."""
    try:
        date = email.utils.parsedate_to_datetime(value.strip())
    except (TypeError, ValueError, IndexError):
        return None
    if date.tzinfo is None:  # `-0000`: UTC, as HTTP-dates are
        date = date.replace(tzinfo=datetime.UTC)
    return date.timestamp()


def _details(data: Any) -> tuple[str, dict[str, str], tuple[Violation, ...]]:
    reason, metadata = "", {}
    violations: list[Violation] = []
    for detail in data if isinstance(data, list) else [data] if isinstance(data, dict) else []:
        if not isinstance(detail, dict):
            continue
        kind = detail.get("@type", "")
        if kind == ERROR_INFO or (not kind and "reason" in detail):  # the 0.3 form has no @type
            reason = str(detail.get("reason", ""))
            raw = detail.get("metadata")
            if isinstance(raw, dict):
                metadata = {str(k): str(v) for k, v in raw.items()}
        if kind == BAD_REQUEST or "fieldViolations" in detail:
            violations.extend(
                Violation(str(item.get("field", "")), str(item.get("description", "")))
                for item in detail.get("fieldViolations") or []
                if isinstance(item, dict)
            )
    return reason, metadata, tuple(violations)


def error_from_rpc(
    error: Mapping[str, Any],
    *,
    http_status: int | None = None,
    retry_after: str | None = None,
    method: str = "",
) -> AimError:
    """The typed error for a JSON-RPC error object (and the HTTP answer it came in)."""
    raw_code = error.get("code")
    code = raw_code if isinstance(raw_code, int) and not isinstance(raw_code, bool) else None
    message = str(error.get("message", "")) or f"error {code}"
    reason, metadata, violations = _details(error.get("data"))
    if http_status in (401, 403) and code not in (UNAUTHENTICATED, PERMISSION_DENIED):
        cls: type[AimError] = AuthError
    else:
        cls = _CLASSES.get(code, AimError) if code is not None else AimError
    if cls is StaleEpochError and metadata.get("reason") == "superseded":
        cls = SupersededError
    elif cls is StaleEpochError and metadata.get("reason") == "agent_replaced":
        cls = AgentReplacedError
    elif cls is AuthError and code != PERMISSION_DENIED and http_status != 403:
        cls = _auth_class(metadata.get("reason", ""))
    raw_data = error.get("data")
    common: dict[str, Any] = {
        "code": code,
        "data": raw_data if isinstance(raw_data, list) else [raw_data] if raw_data else [],
        "reason": reason,
        "metadata": metadata,
        "retry_after_ms": retry_after_ms(retry_after, metadata),
        "http_status": http_status,
        "method": method,
    }
    if cls is InvalidParamsError:
        return InvalidParamsError(message, violations=violations, **common)
    return cls(message, **common)


def transport_error(method: str, cause: BaseException) -> UnavailableError:
    """No answer: the connection failed, was cut, or timed out."""
    said = str(cause) or type(cause).__name__
    return UnavailableError(
        f"no answer from the service: {said}", reason="TRANSPORT", method=method
    )


def http_error(method: str, status: int, retry_after: str | None = None) -> AimError:
    """An HTTP answer without a JSON-RPC body (a proxy's 502, a 413, …)."""
    message = f"HTTP {status} without a JSON-RPC answer"
    wait = retry_after_ms(retry_after, {})
    if status in (502, 503, 504):
        return UnavailableError(
            message, reason="HTTP", http_status=status, method=method, retry_after_ms=wait
        )
    if status in (401, 403):
        return AuthError(message, reason="HTTP", http_status=status, method=method)
    if 300 <= status < 400:
        return RedirectError(
            f"HTTP {status}: the service answered with a redirect, which this client does not "
            "follow (it would send the request's body and token to another URL); check its URL",
            reason="REDIRECT",
            http_status=status,
            method=method,
        )
    return AimError(message, reason="HTTP", http_status=status, method=method)
