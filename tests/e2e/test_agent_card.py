"""The Agent Card at /.well-known/agent-card.json (A2A 1.0 shape, caching)."""

from __future__ import annotations

import pytest

from realtime.rpc.registry import METHODS
from tests.conftest import REALTIME

pytestmark = pytest.mark.e2e


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


async def test_card_is_cacheable_and_revalidates_with_its_etag(client):
    first = await client.get("/.well-known/agent-card.json")
    assert "max-age=" in first.headers["cache-control"]
    etag = first.headers["etag"]
    again = await client.get("/.well-known/agent-card.json", headers={"If-None-Match": etag})
    assert again.status_code == 304
    assert again.content == b""


async def test_card_uses_the_public_base_url(store, tracer_provider):
    import httpx

    from realtime.app import create_app
    from realtime.settings import Settings
    from tests.conftest import TEST_SECRET, serving

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
