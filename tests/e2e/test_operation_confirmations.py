"""Requirements (profile §8): the agent asks, the user answers through SendInteraction
operation.confirm/cancel or A2A ContinueTask, both converging on one transition; expiry."""

from __future__ import annotations

import asyncio
from datetime import datetime

import pytest

from tests.conftest import error_info, rpc, violations
from tests.e2e.agent_operation_helpers import (
    confirm_operation,
    continue_params,
    data_to_agent,
    digest_of,
    get_operation,
    get_session,
    get_task,
    interact,
    meta,
    open_session,
    quiet,
    request_action,
    requirement_data,
    update_operation,
    wait_for_data,
    wait_operation_state,
)
from tests.e2e.realtime_helpers import call, new_id, session_of

pytestmark = pytest.mark.e2e


async def asked(client, livekit, **options):
    """A live session whose agent asked for a confirmable action; (live, operation, task)."""
    live = await open_session(client, livekit)
    operation = await request_action(client, live, **options)
    task = await get_task(client, live.task_id)
    return live, operation, task


async def test_a_confirmable_action_opens_a_requirement_and_input_required(rt_client, livekit):
    live = await open_session(rt_client, livekit)
    before = await get_task(rt_client, live.task_id)
    arguments = {"people": 2, "when": "2030-01-01T19:00:00Z", "note": "caf\u00e9 \u2615", "z": 1e3}
    operation = await request_action(
        rt_client, live, title="Book a table", arguments=arguments, description="At Luigi's"
    )
    action = {
        "title": "Book a table",
        "description": "At Luigi's",
        "tool": "booking",
        "arguments": arguments,
    }
    assert operation["state"] == "awaiting_confirmation"
    assert operation["kind"] == "action"
    assert operation["createdBy"] == "provider"
    assert operation["sessionId"] == live.sid
    requirement = operation["requirement"]
    assert set(requirement) == {"requirementId", "action", "actionDigest", "expiresAt"}
    assert requirement["action"] == action
    assert requirement["actionDigest"] == digest_of(action)
    assert requirement["expiresAt"].endswith("Z")
    # the default requirement lifetime is 120 s (profile §8, AIM_REQUIREMENT_TTL_S)
    expires = datetime.fromisoformat(requirement["expiresAt"])
    lifetime = expires - datetime.fromisoformat(operation["createdAt"])
    assert 119 <= lifetime.total_seconds() <= 121

    task = await get_task(rt_client, live.task_id)
    assert task["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
    version = session_of(task)["taskVersion"]
    assert version > session_of(before)["taskVersion"]
    message = task["status"]["message"]
    assert message["role"] == "ROLE_AGENT"
    assert message["parts"][0]["text"] == "Book a table"
    assert requirement_data(task) == {
        "requirementId": requirement["requirementId"],
        "operationId": operation["operationId"],
        "action": action,
        "actionDigest": digest_of(action),
        "expectedVersion": version,
    }
    session = await get_session(rt_client, live.sid)
    assert session["pendingOperationIds"] == [operation["operationId"]]
    got = await get_operation(rt_client, live.sid, operation["operationId"])
    assert got["result"]["operation"] == operation


async def test_an_action_without_confirmation_runs_at_once(rt_client, livekit):
    live = await open_session(rt_client, livekit)
    operation = await request_action(rt_client, live, confirmation="none")
    assert operation["state"] == "running"
    assert "requirement" not in operation
    task = await get_task(rt_client, live.task_id)
    assert task["status"]["state"] == "TASK_STATE_WORKING"


async def test_operation_confirm_runs_it_and_tells_the_agent(rt_client, livekit):
    live, operation, task = await asked(rt_client, livekit)
    data = requirement_data(task)
    confirmed = await confirm_operation(rt_client, live, operation, data)
    assert confirmed["result"]["operation"]["state"] == "running"
    assert confirmed["result"]["operation"]["operationId"] == operation["operationId"]
    assert confirmed["result"]["session"]["pendingOperationIds"] == [operation["operationId"]]
    after = await get_task(rt_client, live.task_id)
    assert after["status"]["state"] == "TASK_STATE_WORKING"
    assert session_of(after)["taskVersion"] > data["expectedVersion"]
    (update,) = await wait_for_data(livekit, live.room, "operation.update")
    assert update["payload"] == {"operationId": operation["operationId"], "state": "running"}
    assert update["sessionEpoch"] == 1


async def test_operation_confirm_with_wrong_digest_or_requirement_is_a_mismatch(rt_client, livekit):
    live, operation, task = await asked(rt_client, livekit)
    data = requirement_data(task)
    base = {
        "operationId": operation["operationId"],
        "requirementId": data["requirementId"],
        "actionDigest": data["actionDigest"],
    }
    wrong_digest = await interact(
        rt_client,
        live.sid,
        "operation.confirm",
        {**base, "actionDigest": digest_of({"title": "Something else"})},
    )
    assert wrong_digest["error"]["code"] == -31008, wrong_digest
    wrong_requirement = await interact(
        rt_client, live.sid, "operation.confirm", {**base, "requirementId": new_id()}
    )
    assert wrong_requirement["error"]["code"] == -31008, wrong_requirement
    still = await get_operation(rt_client, live.sid, operation["operationId"])
    assert still["result"]["operation"]["state"] == "awaiting_confirmation"
    assert (await get_task(rt_client, live.task_id))["status"]["state"] == (
        "TASK_STATE_INPUT_REQUIRED"
    )
    await quiet(0.1)
    assert data_to_agent(livekit, live.room, "operation.update") == []


async def test_operation_cancel_then_any_answer_meets_a_resolved_operation(rt_client, livekit):
    live, operation, task = await asked(rt_client, livekit)
    data = requirement_data(task)
    canceled = await interact(
        rt_client, live.sid, "operation.cancel", {"operationId": operation["operationId"]}
    )
    assert canceled["result"]["operation"]["state"] == "canceled"
    assert canceled["result"]["session"]["pendingOperationIds"] == []
    assert (await get_task(rt_client, live.task_id))["status"]["state"] == "TASK_STATE_WORKING"
    (update,) = await wait_for_data(livekit, live.room, "operation.update")
    assert update["payload"]["state"] == "canceled"
    confirm = await confirm_operation(rt_client, live, operation, data)
    assert confirm["error"]["code"] == -31003, confirm
    again = await interact(
        rt_client, live.sid, "operation.cancel", {"operationId": operation["operationId"]}
    )
    assert again["error"]["code"] == -31003, again
    later = await rpc(rt_client, "ContinueTask", continue_params(live.task_id, data))
    assert later["error"]["code"] == -31003, later


async def test_continue_task_approve_runs_the_operation_and_keeps_the_message(rt_client, livekit):
    live, operation, task = await asked(rt_client, livekit)
    data = requirement_data(task)
    message_id = new_id()
    params = continue_params(live.task_id, data, "approve", message_id=message_id)
    answered = await rpc(rt_client, "ContinueTask", params)
    result_task = answered["result"]["task"]
    assert result_task["id"] == live.task_id
    assert result_task["status"]["state"] == "TASK_STATE_WORKING"
    assert session_of(result_task)["taskVersion"] > data["expectedVersion"]
    history = result_task["history"]
    assert history[-1]["messageId"] == message_id
    assert history[-1]["role"] == "ROLE_USER"
    assert {"data": {"decision": "approve"}} in [
        {"data": p["data"]} for p in history[-1]["parts"] if "data" in p
    ]
    op = await get_operation(rt_client, live.sid, operation["operationId"])
    assert op["result"]["operation"]["state"] == "running"
    (update,) = await wait_for_data(livekit, live.room, "operation.update")
    assert update["payload"]["state"] == "running"
    # a retry of the same message replays the first answer, nothing changes again
    replay = await rpc(rt_client, "ContinueTask", params)
    assert replay == answered
    got = await get_task(rt_client, live.task_id)
    assert [m["messageId"] for m in got["history"]].count(message_id) == 1
    await quiet()
    assert len(data_to_agent(livekit, live.room, "operation.update")) == 1
    # also after the operation has finished
    _, done, _ = await update_operation(
        rt_client,
        live,
        operation["operationId"],
        "succeeded",
    )
    assert done["result"]["operation"]["state"] == "succeeded", done
    assert await rpc(rt_client, "ContinueTask", params) == answered


async def test_continue_task_history_length_applies(rt_client, livekit):
    live, _, task = await asked(rt_client, livekit)
    answered = await rpc(
        rt_client,
        "ContinueTask",
        continue_params(live.task_id, requirement_data(task), historyLength=0),
    )
    assert answered["result"]["task"]["status"]["state"] == "TASK_STATE_WORKING"
    assert not answered["result"]["task"].get("history")


async def test_continue_task_deny_cancels_the_operation(rt_client, livekit):
    live, operation, task = await asked(rt_client, livekit)
    answered = await rpc(
        rt_client, "ContinueTask", continue_params(live.task_id, requirement_data(task), "deny")
    )
    assert answered["result"]["task"]["status"]["state"] == "TASK_STATE_WORKING"
    op = await get_operation(rt_client, live.sid, operation["operationId"])
    assert op["result"]["operation"]["state"] == "canceled"
    (update,) = await wait_for_data(livekit, live.room, "operation.update")
    assert update["payload"]["state"] == "canceled"


async def test_continue_task_refusals(rt_client, livekit):
    live, operation, task = await asked(rt_client, livekit)
    data = requirement_data(task)
    tid = live.task_id

    async def refused(params, subject="alice"):
        return await rpc(rt_client, "ContinueTask", params, subject=subject)

    wrong_requirement = await refused(continue_params(tid, {**data, "requirementId": new_id()}))
    assert wrong_requirement["error"]["code"] == -31008, wrong_requirement
    wrong_digest = await refused(
        continue_params(tid, {**data, "actionDigest": digest_of({"title": "x"})})
    )
    assert wrong_digest["error"]["code"] == -31008, wrong_digest
    stale = await refused(continue_params(tid, {**data, "expectedVersion": 1}))
    assert stale["error"]["code"] == -31007, stale
    assert meta(stale)["currentVersion"] == str(data["expectedVersion"])
    no_decision = await refused(continue_params(tid, data, None))
    assert no_decision["error"]["code"] == -32602
    assert any(f.startswith("params.message.parts") for f in violations(no_decision))
    bad_decision = await refused(
        continue_params(tid, data, message={"parts": [{"data": {"decision": "maybe"}}]})
    )
    assert bad_decision["error"]["code"] == -32602
    other_task = await refused(continue_params(tid, data, message={"taskId": new_id()}))
    assert other_task["error"]["code"] == -32602, other_task
    other_context = await refused(continue_params(tid, data, message={"contextId": new_id()}))
    assert other_context["error"]["code"] == -32602, other_context
    assert "params.message.contextId" in violations(other_context)
    unknown = new_id()
    missing = await refused(continue_params(unknown, data))
    assert missing["error"]["code"] == -32001
    foreign = await refused(continue_params(tid, data), subject="bob")
    assert foreign["error"]["code"] == -32001
    assert error_info(foreign)["reason"] == error_info(missing)["reason"] == "TASK_NOT_FOUND"
    # nothing of the above changed anything
    op = await get_operation(rt_client, live.sid, operation["operationId"])
    assert op["result"]["operation"]["state"] == "awaiting_confirmation"
    now = await get_task(rt_client, tid)
    assert now["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
    assert session_of(now)["taskVersion"] == data["expectedVersion"]
    # the right answer with the contextId of the task is accepted
    ok = await refused(continue_params(tid, data, message={"contextId": live.context_id}))
    assert ok["result"]["task"]["status"]["state"] == "TASK_STATE_WORKING", ok


async def test_continue_task_on_a_task_that_waits_for_nothing_is_invalid_state(rt_client, livekit):
    live = await open_session(rt_client, livekit)
    task = await get_task(rt_client, live.task_id)
    fake = {
        "requirementId": new_id(),
        "actionDigest": digest_of({"title": "x"}),
        "expectedVersion": session_of(task)["taskVersion"],
    }
    refused = await rpc(rt_client, "ContinueTask", continue_params(live.task_id, fake))
    assert refused["error"]["code"] == -31003, refused


async def test_continue_task_and_operation_confirm_race_for_one_requirement(rt_client, livekit):
    live = await open_session(rt_client, livekit)
    asked_ids = []
    for round_ in range(6):
        operation = await request_action(rt_client, live, title=f"Action {round_}")
        asked_ids.append(operation["operationId"])
        data = requirement_data(await get_task(rt_client, live.task_id))
        assert data["operationId"] == operation["operationId"]
        calls = [
            rpc(rt_client, "ContinueTask", continue_params(live.task_id, data)),
            confirm_operation(rt_client, live, operation, data),
        ]
        outcomes = await asyncio.gather(*(calls if round_ % 2 else reversed(calls)))
        winners = [body for body in outcomes if "result" in body]
        losers = [body for body in outcomes if "error" in body]
        assert len(winners) == 1, outcomes
        assert len(losers) == 1, outcomes
        assert losers[0]["error"]["code"] in (-31003, -31008), losers[0]
        op = await get_operation(rt_client, live.sid, operation["operationId"])
        assert op["result"]["operation"]["state"] == "running"
        assert (await get_task(rt_client, live.task_id))["status"]["state"] == (
            "TASK_STATE_WORKING"
        )
    await wait_for_data(livekit, live.room, "operation.update", count=len(asked_ids))
    await quiet()
    updates = data_to_agent(livekit, live.room, "operation.update")
    assert sorted(u["payload"]["operationId"] for u in updates) == sorted(asked_ids)
    assert {u["payload"]["state"] for u in updates} == {"running"}


async def test_two_open_requirements_are_answered_one_after_the_other(rt_client, livekit):
    live = await open_session(rt_client, livekit)
    first = await request_action(rt_client, live, title="First")
    shown = await get_task(rt_client, live.task_id)
    second = await request_action(rt_client, live, title="Second")
    still = await get_task(rt_client, live.task_id)
    assert requirement_data(still)["operationId"] == first["operationId"]
    assert requirement_data(still) == requirement_data(shown)
    pending = (await get_session(rt_client, live.sid))["pendingOperationIds"]
    assert pending == [first["operationId"], second["operationId"]]
    answered = await rpc(
        rt_client, "ContinueTask", continue_params(live.task_id, requirement_data(shown))
    )
    task = answered["result"]["task"]
    # the next open requirement is shown at once, with a new version to answer it with
    assert task["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
    assert task["status"]["message"]["parts"][0]["text"] == "Second"
    next_data = requirement_data(task)
    assert next_data["operationId"] == second["operationId"]
    assert next_data["expectedVersion"] == session_of(task)["taskVersion"]
    assert next_data["expectedVersion"] > requirement_data(shown)["expectedVersion"]
    stale = await rpc(
        rt_client, "ContinueTask", continue_params(live.task_id, requirement_data(shown))
    )
    assert stale["error"]["code"] == -31008, stale
    done = await rpc(rt_client, "ContinueTask", continue_params(live.task_id, next_data, "deny"))
    assert done["result"]["task"]["status"]["state"] == "TASK_STATE_WORKING", done
    assert "message" not in done["result"]["task"]["status"]
    op = await get_operation(rt_client, live.sid, second["operationId"])
    assert op["result"]["operation"]["state"] == "canceled"


async def test_a_repeated_message_id_replays_the_first_answer(rt_client, livekit):
    live, _, task = await asked(rt_client, livekit)
    data = requirement_data(task)
    message_id = new_id()
    first = await rpc(
        rt_client, "ContinueTask", continue_params(live.task_id, data, message_id=message_id)
    )
    assert "result" in first, first
    again = await rpc(
        rt_client,
        "ContinueTask",
        continue_params(live.task_id, data, "deny", message_id=message_id),
    )
    assert again == first


async def test_an_unanswered_requirement_expires(rt_client, livekit):
    live, operation, task = await asked(rt_client, livekit, expiresInSeconds=1)
    data = requirement_data(task)
    expires = datetime.fromisoformat(operation["requirement"]["expiresAt"])
    lifetime = expires - datetime.fromisoformat(operation["createdAt"])
    assert 0.5 <= lifetime.total_seconds() <= 1.5
    expired = await wait_operation_state(rt_client, live.sid, operation["operationId"], "expired")
    assert expired["operationId"] == operation["operationId"]
    after = await get_task(rt_client, live.task_id)
    assert after["status"]["state"] == "TASK_STATE_WORKING"
    assert (await get_session(rt_client, live.sid))["pendingOperationIds"] == []
    (update,) = await wait_for_data(livekit, live.room, "operation.update")
    assert update["payload"] == {"operationId": operation["operationId"], "state": "expired"}
    late = await rpc(rt_client, "ContinueTask", continue_params(live.task_id, data))
    assert late["error"]["code"] == -31003, late
    late_confirm = await confirm_operation(rt_client, live, operation, data)
    assert late_confirm["error"]["code"] == -31003, late_confirm


async def test_continue_task_names_the_mismatching_task_id_field(rt_client, livekit):
    tid = new_id()  # the check is on the request alone: no session needed
    data = {
        "requirementId": new_id(),
        "actionDigest": digest_of({"title": "x"}),
        "expectedVersion": 1,
    }
    refused = await rpc(
        rt_client, "ContinueTask", continue_params(tid, data, message={"taskId": new_id()})
    )
    assert refused["error"]["code"] == -32602, refused
    assert "params.message.taskId" in violations(refused)


async def test_ending_the_session_cancels_the_open_requirement(rt_client, livekit):
    live, operation, task = await asked(rt_client, livekit)
    data = requirement_data(task)
    ended = await call(
        rt_client, "EndSession", sessionId=live.sid, commandId=new_id(), reason="user hung up"
    )
    assert ended["result"]["session"]["pendingOperationIds"] == []
    got = await get_operation(rt_client, live.sid, operation["operationId"])
    assert got["result"]["operation"]["state"] == "canceled"
    final = await get_task(rt_client, live.task_id)
    assert final["status"]["state"] == "TASK_STATE_COMPLETED"
    late = await rpc(rt_client, "ContinueTask", continue_params(live.task_id, data))
    assert late["error"]["code"] == -31003, late
    after = await get_task(rt_client, live.task_id)
    assert after["status"] == final["status"]
    assert session_of(after)["taskVersion"] == session_of(final)["taskVersion"]
    assert after.get("history") == final.get("history")
