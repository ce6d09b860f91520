"""Building blocks for the operator API and console tests (test_operator_*.py)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

import httpx
import msgspec

from realtime.auth import mint_dev_token
from tests.conftest import ALL_SCOPES, REALTIME, TEST_SECRET
from tests.e2e.realtime_helpers import create_part, new_id, session_of

OPERATOR = ("aim.operator",)
TENANT_CLAIM = "tenant"


def bearer(
    subject: str = "operator",
    scopes: tuple[str, ...] = OPERATOR,
    *,
    tenant: str | None = None,
) -> str:
    token = mint_dev_token(
        TEST_SECRET,
        subject=subject,
        scopes=scopes,
        ttl_s=600,
        now=time.time(),
        tenant_claim=TENANT_CLAIM if tenant is not None else None,
        tenant=tenant,
    )
    return f"Bearer {token}"


async def operator_get(
    client: httpx.AsyncClient,
    path: str,
    *,
    authorization: str | None = None,
    **params: Any,
) -> httpx.Response:
    """GET an operator API path as an operator (a default operator token unless given)."""
    headers = {"Authorization": authorization if authorization is not None else bearer()}
    query = {name: str(value) for name, value in params.items() if value is not None}
    return await client.get(path, headers=headers, params=query)


async def operator_json(client: httpx.AsyncClient, path: str, **params: Any) -> dict[str, Any]:
    response = await operator_get(client, path, **params)
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


async def timeline_of(client: httpx.AsyncClient, session_id: str, **params: Any) -> list[dict]:
    """Every entry of a session's timeline, page after page."""
    entries: list[dict[str, Any]] = []
    cursor = None
    for _ in range(100):
        page = await operator_json(
            client, f"/ops/api/sessions/{session_id}/timeline", cursor=cursor, **params
        )
        entries += page["entries"]
        cursor = page["nextCursor"]
        if cursor is None:
            return entries
    raise AssertionError("the timeline did not end within 100 pages")


async def rpc_as(
    client: httpx.AsyncClient,
    method: str,
    params: dict[str, Any],
    *,
    subject: str = "alice",
    tenant: str | None = None,
    traceparent: str | None = None,
) -> dict[str, Any]:
    """One /a2a call (realtime extension on), optionally with a tenant and a traceparent."""
    headers = {
        "Authorization": bearer(subject, ALL_SCOPES, tenant=tenant),
        "A2A-Version": "1.0",
        "A2A-Extensions": REALTIME,
        "Content-Type": "application/json",
    }
    if traceparent is not None:
        headers["traceparent"] = traceparent
    body = msgspec.json.encode({"jsonrpc": "2.0", "id": 1, "method": method, "params": params})
    response = await client.post("/a2a", content=body, headers=headers)
    decoded: dict[str, Any] = response.json()
    return decoded


async def start_session(
    client: httpx.AsyncClient,
    *,
    subject: str = "alice",
    tenant: str | None = None,
    traceparent: str | None = None,
) -> str:
    """A session started by SendMessage of a realtime part, as `subject` of `tenant`: its id."""
    message = {"messageId": new_id(), "role": "ROLE_USER", "parts": [create_part()]}
    created = await rpc_as(
        client,
        "SendMessage",
        {"message": message},
        subject=subject,
        tenant=tenant,
        traceparent=traceparent,
    )
    return str(session_of(created["result"]["task"])["sessionId"])


async def start_sessions(client: httpx.AsyncClient, per_tenant: dict[str, int]) -> None:
    """`per_tenant[tenant]` sessions in each tenant, each of a subject of its own."""
    for tenant, count in per_tenant.items():
        for index in range(count):
            await start_session(client, subject=f"{tenant}-{index}", tenant=tenant)


def traceparent(trace_id: str) -> str:
    return f"00-{trace_id}-00f067aa0ba902b7-01"


async def eventually(
    check: Callable[[], Awaitable[Any]], *, within: float = 5.0, every: float = 0.05
) -> Any:
    """`check()` until it returns something truthy (bounded by `within` seconds)."""
    deadline = time.monotonic() + within
    while True:
        found = await check()
        if found:
            return found
        assert time.monotonic() < deadline, f"not within {within} s"
        await asyncio.sleep(every)
