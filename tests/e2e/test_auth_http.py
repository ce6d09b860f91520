"""Authentication and authorization over HTTP: 401/403 with WWW-Authenticate and JSON-RPC bodies."""

from __future__ import annotations

import pytest

from tests.conftest import error_info, rpc, token

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
