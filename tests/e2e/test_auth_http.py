"""Authentication and authorization over HTTP: 401/403 with WWW-Authenticate and JSON-RPC bodies."""

from __future__ import annotations

import time
from typing import Any

import httpx
import jwt
import pytest

from realtime.app import create_app
from realtime.settings import Settings
from realtime.store.redis_client import RedisClient
from tests.conftest import TEST_SECRET, error_info, rpc, serving, token

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
