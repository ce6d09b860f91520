"""Where session events go is said before any is sent: tenant routes without a tenant claim
(so no session would ever have a tenant, and every event would go to the default receiver) are
refused at start-up, and `check` and the start-up log list every route, without credentials.
Real processes, run as an operator runs them."""

from __future__ import annotations

import base64
import json
import time
from pathlib import Path

import pytest

from tests.cli_processes import SECRET, call_cli, needs, serving

pytestmark = pytest.mark.e2e

EVENTS_SECRET = "whsec_" + base64.b64encode(b"e" * 32).decode()
ROUTES = {
    "AIM_AUTH_HS256_SECRET": SECRET,
    "AIM_EVENTS_URL": "https://app:hunter2@backend.example/aim/events?key=query-key-one",
    "AIM_EVENTS_SECRET": EVENTS_SECRET,
    "AIM_EVENTS_TENANT_URLS": json.dumps(
        {
            "acme": "https://acme:s3cret@events.acme.example/aim?sig=query-key-two",
            "globex": "http://127.0.0.1:9/globex",
        }
    ),
}
LISTED = [
    "tenant 'acme' (org claim): sent to https://events.acme.example/aim (AIM_EVENTS_TENANT_URLS)",
    "tenant 'globex' (org claim): sent to http://127.0.0.1:9/globex (AIM_EVENTS_TENANT_URLS)",
    "every other tenant: sent to https://backend.example/aim/events (AIM_EVENTS_URL)",
]
CREDENTIALS = ("hunter2", "s3cret", "query-key-one", "query-key-two", EVENTS_SECRET, SECRET)


@pytest.mark.parametrize("command", ["check", "serve", "worker"])
def test_tenant_routes_without_a_tenant_claim_are_refused_at_start_up(
    tmp_path: Path, command: str
) -> None:
    result = call_cli(command, cwd=tmp_path, AIM_REDIS_URL="redis://127.0.0.1:9/0", **ROUTES)

    assert result.returncode == 2, result.stdout + result.stderr
    lines = [line for line in result.stderr.splitlines() if "AIM_EVENTS_TENANT_URLS" in line]
    assert len(lines) == 1, result.stderr
    assert (
        lines[0]
        .strip()
        .startswith(
            "AIM_EVENTS_TENANT_URLS needs AIM_AUTH_TENANT_CLAIM, the token claim naming a "
            "principal's tenant"
        )
    )
    assert "configuration: valid" not in result.stdout
    for credential in CREDENTIALS:
        assert credential not in result.stdout + result.stderr


def test_check_lists_every_route_without_credentials(tmp_path: Path, redis_url: str | None) -> None:
    result = call_cli(
        "check", cwd=tmp_path, AIM_REDIS_URL=needs(redis_url), AIM_AUTH_TENANT_CLAIM="org",
        **ROUTES,
    )  # fmt: skip

    assert result.returncode == 0, result.stdout + result.stderr
    said = [line.removeprefix("events: ") for line in result.stdout.splitlines()]
    assert [line for line in said if "sent to" in line] == LISTED
    for credential in CREDENTIALS:
        assert credential not in result.stdout + result.stderr


@pytest.mark.slow
def test_the_start_up_log_lists_every_route_without_credentials(
    tmp_path: Path, redis_url: str | None
) -> None:
    with serving(
        tmp_path, AIM_REDIS_URL=needs(redis_url), AIM_AUTH_TENANT_CLAIM="org", **ROUTES
    ) as service:
        service.wait_until_ready()
        for _ in range(50):  # the worker's loops start beside the server
            if "every other tenant" in service.output():
                break
            time.sleep(0.1)
        service.terminate()
    logged = [
        json.loads(line)["message"].removeprefix("session events: ")
        for line in service.output().splitlines()
        if line.startswith("{") and "session events: " in line
    ]
    assert logged == LISTED
    for credential in CREDENTIALS:
        assert credential not in service.output()
