"""Message parts of a media type the Agent Card's defaultInputModes does not list → -32005
(ContentTypeNotSupported), in 1.0 and 0.3, after the params are valid and before anything is
stored: before the realtime-only rejection and before a session is created."""

from __future__ import annotations

from typing import Any, Final

import pytest

from tests.conftest import error_info, rpc, violations
from tests.e2e.a2a_v03_helpers import assert_v03_error, rpc03
from tests.e2e.realtime_helpers import create_part, new_id
from tests.e2e.sse_helpers import json_error, stream

pytestmark = pytest.mark.e2e

PNG: Final = {"raw": "iVBORw0KGgo=", "mediaType": "image/png", "filename": "a.png"}
INPUT_MODES: Final = "application/json,text/plain"


def message(*parts: dict[str, Any], message_id: str | None = None) -> dict[str, Any]:
    return {"messageId": message_id or new_id(), "role": "ROLE_USER", "parts": list(parts)}


def assert_refused(body: dict[str, Any], part: int, media_type: str) -> None:
    assert body["_status"] == 200
    assert body["error"]["code"] == -32005
    info = error_info(body)
    assert info["reason"] == "CONTENT_TYPE_NOT_SUPPORTED"
    assert info["domain"] == "a2a-protocol.org"
    assert info["metadata"] == {
        "part": f"params.message.parts[{part}]",
        "mediaType": media_type,
        "inputModes": INPUT_MODES,
    }


async def no_tasks(client: Any, subject: str = "alice") -> bool:
    listed = await rpc(client, "ListTasks", {}, subject=subject)
    return listed["result"]["tasks"] == [] and listed["result"]["totalSize"] == 0


async def test_the_card_lists_what_the_check_accepts(client):
    card = (await client.get("/.well-known/agent-card.json")).json()
    assert card["defaultInputModes"] == INPUT_MODES.split(",")
    assert "-32005" in card["description"]


@pytest.mark.parametrize(
    ("part", "media_type"),
    [
        (PNG, "image/png"),
        ({"url": "https://x.example/a.mp3", "mediaType": "Audio/MPEG"}, "audio/mpeg"),
        ({"text": "# hi", "mediaType": "text/markdown"}, "text/markdown"),
        ({"data": {"k": 1}, "mediaType": "application/xml"}, "application/xml"),
        # an empty mediaType is ProtoJSON's unset: a file that names no type
        ({"raw": "aGk=", "mediaType": ""}, "application/octet-stream"),
    ],
)
async def test_a_part_of_another_media_type_is_refused_and_nothing_stored(
    client, store, part, media_type
):
    # without the check this message would get a REJECTED realtime-only task
    first = message({"text": "look at this"}, part)
    body = await rpc(client, "SendMessage", {"message": first})
    assert_refused(body, 1, media_type)
    assert await store.client.dbsize() == 0
    assert await no_tasks(client)
    # the messageId was not claimed either: the same id with accepted parts makes its task now
    again = message({"text": "look at this"}, message_id=first["messageId"])
    created = await rpc(client, "SendMessage", {"message": again})
    assert created["result"]["task"]["status"]["state"] == "TASK_STATE_REJECTED"


@pytest.mark.parametrize(
    "part",
    [
        {"text": "hi"},
        {"text": "hi", "mediaType": "text/plain; charset=utf-8"},
        {"text": "hi", "mediaType": "Text/Plain"},
        {"data": {"k": [1]}},
        {"data": "a string", "mediaType": "application/json"},
        {"url": "https://x.example/a.json", "mediaType": "application/json"},
        {"raw": "aGk=", "mediaType": "text/plain", "filename": "a.txt"},
    ],
)
async def test_accepted_media_types_get_the_realtime_only_answer(client, part):
    body = await rpc(client, "SendMessage", {"message": message(part)})
    status = body["result"]["task"]["status"]
    assert status["state"] == "TASK_STATE_REJECTED"
    assert status["message"]["parts"][1]["data"] == {"reason": "realtime_only"}


async def test_the_first_refused_part_is_named(client):
    parts = ({"text": "a"}, {"data": {}}, {"text": "b", "mediaType": "text/html"}, PNG)
    assert_refused(await rpc(client, "SendMessage", {"message": message(*parts)}), 2, "text/html")


async def test_params_are_validated_before_media_types(client, store):
    bad = {**PNG, "color": "red"}
    body = await rpc(client, "SendMessage", {"message": message({"text": "a"}, bad)})
    assert body["error"]["code"] == -32602
    assert violations(body) == ["params.message.parts[1].color"]
    # the session.create part is params too; the extension header is checked before it
    broken = create_part(recording="on")
    body = await rpc(client, "SendMessage", {"message": message(broken, PNG)}, realtime=True)
    assert body["error"]["code"] == -32602
    assert violations(body) == ["params.message.parts[0].data.recording"]
    body = await rpc(client, "SendMessage", {"message": message(create_part(), PNG)})
    assert body["error"]["code"] == -32008
    assert await store.client.dbsize() == 0


async def test_a_session_create_with_a_refused_part_creates_no_session(rt_client, livekit, store):
    params = {"message": message(create_part(), PNG)}
    body = await rpc(rt_client, "SendMessage", params, realtime=True)
    assert_refused(body, 1, "image/png")
    assert await no_tasks(rt_client)
    assert await store.client.dbsize() == 0
    assert livekit.rooms == {}
    assert not livekit.calls
    # the same create without the image starts the session
    params = {"message": message(create_part())}
    created = await rpc(rt_client, "SendMessage", params, realtime=True)
    assert created["result"]["task"]["status"]["state"] == "TASK_STATE_WORKING"


async def test_send_streaming_message_answers_plain_json_before_any_event(client, store):
    async with stream(client, "SendStreamingMessage", {"message": message(PNG)}) as reader:
        body = await json_error(reader)
    body["_status"] = reader.response.status_code
    assert_refused(body, 0, "image/png")
    assert await store.client.dbsize() == 0


async def test_continue_task_parts_are_checked_before_the_task_is_looked_up(client):
    task_id = new_id()
    params = {
        "id": task_id,
        "requirementId": new_id(),
        "expectedVersion": 1,
        "actionDigest": "sha256:" + "0" * 64,
        "message": {
            "messageId": new_id(),
            "role": "ROLE_USER",
            "taskId": task_id,
            "parts": [
                {"data": {"decision": "approve"}},
                {"text": "<b>ok</b>", "mediaType": "text/html"},
            ],
        },
    }
    assert_refused(await rpc(client, "ContinueTask", params), 1, "text/html")
    params["message"]["parts"] = params["message"]["parts"][:1]
    assert (await rpc(client, "ContinueTask", params))["error"]["code"] == -32001


# --- A2A 0.3 --------------------------------------------------------------------------------


def message03(*parts: dict[str, Any]) -> dict[str, Any]:
    return {"kind": "message", "messageId": new_id(), "role": "user", "parts": list(parts)}


PNG03: Final = {"kind": "file", "file": {"bytes": "iVBORw0KGgo=", "mimeType": "image/png"}}


@pytest.mark.parametrize(
    ("part", "media_type"),
    [
        (PNG03, "image/png"),
        # a 0.3 file without mimeType is application/octet-stream (the adapter says so)
        ({"kind": "file", "file": {"uri": "https://x.example/blob"}}, "application/octet-stream"),
    ],
)
async def test_message_send_0_3_is_refused_in_the_0_3_form(client, store, part, media_type):
    body, response = await rpc03(
        client, "message/send", {"message": message03({"kind": "text", "text": "a"}, part)}
    )
    assert response.status_code == 200
    error = assert_v03_error(body, -32005, "CONTENT_TYPE_NOT_SUPPORTED")
    assert error["data"]["domain"] == "a2a-protocol.org"
    assert error["data"]["metadata"] == {
        "part": "params.message.parts[1]",
        "mediaType": media_type,
        "inputModes": INPUT_MODES,
    }
    assert await store.client.dbsize() == 0


async def test_message_stream_0_3_is_refused_before_any_event(client, store):
    async with stream(
        client, "message/stream", {"message": message03(PNG03)}, version=None
    ) as reader:
        body = await json_error(reader)
    assert_v03_error(body, -32005, "CONTENT_TYPE_NOT_SUPPORTED")
    assert await store.client.dbsize() == 0


async def test_0_3_text_data_and_accepted_files_still_get_the_realtime_only_task(client):
    parts = (
        {"kind": "text", "text": "a"},
        {"kind": "data", "data": {"k": 1}},
        {"kind": "file", "file": {"uri": "https://x.example/a.txt", "mimeType": "text/plain"}},
    )
    body, _ = await rpc03(client, "message/send", {"message": message03(*parts)})
    assert body["result"]["status"]["state"] == "rejected"
