"""A2A tasks over HTTP: SendMessage without a realtime part, GetTask, ListTasks, CancelTask."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from tests.conftest import error_info, rpc, violations

pytestmark = pytest.mark.e2e

UNKNOWN_ID = "3c9a1f0e-7b6d-4e5c-8a2b-1d0c9e8f7a6b"


def message(message_id: str, text: str = "hello", **extra: Any) -> dict[str, Any]:
    return {"messageId": message_id, "role": "ROLE_USER", "parts": [{"text": text}], **extra}


async def send(client, message_id: str, subject: str = "alice", **extra: Any) -> dict[str, Any]:
    body = await rpc(
        client, "SendMessage", {"message": message(message_id, **extra)}, subject=subject
    )
    return body["result"]["task"]


async def test_plain_message_gets_a_rejected_task_explaining_realtime_only(client):
    task = await send(client, "m-1")
    assert task["status"]["state"] == "TASK_STATE_REJECTED"
    status_message = task["status"]["message"]
    assert status_message["role"] == "ROLE_AGENT"
    assert status_message["taskId"] == task["id"]
    assert status_message["contextId"] == task["contextId"]
    texts = [part["text"] for part in status_message["parts"] if "text" in part]
    assert len(texts) == 1
    assert "session.create" in texts[0]
    assert {"data": {"reason": "realtime_only"}} in status_message["parts"]
    assert task["history"][0]["messageId"] == "m-1"
    assert task["status"]["timestamp"].endswith("Z")


async def test_rejected_task_is_persisted_and_readable(client):
    task = await send(client, "m-1")
    got = await rpc(client, "GetTask", {"id": task["id"]})
    assert got["result"] == task


async def test_given_context_id_is_kept_and_missing_one_is_generated(client):
    kept = await send(client, "m-1", contextId="my-chat")
    made = await send(client, "m-2")
    assert kept["contextId"] == "my-chat"
    assert made["contextId"]
    assert made["contextId"] != "my-chat"


async def test_repeated_message_id_replays_the_first_task(client):
    first = await send(client, "same")
    second = await send(
        client,
        "same",
    )
    assert second == first
    listed = await rpc(client, "ListTasks", {})
    assert listed["result"]["totalSize"] == 1


async def test_concurrent_duplicates_of_one_message_create_one_task(client):
    tasks = await asyncio.gather(*(send(client, "dup") for _ in range(20)))
    assert len({task["id"] for task in tasks}) == 1
    listed = await rpc(client, "ListTasks", {})
    assert listed["result"]["totalSize"] == 1


async def test_message_ids_are_scoped_per_principal(client):
    alice = await send(client, "shared-id", subject="alice")
    bob = await send(client, "shared-id", subject="bob")
    assert alice["id"] != bob["id"]


@pytest.mark.parametrize(
    ("history_length", "expected"),
    [(None, 1), (0, 0), (1, 1), (2**53 - 1, 1)],
)
async def test_get_task_applies_history_length(client, history_length, expected):
    task = await send(client, "m-1")
    params: dict[str, Any] = {"id": task["id"]}
    if history_length is not None:
        params["historyLength"] = history_length
    got = (await rpc(client, "GetTask", params))["result"]
    assert len(got.get("history", [])) == expected
    if expected == 0:
        assert "history" not in got


async def test_send_message_applies_configured_history_length(client):
    params = {"message": message("m-1"), "configuration": {"historyLength": 0}}
    task = (await rpc(client, "SendMessage", params))["result"]["task"]
    assert "history" not in task


async def test_unknown_task_is_task_not_found(client):
    body = await rpc(client, "GetTask", {"id": UNKNOWN_ID})
    assert body["error"]["code"] == -32001
    assert error_info(body)["reason"] == "TASK_NOT_FOUND"


@pytest.mark.parametrize("method", ["GetTask", "CancelTask"])
async def test_another_principals_task_is_answered_exactly_like_an_unknown_one(client, method):
    task = await send(client, "m-1", subject="alice")
    foreign = await rpc(client, method, {"id": task["id"]}, subject="mallory")
    unknown = await rpc(client, method, {"id": UNKNOWN_ID}, subject="mallory")
    assert foreign["error"]["code"] == unknown["error"]["code"] == -32001
    assert foreign["error"]["message"].replace(task["id"], "ID") == unknown["error"][
        "message"
    ].replace(UNKNOWN_ID, "ID")
    assert error_info(foreign)["reason"] == error_info(unknown)["reason"]


async def test_list_tasks_shows_only_the_callers_tasks(client):
    await send(client, "a-1", subject="alice")
    await send(client, "b-1", subject="bob")
    listed = (await rpc(client, "ListTasks", {}, subject="mallory"))["result"]
    assert listed == {"tasks": [], "nextPageToken": "", "pageSize": 50, "totalSize": 0}
    alice = (await rpc(client, "ListTasks", {}, subject="alice"))["result"]
    assert [task["history"][0]["messageId"] for task in alice["tasks"]] == ["a-1"]


async def test_cancel_of_a_terminal_task_is_not_cancelable(client):
    task = await send(client, "m-1")
    body = await rpc(client, "CancelTask", {"id": task["id"]})
    assert body["error"]["code"] == -32002
    assert error_info(body)["metadata"]["state"] == "TASK_STATE_REJECTED"
    again = await rpc(client, "GetTask", {"id": task["id"]})
    assert again["result"]["status"]["state"] == "TASK_STATE_REJECTED"


async def test_list_tasks_pages_across_250_tasks_newest_first(client):
    created = [await send(client, f"m-{i}") for i in range(250)]
    seen: list[dict[str, Any]] = []
    token = None
    pages = 0
    while True:
        params: dict[str, Any] = {"pageSize": 100, "historyLength": 0}
        if token:
            params["pageToken"] = token
        page = (await rpc(client, "ListTasks", params))["result"]
        pages += 1
        assert page["totalSize"] == 250
        assert page["pageSize"] == 100
        seen.extend(page["tasks"])
        token = page["nextPageToken"]
        if token == "":
            break
    assert pages == 3
    assert [len(seen[:100]), len(seen[100:200]), len(seen[200:])] == [100, 100, 50]
    assert sorted(task["id"] for task in seen) == sorted(task["id"] for task in created)
    order = [(task["status"]["timestamp"], task["id"]) for task in seen]
    assert order == sorted(order, reverse=True)
    assert all("history" not in task for task in seen)


async def test_list_tasks_default_page_size_is_50(client):
    for i in range(51):
        await send(client, f"m-{i}")
    page = (await rpc(client, "ListTasks", {}))["result"]
    assert len(page["tasks"]) == 50
    assert page["nextPageToken"] != ""


async def test_list_tasks_filters_by_context_status_and_timestamp(client):
    first = await send(client, "m-1", contextId="ctx-a")
    await asyncio.sleep(0.01)
    second = await send(client, "m-2", contextId="ctx-b")
    by_context = (await rpc(client, "ListTasks", {"contextId": "ctx-a"}))["result"]
    assert [task["id"] for task in by_context["tasks"]] == [first["id"]]
    by_status = (await rpc(client, "ListTasks", {"status": "TASK_STATE_WORKING"}))["result"]
    assert by_status["totalSize"] == 0
    rejected = (await rpc(client, "ListTasks", {"status": "TASK_STATE_REJECTED"}))["result"]
    assert rejected["totalSize"] == 2
    after = second["status"]["timestamp"]
    recent = (await rpc(client, "ListTasks", {"statusTimestampAfter": after}))["result"]
    assert [task["id"] for task in recent["tasks"]] == [second["id"]]  # >= is inclusive


async def test_list_tasks_omits_artifacts_unless_asked(client):
    await send(client, "m-1")
    page = (await rpc(client, "ListTasks", {"includeArtifacts": False}))["result"]
    assert "artifacts" not in page["tasks"][0]


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"pageSize": 0}, "params.pageSize"),
        ({"pageSize": 101}, "params.pageSize"),
        ({"pageToken": "not-a-token"}, "params.pageToken"),
        ({"historyLength": -1}, "params.historyLength"),
        ({"status": "TASK_STATE_DONE"}, "params.status"),
        ({"statusTimestampAfter": "yesterday"}, "params.statusTimestampAfter"),
    ],
)
async def test_bad_list_parameters_are_invalid_params(client, params, field):
    body = await rpc(client, "ListTasks", params)
    assert body["error"]["code"] == -32602
    assert violations(body) == [field]
