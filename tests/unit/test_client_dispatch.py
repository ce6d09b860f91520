"""The agent helper's reading of what LiveKit hands the worker: the dispatch metadata, checked
member by member, and the service's data messages, each taken once."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from aim_realtime_client import AgentMessageError, AgentMetadataError, AgentSession, OperationUpdate
from aim_realtime_client.dispatch import TOPIC, Inbox, InteractionMessage, LeaveNow, parse_metadata

GOOD = {
    "sessionId": "6410da40-7d39-5c99-b5c9-8d9050454e4b",
    "sessionEpoch": 1,
    "taskId": "d7675d45-4c80-4e20-9518-bec95718f7fd",
    "retention": {"transcript": "on", "summary": "off"},
    "requested": {"userVideoSources": [], "agentVideoSources": [], "interactions": ["text"]},
    "providerUrl": "https://aim.example/provider",
    "providerToken": "eyJh.eyJz.c2ln",
}


def message(kind: str, command_id: str, **payload) -> bytes:
    body = {"type": kind, "commandId": command_id, "sessionEpoch": 1, "payload": payload}
    return json.dumps(body).encode()


async def test_the_three_spellings_of_the_metadata_give_the_same_session():
    text = json.dumps(GOOD)
    parsed = [parse_metadata(x) for x in (text, text.encode(), GOOD)]
    assert parsed[0] == parsed[1] == parsed[2]
    agent = AgentSession.from_metadata(text)
    assert (agent.session_id, agent.epoch, agent.provider_url) == (
        GOOD["sessionId"], 1, "https://aim.example/provider")  # fmt: skip
    assert "eyJh" not in repr(agent) + repr(agent.metadata)
    await agent.aclose()


@pytest.mark.parametrize(
    ("raw", "problem"),
    [
        ("", "empty: this job was not dispatched by the AIM realtime service"),
        (b"\xff", "not UTF-8 text"),
        ("{not json", "not JSON"),
        ("[1]", "a JSON object was expected, not list"),
        ({**GOOD, "sessionId": "s-1"}, "sessionId: must be a UUID, got 's-1'"),
        ({**GOOD, "sessionEpoch": True}, "sessionEpoch: must be an integer of at least 1"),
        ({**GOOD, "sessionEpoch": 0}, "sessionEpoch: must be an integer of at least 1"),
        ({**GOOD, "retention": {"transcript": "yes"}}, "retention: must be"),
        ({**GOOD, "providerUrl": "ftp://x"}, "providerUrl: must be an http(s) URL"),
        ({**GOOD, "providerToken": ""}, "providerToken: must be a JWT"),
        ({k: v for k, v in GOOD.items() if k != "taskId"}, "taskId: missing"),
        ({**GOOD, "agentGeneration": 0}, "agentGeneration: must be an integer of at least 1"),
        ({**GOOD, "successorOf": "1"}, "successorOf: must be an integer of at least 1"),
    ],
)
def test_wrong_metadata_is_refused_naming_what_is_wrong(raw, problem):
    with pytest.raises(AgentMetadataError) as refused:
        parse_metadata(raw)
    assert len(refused.value.problems) == 1
    assert refused.value.problems[0].startswith(problem), refused.value.problems
    assert str(refused.value).startswith("dispatch metadata: ")


def test_interactions_are_taken_once_by_command_id():
    inbox = Inbox()
    said = message("input.text", "c1", text="hi")
    assert inbox.receive(said, TOPIC) == InteractionMessage("input.text", "c1", 1, {"text": "hi"})
    assert inbox.receive(said, TOPIC) is None
    assert inbox.receive(message("visual.select", "c2", targetId="t"), TOPIC) is not None
    assert inbox.receive(said, "lk.chat") is None
    assert inbox.receive(said, None) is None


def test_operation_updates_are_taken_once_by_operation_and_state():
    inbox = Inbox()
    live = message("operation.update", "c9", operationId="op", state="running")
    told = inbox.receive(live, TOPIC)
    assert isinstance(told, OperationUpdate)
    assert (told.operation_id, told.state, told.command_id) == ("op", "running", "c9")
    on_join = message("operation.update", "sync:op:running", operationId="op", state="running")
    assert inbox.receive(on_join, TOPIC) is None  # the same news under another id
    later = message("operation.update", "c10", operationId="op", state="canceled")
    assert inbox.receive(later, TOPIC) is not None


@given(st.lists(st.tuples(st.sampled_from(["input.text", "operation.update"]),
                          st.sampled_from(["a", "b", "c"]),
                          st.sampled_from(["running", "canceled"])), max_size=30))  # fmt: skip
def test_any_sequence_with_repeats_gives_each_message_once(sent):
    inbox = Inbox()
    taken = []
    for kind, key, state in sent:
        payload = {"operationId": key, "state": state} if kind == "operation.update" else {}
        command = f"{kind}:{key}:{state}" if kind == "operation.update" else key
        got = inbox.receive(message(kind, command, **payload), TOPIC)
        if got is not None:
            taken.append((kind, key, state if kind == "operation.update" else ""))
    wanted = {(k, key, s if k == "operation.update" else "") for k, key, s in sent}
    assert sorted(taken) == sorted(wanted)


def test_a_successor_knows_its_generation_and_whom_it_follows():
    assert (parse_metadata(GOOD).agent_generation, parse_metadata(GOOD).successor_of) == (1, None)
    successor = parse_metadata({**GOOD, "agentGeneration": 3, "successorOf": 2})
    assert (successor.agent_generation, successor.successor_of) == (3, 2)


def test_leave_now_is_its_own_message_taken_once():
    inbox = Inbox()
    leave = message("agent.leave", "leave:1", generation=1, successorGeneration=2)
    assert inbox.receive(leave, TOPIC) == LeaveNow(1, 2, "leave:1", 1)
    assert inbox.receive(leave, TOPIC) is None


def test_an_interaction_handed_over_and_also_received_is_taken_once():
    inbox = Inbox()
    handed = InteractionMessage("input.text", "c-1", 1, {"text": "hi"})
    assert not inbox.taken(handed)
    assert inbox.receive(message("input.text", "c-1", text="hi"), TOPIC) is None
    assert inbox.taken(handed)


@pytest.mark.parametrize(
    "payload",
    [b"not json", b"[]", message("operation.update", "c", operationId="op"),
     message("agent.leave", "leave:1", generation=1),
     json.dumps({"type": "input.text", "payload": {}}).encode()],
)  # fmt: skip
def test_a_message_that_is_not_the_services_is_an_error(payload):
    with pytest.raises(AgentMessageError):
        Inbox().receive(payload, TOPIC)
