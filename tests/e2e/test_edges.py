"""Broken JSON and HTTP at the edges (profile §16): exact bytes over HTTP, on every POST endpoint.

Each case asserts what a client sees (status and JSON-RPC code), that nothing in Redis changed,
and that the process logged at most one line and no traceback.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from livekit import api
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from realtime.app import create_app
from realtime.livekit_dev.standin import sign_webhook, webhook_headers
from realtime.store.redis_client import RedisClient
from tests.conftest import (
    LIVEKIT_KEY,
    LIVEKIT_SECRET,
    error_info,
    livekit_settings,
    serving,
    token,
)
from tests.e2e.agent_operation_helpers import open_session
from tests.e2e.metrics_helpers import points
from tests.e2e.realtime_helpers import create_session, new_id

pytestmark = pytest.mark.e2e

GET_TASK = b'{"jsonrpc":"2.0","id":1,"method":"GetTask","params":{"id":"%s"}}'
PROVIDER_STATE = (
    b'{"jsonrpc":"2.0","id":1,"method":"aim.provider.ReportAgentState",'
    b'"params":{"sessionId":"%s","sessionEpoch":1,"state":"listening"}}'
)
DEEP = b"[" * 980 + b"]" * 980


async def redis_contents(store: RedisClient) -> dict[bytes, bytes | None]:
    """Every key with its serialized value: equal dicts mean nothing was written."""
    return {key: await store.client.dump(key) async for key in store.client.scan_iter(count=1000)}


async def settled_contents(store: RedisClient) -> dict[bytes, bytes | None]:
    """The contents once the work a journey left running (effects, data messages) is done."""
    contents = await redis_contents(store)
    for _ in range(40):
        await asyncio.sleep(0.05)
        again = await redis_contents(store)
        if again == contents:
            return contents
        contents = again
    raise AssertionError("Redis kept changing for 2 s")


def changed(before: dict[bytes, bytes | None], after: dict[bytes, bytes | None]) -> list[bytes]:
    return sorted(k for k in before.keys() | after.keys() if before.get(k) != after.get(k))


@pytest.fixture
def reader() -> InMemoryMetricReader:
    return InMemoryMetricReader()


@pytest.fixture
async def metered(
    livekit: Any, store: RedisClient, tracer_provider: Any, reader: InMemoryMetricReader
) -> AsyncIterator[httpx.AsyncClient]:
    """A client of a service wired to the stand-in whose metrics `reader` collects."""
    app = create_app(
        livekit_settings(livekit),
        store=store,
        tracer_provider=tracer_provider,
        meter_provider=MeterProvider(metric_readers=[reader]),
    )
    async with serving(app) as base_url, httpx.AsyncClient(base_url=base_url, timeout=30) as http:
        yield http


def webhook_outcomes(reader: InMemoryMetricReader) -> dict[str, float]:
    return {a["aim.webhook.outcome"]: v for a, v in points(reader, "aim.webhooks")}


def assert_quiet(caplog: pytest.LogCaptureFixture) -> None:
    records = [r for r in caplog.records if not r.name.startswith(("httpx", "httpcore"))]
    assert not [r for r in records if r.exc_info], [r.getMessage() for r in records]
    assert len(records) <= 1, [r.getMessage() for r in records]


def bearer(subject: str = "alice") -> str:
    return f"Bearer {token(subject)}"


async def post(
    client: httpx.AsyncClient, path: str, body: bytes, headers: list[tuple[str, str]] | None = None
) -> httpx.Response:
    sent = [("Content-Type", "application/json"), *(headers or [])]
    return await client.post(path, content=body, headers=sent)


async def refused_quietly(
    client: httpx.AsyncClient,
    store: RedisClient,
    caplog: pytest.LogCaptureFixture,
    path: str,
    body: bytes,
    headers: list[tuple[str, str]] | None = None,
) -> Any:
    """The JSON answer to `body` posted to `path`: a 200 that changed nothing in Redis and
    logged nothing (`assert_quiet`)."""
    caplog.set_level(logging.INFO)
    before = await redis_contents(store)
    response = await post(client, path, body, headers)
    assert response.status_code == 200
    assert changed(before, await redis_contents(store)) == []
    assert_quiet(caplog)
    return response.json()


# --- 1. invalid UTF-8 anywhere is a parse error --------------------------------------------------

INVALID_UTF8 = [
    b'{"jsonrpc":"2.0","id":1,"method":"GetTask","params":{"id":"\xff"}}',
    b'{"jsonrpc":"2.0","id":"\xff","method":"GetTask","params":{"id":"x"}}',
    b'{"jsonrpc":"2.0","id":1,"method":"Get\xffTask","params":{"id":"x"}}',
    b'{"jsonrpc":"2.\xff","id":1,"method":"GetTask","params":{"id":"x"}}',
    b'{"jsonrpc":"2.0","id":1,"method":"GetTask","params":{"\xc3":"x"}}',
    b'{"jsonrpc":"2.0","id":1,"method":"GetTask","params":{"id":"\xed\xa0\x80"}}',  # surrogate
]


@pytest.mark.parametrize("body", INVALID_UTF8)
@pytest.mark.parametrize("path", ["/a2a", "/provider"])
async def test_invalid_utf8_in_any_string_is_a_parse_error_before_authentication(
    rt_client, store, caplog, path, body
):
    answer = await refused_quietly(rt_client, store, caplog, path, body)  # no Authorization at all
    assert answer["error"]["code"] == -32700
    assert answer["id"] is None
    assert error_info(answer)["reason"] == "PARSE_ERROR"


# --- 2. deep nesting is refused by a limit, not by Python's stack ---------------------------------


DEEP_BODIES = [
    DEEP,
    b'{"jsonrpc":"2.0","id":1,"method":"GetTask","params":{"id":' + DEEP + b"}}",
    b'{"jsonrpc":"2.0","id":1,"method":"GetTask","params":' + b'{"a":' * 65 + b"1" + b"}" * 66,
    b'{"jsonrpc":"2.0","id":' + b"[" * 70 + b"]" * 70 + b',"method":"GetTask","params":{}}',
]


@pytest.mark.parametrize("body", DEEP_BODIES)
@pytest.mark.parametrize("path", ["/a2a", "/provider"])
async def test_json_nested_deeper_than_64_levels_is_an_invalid_request(
    rt_client, store, caplog, path, body
):
    answer = await refused_quietly(
        rt_client, store, caplog, path, body, [("Authorization", bearer())]
    )
    error = answer["error"]
    assert error["code"] == -32600
    assert "64" in error["message"]


async def test_nesting_of_64_levels_is_within_the_limit(rt_client):
    """64 levels (the envelope is the first) pass the limit and reach params validation."""
    params = b'{"id":' + b"[" * 62 + b"]" * 62 + b"}"
    body = b'{"jsonrpc":"2.0","id":1,"method":"GetTask","params":' + params + b"}"
    response = await post(
        rt_client, "/a2a", body, [("Authorization", bearer()), ("A2A-Version", "1.0")]
    )
    assert response.json()["error"]["code"] == -32602


async def test_brackets_inside_strings_do_not_count_as_nesting(rt_client):
    deep_text = "[" * 500 + '\\"{' * 100
    body = GET_TASK % deep_text.encode()
    response = await post(
        rt_client, "/a2a", body, [("Authorization", bearer()), ("A2A-Version", "1.0")]
    )
    assert response.json()["error"]["code"] == -32602  # not a UUID; but not a nesting error


async def test_deeply_nested_webhook_is_refused_with_the_limit(rt_client, store, caplog):
    caplog.set_level(logging.INFO)
    before = await redis_contents(store)
    body = b'{"event":"room_finished","room":{"name":' + DEEP + b"}}"
    response = await rt_client.post(
        "/livekit/webhook", content=body, headers=webhook_headers("not-a-jwt")
    )
    assert response.status_code == 400
    assert response.json()["error"]["code"] == -32600
    assert "64" in response.json()["error"]["message"]
    assert changed(before, await redis_contents(store)) == []
    assert_quiet(caplog)


# --- 3. verified webhooks the service does not understand are ignored, never 5xx -----------------


async def signed_post(client: httpx.AsyncClient, event: Any) -> httpx.Response:
    body, auth = sign_webhook(event, LIVEKIT_KEY, LIVEKIT_SECRET)
    return await client.post("/livekit/webhook", content=body, headers=webhook_headers(auth))


async def test_webhook_with_an_unknown_track_source_is_ignored_and_counted(
    metered, livekit, store, caplog, reader
):
    live = await open_session(metered, livekit)
    ignored_before = webhook_outcomes(reader).get("ignored", 0)
    caplog.set_level(logging.INFO)
    before = await settled_contents(store)
    event = api.WebhookEvent(
        event="track_published",
        id=new_id(),
        created_at=int(time.time()),
        room=api.Room(name=live.room),
        participant=api.ParticipantInfo(
            identity=live.phone, metadata=json.dumps({"sessionEpoch": 1})
        ),
        track=api.TrackInfo(sid="TR_new", source=99, type=api.TrackType.VIDEO),
    )
    response = await signed_post(metered, event)
    assert response.status_code == 200
    assert response.json() == {"status": "ignored"}
    assert webhook_outcomes(reader)["ignored"] == ignored_before + 1
    assert changed(before, await redis_contents(store)) == []
    assert_quiet(caplog)


@pytest.mark.parametrize(
    "room",
    [
        "aim-9b2f7c1e-4a8d-4c3b-9e6f-1a2b3c4d5e6f-e" + "9" * 5000,
        "aim-9b2f7c1e-4a8d-4c3b-9e6f-1a2b3c4d5e6f-e99999999999999999999",
        "aim-9b2f7c1e-4a8d-4c3b-9e6f-1a2b3c4d5e6f-e٣",  # a non-ASCII digit
    ],
)
async def test_webhook_for_a_room_whose_epoch_is_not_a_small_integer_is_ignored(
    rt_client, store, caplog, room
):
    caplog.set_level(logging.INFO)
    before = await redis_contents(store)
    event = api.WebhookEvent(
        event="room_finished", id=new_id(), created_at=int(time.time()), room=api.Room(name=room)
    )
    response = await signed_post(rt_client, event)
    assert response.status_code == 200
    assert response.json() == {"status": "ignored"}
    assert changed(before, await redis_contents(store)) == []
    assert_quiet(caplog)


@pytest.mark.parametrize(
    "metadata",
    [
        '{"sessionEpoch":' + "[" * 5000 + "]" * 5000 + "}",
        '{"sessionEpoch":' + "9" * 5000 + "}",
        '{"sessionEpoch":' + "9" * 30 + "}",
        '{"sessionEpoch":-1}',
        "[1,2]",
        "not json",
    ],
)
async def test_webhook_with_participant_metadata_the_service_cannot_read_is_not_a_5xx(
    rt_client, livekit, caplog, metadata
):
    live = await open_session(rt_client, livekit, agent=False)
    caplog.set_level(logging.INFO)
    event = api.WebhookEvent(
        event="participant_left",
        id=new_id(),
        created_at=int(time.time()),
        room=api.Room(name=live.room),
        participant=api.ParticipantInfo(identity="stranger", metadata=metadata),
    )
    response = await signed_post(rt_client, event)
    assert response.status_code == 200
    assert response.json()["status"] in ("ignored", "applied")
    assert_quiet(caplog)


# --- 4. exactly one Authorization header ----------------------------------------------------------


async def test_two_authorization_headers_are_refused_whatever_their_values(rt_client, store):
    task = await create_session(rt_client)
    task_id = task["result"]["task"]["id"]
    before = await settled_contents(store)
    cases = [
        [("Authorization", bearer("alice")), ("Authorization", "junk")],
        [("Authorization", bearer("alice")), ("Authorization", bearer("bob"))],
        [("Authorization", bearer("alice")), ("Authorization", bearer("alice"))],
        [("Authorization", "junk"), ("Authorization", bearer("alice"))],
    ]
    for pair in cases:
        response = await post(
            rt_client, "/a2a", GET_TASK % task_id.encode(), [*pair, ("A2A-Version", "1.0")]
        )
        assert response.status_code == 401, pair
        assert 'error="invalid_request"' in response.headers["www-authenticate"]
        assert response.json()["error"]["code"] == -31401
        assert "one Authorization header" in response.json()["error"]["message"]
    assert changed(before, await redis_contents(store)) == []


async def test_bearer_scheme_is_matched_case_insensitively(rt_client):
    task = await create_session(rt_client)
    task_id = task["result"]["task"]["id"]
    for scheme in ("bearer", "BEARER", "BeArEr"):
        response = await post(
            rt_client,
            "/a2a",
            GET_TASK % task_id.encode(),
            [("Authorization", f"{scheme} {token()}"), ("A2A-Version", "1.0")],
        )
        assert response.json()["result"]["id"] == task_id


async def test_two_authorization_headers_on_provider_apply_nothing(rt_client, livekit, store):
    live = await open_session(rt_client, livekit)
    before = await settled_contents(store)
    body = PROVIDER_STATE % live.sid.encode()
    for pair in (
        [("Authorization", f"Bearer {live.provider_token}"), ("Authorization", "junk")],
        [("Authorization", f"Bearer {live.provider_token}")] * 2,
    ):
        response = await post(rt_client, "/provider", body, pair)
        assert response.status_code == 401
        assert 'error="invalid_request"' in response.headers["www-authenticate"]
    assert changed(before, await redis_contents(store)) == []
    # one header still works: the refusal was about the duplicate
    response = await post(
        rt_client, "/provider", body, [("Authorization", f"Bearer {live.provider_token}")]
    )
    assert "result" in response.json(), response.json()


async def test_two_a2a_version_headers_are_version_not_supported(rt_client):
    task = await create_session(rt_client)
    task_id = task["result"]["task"]["id"]
    response = await post(
        rt_client,
        "/a2a",
        GET_TASK % task_id.encode(),
        [("Authorization", bearer()), ("A2A-Version", "1.0"), ("A2A-Version", "1.0")],
    )
    assert response.json()["error"]["code"] == -32009


# --- 7. the webhook's refusals say what is wrong --------------------------------------------------


async def test_webhook_without_authorization_says_the_signature_is_missing(rt_client):
    response = await rt_client.post("/livekit/webhook", content=b"{}")
    assert response.status_code == 401
    assert "missing" in response.json()["error"]
    assert "keys" not in response.json()["error"]


async def test_webhook_when_no_signer_is_configured_says_so(client):
    response = await client.post("/livekit/webhook", content=b"{}", headers={"Authorization": "x"})
    assert response.status_code == 401
    assert "no webhook keys" in response.json()["error"]
