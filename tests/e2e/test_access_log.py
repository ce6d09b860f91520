"""The access log: one JSON line per JSON-RPC call, with what was called and how it ended, and
never the token or the params; `AIM_ACCESS_LOG=off` turns it off."""

from __future__ import annotations

import json

import httpx
import pytest

from realtime.app import create_app
from realtime.settings import Settings
from tests.conftest import TEST_SECRET, rpc, serving, token

pytestmark = pytest.mark.e2e

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
LISTTASKS = b'{"jsonrpc":"2.0","id":1,"method":"ListTasks","params":{}}'


async def test_each_call_writes_one_access_line_with_its_outcome(client, access_lines):
    bearer = token()
    await client.post(
        "/a2a",
        content=LISTTASKS,
        headers={
            "Authorization": f"Bearer {bearer}",
            "A2A-Version": "1.0",
            "traceparent": f"00-{TRACE_ID}-00f067aa0ba902b7-01",
        },
    )
    await rpc(client, "GetTask", {"id": "3c9a1f0e-7b6d-4e5c-8a2b-1d0c9e8f7a6b"})
    listed, missing = access_lines()
    assert listed["logger"] == "realtime.access"
    assert listed["level"] == "INFO"
    assert listed["message"] == "POST /a2a ListTasks 200"
    assert {k: listed[k] for k in ("path", "method", "code", "status")} == {
        "path": "/a2a",
        "method": "ListTasks",
        "code": 0,
        "status": 200,
    }
    assert isinstance(listed["duration_ms"], float)
    assert 0 <= listed["duration_ms"] < 10_000
    assert listed["trace_id"] == TRACE_ID  # the caller's trace, continued by the call's span
    assert (missing["method"], missing["code"], missing["status"]) == ("GetTask", -32001, 200)


async def test_the_access_line_never_holds_the_token_or_the_params(client, access_lines):
    secret_text = "my very private words"
    await rpc(
        client,
        "SendMessage",
        {"message": {"messageId": "m-1", "role": "ROLE_USER", "parts": [{"text": secret_text}]}},
    )
    refused = await client.post(
        "/a2a",
        content=LISTTASKS,
        headers={"Authorization": "Bearer not.a.valid-token", "A2A-Version": "1.0"},
    )
    assert refused.status_code == 401
    lines = access_lines()
    assert [(line["method"], line["status"]) for line in lines] == [
        ("SendMessage", 200),
        ("ListTasks", 401),
    ]
    assert lines[1]["code"] == -31401
    text = json.dumps(lines)
    for forbidden in (secret_text, "m-1", "not.a.valid-token", "Bearer"):
        assert forbidden not in text


async def test_an_unreadable_body_is_logged_with_an_unknown_method(client, access_lines):
    await client.post("/a2a", content=b"{not json", headers={"A2A-Version": "1.0"})
    (line,) = access_lines()
    assert (line["method"], line["code"], line["status"]) == ("unknown", -32700, 200)


async def test_access_log_off_writes_nothing(store, access_lines):
    settings = Settings(auth_hs256_secret=TEST_SECRET, rate_limit_rps=0, access_log=False)
    app = create_app(settings, store=store)
    async with serving(app) as base_url, httpx.AsyncClient(base_url=base_url) as http:
        assert (await rpc(http, "ListTasks", {}))["_status"] == 200
    assert access_lines() == []
