"""Browser apps on another origin call the service when their origin is listed in
AIM_CORS_ORIGINS: preflights are answered and responses name the origin; any other origin, or a
service without the setting, gets no CORS headers (the browser then refuses the call)."""

from __future__ import annotations

import pytest

from tests.conftest import headers
from tests.e2e.realtime_helpers import plain_service

pytestmark = pytest.mark.e2e

APP = "https://app.example.com"
LIST_TASKS = b'{"jsonrpc":"2.0","id":1,"method":"ListTasks","params":{}}'


async def test_a_listed_origin_passes_the_preflight_and_reads_the_answer(store):
    async with plain_service(store, cors_origins=(APP,)) as client:
        preflight = await client.options(
            "/a2a",
            headers={
                "Origin": APP,
                "Access-Control-Request-Method": "POST",
                "Access-Control-Request-Headers": "authorization, content-type, a2a-version, "
                "a2a-extensions, last-event-id",
            },
        )
        assert preflight.status_code in (200, 204)
        assert preflight.headers["access-control-allow-origin"] == APP
        allowed = preflight.headers["access-control-allow-headers"].lower()
        for name in ("authorization", "content-type", "a2a-version", "a2a-extensions"):
            assert name in allowed
        assert "POST" in preflight.headers["access-control-allow-methods"]
        assert "access-control-allow-credentials" not in preflight.headers

        answer = await client.post(
            "/a2a", content=LIST_TASKS, headers={"Origin": APP, **headers("alice")}
        )
        assert answer.status_code == 200
        assert answer.json()["result"]["tasks"] == []
        assert answer.headers["access-control-allow-origin"] == APP
        exposed = answer.headers["access-control-expose-headers"].lower()
        assert "a2a-extensions" in exposed
        assert "retry-after" in exposed


async def test_an_unlisted_origin_gets_no_cors_headers(store):
    async with plain_service(store, cors_origins=(APP,)) as client:
        answer = await client.post(
            "/a2a",
            content=LIST_TASKS,
            headers={"Origin": "https://evil.example", **headers("alice")},
        )
        assert "access-control-allow-origin" not in answer.headers


async def test_without_the_setting_no_origin_is_allowed(store):
    async with plain_service(store) as client:
        preflight = await client.options(
            "/a2a", headers={"Origin": APP, "Access-Control-Request-Method": "POST"}
        )
        assert "access-control-allow-origin" not in preflight.headers
        answer = await client.post(
            "/a2a", content=LIST_TASKS, headers={"Origin": APP, **headers("alice")}
        )
        assert answer.status_code == 200
        assert "access-control-allow-origin" not in answer.headers


async def test_with_a_list_of_origins_every_response_varies_by_origin(store):
    async with plain_service(store, cors_origins=(APP, "https://other.example.com")) as client:
        answers = [
            await client.get("/.well-known/agent-card.json"),
            await client.get("/.well-known/agent-card.json", headers={"Origin": APP}),
            await client.get(
                "/.well-known/agent-card.json", headers={"Origin": "https://evil.example"}
            ),
            await client.post("/a2a", content=LIST_TASKS, headers=headers("alice")),
            await client.get("/healthz"),
            await client.get("/ops/api/sessions"),  # a 401
            await client.get("/no/such/path"),
        ]
    for answer in answers:
        vary = [part.strip().lower() for part in answer.headers.get("vary", "").split(",")]
        assert vary.count("origin") == 1, (answer.url, answer.headers)
    card = answers[0]
    assert card.headers["cache-control"].startswith("public")  # what a shared cache keeps


async def test_any_origin_or_none_needs_no_vary(store):
    for origins in [("*",), ()]:
        async with plain_service(store, cors_origins=origins) as client:
            card = await client.get("/.well-known/agent-card.json")
        assert "origin" not in card.headers.get("vary", "").lower(), origins
