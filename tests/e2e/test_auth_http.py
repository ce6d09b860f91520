"""Authentication and authorization over HTTP: 401/403 with WWW-Authenticate and JSON-RPC bodies."""

from __future__ import annotations

import time
from typing import Any

import httpx
import jwt
import pytest

from realtime.app import create_app
from realtime.provider_tokens import mint_provider_token
from realtime.settings import Settings
from realtime.store.redis_client import RedisClient
from tests.conftest import TEST_SECRET, error_info, rpc, serving, token
from tests.jwks_server import AUDIENCE, ISSUER, jwk, jwks_server, rsa_key, signed

pytestmark = pytest.mark.e2e

LIST = b'{"jsonrpc":"2.0","id":42,"method":"ListTasks","params":{}}'


async def test_no_credentials_is_401_with_a_bare_bearer_challenge(client):
    response = await client.post("/a2a", content=LIST, headers={"A2A-Version": "1.0"})
    assert response.status_code == 401
    assert response.headers["www-authenticate"] == 'Bearer realm="aim-realtime"'
    body = response.json()
    assert body["id"] == 42
    assert error_info(body)["reason"] == "UNAUTHENTICATED"


async def test_bad_token_is_401_invalid_token(client):
    response = await client.post(
        "/a2a", content=LIST, headers={"A2A-Version": "1.0", "Authorization": "Bearer x.y.z"}
    )
    assert response.status_code == 401
    assert 'error="invalid_token"' in response.headers["www-authenticate"]
    assert response.json()["error"]["message"]


async def test_missing_scope_is_403_naming_the_scope(client):
    body = await rpc(
        client,
        "CancelTask",
        {"id": "3c9a1f0e-7b6d-4e5c-8a2b-1d0c9e8f7a6b"},
        scopes=("a2a.tasks.read",),
    )
    assert body["_status"] == 403
    assert error_info(body)["metadata"]["scope"] == "a2a.tasks.cancel"


async def test_scope_challenge_header_names_the_scope(client):
    response = await client.post(
        "/a2a",
        content=LIST,
        headers={
            "A2A-Version": "1.0",
            "Authorization": f"Bearer {token(scopes=('a2a.invoke',))}",
        },
    )
    assert response.status_code == 403
    assert response.headers["www-authenticate"] == (
        'Bearer realm="aim-realtime", error="insufficient_scope", scope="a2a.tasks.read"'
    )


@pytest.mark.parametrize(
    ("method", "scope"),
    [
        ("SendMessage", "a2a.invoke"),
        ("GetTask", "a2a.tasks.read"),
        ("ListTasks", "a2a.tasks.read"),
        ("CancelTask", "a2a.tasks.cancel"),
        ("aim.realtime.JoinSession", "a2a.invoke"),
    ],
)
async def test_each_method_requires_its_schema_scope(client, method, scope):
    others = tuple(s for s in ("a2a.invoke", "a2a.tasks.read", "a2a.tasks.cancel") if s != scope)
    body = await rpc(client, method, {}, scopes=others, realtime=True)
    assert body["_status"] == 403
    assert error_info(body)["metadata"]["scope"] == scope


# --- what a token may be (lifetime, audience, principal) ---------------------------------------


def production_settings() -> Settings:
    """Settings as production reads them (AIM_REQUIRE_REDIS=1, an HS256 key, its audience)."""
    return Settings.from_env(
        {
            "AIM_REQUIRE_REDIS": "1",
            "AIM_AUTH_HS256_SECRET": TEST_SECRET,
            "AIM_AUTH_AUDIENCE": "aim-realtime",
            "AIM_AUTH_TENANT_CLAIM": "org",
            "AIM_RATE_LIMIT_RPS": "0",
        }
    )


def bearer(**claims: Any) -> dict[str, str]:
    now = int(time.time())
    payload = {"sub": "alice", "scope": "a2a.tasks.read", "iat": now, "exp": now + 600, **claims}
    signed = jwt.encode(payload, TEST_SECRET, algorithm="HS256")
    return {"A2A-Version": "1.0", "Authorization": f"Bearer {signed}"}


@pytest.mark.parametrize(
    ("claims", "says"),
    [
        ({"exp": int(time.time()) + 100 * 365 * 86400}, "at most 86400 s"),
        ({"aud": "other-service"}, "aud"),
        ({"aud": None}, "aud"),
        ({"org": "acme\u202eevil"}, "'org' claim must not contain"),
        ({"sub": "alice\u2028admin"}, "'sub' claim must not contain"),
    ],
    ids=["100-years", "other-aud", "no-aud", "bidi-tenant", "line-separator-sub"],
)
async def test_production_refuses_tokens_beyond_what_it_accepts(
    store: RedisClient, claims: dict[str, Any], says: str
) -> None:
    app = create_app(production_settings(), store=store, tracer_provider=None)
    fine = {"aud": "aim-realtime", "org": "acme"}
    async with serving(app) as base, httpx.AsyncClient(base_url=base) as http:
        accepted = await http.post("/a2a", content=LIST, headers=bearer(**fine))
        payload = {k: v for k, v in {**fine, **claims}.items() if v is not None}
        answer = await http.post("/a2a", content=LIST, headers=bearer(**payload))
    assert accepted.status_code == 200, accepted.text
    assert answer.status_code == 401, answer.text
    assert says in answer.json()["error"]["message"]
    assert 'error="invalid_token"' in answer.headers["www-authenticate"]


# --- a 401 says why in data (ErrorInfo metadata `reason`) -----------------------------------------


def unauthenticated(answer: httpx.Response) -> str:
    """The cause of a 401 answer, checked to be the JSON-RPC -31401 it always is."""
    assert answer.status_code == 401, answer.text
    body = answer.json()
    assert body["error"]["code"] == -31401
    info = error_info(body)
    assert (info["reason"], info["domain"]) == ("UNAUTHENTICATED", "urn:aim:a2a:realtime:v1")
    cause: str = info["metadata"]["reason"]
    return cause


def signed_with(secret: str, **claims: Any) -> str:
    now = int(time.time())
    payload = {"sub": "alice", "scope": "a2a.tasks.read", "iat": now, "exp": now + 600, **claims}
    return "Bearer " + jwt.encode(payload, secret, algorithm="HS256")


@pytest.mark.parametrize(
    ("authorization", "cause"),
    [
        (None, "missing_token"),
        ("Bearer not-a-jwt", "malformed_token"),
        (signed_with(TEST_SECRET, iat=int(time.time()) - 700, exp=int(time.time()) - 60),
         "token_expired"),
        (signed_with(TEST_SECRET, nbf=int(time.time()) + 3600), "token_not_yet_valid"),
        (signed_with("another-secret-0123456789-abcdefghijklmnop"), "invalid_signature"),
        (signed_with(TEST_SECRET, sub=""), "invalid_claims"),
    ],
    ids=["missing", "malformed", "expired", "not-yet-valid", "bad-signature", "bad-claims"],
)  # fmt: skip
async def test_a_401_on_a2a_says_why_in_data(
    client: httpx.AsyncClient, authorization: str | None, cause: str
) -> None:
    headers = {"A2A-Version": "1.0"}
    if authorization is not None:
        headers["Authorization"] = authorization
    assert unauthenticated(await client.post("/a2a", content=LIST, headers=headers)) == cause


async def test_a_401_says_which_of_audience_or_issuer_is_wrong(store: RedisClient) -> None:
    settings = Settings(
        auth_hs256_secret=TEST_SECRET, auth_audience="aim-realtime", auth_issuer="https://idp"
    )
    app = create_app(settings, store=store, tracer_provider=None)
    good = {"aud": "aim-realtime", "iss": "https://idp"}
    async with serving(app) as base, httpx.AsyncClient(base_url=base) as http:

        async def cause(**claims: Any) -> str:
            authorization = signed_with(TEST_SECRET, **{**good, **claims})
            headers = {"A2A-Version": "1.0", "Authorization": authorization}
            return unauthenticated(await http.post("/a2a", content=LIST, headers=headers))

        assert await cause(aud="other-service") == "invalid_audience"
        assert await cause(iss="https://other-idp") == "invalid_issuer"


async def test_a_401_says_when_the_issuers_keys_lack_the_token_key_or_cannot_be_had(
    store: RedisClient,
) -> None:
    key = rsa_key()
    now = int(time.time())
    bearer = signed(key, "k", iat=now, exp=now + 600, scope="a2a.tasks.read")
    unpublished = signed(key, "not-published", iat=now, exp=now + 600, scope="a2a.tasks.read")

    async def cause(url: str, authorization: str) -> str:
        settings = Settings(auth_jwks_url=url, auth_issuer=ISSUER, auth_audience=AUDIENCE)
        app = create_app(settings, store=store, tracer_provider=None)
        async with serving(app) as base, httpx.AsyncClient(base_url=base) as http:
            headers = {"A2A-Version": "1.0", "Authorization": authorization}
            return unauthenticated(await http.post("/a2a", content=LIST, headers=headers))

    with jwks_server([jwk(key, "k")]) as jwks:
        assert await cause(jwks.url, unpublished) == "unknown_key"
        jwks.down = True  # a service that has not fetched the keys yet
        assert await cause(jwks.url, bearer) == "keys_unavailable"


PROVIDER_CALL = (
    b'{"jsonrpc":"2.0","id":7,"method":"aim.provider.ReportAgentState","params":{"sessionId":'
    b'"3c9a1f0e-7b6d-4e5c-8a2b-1d0c9e8f7a6b","sessionEpoch":1,"state":"listening"}}'
)


async def test_a_401_on_provider_says_why_in_data(
    client: httpx.AsyncClient, settings: Settings
) -> None:
    sid = "3c9a1f0e-7b6d-4e5c-8a2b-1d0c9e8f7a6b"
    now = int(time.time())
    secret = settings.provider_secret

    async def cause(authorization: str | None) -> str:
        headers = {} if authorization is None else {"Authorization": authorization}
        return unauthenticated(await client.post("/provider", content=PROVIDER_CALL,
                                                 headers=headers))  # fmt: skip

    expired = mint_provider_token(secret, session_id=sid, epoch=1, ttl_s=60, now=now - 3600)
    forged = mint_provider_token(TEST_SECRET, session_id=sid, epoch=1, ttl_s=60, now=now)
    assert await cause(None) == "missing_token"
    assert await cause("Bearer x.y.z") == "malformed_token"
    assert await cause(f"Bearer {expired}") == "token_expired"
    assert await cause(f"Bearer {forged}") == "invalid_signature"
    assert await cause(f"Bearer {token()}") == "invalid_signature"  # a client token, its key
