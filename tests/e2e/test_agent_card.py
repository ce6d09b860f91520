"""The Agent Card at /.well-known/agent-card.json (A2A 1.0 shape, caching)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from email.utils import formatdate, parsedate_to_datetime
from typing import Any

import httpx
import pytest

from realtime.app import create_app
from realtime.rpc.registry import METHODS
from realtime.settings import Settings
from realtime.store.redis_client import RedisClient
from tests.conftest import REALTIME, TEST_SECRET, serving
from tests.tcp_proxy import redis_proxy

pytestmark = pytest.mark.e2e

CARD = "/.well-known/agent-card.json"
T0 = 1_900_000_000  # a fixed "now" (2030-03-17) for services with an injected clock


async def test_card_declares_the_jsonrpc_interface_and_capabilities(client):
    response = await client.get("/.well-known/agent-card.json")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("application/json")
    card = response.json()
    for member in ("name", "description", "version", "defaultInputModes", "defaultOutputModes"):
        assert card[member]
    assert card["supportedInterfaces"][0] == {
        "url": "http://127.0.0.1:8080/a2a",
        "protocolBinding": "JSONRPC",
        "protocolVersion": "1.0",
    }
    assert card["capabilities"]["streaming"] is True
    assert card["capabilities"]["pushNotifications"] is False


async def test_card_also_declares_the_0_3_interface_after_the_1_0_one(client):
    card = (await client.get("/.well-known/agent-card.json")).json()
    url = "http://127.0.0.1:8080/a2a"
    assert card["supportedInterfaces"] == [
        {"url": url, "protocolBinding": "JSONRPC", "protocolVersion": "1.0"},
        {"url": url, "protocolBinding": "JSONRPC", "protocolVersion": "0.3"},
    ]
    # the 0.3 card members, for clients that only read those
    assert (card["url"], card["preferredTransport"], card["protocolVersion"]) == (
        url,
        "JSONRPC",
        "0.3.0",
    )


async def test_card_declares_the_realtime_extension_as_optional_with_its_params(client):
    card = (await client.get("/.well-known/agent-card.json")).json()
    (extension,) = card["capabilities"]["extensions"]
    assert extension["uri"] == REALTIME
    assert extension["required"] is False
    params = extension["params"]
    assert params["methods"] == [m for m in METHODS if m.startswith("aim.realtime.")]
    assert params["mediaBindings"] == ["livekit-webrtc-v1"]
    assert len(params["interactionTypes"]) == 10
    assert set(params["providerCapabilities"]) == {
        "audio_input",
        "audio_output",
        "vision_input",
        "transcript_history",
    }


async def test_card_declares_bearer_security_with_the_three_scopes(client):
    card = (await client.get("/.well-known/agent-card.json")).json()
    (name,) = card["securitySchemes"]
    assert card["securitySchemes"][name]["httpAuthSecurityScheme"]["scheme"] == "Bearer"
    scopes = {
        scope
        for requirement in card["securityRequirements"]
        for scope in requirement["schemes"][name]["list"]
    }
    assert scopes == {"a2a.invoke", "a2a.tasks.read", "a2a.tasks.cancel"}
    assert all(skill["id"] and skill["tags"] for skill in card["skills"])


async def test_card_also_declares_its_security_in_the_0_3_form(client):
    card = (await client.get("/.well-known/agent-card.json")).json()
    (name,) = card["securitySchemes"]
    scheme = card["securitySchemes"][name]
    # 0.3's HTTPAuthSecurityScheme beside the 1.0 member, in the same entry
    assert (scheme["type"], scheme["scheme"], scheme["bearerFormat"]) == ("http", "bearer", "JWT")
    assert scheme["httpAuthSecurityScheme"]["bearerFormat"] == "JWT"
    # 0.3's `security`: the same alternatives as `securityRequirements`, `{name: [scopes]}`
    assert card["security"] == [
        {name: requirement["schemes"][name]["list"]} for requirement in card["securityRequirements"]
    ]
    for skill in card["skills"]:
        assert skill["security"] == [
            {name: r["schemes"][name]["list"]} for r in skill["securityRequirements"]
        ]


async def test_card_is_cacheable_and_revalidates_with_its_etag(client):
    first = await client.get("/.well-known/agent-card.json")
    assert "max-age=" in first.headers["cache-control"]
    etag = first.headers["etag"]
    again = await client.get("/.well-known/agent-card.json", headers={"If-None-Match": etag})
    assert again.status_code == 304
    assert again.content == b""


async def test_card_uses_the_public_base_url(store, tracer_provider):
    settings = Settings.from_env(
        {"AIM_AUTH_HS256_SECRET": TEST_SECRET, "AIM_PUBLIC_BASE_URL": "https://aim.example/"}
    )
    app = create_app(settings, store=store, tracer_provider=tracer_provider)
    async with serving(app) as base_url, httpx.AsyncClient(base_url=base_url) as http:
        card = (await http.get("/.well-known/agent-card.json")).json()
    assert card["supportedInterfaces"][0]["url"] == "https://aim.example/a2a"


async def test_health_and_readiness_probes(client):
    assert (await client.get("/healthz")).status_code == 200
    ready = await client.get("/readyz")
    assert ready.status_code == 200
    assert ready.json() == {"status": "ready"}


# --- Last-Modified and conditional requests (RFC 9110 §8.8.2, §13.1, §13.2.2) -------------------


def seconds(http_date: str) -> int:
    return int(parsedate_to_datetime(http_date).timestamp())


CARD_PATHS = (CARD, "/.well-known/agent.json")  # the A2A 1.0 card, and the 0.1 one


@pytest.mark.parametrize("path", CARD_PATHS)
async def test_card_has_a_last_modified_beside_its_etag(client, path):
    first = await client.get(path)
    modified = first.headers["last-modified"]
    assert modified.endswith(" GMT")  # IMF-fixdate
    assert seconds(modified) <= seconds(first.headers["date"])
    again = await client.get(path)
    assert again.headers["last-modified"] == modified
    assert again.headers["etag"] == first.headers["etag"]
    revalidated = await client.get(path, headers={"If-None-Match": first.headers["etag"]})
    assert revalidated.status_code == 304
    for header in ("etag", "last-modified", "cache-control"):
        assert revalidated.headers[header] == first.headers[header]


@pytest.mark.parametrize("path", CARD_PATHS)
async def test_if_modified_since_revalidates_by_date(client, path):
    modified = (await client.get(path)).headers["last-modified"]
    at = seconds(modified)
    for since in (modified, formatdate(at + 3600, usegmt=True)):
        response = await client.get(path, headers={"If-Modified-Since": since})
        assert (response.status_code, response.content) == (304, b""), since
    earlier = await client.get(path, headers={"If-Modified-Since": formatdate(at - 1, usegmt=True)})
    assert earlier.status_code == 200
    assert earlier.json()["name"]
    # the obsolete forms are HTTP-dates too (a recipient must accept them)
    asctime = parsedate_to_datetime(modified).strftime("%a %b %e %H:%M:%S %Y")
    assert (await client.get(path, headers={"If-Modified-Since": asctime})).status_code == 304


@pytest.mark.parametrize(
    "since",
    ["yesterday", "", "Sun, 06 Nov 2994 08:49:37 +0000", "2994-11-06T08:49:37Z",
     "Sun, 06 Nov 2994 08:49:37 GMT, Mon, 07 Nov 2994 08:49:37 GMT"],
)  # fmt: skip
async def test_an_if_modified_since_that_is_not_one_http_date_is_ignored(client, since):
    response = await client.get(CARD, headers={"If-Modified-Since": since})
    assert response.status_code == 200
    assert response.json()["name"]


async def test_if_none_match_takes_precedence_over_if_modified_since(client):
    first = await client.get(CARD)
    etag, modified = first.headers["etag"], first.headers["last-modified"]
    earlier = formatdate(seconds(modified) - 60, usegmt=True)
    # another ETag: the card is sent, although the date alone would say 304
    other = {"If-None-Match": '"0123"', "If-Modified-Since": modified}
    response = await client.get(CARD, headers=other)
    assert response.status_code == 200
    assert response.json()["name"]
    # ours (strong, weak, in a list, or `*`): 304, although the date alone would say 200
    for if_none_match in (etag, f"W/{etag}", f'"0123", {etag}', "*"):
        headers = {"If-None-Match": if_none_match, "If-Modified-Since": earlier}
        response = await client.get(CARD, headers=headers)
        assert (response.status_code, response.content) == (304, b""), if_none_match


@contextlib.asynccontextmanager
async def card_service(
    store: RedisClient, tracer_provider: Any, *, now: float, base_url: str | None = None
) -> AsyncIterator[httpx.AsyncClient]:
    environ = {"AIM_AUTH_HS256_SECRET": TEST_SECRET}
    if base_url is not None:
        environ["AIM_PUBLIC_BASE_URL"] = base_url
    app = create_app(
        Settings.from_env(environ),
        store=store,
        clock=lambda: now,
        tracer_provider=tracer_provider,
        run_worker=False,
    )
    async with serving(app) as url, httpx.AsyncClient(base_url=url) as http:
        yield http


async def test_last_modified_is_the_same_on_every_replica_and_after_restarts(
    store, tracer_provider
):
    async with (
        card_service(store, tracer_provider, now=T0) as one,
        card_service(store, tracer_provider, now=T0 + 600) as two,
    ):
        a, b = await one.get(CARD), await two.get(CARD)
    assert a.headers["etag"] == b.headers["etag"]
    assert (
        a.headers["last-modified"] == b.headers["last-modified"] == formatdate(T0 - 1, usegmt=True)
    )
    async with card_service(store, tracer_provider, now=T0 + 1200) as restarted:
        again = await restarted.get(CARD)
    assert again.headers["last-modified"] == formatdate(T0 - 1, usegmt=True)
    # a since-date from one replica revalidates on another
    async with card_service(store, tracer_provider, now=T0 + 1800) as three:
        since = {"If-Modified-Since": a.headers["last-modified"]}
        assert (await three.get(CARD, headers=since)).status_code == 304


async def test_another_card_content_gets_a_later_last_modified(store, tracer_provider):
    async with card_service(store, tracer_provider, now=T0) as first:
        old = await first.get(CARD)
    async with card_service(store, tracer_provider, now=T0 + 60, base_url="https://b.example") as b:
        changed = await b.get(CARD)
        # a client that holds the old card by date alone gets the new one
        since = {"If-Modified-Since": old.headers["last-modified"]}
        refreshed = await b.get(CARD, headers=since)
    assert changed.headers["etag"] != old.headers["etag"]
    assert changed.headers["last-modified"] == formatdate(T0 + 60 - 1, usegmt=True)
    assert refreshed.status_code == 200
    assert refreshed.json()["supportedInterfaces"][0]["url"] == "https://b.example/a2a"
    # and a change back is a change too: the first content is dated anew, never back in time
    since = {"If-Modified-Since": changed.headers["last-modified"]}
    async with card_service(store, tracer_provider, now=T0 + 120) as back:
        reverted = await back.get(CARD, headers=since)
    assert reverted.status_code == 200
    assert reverted.headers["etag"] == old.headers["etag"]
    assert reverted.headers["last-modified"] == formatdate(T0 + 120 - 1, usegmt=True)


async def test_without_redis_the_card_is_served_without_last_modified(
    redis_url, tracer_provider, monkeypatch
):
    if redis_url is None:
        pytest.skip("needs a real Redis (the embedded store has no socket to cut)")
    from realtime.routes import AgentCardBody

    monkeypatch.setattr(AgentCardBody, "RETRY_S", 0.0)
    async with redis_proxy(redis_url) as (proxy, url):
        proxied = RedisClient.from_url(url, pool_size=4)
        try:
            await proxied.client.flushdb()
            proxy.refuse()
            async with card_service(proxied, tracer_provider, now=T0) as http:
                response = await http.get(CARD)
                assert response.status_code == 200
                assert "last-modified" not in response.headers
                etag = response.headers["etag"]
                # so a date cannot revalidate; the ETag still does
                since = {"If-Modified-Since": formatdate(T0 + 3600, usegmt=True)}
                assert (await http.get(CARD, headers=since)).status_code == 200
                assert (await http.get(CARD, headers={"If-None-Match": etag})).status_code == 304
                proxy.restore()
                back = await http.get(CARD)
                assert back.headers["last-modified"] == formatdate(T0 - 1, usegmt=True)
        finally:
            await proxied.aclose()
