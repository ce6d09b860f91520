"""The JSON-RPC front door over HTTP: envelope, headers, extension, errors (profile §1, §12)."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.conftest import REALTIME, error_info, headers, rpc, violations
from tests.e2e.realtime_helpers import create_part

pytestmark = pytest.mark.e2e

SESSION_ID = "9b2f7c1e-4a8d-4c3b-9e6f-1a2b3c4d5e6f"
COMMAND_ID = "0f1e2d3c-4b5a-4978-8695-a4b3c2d1e0f9"


async def post_raw(client: httpx.AsyncClient, body: bytes, **options: Any) -> httpx.Response:
    return await client.post(
        "/a2a", content=body, headers={"Content-Type": "application/json", **headers(**options)}
    )


def text_message(message_id: str = "m-1", **extra: Any) -> dict[str, Any]:
    return {"messageId": message_id, "role": "ROLE_USER", "parts": [{"text": "hello"}], **extra}


def session_create_part(**overrides: Any) -> dict[str, Any]:
    return create_part(
        "5d7e9f1a-2b3c-4d5e-8f9a-0b1c2d3e4f5a", requiredCapabilities=["audio_input"], **overrides
    )


async def test_invalid_json_is_a_parse_error_with_null_id(client):
    response = await post_raw(client, b'{"jsonrpc": "2.0", "id": 1,')
    body = response.json()
    assert response.status_code == 200
    assert body["id"] is None
    assert body["error"]["code"] == -32700
    assert error_info(body)["reason"] == "PARSE_ERROR"


async def test_batch_is_refused_with_one_invalid_request_error(client):
    request = b'[{"jsonrpc":"2.0","id":1,"method":"GetTask","params":{}}]'
    body = (await post_raw(client, request)).json()
    assert isinstance(body, dict)
    assert body["error"]["code"] == -32600
    assert "batch" in body["error"]["message"]


@pytest.mark.parametrize(
    ("request_body", "field"),
    [
        (b'{"jsonrpc":"2.0","method":"ListTasks","params":{}}', "id"),
        (b'{"jsonrpc":"1.0","id":1,"method":"ListTasks","params":{}}', "jsonrpc"),
        (b'{"id":1,"method":"ListTasks","params":{}}', "jsonrpc"),
        (b'{"jsonrpc":"2.0","id":1,"params":{}}', "method"),
        (b'{"jsonrpc":"2.0","id":1,"method":7,"params":{}}', "method"),
        (b'{"jsonrpc":"2.0","id":1,"method":"ListTasks"}', "params"),
        (b'{"jsonrpc":"2.0","id":1,"method":"ListTasks","params":[]}', "params"),
        (b'{"jsonrpc":"2.0","id":null,"method":"ListTasks","params":{}}', "id"),
        (b'{"jsonrpc":"2.0","id":1.5,"method":"ListTasks","params":{}}', "id"),
        (b'{"jsonrpc":"2.0","id":1,"method":"ListTasks","params":{},"extra":1}', "extra"),
        (b'"just a string"', None),
    ],
)
async def test_malformed_envelopes_are_invalid_requests(client, request_body, field):
    body = (await post_raw(client, request_body)).json()
    assert body["error"]["code"] == -32600
    assert error_info(body)["reason"] == "INVALID_REQUEST"
    if field is not None:
        assert violations(body) == [field]


async def test_readable_id_is_echoed_in_envelope_errors(client):
    body = (await post_raw(client, b'{"jsonrpc":"1.0","id":"abc","method":"x","params":{}}')).json()
    assert body["id"] == "abc"


async def test_body_over_one_mebibyte_is_413_with_a_jsonrpc_body_and_nothing_stored(client, store):
    filler = "x" * (1024 * 1024)
    request = (
        b'{"jsonrpc":"2.0","id":9,"method":"SendMessage","params":{"message":'
        b'{"messageId":"big","role":"ROLE_USER","parts":[{"text":"' + filler.encode() + b'"}]}}}'
    )
    response = await post_raw(client, request)
    assert response.status_code == 413
    assert response.json()["error"]["code"] == -32600
    assert await store.client.dbsize() == 0


async def test_trailing_slash_path_is_served_without_redirect(client):
    response = await client.post(
        "/a2a/",
        content=b'{"jsonrpc":"2.0","id":1,"method":"ListTasks","params":{}}',
        headers=headers(),
    )
    assert response.status_code == 200
    assert response.json()["result"]["tasks"] == []


async def test_unknown_method_is_method_not_found(client):
    body = await rpc(client, "tasks/list", {})
    assert body["error"]["code"] == -32601
    assert body["id"] == 1


@pytest.mark.parametrize("version", [None, "", "99.0", "0.9"])
async def test_missing_or_unsupported_version_is_refused_with_supported_versions(client, version):
    body = await rpc(client, "ListTasks", {}, version=version)
    assert body["error"]["code"] == -32009
    info = error_info(body)
    assert info["reason"] == "VERSION_NOT_SUPPORTED"
    assert info["metadata"]["supportedVersions"] == "1.0"


async def test_version_with_patch_number_is_accepted(client):
    body = await rpc(client, "ListTasks", {}, version="1.0.2")
    assert "result" in body


async def test_realtime_method_without_extension_header_needs_the_extension(client):
    body = await rpc(client, "aim.realtime.GetSession", {"sessionId": SESSION_ID})
    assert body["error"]["code"] == -32008
    assert error_info(body)["metadata"]["extension"] == REALTIME


async def test_realtime_method_is_validated_before_it_is_looked_up(client):
    bad = await rpc(client, "aim.realtime.GetSession", {"sessionId": "nope"}, realtime=True)
    assert bad["error"]["code"] == -32602
    assert violations(bad) == ["params.sessionId"]
    good = await rpc(client, "aim.realtime.GetSession", {"sessionId": SESSION_ID}, realtime=True)
    assert good["error"]["code"] == -31001


async def test_get_operation_is_validated_before_the_session_is_looked_up(client):
    params = {"sessionId": SESSION_ID, "operationId": COMMAND_ID}
    bad = await rpc(client, "aim.realtime.GetOperation", {**params, "x": 1}, realtime=True)
    assert bad["error"]["code"] == -32602
    assert violations(bad) == ["params.x"]
    good = await rpc(client, "aim.realtime.GetOperation", params, realtime=True)
    assert good["error"]["code"] == -31001


async def test_interaction_payload_is_validated_per_type(client):
    params = {
        "sessionId": SESSION_ID,
        "sessionEpoch": 1,
        "commandId": COMMAND_ID,
        "type": "input.text",
        "payload": {"text": "hi", "bold": True},
    }
    body = await rpc(client, "aim.realtime.SendInteraction", params, realtime=True)
    assert body["error"]["code"] == -32602
    assert violations(body) == ["params.payload.bold"]
    huge = {**params, "payload": {"text": "x" * 3000, "pad": "y" * 17000}}
    body = await rpc(client, "aim.realtime.SendInteraction", huge, realtime=True)
    assert violations(body) == ["params.payload"]


async def test_active_extension_is_echoed_and_unknown_ones_are_not(client):
    response = await client.post(
        "/a2a",
        content=b'{"jsonrpc":"2.0","id":1,"method":"ListTasks","params":{}}',
        headers={**headers(), "A2A-Extensions": f"urn:example:other, {REALTIME}"},
    )
    assert response.headers["A2A-Extensions"] == REALTIME
    plain = await client.post(
        "/a2a",
        content=b'{"jsonrpc":"2.0","id":1,"method":"ListTasks","params":{}}',
        headers={**headers(), "A2A-Extensions": "urn:example:other"},
    )
    assert "A2A-Extensions" not in plain.headers


async def test_session_create_part_without_extension_header_needs_the_extension(client, store):
    params = {"message": text_message(parts=[session_create_part()])}
    body = await rpc(client, "SendMessage", params)
    assert body["error"]["code"] == -32008
    assert await store.client.dbsize() == 0


async def test_invalid_session_create_part_names_the_path(client):
    part = session_create_part(recording="on")
    body = await rpc(client, "SendMessage", {"message": text_message(parts=[part])}, realtime=True)
    assert body["error"]["code"] == -32602
    assert violations(body) == ["params.message.parts[0].data.recording"]


async def test_invalid_params_name_the_json_path(client):
    params = {"message": text_message(parts=[{"text": "a"}, {"text": "b", "color": "red"}])}
    body = await rpc(client, "SendMessage", params)
    assert body["error"]["code"] == -32602
    assert violations(body) == ["params.message.parts[1].color"]
    assert error_info(body)["reason"] == "INVALID_PARAMS"


async def test_every_error_carries_exactly_one_error_info(client):
    for method, params in [
        ("GetTask", {"id": SESSION_ID}),
        ("GetTask", {}),
        ("Nope", {}),
        ("CancelTask", {"id": SESSION_ID}),
    ]:
        body = await rpc(client, method, params)
        info = error_info(body)
        assert info["domain"] in ("a2a-protocol.org", "jsonrpc.org", REALTIME)
        assert all(isinstance(value, str) for value in info["metadata"].values())


async def test_rate_limit_answers_limit_exceeded_with_retry_after(store, tracer_provider):
    from realtime.app import create_app
    from realtime.settings import Settings
    from tests.conftest import TEST_SECRET, serving

    settings = Settings(auth_hs256_secret=TEST_SECRET, rate_limit_rps=1)
    app = create_app(settings, store=store, tracer_provider=tracer_provider)
    async with serving(app) as base_url, httpx.AsyncClient(base_url=base_url) as http:
        codes = [(await rpc(http, "ListTasks", {})).get("error", {}).get("code") for _ in range(4)]
        other = await rpc(http, "ListTasks", {}, subject="bob")
    assert codes[:2] == [None, None]
    assert -31011 in codes[2:]
    assert "result" in other  # limits are per principal
