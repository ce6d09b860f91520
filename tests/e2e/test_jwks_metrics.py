"""`GET /metrics` counts the service's JWKS fetches by outcome (`aim_auth_jwks_fetches_total`),
as the app wires its authenticator to its metrics."""

from __future__ import annotations

import time
from collections.abc import Iterator

import httpx
import msgspec
import pytest
from prometheus_client.parser import text_string_to_metric_families

from realtime.app import create_app
from realtime.store.redis_client import RedisClient
from tests.conftest import serving
from tests.jwks_server import (
    JwksServer,
    PrivateKey,
    jwk,
    jwks_server,
    jwks_settings,
    rsa_key,
    signed,
)

pytestmark = pytest.mark.e2e


@pytest.fixture(autouse=True)
def _no_otlp(monkeypatch: pytest.MonkeyPatch) -> None:
    """The service's own meter provider, with nothing pushed over OTLP."""
    for name in ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_METRICS_EXPORTER", "OTEL_TRACES_EXPORTER"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture(scope="module")
def key() -> PrivateKey:
    return rsa_key()


@pytest.fixture
def server(key: PrivateKey) -> Iterator[JwksServer]:
    with jwks_server([jwk(key, "a")]) as endpoint:
        yield endpoint


async def fetches(http: httpx.AsyncClient) -> dict[str, float]:
    response = await http.get("/metrics")
    assert response.status_code == 200
    return {
        sample.labels["outcome"]: sample.value
        for family in text_string_to_metric_families(response.text)
        for sample in family.samples
        if sample.name == "aim_auth_jwks_fetches_total"
    }


async def test_metrics_counts_the_jwks_fetches_by_outcome(
    store: RedisClient, server: JwksServer, key: PrivateKey
) -> None:
    settings = jwks_settings(server, rate_limit_rps=0, metrics_refresh_s=0)
    app = create_app(settings, store=store, run_worker=False)
    now = int(time.time())
    token = signed(key, "a", iat=now, exp=now + 600, scope="a2a.tasks.read")
    body = msgspec.json.encode({"jsonrpc": "2.0", "id": 1, "method": "ListTasks", "params": {}})
    async with serving(app) as base_url, httpx.AsyncClient(base_url=base_url) as http:
        assert await fetches(http) == {"ok": 0, "failed": 0}
        for _ in range(2):
            response = await http.post(
                "/a2a",
                content=body,
                headers={
                    "Content-Type": "application/json",
                    "A2A-Version": "1.0",
                    "Authorization": token,
                },
            )
            assert response.status_code == 200, response.text
            assert "error" not in response.json(), response.text
        assert await fetches(http) == {"ok": 1, "failed": 0}
        assert server.requests == 1
