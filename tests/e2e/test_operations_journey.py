"""A whole journey: the agent asks, the user confirms (ContinueTask), the provider finishes."""

from __future__ import annotations

import pytest

from tests.conftest import rpc
from tests.e2e import agent_operation_helpers as ops
from tests.e2e.realtime_helpers import call

pytestmark = pytest.mark.e2e


async def test_agent_asks_user_approves_agent_finishes_and_the_history_keeps_it(rt_client, livekit):
    live = await ops.open_session(rt_client, livekit, transcript="on")

    status, body, _ = await ops.request_operation(
        rt_client,
        live,
        kind="action",
        action={"title": "Book a table", "arguments": {"n": 2}},
        confirmation="required",
    )
    assert status == 200, body
    op = body["result"]["operation"]
    assert op["state"] == "awaiting_confirmation"
    got = await rpc(rt_client, "GetTask", {"id": live.task_id})
    t = got["result"]
    assert t["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
    data = t["status"]["message"]["parts"][1]["data"]
    approve = {"parts": [{"data": {"decision": "approve"}}]}
    params = ops.continue_params(live.task_id, data, message=approve)
    cont = await rpc(rt_client, "ContinueTask", params)
    assert cont["result"]["task"]["status"]["state"] == "TASK_STATE_WORKING"
    again = await rpc(rt_client, "ContinueTask", params)
    assert again == cont
    got = await call(rt_client, "GetOperation", sessionId=live.sid, operationId=op["operationId"])
    assert got["result"]["operation"]["state"] == "running"
    _, done, _ = await ops.update_operation(
        rt_client, live, op["operationId"], "succeeded", result={"booked": True}
    )
    assert done["result"]["operation"]["state"] == "succeeded", done
    assert done["result"]["operation"]["result"] == {"booked": True}
    _, tr, _ = await ops.append_transcript(
        rt_client, live, "it-1", "agent", "Your table is booked."
    )
    assert tr["result"] == {"itemId": "it-1"}, tr
    await ops.interact(rt_client, live.sid, "input.text", {"text": "thanks"})
    got = await rpc(rt_client, "GetTask", {"id": live.task_id})
    history = got["result"]["history"]
    assert [m["role"] for m in history][-3:] == ["ROLE_USER", "ROLE_AGENT", "ROLE_USER"]
