"""A2A 0.3 clients: 0.3 method names without A2A-Version (or with 0.3), answered in 0.3 shapes
by the same handlers (A2A notes §5)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.conftest import REALTIME, error_info, rpc
from tests.e2e.a2a_v03_helpers import assert_v03_error, rpc03
from tests.e2e.realtime_helpers import create_part, new_id
from tests.e2e.sse_helpers import json_error, stream
from tests.e2e.streaming_helpers import drive_to_active, end

pytestmark = pytest.mark.e2e


def text_message(text: str = "hello", **extra: Any) -> dict[str, Any]:
    return {"kind": "message", "messageId": new_id(), "role": "user",
            "parts": [{"kind": "text", "text": text}], **extra}  # fmt: skip


def create_message03() -> dict[str, Any]:
    data = create_part()["data"]
    return {"kind": "message", "messageId": new_id(), "role": "user",
            "parts": [{"kind": "data", "data": data}]}  # fmt: skip


async def test_message_send_answers_a_bare_0_3_task_with_kinds_and_kebab_states(client):
    # a file of a media type the agent accepts (others are -32005: test_a2a_gaps)
    file_part = {"kind": "file", "file": {"uri": "https://example.com/a.txt",
                                          "mimeType": "text/plain", "name": "a.txt"}}  # fmt: skip
    message = text_message()
    message["parts"].append(file_part)
    body, response = await rpc03(client, "message/send", {"message": message})
    assert response.status_code == 200
    assert body["id"] == "r1"
    task = body["result"]
    assert task["kind"] == "task"
    assert task["status"]["state"] == "rejected"
    status_message = task["status"]["message"]
    assert status_message["kind"] == "message"
    assert status_message["role"] == "agent"
    assert [p["kind"] for p in status_message["parts"]] == ["text", "data"]
    assert status_message["parts"][1]["data"] == {"reason": "realtime_only"}
    (sent,) = task["history"]
    assert sent["kind"] == "message"
    assert sent["role"] == "user"
    assert sent["messageId"] == message["messageId"]
    assert sent["parts"] == [{"kind": "text", "text": "hello"}, file_part]
    assert "TASK_STATE" not in response.text


async def test_tasks_get_and_cancel_round_trip_and_errors_come_in_0_3_form(rt_client):
    body, response = await rpc03(
        rt_client, "message/send", {"message": create_message03()}, extensions=REALTIME
    )
    task = body["result"]
    assert task["kind"] == "task"
    assert task["status"]["state"] == "working"
    assert task["metadata"][REALTIME]["sessionState"] == "ready"
    assert response.headers["a2a-extensions"] == REALTIME
    assert response.headers["x-a2a-extensions"] == REALTIME

    got, _ = await rpc03(rt_client, "tasks/get", {"id": task["id"], "historyLength": 0})
    assert got["result"]["kind"] == "task"
    assert got["result"]["id"] == task["id"]
    assert "history" not in got["result"]
    same, _ = await rpc03(rt_client, "tasks/get", {"id": task["id"]}, version="0.3")
    assert same["result"]["status"]["state"] == "working"

    canceled, _ = await rpc03(rt_client, "tasks/cancel", {"id": task["id"]})
    assert canceled["result"]["kind"] == "task"
    assert canceled["result"]["status"]["state"] == "canceled"
    again, _ = await rpc03(rt_client, "tasks/cancel", {"id": task["id"], "metadata": {}})
    error = assert_v03_error(again, -32002, "TASK_NOT_CANCELABLE")
    # in 0.3's words: its state names, as the task's own status says them
    assert error["data"]["metadata"]["state"] == "canceled"
    assert error["message"] == f"Task {task['id']} is canceled and can no longer be canceled."

    for params, subject in (({"id": new_id()}, "alice"), ({"id": task["id"]}, "mallory")):
        missing, _ = await rpc03(rt_client, "tasks/get", params, subject=subject)
        assert_v03_error(missing, -32001, "TASK_NOT_FOUND")


async def test_bad_0_3_shapes_are_invalid_params_naming_the_path(client):
    cases = [
        ({"message": {**text_message(), "parts": [{"text": "no kind"}]}},
         "params.message.parts[0].kind"),
        ({"message": {**text_message(), "parts": [{"kind": "video", "text": "x"}]}},
         "params.message.parts[0].kind"),
        ({"message": {**text_message(), "role": "ROLE_USER"}}, "params.message.role"),
        ({"message": text_message(), "configuration": {"blocking": "yes"}},
         "params.configuration.blocking"),
        ({"message": text_message(), "extra": 1}, "params.extra"),
        ({"message": {**text_message(), "parts": [{"kind": "file", "file": {"name": "x"}}]}},
         "params.message.parts[0].file"),
    ]  # fmt: skip
    for params, path in cases:
        body, _ = await rpc03(client, "message/send", params)
        error = assert_v03_error(body, -32602, "INVALID_PARAMS")
        assert [v["field"] for v in error["data"]["fieldViolations"]] == [path], body
    # the 0.3 file's own members, also where the translated 1.0 part is what checks them
    files = [
        ({"bytes": "not base64!", "mimeType": "text/plain"}, "params.message.parts[0].file",
         "`bytes` must be standard padded base64"),
        ({"uri": "https://example.com/a.txt", "mimeType": "text/" + "x" * 130},
         "params.message.parts[0].file.mimeType", "length <= 127"),
    ]  # fmt: skip
    for file, path, said in files:
        part = {"kind": "file", "file": file}
        body, _ = await rpc03(client, "message/send",
                              {"message": {**text_message(), "parts": [part]}})  # fmt: skip
        error = assert_v03_error(body, -32602, "INVALID_PARAMS")
        assert [v["field"] for v in error["data"]["fieldViolations"]] == [path], body
        assert error["message"].startswith(f"Invalid params: {path}: "), body
        assert said in error["message"], body
    body, _ = await rpc03(client, "tasks/get", {"id": "not-a-uuid"})
    assert_v03_error(body, -32602, "INVALID_PARAMS")
    body, _ = await rpc03(client, "tasks/get", {})
    assert_v03_error(body, -32602, "INVALID_PARAMS")


async def test_a_0_3_agent_message_is_refused_like_in_1_0(client):
    body, _ = await rpc03(client, "message/send", {"message": text_message(role="agent")})
    error = assert_v03_error(body, -32602, "INVALID_PARAMS")
    assert error["data"]["fieldViolations"][0]["field"] == "params.message.role"


async def test_realtime_methods_and_continue_task_are_1_0_only(rt_client):
    for method in ("aim.realtime.GetSession", "ContinueTask", "SendMessage"):
        body = await rpc(rt_client, method, {}, version=None, realtime=True)
        assert body["error"]["code"] == -32009, method
        assert error_info(body)["metadata"]["supportedVersions"] == "1.0"
        body = await rpc(rt_client, method, {}, version="0.3", realtime=True)
        assert body["error"]["code"] == -32009, method


async def test_an_unknown_name_without_a2a_version_is_a_0_3_method_not_found(client):
    # no header: an A2A 0.3 request (A2A §3.6), so -32601 in the 0.3 form, as with 0.3
    for version in (None, "", "0.3", "0.3.1"):
        body, _ = await rpc03(client, "tasks/list", {}, version=version)
        error = assert_v03_error(body, -32601, "METHOD_NOT_FOUND")
        assert error["data"]["metadata"] == {"method": "tasks/list"}
        assert "message/send" in error["message"]
        assert "A2A-Version: 1.0" in error["message"]
    # an unsupported version is refused before the method is looked at
    body = await rpc(client, "tasks/list", {}, version="0.9")
    assert body["error"]["code"] == -32009


async def test_a_0_3_method_with_a_1_0_header_is_not_found(client):
    body = await rpc(client, "message/send", {"message": text_message()}, version="1.0")
    assert body["error"]["code"] == -32601
    assert "SendMessage" in body["error"]["message"]
    body = await rpc(client, "tasks/get", {"id": new_id()}, version="2.0")
    assert body["error"]["code"] == -32009


async def test_0_3_calls_need_authentication_and_scopes_too(client):
    body = await rpc(client, "tasks/cancel", {"id": new_id()}, version=None,
                     scopes=("a2a.tasks.read",))  # fmt: skip
    assert body["_status"] == 403
    assert body["error"]["code"] == -31403
    assert body["error"]["data"]["metadata"] == {"scope": "a2a.tasks.cancel"}


async def test_message_stream_sends_0_3_events_with_final(rt_client):
    params = {"message": create_message03()}
    async with stream(rt_client, "message/stream", params, version=None, realtime=True) as reader:
        first = await reader.next_data()
        assert first is not None
        task = first.result
        assert task["kind"] == "task"
        assert task["status"]["state"] == "working"
        session_id = task["metadata"][REALTIME]["sessionId"]
        update = await reader.next_data()
        assert update is not None
        assert update.result["kind"] == "status-update"
        assert update.result["taskId"] == task["id"]
        assert update.result["contextId"] == task["contextId"]
        assert update.result["status"]["state"] == "working"
        assert update.result["final"] is False
        await drive_to_active(rt_client, session_id)
        await end(rt_client, session_id)
        rest = await reader.rest()
    assert all(e.result["kind"] == "status-update" for e in rest)
    assert [e.result["final"] for e in rest] == [False] * (len(rest) - 1) + [True]
    assert rest[-1].result["status"]["state"] == "completed"


async def test_tasks_resubscribe_sends_the_task_then_0_3_updates(rt_client):
    body, _ = await rpc03(
        rt_client, "message/send", {"message": create_message03()}, extensions=REALTIME
    )
    task = body["result"]
    session_id = task["metadata"][REALTIME]["sessionId"]
    async with stream(rt_client, "tasks/resubscribe", {"id": task["id"]}, version=None) as reader:
        first = await reader.next_data()
        assert first is not None
        assert first.result["kind"] == "task"
        assert first.result["status"]["state"] == "working"
        await end(rt_client, session_id)
        rest = await reader.rest()
    assert rest[-1].result == {
        "kind": "status-update",
        "taskId": task["id"],
        "contextId": task["contextId"],
        "status": rest[-1].result["status"],
        "metadata": rest[-1].result["metadata"],
        "final": True,
    }
    assert rest[-1].result["status"]["state"] == "completed"
    async with stream(rt_client, "tasks/resubscribe", {"id": task["id"]}, version=None) as reader:
        error = await json_error(reader)
    over = assert_v03_error(error, -32004, "UNSUPPORTED_OPERATION")
    # said in 0.3's words: its state and the 0.3 name of the method to call instead
    assert over["message"] == (
        f"Task {task['id']} is completed: a terminal task has no more updates to subscribe to. "
        "Read it with tasks/get."
    )
    assert over["data"]["metadata"] == {"taskId": task["id"], "state": "completed"}
