"""The error tree and its one JSON-RPC table (profile §12)."""

from __future__ import annotations

import pytest

from realtime import errors as e
from realtime.rpc.errors import AUTH_ROWS, TABLE, error_object, row


def every_error_class(base: type[e.ServiceError] = e.ServiceError) -> list[type[e.ServiceError]]:
    found: list[type[e.ServiceError]] = []
    for cls in base.__subclasses__():
        found += [cls, *every_error_class(cls)]
    return found


# AuthError has a row per HTTP status (AUTH_ROWS), tested below
LEAVES = [cls for cls in every_error_class() if not cls.__subclasses__() and cls is not e.AuthError]


@pytest.mark.parametrize("cls", LEAVES, ids=lambda cls: cls.__name__)
def test_every_error_a_layer_can_raise_has_its_own_row(cls):
    assert cls in TABLE, f"{cls.__name__} has no JSON-RPC row"


def test_codes_are_unique_but_for_the_413_variant_and_the_not_configured_one():
    codes = [r.code for cls, r in TABLE.items() if cls not in (e.BodyTooLarge, e.NotConfigured)]
    assert len(codes) == len(set(codes))
    assert row(e.BodyTooLarge(10)) == row(e.InvalidRequest("x"))._replace(status=413)
    missing = e.NotConfigured("no", service="livekit", unset=("AIM_LIVEKIT_URL",))
    assert row(missing) == row(e.Unavailable("down", service="livekit"))


def test_an_error_object_carries_error_info_and_field_violations():
    body = error_object(e.invalid_params("params.id", "must be a UUID"))
    assert body["code"] == -32602
    info, bad_request = body["data"]
    assert (info["reason"], info["domain"]) == ("INVALID_PARAMS", "jsonrpc.org")
    assert bad_request["fieldViolations"] == [
        {"field": "params.id", "description": "must be a UUID"}
    ]


def test_details_become_string_metadata():
    error = e.LimitExceeded("slow down", limit="requests_per_second", retry_after=3)
    metadata = error_object(error)["data"][0]["metadata"]
    assert metadata == {"limit": "requests_per_second", "retryAfterSeconds": "3"}
    unavailable = error_object(e.Unavailable("down", service="livekit"))["data"][0]["metadata"]
    assert unavailable == {"service": "livekit", "retryable": "true"}
    unset = ("AIM_LIVEKIT_URL", "AIM_LIVEKIT_API_KEY")
    missing = error_object(e.NotConfigured("no", service="livekit", unset=unset))
    assert missing["data"][0]["metadata"] == {
        "service": "livekit",
        "retryable": "false",
        "unset": "AIM_LIVEKIT_URL,AIM_LIVEKIT_API_KEY",
    }


@pytest.mark.parametrize("status", sorted(AUTH_ROWS))
def test_authentication_failures_keep_their_http_status(status):
    failure = e.AuthError(status, "invalid_token", "no", required_scope="a2a.invoke")
    assert row(failure).status == status
    assert error_object(failure)["data"][0]["metadata"] == {"scope": "a2a.invoke"}
