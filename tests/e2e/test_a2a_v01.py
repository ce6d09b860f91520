"""A2A 0.1 clients on `POST /a2a/v0.1`: 0.1 shapes in and out through the same handlers
(A2A 0.1 notes): every method, the client-chosen task id (§2.3), errors (§4), the streams
with `final` (§3.3, §5) and the 0.1 card (§6)."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from typing import Any

import msgspec
import pytest

from tests.conftest import REALTIME, headers, rpc
from tests.e2e.realtime_helpers import create_part, create_session, new_id
from tests.e2e.sse_helpers import SseReader
from tests.e2e.streaming_helpers import drive_to_active, end, journey_to_the_end

pytestmark = pytest.mark.e2e

V01 = "/a2a/v0.1"


async def post01(
    client: Any,
    body: Any,
    *,
    subject: str = "alice",
    scopes: tuple[str, ...] | None = None,
    auth: bool = True,
    path: str = V01,
) -> tuple[dict[str, Any], Any]:
    """POST `body` (JSON-encoded unless bytes) as a 0.1 client: no A2A-Version, no extensions."""
    sent = {"Content-Type": "application/json"}
    if auth:
        options: dict[str, Any] = {"version": None}
        if scopes is not None:
            options["scopes"] = scopes
        sent.update(headers(subject, **options))
    content = body if isinstance(body, bytes) else msgspec.json.encode(body)
    response = await client.post(path, content=content, headers=sent)
    answer: dict[str, Any] = response.json()
    return answer, response


async def rpc01(
    client: Any, method: str, params: dict[str, Any], **options: Any
) -> tuple[dict[str, Any], Any]:
    body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
    return await post01(client, body, **options)


def text_message(text: str = "hello") -> dict[str, Any]:
    return {"role": "user", "parts": [{"type": "text", "text": text}]}


def with_file(mime_type: str, name: str) -> dict[str, Any]:
    """A text message with a file part of `mime_type` (a URI under example.com)."""
    message = text_message()
    file = {"uri": f"https://example.com/{name}", "mimeType": mime_type, "name": name}
    message["parts"].append({"type": "file", "file": file})
    return message


def create_message01(client_session_id: str | None = None, **overrides: Any) -> dict[str, Any]:
    data = create_part(client_session_id, **overrides)["data"]
    return {"role": "user", "parts": [{"type": "data", "data": data}]}


def assert_v01_error(body: dict[str, Any], code: int, reason: str) -> dict[str, Any]:
    assert body["jsonrpc"] == "2.0"
    assert "result" not in body
    error: dict[str, Any] = body["error"]
    assert error["code"] == code, body
    assert isinstance(error["message"], str)
    assert isinstance(error["data"], dict)  # the 0.3 adapter's object, not the ErrorInfo array
    assert error["data"]["reason"] == reason
    return error


def fields(error: dict[str, Any]) -> list[str]:
    return [v["field"] for v in error["data"].get("fieldViolations", ())]


async def server_tasks(client: Any, subject: str = "alice") -> list[dict[str, Any]]:
    """The principal's tasks as A2A 1.0 ListTasks shows them (server ids)."""
    tasks: list[dict[str, Any]] = (await rpc(client, "ListTasks", {}, subject=subject))["result"][
        "tasks"
    ]
    return tasks


async def test_a_part_of_a_media_type_the_card_does_not_list_is_32005(client):
    message = with_file("image/png", "a.png")
    body, response = await rpc01(client, "tasks/send", {"id": "t-png", "message": message})
    assert response.status_code == 200
    assert body["error"]["code"] == -32005
    assert "image/png" in body["error"]["message"]
    got, _ = await rpc01(client, "tasks/get", {"id": "t-png"})
    assert got["error"]["code"] == -32001  # nothing was stored: the id names no task


async def test_tasks_send_without_session_create_is_a_failed_0_1_task(client):
    message = with_file("text/plain", "a.txt")
    body, response = await rpc01(client, "tasks/send", {"id": "t-1", "message": message})
    assert response.status_code == 200
    assert body["jsonrpc"] == "2.0"
    assert body["id"] == 1
    task = body["result"]
    assert task["id"] == "t-1"  # the client's id, never the server's
    assert set(task) == {"id", "sessionId", "status"}  # no history, kind or contextId
    assert task["status"]["state"] == "failed"  # REJECTED (decision 115)
    assert task["status"]["timestamp"].endswith("Z")
    status_message = task["status"]["message"]
    assert set(status_message) == {"role", "parts"}
    assert status_message["role"] == "agent"
    assert [p["type"] for p in status_message["parts"]] == ["text", "data"]
    assert status_message["parts"][1] == {"type": "data", "data": {"reason": "realtime_only"}}
    advice = status_message["parts"][0]["text"]  # how to start a session, the 0.1 way
    assert "tasks/send" in advice
    assert "session.create" in advice
    assert "A2A-Extensions" not in advice
    assert "TASK_STATE" not in response.text
    (stored,) = await server_tasks(client)
    assert stored["contextId"] == task["sessionId"]  # a new context: sessionId = contextId
    assert stored["id"] not in response.text
    # the message went in as 1.0 parts: text, and the file with its media type and name
    assert stored["history"][0]["parts"] == [
        {"text": "hello"},
        {"url": "https://example.com/a.txt", "mediaType": "text/plain", "filename": "a.txt"},
    ]


async def test_a_session_is_created_read_and_canceled_in_0_1_shapes(rt_client):
    message = create_message01()
    params = {"id": "voice-1", "sessionId": "s-7", "message": message}
    body, response = await rpc01(rt_client, "tasks/send", params)
    task = body["result"]
    assert task["id"] == "voice-1"
    assert task["sessionId"] == "s-7"
    assert task["status"]["state"] == "working"
    realtime = task["metadata"][REALTIME]
    assert realtime["sessionState"] == "ready"  # blocked up to 5 s, as SendMessage does
    assert realtime["sessionId"] != "s-7"  # the realtime session is not the 0.1 session
    assert response.headers["a2a-extensions"] == REALTIME  # the part implies it (decision 113)
    (stored,) = await server_tasks(rt_client)
    assert stored["contextId"] == "s-7"

    got, response = await rpc01(rt_client, "tasks/get", {"id": "voice-1"})
    assert got["result"]["id"] == "voice-1"
    assert got["result"]["metadata"][REALTIME]["sessionId"] == realtime["sessionId"]
    assert "history" not in got["result"]  # the 0.1 Task has none (decision 112)
    assert stored["id"] not in response.text
    with_history, _ = await rpc01(rt_client, "tasks/get", {"id": "voice-1", "historyLength": 1})
    (sent,) = with_history["result"]["history"]  # the message as the 0.1 client sent it
    assert sent == message
    no_history, _ = await rpc01(rt_client, "tasks/get", {"id": "voice-1", "historyLength": 0})
    assert "history" not in no_history["result"]

    canceled, response = await rpc01(rt_client, "tasks/cancel", {"id": "voice-1"})
    assert canceled["result"]["id"] == "voice-1"
    assert canceled["result"]["status"]["state"] == "canceled"
    assert "A2A-Extensions" not in response.headers
    again, response = await rpc01(rt_client, "tasks/cancel", {"id": "voice-1", "metadata": {}})
    error = assert_v01_error(again, -32002, "TASK_NOT_CANCELABLE")
    assert error["data"]["metadata"] == {"taskId": "voice-1", "state": "canceled"}
    assert "voice-1" in error["message"]
    assert stored["id"] not in response.text
    assert "TASK_STATE" not in response.text


async def test_the_same_id_twice_replays_the_task_and_creates_no_second_one(rt_client):
    params = {"id": "again", "message": create_message01()}
    first, _ = await rpc01(rt_client, "tasks/send", params)
    second, _ = await rpc01(rt_client, "tasks/send", params)
    assert second["result"]["id"] == "again"
    assert second["result"]["sessionId"] == first["result"]["sessionId"]
    session = first["result"]["metadata"][REALTIME]["sessionId"]
    assert second["result"]["metadata"][REALTIME]["sessionId"] == session
    assert len(await server_tasks(rt_client)) == 1
    # the same request with members outside the 0.1 schema is the same request (decision 114)
    relaxed = {**params, "acceptedOutputModes": ["text"], "historyLength": None}
    third, _ = await rpc01(rt_client, "tasks/send", relaxed)
    assert third["result"]["metadata"][REALTIME]["sessionId"] == session
    assert len(await server_tasks(rt_client)) == 1


async def test_concurrent_first_sends_of_one_id_make_one_task(rt_client):
    same = {"id": "race", "message": create_message01()}
    other = {"id": "race", "message": create_message01()}
    answers = await asyncio.gather(
        *(rpc01(rt_client, "tasks/send", same) for _ in range(4)),
        rpc01(rt_client, "tasks/send", other),
    )
    (stored,) = await server_tasks(rt_client)
    sessions = {
        body["result"]["metadata"][REALTIME]["sessionId"] for body, _ in answers if "result" in body
    }
    assert sessions == {stored["metadata"][REALTIME]["sessionId"]}
    codes = [body["error"]["code"] for body, _ in answers if "error" in body]
    assert codes in ([], [-32004], [-32004] * 4)  # whichever message came first owns the id
    got, _ = await rpc01(rt_client, "tasks/get", {"id": "race"})
    assert got["result"]["metadata"][REALTIME]["sessionId"] in sessions


async def test_a_known_id_with_another_message_is_unsupported_and_stores_nothing(rt_client):
    await rpc01(rt_client, "tasks/send", {"id": "busy", "message": create_message01()})
    for params in (
        {"id": "busy", "message": create_message01()},  # another clientSessionId
        {"id": "busy", "message": text_message("are you there?")},
        {"id": "busy", "sessionId": "elsewhere", "message": create_message01()},
    ):
        body, _response = await rpc01(rt_client, "tasks/send", params)
        error = assert_v01_error(body, -32004, "UNSUPPORTED_OPERATION")
        assert error["data"]["metadata"] == {"taskId": "busy", "state": "working"}
        assert "new `id`" in error["message"]
    assert len(await server_tasks(rt_client)) == 1
    got, _ = await rpc01(rt_client, "tasks/get", {"id": "busy"})
    assert got["result"]["status"]["state"] == "working"


async def test_another_principals_id_is_another_task_and_theirs_stays_unseen(rt_client):
    mine, _ = await rpc01(rt_client, "tasks/send", {"id": "shared", "message": text_message()})
    for method in ("tasks/get", "tasks/cancel"):
        body, response = await rpc01(rt_client, method, {"id": "shared"}, subject="mallory")
        error = assert_v01_error(body, -32001, "TASK_NOT_FOUND")
        assert error["data"]["metadata"] == {"taskId": "shared"}
        assert response.status_code == 200
    theirs, _ = await rpc01(
        rt_client, "tasks/send", {"id": "shared", "message": create_message01()}, subject="mallory"
    )
    assert theirs["result"]["id"] == "shared"
    assert theirs["result"]["status"]["state"] == "working"  # not alice's failed task
    assert theirs["result"]["sessionId"] != mine["result"]["sessionId"]
    still, _ = await rpc01(rt_client, "tasks/get", {"id": "shared"})
    assert still["result"]["status"]["state"] == "failed"
    assert len(await server_tasks(rt_client)) == 1
    assert len(await server_tasks(rt_client, "mallory")) == 1


async def test_task_ids_are_any_string_of_1_to_128_characters(client):
    for client_id in ("t-42", "my task #1 ✓", "x" * 128, new_id()):
        body, _ = await rpc01(client, "tasks/send", {"id": client_id, "message": text_message()})
        assert body["result"]["id"] == client_id
        got, _ = await rpc01(client, "tasks/get", {"id": client_id})
        assert got["result"]["id"] == client_id
    for client_id in ("", "x" * 129, 42, None):
        body, _ = await rpc01(client, "tasks/send", {"id": client_id, "message": text_message()})
        error = assert_v01_error(body, -32602, "INVALID_PARAMS")
        assert fields(error) == ["params.id"]
        body, _ = await rpc01(client, "tasks/get", {"id": client_id})
        assert fields(assert_v01_error(body, -32602, "INVALID_PARAMS")) == ["params.id"]


async def test_unknown_ids_and_1_0_task_ids_are_not_found(rt_client):
    created = (await create_session(rt_client))["result"]["task"]  # over A2A 1.0: no 0.1 id
    for client_id in ("never-sent", created["id"]):
        for method in ("tasks/get", "tasks/cancel", "tasks/resubscribe"):
            body, _ = await rpc01(rt_client, method, {"id": client_id})
            error = assert_v01_error(body, -32001, "TASK_NOT_FOUND")
            assert error["data"]["metadata"] == {"taskId": client_id}
            assert client_id in error["message"]


async def test_a_failed_send_leaves_the_id_free_for_a_corrected_one(rt_client):
    bad = {"id": "fix-me", "message": create_message01(recording="on")}
    body, _ = await rpc01(rt_client, "tasks/send", bad)
    error = assert_v01_error(body, -32602, "INVALID_PARAMS")
    assert fields(error) == ["params.message.parts[0].data.recording"]
    assert await server_tasks(rt_client) == []
    missing, _ = await rpc01(rt_client, "tasks/get", {"id": "fix-me"})
    assert_v01_error(missing, -32001, "TASK_NOT_FOUND")
    fixed, _ = await rpc01(rt_client, "tasks/send", {"id": "fix-me", "message": create_message01()})
    assert fixed["result"]["status"]["state"] == "working"


async def test_two_ids_may_name_one_session_and_each_answer_carries_its_own(rt_client):
    client_session_id = new_id()
    first, _ = await rpc01(
        rt_client, "tasks/send", {"id": "a", "message": create_message01(client_session_id)}
    )
    second, _ = await rpc01(
        rt_client, "tasks/send", {"id": "b", "message": create_message01(client_session_id)}
    )
    assert (first["result"]["id"], second["result"]["id"]) == ("a", "b")
    session = first["result"]["metadata"][REALTIME]["sessionId"]
    assert second["result"]["metadata"][REALTIME]["sessionId"] == session
    for client_id in ("a", "b"):
        got, _ = await rpc01(rt_client, "tasks/get", {"id": client_id})
        assert got["result"]["id"] == client_id
    assert len(await server_tasks(rt_client)) == 1


async def test_bad_0_1_params_are_invalid_params_naming_the_0_1_path(client):
    def send(message: dict[str, Any] | None = None, **params: Any) -> dict[str, Any]:
        return {"id": new_id(), "message": message or text_message(), **params}

    file_ = {"type": "file", "file": {"bytes": "not base64!"}}
    cases = [
        (send({"role": "user", "parts": [{"text": "no type"}]}), "params.message.parts[0].type"),
        (send({"role": "user", "parts": [{"type": "video", "text": "x"}]}),
         "params.message.parts[0].type"),
        (send({"role": "user", "parts": [{"kind": "text", "text": "0.3"}]}),
         "params.message.parts[0].type"),
        (send({"role": "user", "parts": [file_]}), "params.message.parts[0].file"),
        (send({"role": "user", "parts": [{"type": "file", "file": {"bytes": "aGk=", "uri": "x"}}]}),
         "params.message.parts[0].file"),
        (send({"role": "user", "parts": [{"type": "file", "file": {"name": "x"}}]}),
         "params.message.parts[0].file"),
        (send({"role": "user", "parts": [{"type": "file", "file": {"bytes": ""}}]}),
         "params.message.parts[0].file.bytes"),
        (send({"role": "user", "parts": [{"type": "file", "file": {"uri": "u", "name": ""}}]}),
         "params.message.parts[0].file.name"),
        (send({"role": "user", "parts": [{"type": "data", "data": [1]}]}),
         "params.message.parts[0].data"),
        (send({"role": "agent", "parts": [{"type": "text", "text": "x"}]}), "params.message.role"),
        (send({"role": "ROLE_USER", "parts": [{"type": "text", "text": "x"}]}),
         "params.message.role"),
        (send({"role": "user", "parts": []}), "params.message.parts"),
        (send(historyLength=-1), "params.historyLength"),
        (send(historyLength=1.5), "params.historyLength"),
        (send(historyLength="2"), "params.historyLength"),
        (send(sessionId=7), "params.sessionId"),
        (send(metadata=[1]), "params.metadata"),
        ({"id": "x"}, "params.message"),
    ]  # fmt: skip
    for params, path in cases:
        body, response = await rpc01(client, "tasks/send", params)
        error = assert_v01_error(body, -32602, "INVALID_PARAMS")
        assert fields(error) == [path], (params, body)
        assert path in error["message"]
        assert "configuration" not in response.text
        assert "mediaType" not in response.text
    body, _ = await rpc01(client, "tasks/get", {"id": "x", "historyLength": -2})
    assert fields(assert_v01_error(body, -32602, "INVALID_PARAMS")) == ["params.historyLength"]
    assert await server_tasks(client) == []  # nothing was stored for any of them


async def test_members_outside_the_0_1_schema_are_ignored(client):
    message = {**text_message(), "messageId": "m-1", "kind": "message"}
    message["parts"][0]["mediaType"] = "text/plain"
    params = {"id": "lenient", "message": message, "acceptedOutputModes": ["text"], "x": {}}
    body, _ = await rpc01(client, "tasks/send", params)
    assert body["result"]["id"] == "lenient"
    body, _ = await rpc01(client, "tasks/get", {"id": "lenient", "metadata": {"a": 1}, "y": 2})
    assert body["result"]["id"] == "lenient"


async def test_push_notifications_are_not_supported(client):
    params = {"id": "p", "message": text_message(), "pushNotification": {"url": "https://x"}}
    body, _ = await rpc01(client, "tasks/send", params)
    error = assert_v01_error(body, -32003, "PUSH_NOTIFICATION_NOT_SUPPORTED")
    assert error["data"]["metadata"] == {"taskId": "p"}
    ok, _ = await rpc01(client, "tasks/send", {**params, "pushNotification": None})
    assert ok["result"]["id"] == "p"
    config = {"id": "p", "pushNotificationConfig": {"url": "https://x"}}
    for method, params in (("tasks/pushNotification/set", config),
                           ("tasks/pushNotification/get", {"id": "p"}),
                           ("tasks/pushNotification/get", {"not": "examined"})):  # fmt: skip
        body, _ = await rpc01(client, method, params)
        assert_v01_error(body, -32003, "PUSH_NOTIFICATION_NOT_SUPPORTED")
    body, response = await rpc01(client, "tasks/pushNotification/set", config, auth=False)
    assert response.status_code == 401
    body, response = await rpc01(
        client, "tasks/pushNotification/set", config, scopes=("a2a.tasks.read",)
    )
    assert response.status_code == 403
    assert assert_v01_error(body, -31403, "PERMISSION_DENIED")["data"]["metadata"] == {
        "scope": "a2a.invoke"
    }


async def test_1_0_methods_are_1_0_only_and_other_names_do_not_exist(rt_client):
    for method in ("aim.realtime.GetSession", "aim.realtime.JoinSession", "SendMessage",
                   "ContinueTask", "ListTasks"):  # fmt: skip
        body, _ = await rpc01(rt_client, method, {})
        error = assert_v01_error(body, -32009, "VERSION_NOT_SUPPORTED")
        assert error["data"]["metadata"] == {"supportedVersions": "1.0", "requestedVersion": "0.1"}
        assert "http://127.0.0.1:8080/a2a with the header A2A-Version: 1.0" in error["message"]
        assert method in error["message"]
    for method in ("message/send", "message/stream"):
        body, _ = await rpc01(rt_client, method, {})
        error = assert_v01_error(body, -32601, "METHOD_NOT_FOUND")
        assert "A2A 0.3" in error["message"]
    for method in ("tasks/getHistory", "tasks/subscribe", "tasks/sendx", ""):
        body, _ = await rpc01(rt_client, method, {"id": "x"})
        error = assert_v01_error(body, -32601, "METHOD_NOT_FOUND")
        assert error["data"]["metadata"] == {"method": method}
        assert "tasks/sendSubscribe" in error["message"]


async def test_on_a2a_the_0_1_only_names_point_to_the_0_1_endpoint(client):
    for version in (None, "1.0", "0.3"):
        for method in ("tasks/send", "tasks/sendSubscribe", "tasks/pushNotification/get"):
            body = await rpc(client, method, {"id": "t-1", "message": text_message()},
                             version=version)  # fmt: skip
            assert body["error"]["code"] == -32601
            assert "http://127.0.0.1:8080/a2a/v0.1" in body["error"]["message"]
    # the names 0.1 shares with 0.3 stay 0.3 on /a2a: a 0.1 id is no 0.3 task id
    await rpc01(client, "tasks/send", {"id": "t-1", "message": text_message()})
    body = await rpc(client, "tasks/get", {"id": "t-1"}, version=None)
    assert body["error"]["code"] == -32602
    assert body["error"]["data"]["fieldViolations"][0]["field"] == "params.id"


async def test_the_envelope_may_omit_jsonrpc_but_nothing_else(client):
    params = {"id": "env", "message": text_message()}
    body, _ = await post01(client, {"id": 5, "method": "tasks/send", "params": params})
    assert body == {"jsonrpc": "2.0", "id": 5, "result": body["result"]}  # decision 119
    assert body["result"]["id"] == "env"
    cases = [
        ({"jsonrpc": "1.0", "id": 1, "method": "tasks/get", "params": {"id": "env"}}, ["jsonrpc"]),
        ({"jsonrpc": "2.0", "id": None, "method": "tasks/get", "params": {"id": "env"}}, ["id"]),
        ({"jsonrpc": "2.0", "method": "tasks/get", "params": {"id": "env"}}, ["id"]),
        ({"jsonrpc": "2.0", "id": 1, "method": "tasks/get"}, ["params"]),
        ([{"jsonrpc": "2.0", "id": 1, "method": "tasks/get", "params": {"id": "env"}}], []),
    ]
    for request, path in cases:
        body, response = await post01(client, request)
        assert response.status_code == 200
        assert fields(assert_v01_error(body, -32600, "INVALID_REQUEST")) == path
    body, response = await post01(client, b'{"id": 1, "method": ')
    assert body["id"] is None
    assert_v01_error(body, -32700, "PARSE_ERROR")
    body, response = await post01(client, b"[" * 70 + b"]" * 70)
    assert_v01_error(body, -32600, "INVALID_REQUEST")
    filler = {"id": "big", "message": text_message("x" * (1024 * 1024))}
    body, response = await rpc01(client, "tasks/send", filler)
    assert response.status_code == 413
    assert_v01_error(body, -32600, "INVALID_REQUEST")
    body, response = await rpc01(client, "tasks/get", {"id": "env"}, path=V01 + "/")
    assert response.status_code == 200
    assert body["result"]["id"] == "env"


async def test_0_1_calls_need_authentication_and_scopes(client):
    body, response = await rpc01(client, "tasks/get", {"id": "x"}, auth=False)
    assert response.status_code == 401
    assert response.headers["www-authenticate"] == 'Bearer realm="aim-realtime"'
    assert_v01_error(body, -31401, "UNAUTHENTICATED")
    assert body["id"] == 1
    body, response = await rpc01(client, "tasks/cancel", {"id": "x"}, scopes=("a2a.tasks.read",))
    assert response.status_code == 403
    assert 'scope="a2a.tasks.cancel"' in response.headers["www-authenticate"]
    assert_v01_error(body, -31403, "PERMISSION_DENIED")
    body, _ = await rpc01(client, "tasks/send", {"id": "x", "message": text_message()},
                          scopes=("a2a.tasks.read",))  # fmt: skip
    assert_v01_error(body, -31403, "PERMISSION_DENIED")


async def test_the_0_1_agent_card_points_to_the_0_1_endpoint(client):
    response = await client.get("/.well-known/agent.json")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("application/json")
    assert response.headers["cache-control"] == "public, max-age=300"
    card = response.json()
    v10 = (await client.get("/.well-known/agent-card.json")).json()
    assert card["url"] == "http://127.0.0.1:8080/a2a/v0.1"
    assert (card["name"], card["version"]) == (v10["name"], v10["version"])
    assert card["capabilities"] == {
        "streaming": True,
        "pushNotifications": False,
        "stateTransitionHistory": False,
    }
    assert card["authentication"] == {"schemes": ["Bearer"]}  # never `credentials`
    assert card["defaultInputModes"] == ["application/json", "text/plain"]
    assert [s["id"] for s in card["skills"]] == [s["id"] for s in v10["skills"]]
    assert all("securityRequirements" not in s for s in card["skills"])
    for said in ("session.create", "tasks/send", "a2a.invoke", "a2a.tasks.read"):
        assert said in card["description"]
    for member in ("protocolVersion", "supportedInterfaces", "securitySchemes"):
        assert member not in card
    cached = await client.get(
        "/.well-known/agent.json", headers={"If-None-Match": response.headers["etag"]}
    )
    assert cached.status_code == 304
    assert v10["url"] == "http://127.0.0.1:8080/a2a"  # the 1.0 card is unchanged


# --- streams: tasks/sendSubscribe, tasks/resubscribe -------------------------------------------


@contextlib.asynccontextmanager
async def stream01(
    client: Any, method: str, params: dict[str, Any], *, last_event_id: str | None = None
) -> AsyncIterator[SseReader]:
    sent = {"Content-Type": "application/json", **headers(version=None)}
    if last_event_id is not None:
        sent["Last-Event-ID"] = last_event_id
    body = msgspec.json.encode({"jsonrpc": "2.0", "id": 7, "method": method, "params": params})
    async with client.stream("POST", V01, content=body, headers=sent) as response:
        yield SseReader(response)


async def plain_error(reader: SseReader) -> dict[str, Any]:
    """The plain JSON-RPC error a streaming call answered instead of a stream."""
    assert reader.response.headers["content-type"].startswith("application/json")
    body: dict[str, Any] = json.loads(await reader.response.aread())
    return body


def session_state(event: Any) -> str:
    state: str = event.result["metadata"][REALTIME]["sessionState"]
    return state


async def read_until(reader: SseReader, state: str, seen: list[Any]) -> None:
    while True:
        event = await reader.next_data()
        assert event is not None, f"closed before {state}: {[e.data for e in seen]}"
        seen.append(event)
        if session_state(event) == state:
            return


async def test_send_subscribe_streams_status_events_with_final_on_the_last(rt_client):
    params = {"id": "live-1", "sessionId": "s-1", "message": create_message01()}
    async with stream01(rt_client, "tasks/sendSubscribe", params) as reader:
        response = reader.response
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        assert response.headers["cache-control"] == "no-cache"
        assert response.headers["a2a-extensions"] == REALTIME
        first = await reader.next_data()
        assert first is not None
        assert first.event is None
        assert first.id is not None  # SSE ids stay: a reconnect resumes with Last-Event-ID
        assert (first.data["jsonrpc"], first.data["id"]) == ("2.0", 7)
        event = first.result
        assert set(event) == {"id", "status", "final", "metadata"}  # no kind, taskId, contextId
        assert (event["id"], event["final"]) == ("live-1", False)
        assert event["status"]["state"] == "working"
        assert session_state(first) == "provisioning"  # the task as created: never blocks
        session_id = event["metadata"][REALTIME]["sessionId"]
        seen = await journey_to_the_end(rt_client, reader, first, session_id, until=read_until)
    assert reader.closed
    assert all(e.event is None and e.result["id"] == "live-1" for e in seen)
    assert [e.result["final"] for e in seen] == [False] * (len(seen) - 1) + [True]
    assert seen[-1].result["status"]["state"] == "completed"
    assert all(e.result["status"]["state"] == "working" for e in seen[:-1])
    got, _ = await rpc01(rt_client, "tasks/get", {"id": "live-1"})
    assert (got["result"]["sessionId"], got["result"]["status"]["state"]) == ("s-1", "completed")
    async with stream01(rt_client, "tasks/resubscribe", {"id": "live-1"}) as reader:
        body = await plain_error(reader)  # decision 117: as 1.0, and tasks/get reads it
    error = assert_v01_error(body, -32004, "UNSUPPORTED_OPERATION")
    assert error["data"]["metadata"] == {"taskId": "live-1", "state": "completed"}
    assert "tasks/get" in error["message"]
    # the same request again, resuming after its last event: nothing follows the end
    async with stream01(
        rt_client, "tasks/sendSubscribe", params, last_event_id=seen[-1].id
    ) as reader:
        response_text = (await reader.response.aread()).decode()
    error = assert_v01_error(json.loads(response_text), -32004, "UNSUPPORTED_OPERATION")
    assert error["data"]["metadata"] == {"taskId": "live-1", "state": "completed"}
    (stored,) = await server_tasks(rt_client)
    assert stored["id"] not in response_text
    assert "live-1" in error["message"]


async def test_a_refused_send_subscribe_is_one_final_failed_event(client):
    params = {"id": "chat", "message": text_message()}
    async with stream01(client, "tasks/sendSubscribe", params) as reader:
        events = await reader.rest()
    (only,) = events
    assert only.id is None  # no session, no event stream to resume
    assert only.result["id"] == "chat"
    assert only.result["status"]["state"] == "failed"
    assert only.result["status"]["message"]["parts"][1]["data"] == {"reason": "realtime_only"}
    assert only.result["final"] is True


async def test_send_subscribe_again_streams_the_same_session_from_its_creation(rt_client):
    params = {"id": "twice", "message": create_message01()}
    async with stream01(rt_client, "tasks/sendSubscribe", params) as reader:
        first = await reader.next_data()
    async with stream01(rt_client, "tasks/sendSubscribe", params) as reader:
        again = await reader.next_data()
    assert first is not None
    assert again is not None
    assert again.id == first.id
    assert again.result == first.result  # the creation event again, as the 1.0 stream does
    assert len(await server_tasks(rt_client)) == 1
    other = {"id": "twice", "message": create_message01()}
    async with stream01(rt_client, "tasks/sendSubscribe", other) as reader:
        body = await plain_error(reader)
    assert_v01_error(body, -32004, "UNSUPPORTED_OPERATION")


async def test_resubscribe_sends_the_status_then_updates_and_resumes_after_last_event_id(
    rt_client,
):
    created, _ = await rpc01(rt_client, "tasks/send", {"id": "re", "message": create_message01()})
    session_id = created["result"]["metadata"][REALTIME]["sessionId"]
    params = {"id": "re", "historyLength": 3, "metadata": {"k": "v"}}
    async with stream01(rt_client, "tasks/resubscribe", params) as reader:
        first = await reader.next_data()
    assert first is not None
    assert first.id is not None
    assert first.result["status"]["state"] == "working"
    assert (session_state(first), first.result["final"]) == ("ready", False)
    assert "history" not in first.result
    await drive_to_active(rt_client, session_id)  # while disconnected
    async with stream01(
        rt_client, "tasks/resubscribe", {"id": "re"}, last_event_id=first.id
    ) as reader:
        seen: list[Any] = []
        await read_until(reader, "active", seen)
        await end(rt_client, session_id)
        seen.extend(await reader.rest())
    ids = [e.id for e in seen]
    assert first.id not in ids
    assert len(set(ids)) == len(ids)
    assert session_state(seen[0]) in ("ready", "joining")  # it continues, no status first
    assert [e.result["final"] for e in seen] == [False] * (len(seen) - 1) + [True]
    async with stream01(
        rt_client, "tasks/resubscribe", {"id": "re"}, last_event_id=seen[1].id
    ) as reader:
        replayed = await reader.rest()  # terminal since: the missed events, then the end
    assert [e.id for e in replayed] == ids[2:]
    assert replayed[-1].result["final"] is True


async def test_stream_errors_before_the_first_event_are_plain_json(rt_client):
    _created, _ = await rpc01(rt_client, "tasks/send", {"id": "e", "message": create_message01()})
    cases = [
        ("tasks/resubscribe", {"id": "nobody"}, None, -32001, []),
        ("tasks/resubscribe", {"id": "e"}, "yesterday", -32602, ["Last-Event-ID"]),
        ("tasks/sendSubscribe", {"id": "n", "message": create_message01()}, "x", -32602,
         ["Last-Event-ID"]),
        ("tasks/sendSubscribe", {"id": "n", "message": {"role": "user", "parts": []}}, None,
         -32602, ["params.message.parts"]),
        ("tasks/resubscribe", {"id": ""}, None, -32602, ["params.id"]),
    ]  # fmt: skip
    for method, params, last_event_id, code, paths in cases:
        async with stream01(rt_client, method, params, last_event_id=last_event_id) as reader:
            body = await plain_error(reader)
        assert body["error"]["code"] == code, body
        assert fields(body["error"]) == paths
    missing, _ = await rpc01(rt_client, "tasks/get", {"id": "n"})
    assert_v01_error(missing, -32001, "TASK_NOT_FOUND")  # nothing created, the id is free
