"""Interoperability with okbot-peer, a Rust A2A client/server.

The requests below reproduce okbot-peer's wire shapes as described in docs/decisions.md (its
own fixtures were not available): 1.0 calls carry `A2A-Version: 1.0` and an `A2A-Extensions`
header naming okbot's delegation extension (unknown here: it must not be activated, echoed or
refused), message metadata under `okbot/delegation`; 0.3 calls carry no version header. Each
test checks what such a peer reads back: task id, contextId, the state spelling of its version,
and the `kind` discriminators of 0.3.
"""

from __future__ import annotations

import uuid
from typing import Any

import httpx
import msgspec
import pytest

from tests.conftest import REALTIME, token
from tests.e2e.realtime_helpers import create_part

pytestmark = pytest.mark.e2e

DELEGATION = "https://okbot.dev/extensions/delegation/v1"
UUID_FORM = r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$"


def delegation() -> dict[str, Any]:
    return {"okbot/delegation": {"hop": 1, "origin": "okbot-peer",
                                 "correlationId": str(uuid.uuid4())}}  # fmt: skip


async def okbot(
    client: httpx.AsyncClient,
    method: str,
    params: dict[str, Any],
    *,
    version: str | None,
    extensions: list[str],
) -> tuple[dict[str, Any], httpx.Response]:
    """One request exactly as okbot-peer sends it (its header spelling and member order)."""
    sent = {
        "content-type": "application/json",
        "accept": "application/json",
        "authorization": f"Bearer {token('okbot-peer')}",
        "user-agent": "okbot-peer/0.4 (rust; reqwest)",
    }
    if version is not None:
        sent["a2a-version"] = version
    if extensions:
        sent["a2a-extensions"] = ",".join(extensions)
    envelope = {"jsonrpc": "2.0", "method": method, "params": params, "id": str(uuid.uuid4())}
    response = await client.post("/a2a", content=msgspec.json.encode(envelope), headers=sent)
    body: dict[str, Any] = response.json()
    assert body["id"] == envelope["id"]
    return body, response


def text_message_v10(text: str) -> dict[str, Any]:
    return {
        "messageId": str(uuid.uuid4()),
        "role": "ROLE_USER",
        "parts": [{"text": text}],
        "metadata": delegation(),
    }


def text_message_v03(text: str) -> dict[str, Any]:
    return {
        "kind": "message",
        "messageId": str(uuid.uuid4()),
        "role": "user",
        "parts": [{"kind": "text", "text": text}],
        "metadata": delegation(),
    }


async def test_okbot_1_0_text_message_gets_a_rejected_task_and_can_read_it(client):
    body, response = await okbot(
        client,
        "SendMessage",
        {"message": text_message_v10("summarise my inbox")},
        version="1.0",
        extensions=[DELEGATION],
    )
    assert "a2a-extensions" not in response.headers  # nothing activated, nothing refused
    task = body["result"]["task"]
    assert task["id"]
    assert task["contextId"]
    assert task["status"]["state"] == "TASK_STATE_REJECTED"
    assert "kind" not in task
    reason = task["status"]["message"]["parts"][1]["data"]
    assert reason == {"reason": "realtime_only"}
    assert task["history"][0]["metadata"]["okbot/delegation"]["origin"] == "okbot-peer"

    got, _ = await okbot(client, "GetTask", {"id": task["id"]}, version="1.0",
                         extensions=[DELEGATION])  # fmt: skip
    assert got["result"]["id"] == task["id"]
    assert got["result"]["contextId"] == task["contextId"]
    assert got["result"]["status"]["state"] == "TASK_STATE_REJECTED"

    canceled, _ = await okbot(client, "CancelTask", {"id": task["id"]}, version="1.0",
                              extensions=[DELEGATION])  # fmt: skip
    assert canceled["error"]["code"] == -32002  # a rejected task is terminal


async def test_okbot_1_0_session_create_activates_only_the_realtime_extension(rt_client):
    message = text_message_v10("start a call")
    message["parts"] = [create_part()]
    body, response = await okbot(
        rt_client,
        "SendMessage",
        {"message": message, "configuration": {"returnImmediately": True}},
        version="1.0",
        extensions=[DELEGATION, REALTIME],
    )
    assert response.headers["a2a-extensions"] == REALTIME
    task = body["result"]["task"]
    assert task["status"]["state"] == "TASK_STATE_WORKING"
    session = task["metadata"][REALTIME]
    assert session["sessionId"]
    assert session["sessionState"] == "provisioning"

    got, _ = await okbot(rt_client, "GetTask", {"id": task["id"]}, version="1.0",
                         extensions=[DELEGATION])  # fmt: skip
    assert got["result"]["contextId"] == task["contextId"]
    canceled, _ = await okbot(rt_client, "CancelTask", {"id": task["id"]}, version="1.0",
                              extensions=[DELEGATION])  # fmt: skip
    assert canceled["result"]["id"] == task["id"]
    assert canceled["result"]["status"]["state"] == "TASK_STATE_CANCELED"


async def test_okbot_0_3_send_get_cancel_read_back_0_3_shapes(rt_client):
    body, response = await okbot(
        rt_client,
        "message/send",
        {"message": text_message_v03("hello"), "configuration": {"blocking": True}},
        version=None,
        extensions=[DELEGATION],
    )
    assert "a2a-extensions" not in response.headers
    task = body["result"]
    assert task["kind"] == "task"
    assert task["status"]["state"] == "rejected"
    assert task["status"]["message"]["kind"] == "message"
    assert task["status"]["message"]["role"] == "agent"
    assert {part["kind"] for part in task["status"]["message"]["parts"]} == {"text", "data"}
    assert task["history"][0]["metadata"]["okbot/delegation"]["hop"] == 1

    got, _ = await okbot(rt_client, "tasks/get", {"id": task["id"], "historyLength": 1},
                         version=None, extensions=[])  # fmt: skip
    assert got["result"]["kind"] == "task"
    assert got["result"]["id"] == task["id"]
    assert got["result"]["contextId"] == task["contextId"]
    assert got["result"]["status"]["state"] == "rejected"

    canceled, _ = await okbot(rt_client, "tasks/cancel", {"id": task["id"]}, version=None,
                              extensions=[])  # fmt: skip
    assert canceled["error"]["code"] == -32002
    assert canceled["error"]["data"]["reason"] == "TASK_NOT_CANCELABLE"

    # a realtime session over 0.3, then canceled: `canceled`, kebab-case, with kind
    data = create_part()["data"]
    message = {**text_message_v03("call"), "parts": [{"kind": "data", "data": data}]}
    created, response = await okbot(
        rt_client,
        "message/send",
        {"message": message, "configuration": {"blocking": False}},
        version=None,
        extensions=[DELEGATION, REALTIME],
    )
    assert response.headers["a2a-extensions"] == REALTIME
    assert created["result"]["status"]["state"] == "working"
    canceled, _ = await okbot(rt_client, "tasks/cancel", {"id": created["result"]["id"]},
                              version=None, extensions=[])  # fmt: skip
    assert canceled["result"]["kind"] == "task"
    assert canceled["result"]["status"]["state"] == "canceled"
