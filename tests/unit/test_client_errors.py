"""The client's error mapping: every code to its class, ErrorInfo and BadRequest read, the
retry advice of `Retry-After` (seconds or an HTTP-date) / `retryAfterSeconds`."""

from __future__ import annotations

import time
from email.utils import formatdate

from hypothesis import given
from hypothesis import strategies as st

from aim_realtime_client import (
    AgentReplacedError,
    AimError,
    AllowanceExhaustedError,
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
from aim_realtime_client.errors import error_from_rpc, http_error, retry_after_ms, transport_error

INFO = "type.googleapis.com/google.rpc.ErrorInfo"
BAD = "type.googleapis.com/google.rpc.BadRequest"
CLASSES = {
    -31002: StaleEpochError,
    -31003: InvalidStateError,
    -31004: CommandConflictError,
    -31011: LimitExceededError,
    -31012: UnavailableError,
    -31013: AllowanceExhaustedError,
    -31401: AuthError,
    -31403: AuthError,
    -32602: InvalidParamsError,
    -32001: NotFoundError,
    -31001: NotFoundError,
    -31005: NotFoundError,
    -31006: NotFoundError,
    -31010: NotFoundError,
}
metadata = st.dictionaries(st.text(min_size=1, max_size=8), st.text(max_size=8), max_size=4)


def wire(code: int, reason: str = "R", meta: dict[str, str] | None = None, **more) -> dict:
    data = [{"@type": INFO, "reason": reason, "domain": "d", "metadata": meta or {}}]
    return {"code": code, "message": "said", "data": data, **more}


@given(st.sampled_from(sorted(CLASSES)), st.text(max_size=12), metadata)
def test_every_code_maps_to_its_class_with_what_errorinfo_says(code, reason, meta):
    meta.pop("reason", None)
    error = error_from_rpc(wire(code, reason, meta), http_status=200, method="M")
    assert type(error) is CLASSES[code]
    assert (error.code, error.reason, error.metadata, error.message) == (code, reason, meta,
                                                                         "said")  # fmt: skip
    assert (error.http_status, error.method, str(error)) == (200, "M", "said")
    assert error.retryable == (code == -31012)


@given(st.integers().filter(lambda c: c not in CLASSES))
def test_any_other_code_is_a_plain_aim_error(code):
    error = error_from_rpc(wire(code))
    assert type(error) is AimError
    assert error.code == code
    assert not error.retryable


def test_a_stale_epoch_tells_its_epoch_and_why_and_superseded_is_its_own_class():
    stale = error_from_rpc(wire(-31002, meta={"currentEpoch": "3", "reason": "rebound"}))
    assert type(stale) is StaleEpochError
    assert (stale.current_epoch, stale.stale_reason) == (3, "rebound")
    taken = error_from_rpc(wire(-31002, meta={"currentEpoch": "2", "reason": "superseded"}))
    assert type(taken) is SupersededError
    assert isinstance(taken, StaleEpochError)
    assert taken.current_epoch == 2


def test_a_write_of_a_replaced_agent_is_its_own_class_naming_the_serving_generation():
    replaced = error_from_rpc(
        wire(-31002, meta={"currentEpoch": "1", "reason": "agent_replaced", "agentGeneration": "4"})
    )
    assert type(replaced) is AgentReplacedError
    assert isinstance(replaced, StaleEpochError)
    assert replaced.agent_generation == 4
    assert error_from_rpc(wire(-31002, meta={"reason": "agent_replaced"})).agent_generation is None


def test_violations_come_from_bad_request():
    body = wire(-32602)
    body["data"].append({"@type": BAD, "fieldViolations": [
        {"field": "params.clientEndpointKey", "description": "too long"}]})  # fmt: skip
    error = error_from_rpc(body)
    assert isinstance(error, InvalidParamsError)
    assert error.violations == (Violation("params.clientEndpointKey", "too long"),)
    assert error.data == body["data"]


def test_a_limit_with_advice_is_retryable_and_one_without_is_not():
    advised = error_from_rpc(wire(-31011, meta={"limit": "requests_per_second",
                                                "retryAfterSeconds": "2"}))  # fmt: skip
    assert (advised.retry_after_ms, advised.retryable) == (2000, True)
    header = error_from_rpc(wire(-31011, meta={"limit": "x"}), retry_after="1")
    assert (header.retry_after_ms, header.retryable) == (1000, True)
    plain = error_from_rpc(wire(-31011, meta={"limit": "endpoints_per_session"}))
    assert (plain.retry_after_ms, plain.retryable) == (None, False)


@given(st.integers(min_value=0, max_value=10**6))
def test_retry_after_is_read_in_seconds(seconds):
    assert retry_after_ms(str(seconds), {}) == seconds * 1000
    assert retry_after_ms(None, {"retryAfterSeconds": str(seconds)}) == seconds * 1000


def test_retry_after_as_an_http_date_is_the_time_until_then():
    at = 1_445_412_480.0  # Wed, 21 Oct 2015 07:28:00 GMT
    for date in ("Wed, 21 Oct 2015 07:28:00 GMT", "Wednesday, 21-Oct-15 07:28:00 GMT",
                 "Wed Oct 21 07:28:00 2015"):  # fmt: skip
        assert retry_after_ms(date, {}, now=lambda: at - 12.5) == 12_500, date
        assert retry_after_ms(date, {}, now=lambda: at + 30) == 0, date  # passed: at once
    in_90_s = formatdate(time.time() + 90, usegmt=True)
    limited = error_from_rpc(wire(-31011, meta={"limit": "x"}), retry_after=in_90_s)
    assert limited.retryable
    assert 85_000 <= (limited.retry_after_ms or 0) <= 91_000  # by the real clock


def test_retry_after_that_is_neither_seconds_nor_a_date_is_no_advice():
    assert retry_after_ms("soon", {}) is None
    assert retry_after_ms("-1", {}) is None
    assert retry_after_ms(None, {}) is None
    # retryAfterSeconds is a number of seconds, never a date
    assert retry_after_ms(None, {"retryAfterSeconds": "Wed, 21 Oct 2015 07:28:00 GMT"}) is None


def test_an_http_401_or_403_is_an_auth_error_whatever_the_body():
    assert type(error_from_rpc(wire(-32600), http_status=401)) is AuthError
    assert type(http_error("M", 403)) is AuthError


def test_failures_without_json_rpc():
    lost = transport_error("GetTask", ConnectionResetError("reset"))
    assert (type(lost), lost.code, lost.reason, lost.retryable) == (
        UnavailableError, None, "TRANSPORT", True)  # fmt: skip
    proxy = http_error("GetTask", 503, "3")
    assert (type(proxy), proxy.http_status, proxy.retryable, proxy.retry_after_ms) == (
        UnavailableError, 503, True, 3000)  # fmt: skip
    other = http_error("GetTask", 413)
    assert (type(other), other.retryable) == (AimError, False)


@given(st.one_of(st.none(), st.text(), st.integers(), st.lists(st.integers()), st.booleans()))
def test_a_malformed_error_object_still_gives_an_aim_error(data):
    error = error_from_rpc({"code": "x", "message": 5, "data": data})
    assert isinstance(error, AimError)
    assert error.code is None


MISCONFIGURED = ["malformed_token", "token_not_yet_valid", "invalid_signature", "unknown_key",
                 "invalid_audience", "invalid_issuer", "invalid_claims"]  # fmt: skip


def test_a_401_is_raised_by_why_it_was_refused():
    def raised(reason: str, status: int = 401, code: int = -31401) -> AimError:
        return error_from_rpc(wire(code, "UNAUTHENTICATED", {"reason": reason}), http_status=status)

    expired = raised("token_expired")
    assert type(expired) is TokenExpiredError
    assert isinstance(expired, AuthError)
    assert (expired.auth_reason, expired.retryable) == ("token_expired", False)
    for reason in MISCONFIGURED:
        wrong = raised(reason)
        assert type(wrong) is AuthMisconfiguredError, reason
        assert isinstance(wrong, AuthError)
        assert wrong.auth_reason == reason
    for reason in ("missing_token", "keys_unavailable", "", "a_reason_added_later"):
        assert type(raised(reason)) is AuthError, reason
    # a 403 never is: its token is valid, it lacks a scope
    assert type(raised("token_expired", 403, -31403)) is AuthError
