"""A refused token says why in data (`AuthError.cause`, ErrorInfo metadata `reason`), so a
client acts without reading the message: an expired token is refreshed, a misconfigured one is
not retried in vain."""

from __future__ import annotations

from typing import Any

import jwt
import pytest

from realtime.auth import Authenticator
from realtime.errors import AuthError
from realtime.provider_tokens import mint_provider_token, verify_provider_token
from realtime.rpc.errors import error_object
from realtime.settings import Settings
from tests.jwks_server import (
    AUDIENCE,
    ISSUER,
    NOW,
    Clock,
    JwksServer,
    PrivateKey,
    jwks_authenticator,
    rsa_key,
    signed,
)

SECRET = "s" * 40
OTHER = "o" * 40
PROVIDER_SECRET = "p" * 40


def hs256(secret: str = SECRET, **claims: Any) -> str:
    payload = {"sub": "alice", "iat": int(NOW), "exp": int(NOW) + 600, **claims}
    payload = {k: v for k, v in payload.items() if v is not None}
    return "Bearer " + jwt.encode(payload, secret, algorithm="HS256")


def dev(**settings: Any) -> Authenticator:
    return Authenticator(Settings(auth_hs256_secret=SECRET, **settings), now=Clock())


async def cause_of(auth: Authenticator, header: str | None) -> str | None:
    with pytest.raises(AuthError) as info:
        await auth.authenticate(header)
    assert info.value.status == 401
    # the same cause, in data, in the error object every endpoint answers
    metadata = error_object(info.value)["data"][0]["metadata"]
    assert metadata["reason"] == info.value.cause
    return info.value.cause


@pytest.mark.parametrize(
    ("header", "settings", "cause"),
    [
        (None, {}, "missing_token"),
        ("Basic YWxpY2U6cHc=", {}, "missing_token"),
        ("Bearer", {}, "malformed_token"),
        ("Bearer not-a-jwt", {}, "malformed_token"),
        ("Bearer a.b.c, Bearer d.e.f", {}, "malformed_token"),
        (hs256(exp=int(NOW) - 60), {}, "token_expired"),
        (hs256(nbf=int(NOW) + 600), {}, "token_not_yet_valid"),
        (hs256(iat=int(NOW) + 600, exp=int(NOW) + 900), {}, "token_not_yet_valid"),
        (hs256(OTHER), {}, "invalid_signature"),
        (hs256(aud="other-service"), {"auth_audience": AUDIENCE}, "invalid_audience"),
        (hs256(), {"auth_audience": AUDIENCE}, "invalid_audience"),
        (hs256(iss="https://other", aud=AUDIENCE), {"auth_issuer": ISSUER}, "invalid_issuer"),
        (hs256(), {"auth_issuer": ISSUER}, "invalid_issuer"),
        (hs256(exp=int(NOW) + 10 * 86400), {}, "invalid_claims"),
        (hs256(sub="alice\u202e"), {}, "invalid_claims"),
        (hs256(scope=3), {}, "invalid_claims"),
        (hs256(exp=None), {}, "invalid_claims"),
    ],
    ids=[
        "no-header", "basic", "bearer-alone", "not-a-jwt", "two-tokens", "expired", "nbf-ahead",
        "iat-ahead", "other-secret", "other-aud", "no-aud", "other-iss", "no-iss", "too-long",
        "bidi-sub", "bad-scope", "no-exp",
    ],
)  # fmt: skip
async def test_each_refusal_of_a_client_token_says_why(
    header: str | None, settings: dict[str, Any], cause: str
) -> None:
    assert await cause_of(dev(**settings), header) == cause


async def test_an_algorithm_the_service_does_not_accept_is_an_invalid_signature() -> None:
    token = "Bearer " + jwt.encode({"sub": "a", "exp": int(NOW) + 60}, rsa_key(), algorithm="RS256")
    assert await cause_of(dev(), token) == "invalid_signature"


async def test_a_kid_the_issuer_does_not_publish_is_an_unknown_key(
    one_key_jwks: tuple[JwksServer, PrivateKey],
) -> None:
    server, key = one_key_jwks
    auth = jwks_authenticator(server)
    assert await cause_of(auth, signed(key, "not-published")) == "unknown_key"
    no_kid = "Bearer " + jwt.encode({"sub": "a"}, key, algorithm="RS256")
    assert await cause_of(auth, no_kid) == "unknown_key"
    assert await cause_of(auth, signed(rsa_key(), "k")) == "invalid_signature"
    assert (await auth.authenticate(signed(key, "k"))).subject == "alice"
    await auth.aclose()


async def test_a_key_set_that_cannot_be_fetched_is_keys_unavailable(
    one_key_jwks: tuple[JwksServer, PrivateKey],
) -> None:
    server, key = one_key_jwks
    server.down = True
    auth = jwks_authenticator(server)
    assert await cause_of(auth, signed(key, "k")) == "keys_unavailable"
    await auth.aclose()


def provider_cause(header: str | None, *, now: float = NOW) -> str | None:
    with pytest.raises(AuthError) as info:
        verify_provider_token(PROVIDER_SECRET, header, now=now, leeway=30)
    assert info.value.status == 401
    return info.value.cause


def test_each_refusal_of_a_provider_token_says_why() -> None:
    minted = mint_provider_token(PROVIDER_SECRET, session_id="s", epoch=1, ttl_s=60, now=int(NOW))
    other = mint_provider_token(OTHER, session_id="s", epoch=1, ttl_s=60, now=int(NOW))
    client = hs256(PROVIDER_SECRET, aud="aim-realtime", iss="aim-realtime", sid="s", epoch=1)
    assert provider_cause(None) == "missing_token"
    assert provider_cause("Bearer x.y.z") == "malformed_token"
    assert provider_cause(f"Bearer {minted}", now=NOW + 600) == "token_expired"
    assert provider_cause(f"Bearer {other}") == "invalid_signature"
    assert provider_cause(client) == "invalid_audience"
    assert provider_cause(hs256(PROVIDER_SECRET)) == "invalid_claims"  # no sid, epoch, aud…
    grant = verify_provider_token(PROVIDER_SECRET, f"Bearer {minted}", now=NOW, leeway=30)
    assert (grant.session_id, grant.epoch) == ("s", 1)


def test_a_forbidden_call_names_the_scope_and_no_cause() -> None:
    error = AuthError(403, "insufficient_scope", "no", required_scope="a2a.invoke")
    assert error.cause is None
    assert error_object(error)["data"][0]["metadata"] == {"scope": "a2a.invoke"}
