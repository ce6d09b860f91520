"""Bearer JWT authentication (profile §2): what a caller of `Authenticator` sees."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import json
from collections.abc import AsyncIterator
from typing import Any

import jwt
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from jwt.algorithms import ECAlgorithm, RSAAlgorithm

from realtime.auth import VERIFIED_MAX, VERIFIED_TTL_S, Authenticator, Principal, mint_dev_token
from realtime.errors import AuthError
from realtime.settings import Settings
from tests.jwks_server import CountingDecode

NOW = 1_800_000_000.0
SECRET = "s" * 40
ISSUER = "https://issuer.example"
AUDIENCE = "aim-realtime"
CHALLENGE = 'Bearer realm="aim-realtime"'


class Clock:
    """Injectable clock the tests move by hand."""

    def __init__(self, t: float = NOW) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def claims(**extra: Any) -> dict[str, Any]:
    base: dict[str, Any] = {"sub": "alice", "iat": int(NOW), "exp": int(NOW) + 600}
    base.update(extra)
    return {k: v for k, v in base.items() if v is not None}


def hs256(payload: dict[str, Any], secret: str = SECRET) -> str:
    return jwt.encode(payload, secret, algorithm="HS256")


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def hand_signed(header: dict[str, Any], payload: dict[str, Any], key: bytes | None) -> str:
    """Sign by hand, for tokens pyjwt refuses to make (alg none, HS256 keyed with a PEM)."""
    signing_input = f"{b64(json.dumps(header).encode())}.{b64(json.dumps(payload).encode())}"
    signature = b"" if key is None else hmac.digest(key, signing_input.encode(), hashlib.sha256)
    return f"{signing_input}.{b64(signature)}"


def dev_auth(clock: Clock | None = None, **settings: Any) -> Authenticator:
    return Authenticator(Settings(auth_hs256_secret=SECRET, **settings), now=clock or Clock())


async def rejected(auth: Authenticator, header: str | None) -> AuthError:
    with pytest.raises(AuthError) as info:
        await auth.authenticate(header)
    return info.value


async def refusal_of(token: str, **settings: Any) -> str:
    """The message of the invalid_token refusal of `token` in dev mode with `settings`."""
    err = await rejected(dev_auth(**settings), f"Bearer {token}")
    assert_invalid_token(err)
    return err.message


def assert_invalid_token(err: AuthError) -> None:
    assert err.status == 401
    assert err.reason == "invalid_token"
    assert err.www_authenticate.startswith(
        f'{CHALLENGE}, error="invalid_token", error_description="'
    )


# --- development mode (HS256) ---------------------------------------------------------------


async def test_valid_hs256_token_with_scope_string_yields_principal() -> None:
    token = hs256(claims(scope="a2a.invoke a2a.tasks.read"))
    principal = await dev_auth().authenticate(f"Bearer {token}")
    assert principal == Principal("alice", None, frozenset({"a2a.invoke", "a2a.tasks.read"}))


async def test_valid_token_with_scp_array_yields_scopes() -> None:
    token = hs256(claims(scp=["a2a.invoke", "a2a.tasks.cancel"]))
    principal = await dev_auth().authenticate(f"Bearer {token}")
    assert principal.scopes == {"a2a.invoke", "a2a.tasks.cancel"}


async def test_scp_as_space_separated_string_is_accepted() -> None:
    principal = await dev_auth().authenticate(f"Bearer {hs256(claims(scp='a b'))}")
    assert principal.scopes == {"a", "b"}


async def test_token_without_scope_claims_has_no_scopes() -> None:
    principal = await dev_auth().authenticate(f"Bearer {hs256(claims())}")
    assert principal.scopes == frozenset()


@pytest.mark.parametrize("bad", [{"scope": 7}, {"scp": ["a", 1]}, {"scp": {"a": True}}])
async def test_malformed_scope_claim_is_invalid_token(bad: dict[str, Any]) -> None:
    message = await refusal_of(hs256(claims(**bad)))
    assert "must be a string or an array of strings" in message


@pytest.mark.parametrize("scheme", ["bearer", "BEARER", "BeArEr"])
async def test_bearer_scheme_is_case_insensitive(scheme: str) -> None:
    principal = await dev_auth().authenticate(f"{scheme} {hs256(claims())}")
    assert principal.subject == "alice"


@pytest.mark.parametrize("header", [None, "", "   "])
async def test_no_credentials_is_401_without_error_attribute(header: str | None) -> None:
    err = await rejected(dev_auth(), header)
    assert (err.status, err.reason) == (401, "missing_credentials")
    assert err.www_authenticate == CHALLENGE


async def test_non_bearer_scheme_counts_as_no_credentials() -> None:
    # RFC 6750 §3.1: an unsupported authentication method gets no error code
    err = await rejected(dev_auth(), "Basic YWxpY2U6c2VjcmV0")
    assert (err.status, err.reason) == (401, "missing_credentials")
    assert err.www_authenticate == CHALLENGE
    assert "Bearer" in err.message


@pytest.mark.parametrize("header", ["Bearer", "Bearer   ", "Bearer a b", "Bearer " + "a" * 9000])
async def test_malformed_bearer_header_is_invalid_token(header: str) -> None:
    assert_invalid_token(await rejected(dev_auth(), header))


@pytest.mark.parametrize(
    "garbage", ["not-a-jwt", "a.b.c", "eyJhbGciOiJIUzI1NiJ9.e30", "\u00e9t\u00e9.x.y"]
)
async def test_garbage_token_is_invalid_token(garbage: str) -> None:
    message = await refusal_of(garbage)
    assert garbage not in message


async def test_alg_none_token_is_refused() -> None:
    token = hand_signed({"alg": "none", "typ": "JWT"}, claims(), key=None)
    message = await refusal_of(token)
    assert "algorithm is not accepted" in message


async def test_token_signed_with_another_secret_is_refused() -> None:
    message = await refusal_of(hs256(claims(), secret="o" * 40))
    assert "signature" in message


async def test_expired_token_is_refused() -> None:
    token = hs256(claims(iat=int(NOW) - 700, exp=int(NOW) - 31))
    message = await refusal_of(token, auth_leeway_s=30)
    assert "expired" in message


async def test_token_expired_within_leeway_is_accepted() -> None:
    token = hs256(claims(iat=int(NOW) - 700, exp=int(NOW) - 20))
    principal = await dev_auth(auth_leeway_s=30).authenticate(f"Bearer {token}")
    assert principal.subject == "alice"


async def test_leeway_is_capped_at_30_seconds() -> None:
    token = hs256(claims(iat=int(NOW) - 700, exp=int(NOW) - 60))
    assert_invalid_token(await rejected(dev_auth(auth_leeway_s=120), f"Bearer {token}"))


async def test_token_with_future_nbf_is_refused() -> None:
    message = await refusal_of(hs256(claims(nbf=int(NOW) + 300)))
    assert "not valid yet" in message


async def test_token_issued_in_the_future_is_refused() -> None:
    err = await rejected(dev_auth(), f"Bearer {hs256(claims(iat=int(NOW) + 300))}")
    assert_invalid_token(err)


@pytest.mark.parametrize("exp", ["tomorrow", True, float("inf"), float("nan")])
async def test_non_numeric_or_infinite_exp_is_refused(exp: object) -> None:
    message = await refusal_of(hs256(claims(exp=exp)))
    assert "'exp'" in message


async def test_token_without_exp_is_refused() -> None:
    message = await refusal_of(hs256(claims(exp=None)))
    assert "'exp'" in message


@pytest.mark.parametrize("sub", [None, "", "  ", 42])
async def test_token_without_usable_sub_is_refused(sub: object) -> None:
    payload = claims()
    payload.pop("sub")
    if sub is not None:
        payload["sub"] = sub
    message = await refusal_of(hs256(payload))
    assert "sub" in message


async def test_issuer_and_audience_are_checked_in_dev_mode_when_configured() -> None:
    auth = dev_auth(auth_issuer=ISSUER, auth_audience=AUDIENCE)
    good = hs256(claims(iss=ISSUER, aud=AUDIENCE))
    assert (await auth.authenticate(f"Bearer {good}")).subject == "alice"
    wrong_iss = await rejected(auth, f"Bearer {hs256(claims(iss='https://evil', aud=AUDIENCE))}")
    assert_invalid_token(wrong_iss)
    assert ISSUER in wrong_iss.message
    wrong_aud = await rejected(auth, f"Bearer {hs256(claims(iss=ISSUER, aud='other'))}")
    assert_invalid_token(wrong_aud)
    assert AUDIENCE in wrong_aud.message


async def test_audience_claim_is_ignored_when_no_audience_is_configured() -> None:
    principal = await dev_auth().authenticate(f"Bearer {hs256(claims(aud='anything'))}")
    assert principal.subject == "alice"


async def test_rs256_token_is_refused_in_dev_mode(rsa_key: rsa.RSAPrivateKey) -> None:
    token = jwt.encode(claims(), rsa_key, algorithm="RS256", headers={"kid": "rsa-1"})
    message = await refusal_of(token)
    assert "use HS256" in message


async def test_missing_scope_is_403_naming_the_scope() -> None:
    auth = dev_auth()
    principal = await auth.authenticate(f"Bearer {hs256(claims(scope='a2a.invoke'))}")
    auth.require_scope(principal, "a2a.invoke")
    with pytest.raises(AuthError) as info:
        auth.require_scope(principal, "a2a.tasks.cancel")
    err = info.value
    assert (err.status, err.reason, err.required_scope) == (
        403,
        "insufficient_scope",
        "a2a.tasks.cancel",
    )
    assert err.www_authenticate == (
        f'{CHALLENGE}, error="insufficient_scope", scope="a2a.tasks.cancel"'
    )


async def test_tenant_claim_sets_the_principal_tenant() -> None:
    auth = dev_auth(auth_tenant_claim="org")
    principal = await auth.authenticate(f"Bearer {hs256(claims(org='acme'))}")
    assert principal.tenant == "acme"
    err = await rejected(auth, f"Bearer {hs256(claims())}")
    assert_invalid_token(err)
    assert "'org'" in err.message


async def test_tenant_is_none_when_no_tenant_claim_is_configured() -> None:
    principal = await dev_auth().authenticate(f"Bearer {hs256(claims(org='acme'))}")
    assert principal.tenant is None


def test_principal_key_is_stable_and_separates_tenants() -> None:
    alice = Principal("alice", None, frozenset())
    expected = hashlib.sha256(b"\x00alice").hexdigest()[:32]
    assert alice.key == expected == Principal("alice", None, frozenset({"x"})).key
    assert Principal("alice", "acme", frozenset()).key != alice.key
    assert len(alice.key) == 32


async def test_error_messages_never_contain_the_token_or_secret() -> None:
    auth = dev_auth(auth_issuer=ISSUER)
    tokens = [
        hs256(claims(iss=ISSUER, exp=int(NOW) - 100)),
        hs256(claims(iss="https://evil")),
        hs256(claims(iss=ISSUER), secret="o" * 40),
    ]
    for token in tokens:
        err = await rejected(auth, f"Bearer {token}")
        for text in (err.message, err.www_authenticate, str(err)):
            assert token not in text
            assert SECRET not in text


async def test_mint_dev_token_round_trips_through_authenticator() -> None:
    token = mint_dev_token(
        SECRET,
        subject="bob",
        scopes=["a2a.invoke", "a2a.tasks.read"],
        ttl_s=60,
        now=NOW,
        tenant_claim="tid",
        tenant="acme",
    )
    principal = await dev_auth(auth_tenant_claim="tid").authenticate(f"Bearer {token}")
    assert principal == Principal("bob", "acme", frozenset({"a2a.invoke", "a2a.tasks.read"}))
    assert_invalid_token(await rejected(dev_auth(Clock(NOW + 120)), f"Bearer {token}"))


async def test_mint_dev_token_refuses_short_secrets() -> None:
    with pytest.raises(ValueError, match="at least 32 bytes"):
        mint_dev_token("short", subject="bob", scopes=[], ttl_s=60, now=NOW)


# --- production mode (JWKS) ----------------------------------------------------------------


@pytest.fixture(scope="module")
def rsa_key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


@pytest.fixture(scope="module")
def rsa_key_2() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


@pytest.fixture(scope="module")
def ec_key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def rsa_jwk(key: rsa.RSAPrivateKey, kid: str) -> dict[str, Any]:
    return {**RSAAlgorithm.to_jwk(key.public_key(), as_dict=True), "kid": kid, "use": "sig"}


def ec_jwk(key: ec.EllipticCurvePrivateKey, kid: str) -> dict[str, Any]:
    return {**ECAlgorithm.to_jwk(key.public_key(), as_dict=True), "kid": kid, "use": "sig"}


class Jwks:
    """A JWKS endpoint on 127.0.0.1 that counts how often it is fetched."""

    def __init__(self, keys: list[dict[str, Any]]) -> None:
        self.keys = keys
        self.fetches = 0
        self.server: TestServer | None = None

    async def handle(self, request: web.Request) -> web.Response:
        self.fetches += 1
        return web.json_response({"keys": self.keys})

    @property
    def url(self) -> str:
        assert self.server is not None
        return str(self.server.make_url("/jwks"))


@pytest.fixture
async def jwks(
    rsa_key: rsa.RSAPrivateKey, ec_key: ec.EllipticCurvePrivateKey
) -> AsyncIterator[Jwks]:
    endpoint = Jwks([rsa_jwk(rsa_key, "rsa-1"), ec_jwk(ec_key, "ec-1")])
    app = web.Application()
    app.router.add_get("/jwks", endpoint.handle)
    endpoint.server = TestServer(app, host="127.0.0.1", port=0)
    await endpoint.server.start_server()
    yield endpoint
    await endpoint.server.close()


def jwks_auth(jwks: Jwks, clock: Clock | None = None, **settings: Any) -> Authenticator:
    config = Settings(
        auth_jwks_url=jwks.url, auth_issuer=ISSUER, auth_audience=AUDIENCE, **settings
    )
    return Authenticator(config, now=clock or Clock())


def prod_claims(**extra: Any) -> dict[str, Any]:
    return claims(**{"iss": ISSUER, "aud": AUDIENCE, "scope": "a2a.invoke", **extra})


def signed(key: Any, alg: str, kid: str, payload: dict[str, Any] | None = None) -> str:
    return jwt.encode(payload or prod_claims(), key, algorithm=alg, headers={"kid": kid})


async def test_rs256_and_es256_tokens_are_accepted(
    jwks: Jwks, rsa_key: rsa.RSAPrivateKey, ec_key: ec.EllipticCurvePrivateKey
) -> None:
    auth = jwks_auth(jwks)
    rs = await auth.authenticate(f"Bearer {signed(rsa_key, 'RS256', 'rsa-1')}")
    es = await auth.authenticate(f"Bearer {signed(ec_key, 'ES256', 'ec-1')}")
    assert rs == es == Principal("alice", None, frozenset({"a2a.invoke"}))
    await auth.aclose()


async def test_jwks_keys_are_cached_between_verifications(
    jwks: Jwks, rsa_key: rsa.RSAPrivateKey
) -> None:
    auth = jwks_auth(jwks)
    token = signed(rsa_key, "RS256", "rsa-1")
    await auth.authenticate(f"Bearer {token}")
    await auth.authenticate(f"Bearer {token}")
    assert jwks.fetches == 1


async def test_concurrent_first_verifications_share_one_fetch(
    jwks: Jwks, rsa_key: rsa.RSAPrivateKey
) -> None:
    auth = jwks_auth(jwks)
    token = signed(rsa_key, "RS256", "rsa-1")
    await asyncio.gather(*(auth.authenticate(f"Bearer {token}") for _ in range(5)))
    assert jwks.fetches == 1


async def test_unknown_kid_refetches_at_most_once_per_throttle_window(
    jwks: Jwks, rsa_key: rsa.RSAPrivateKey
) -> None:
    clock = Clock()
    auth = jwks_auth(jwks, clock)
    await auth.authenticate(f"Bearer {signed(rsa_key, 'RS256', 'rsa-1')}")
    # right after a fetch, an unknown kid fails fast without refetching
    err = await rejected(auth, f"Bearer {signed(rsa_key, 'RS256', 'nope-0')}")
    assert_invalid_token(err)
    assert "kid" in err.message
    assert jwks.fetches == 1
    clock.t += 31
    for kid in ("nope-1", "nope-2"):
        assert_invalid_token(await rejected(auth, f"Bearer {signed(rsa_key, 'RS256', kid)}"))
    assert jwks.fetches == 2


async def test_rotated_key_is_accepted_once_the_throttle_window_passes(
    jwks: Jwks, rsa_key: rsa.RSAPrivateKey, rsa_key_2: rsa.RSAPrivateKey
) -> None:
    clock = Clock()
    auth = jwks_auth(jwks, clock)
    await auth.authenticate(f"Bearer {signed(rsa_key, 'RS256', 'rsa-1')}")
    jwks.keys = [rsa_jwk(rsa_key_2, "rsa-2")]
    rotated = f"Bearer {signed(rsa_key_2, 'RS256', 'rsa-2')}"
    clock.t += 5
    assert_invalid_token(await rejected(auth, rotated))
    clock.t += 30
    assert (await auth.authenticate(rotated)).subject == "alice"
    assert jwks.fetches == 2
    # the withdrawn key left the set with the refresh
    assert_invalid_token(await rejected(auth, f"Bearer {signed(rsa_key, 'RS256', 'rsa-1')}"))


async def test_jwks_server_down_is_401_saying_keys_could_not_be_fetched(
    jwks: Jwks, rsa_key: rsa.RSAPrivateKey
) -> None:
    auth = jwks_auth(jwks)
    assert jwks.server is not None
    await jwks.server.close()
    err = await rejected(auth, f"Bearer {signed(rsa_key, 'RS256', 'rsa-1')}")
    assert_invalid_token(err)
    assert "could not be fetched" in err.message


async def test_hs256_token_is_refused_in_jwks_mode(jwks: Jwks) -> None:
    token = jwt.encode(prod_claims(), SECRET, algorithm="HS256", headers={"kid": "rsa-1"})
    err = await rejected(jwks_auth(jwks), f"Bearer {token}")
    assert_invalid_token(err)
    assert "use RS256, ES256" in err.message
    assert jwks.fetches == 0


async def test_hs256_token_keyed_with_the_rsa_public_pem_is_refused(
    jwks: Jwks, rsa_key: rsa.RSAPrivateKey
) -> None:
    pem = rsa_key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    token = hand_signed({"alg": "HS256", "typ": "JWT", "kid": "rsa-1"}, prod_claims(), pem)
    assert_invalid_token(await rejected(jwks_auth(jwks), f"Bearer {token}"))
    # with both key sources configured, HS256 still only ever meets the HS256 secret
    both = jwks_auth(jwks, auth_hs256_secret=SECRET)
    assert_invalid_token(await rejected(both, f"Bearer {token}"))


async def test_both_modes_configured_accepts_each_family_with_its_own_key(
    jwks: Jwks, rsa_key: rsa.RSAPrivateKey
) -> None:
    auth = jwks_auth(jwks, auth_hs256_secret=SECRET)
    assert (await auth.authenticate(f"Bearer {hs256(prod_claims())}")).subject == "alice"
    rs = signed(rsa_key, "RS256", "rsa-1")
    assert (await auth.authenticate(f"Bearer {rs}")).subject == "alice"


async def test_token_whose_alg_does_not_match_its_key_is_refused(
    jwks: Jwks, ec_key: ec.EllipticCurvePrivateKey
) -> None:
    err = await rejected(jwks_auth(jwks), f"Bearer {signed(ec_key, 'ES256', 'rsa-1')}")
    assert_invalid_token(err)


async def test_token_without_kid_is_refused_in_jwks_mode(
    jwks: Jwks, rsa_key: rsa.RSAPrivateKey
) -> None:
    token = jwt.encode(prod_claims(), rsa_key, algorithm="RS256")
    assert_invalid_token(await rejected(jwks_auth(jwks), f"Bearer {token}"))


@pytest.mark.parametrize(
    ("field", "value"), [("iss", "https://evil.example"), ("aud", "someone-else")]
)
async def test_wrong_issuer_or_audience_is_refused_in_jwks_mode(
    jwks: Jwks, rsa_key: rsa.RSAPrivateKey, field: str, value: str
) -> None:
    token = signed(rsa_key, "RS256", "rsa-1", prod_claims(**{field: value}))
    err = await rejected(jwks_auth(jwks), f"Bearer {token}")
    assert_invalid_token(err)
    assert f"({field})" in err.message


# --- verified tokens are remembered -------------------------------------------------------------


async def test_a_verified_token_is_not_verified_again_on_its_next_call(monkeypatch) -> None:
    decodes = CountingDecode(monkeypatch)
    auth = dev_auth()
    token = f"Bearer {hs256(claims(scope='a2a.invoke'))}"
    first = await auth.authenticate(token)
    assert await auth.authenticate(token) == first
    assert decodes.calls == 1


async def test_a_remembered_token_still_expires_on_time(monkeypatch) -> None:
    clock = Clock()
    auth = dev_auth(clock, auth_leeway_s=0)
    token = f"Bearer {hs256(claims(exp=int(NOW) + 60))}"
    assert (await auth.authenticate(token)).subject == "alice"
    clock.t += 61
    err = await rejected(auth, token)
    assert_invalid_token(err)
    assert "expired" in err.message


async def test_a_remembered_token_is_verified_again_after_the_ttl(monkeypatch) -> None:
    decodes = CountingDecode(monkeypatch)
    clock = Clock()
    auth = dev_auth(clock)
    token = f"Bearer {hs256(claims(exp=int(NOW) + 3600))}"
    await auth.authenticate(token)
    clock.t += VERIFIED_TTL_S - 1
    await auth.authenticate(token)
    assert decodes.calls == 1
    clock.t += 2
    await auth.authenticate(token)
    assert decodes.calls == 2


async def test_refused_tokens_are_not_remembered(monkeypatch) -> None:
    decodes = CountingDecode(monkeypatch)
    auth = dev_auth()
    forged = f"Bearer {hs256(claims(), secret='o' * 40)}"
    for _ in range(3):
        assert_invalid_token(await rejected(auth, forged))
    assert decodes.calls == 3


async def test_remembered_tokens_are_bounded_oldest_out_first(monkeypatch) -> None:
    decodes = CountingDecode(monkeypatch)
    auth = dev_auth()
    tokens = [f"Bearer {hs256(claims(jti=str(n)))}" for n in range(VERIFIED_MAX + 1)]
    for token in tokens:
        await auth.authenticate(token)
    assert decodes.calls == VERIFIED_MAX + 1
    await auth.authenticate(tokens[-1])  # the newest is still remembered
    assert decodes.calls == VERIFIED_MAX + 1
    await auth.authenticate(tokens[0])  # the oldest was let go
    assert decodes.calls == VERIFIED_MAX + 2
