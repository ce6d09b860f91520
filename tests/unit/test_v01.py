"""The A2A 0.1 mapping (A2A 0.1 notes §2 to §6), value by value, and the 0.1 stream framing."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import msgspec
import pytest

from realtime.a2a import v01
from realtime.agent_card import build_agent_card
from realtime.errors import (
    InvalidParams,
    ServiceError,
    TaskNotCancelable,
    Unavailable,
    UnsupportedOperation,
    invalid_params,
    method_name,
    task_ref,
    task_state,
)
from realtime.methods.client_tasks import digest
from realtime.methods.streaming import Comment
from realtime.rpc.dispatch import events
from realtime.rpc.envelope import decode_envelope
from realtime.rpc.v01 import V01Codec, agent_card_v01
from realtime.settings import Settings
from tests.unit.a2a_task_states import V01_STATES

SERVER_ID = "4f1c0a52-7c1e-4c4e-9d0a-2b1f3c4d5e6f"


@pytest.mark.parametrize(
    ("state", "expected"),
    V01_STATES,
)
def test_the_seven_0_1_states(state: str, expected: str) -> None:
    assert v01.state(state) == expected


def send(**params: Any) -> v01.Request:
    return v01.decode("tasks/send", msgspec.json.encode(params))


def test_derived_message_ids_never_change() -> None:
    # a retry after an upgrade must meet the same replay: the namespace is fixed for good
    assert v01.message_id("t-42") == "6ee22972-12ce-5a92-9eee-83212f75a449"
    assert v01.message_id("t-42") != v01.message_id("T-42")


def test_requests_are_translated_to_1_0_params() -> None:
    request = send(
        id="t-42",
        sessionId="s-7",
        message={
            "role": "user",
            "parts": [
                {"type": "text", "text": "hi", "metadata": {"a": 1}},
                {"type": "data", "data": {"operation": "session.create"}},
                {"type": "file", "file": {"bytes": "aGk=", "mimeType": None, "name": None}},
                {
                    "type": "file",
                    "file": {
                        "uri": "https://x.example/a",
                        "mimeType": "image/png",
                        "name": "a.png",
                    },
                },
            ],
            "metadata": {"m": 2},
        },
        pushNotification=None,
        historyLength=2,
        metadata={"x": 1},
        acceptedOutputModes=["text"],  # outside the schema: ignored (decision 114)
    )
    assert msgspec.json.decode(v01.to_v10_params(request)) == {
        "message": {
            "messageId": v01.message_id("t-42"),
            "role": "ROLE_USER",
            "contextId": "s-7",
            "metadata": {"m": 2},
            "parts": [
                {"text": "hi", "metadata": {"a": 1}},
                {"data": {"operation": "session.create"}, "mediaType": "application/json"},
                {"raw": "aGk=", "mediaType": "application/octet-stream"},
                {"url": "https://x.example/a", "mediaType": "image/png", "filename": "a.png"},
            ],
        },
        "configuration": {"historyLength": 2},
        "metadata": {"x": 1},
    }
    assert v01.wants_history(request)
    get = v01.decode("tasks/get", b'{"id":"t","historyLength":0,"metadata":{}}')
    assert msgspec.json.decode(v01.to_v10_params(get, SERVER_ID)) == {
        "id": SERVER_ID,
        "historyLength": 0,
    }
    assert not v01.wants_history(get)
    cancel = v01.decode("tasks/cancel", b'{"id":"t","historyLength":"not in TaskIdParams"}')
    assert msgspec.json.decode(v01.to_v10_params(cancel)) == {"id": v01.PLACEHOLDER_ID}


def test_the_digest_is_of_what_the_request_says_not_how() -> None:
    message = {"role": "user", "parts": [{"type": "data", "data": {"b": 1, "a": [1, 2]}}]}
    base = digest(send(id="t", message=message))  # type: ignore[arg-type]
    reordered = {"parts": [{"data": {"a": [1, 2], "b": 1}, "type": "data"}], "role": "user"}
    same = [
        send(id="t", message=reordered),
        send(id="t", message={**message, "metadata": None}, metadata=None, sessionId=None),
        send(id="other id, same message", message=message, historyLength=5, extra=1),
    ]
    assert all(digest(s) == base for s in same)  # type: ignore[arg-type]
    different = [
        send(id="t", message=message, sessionId="s"),
        send(id="t", message=message, metadata={}),
        send(id="t", message={**message, "parts": [{"type": "text", "text": "x"}]}),
        send(id="t", message={**message, "parts": [{"type": "data", "data": {"big": 2**60}}]}),
    ]
    digests = {digest(d) for d in different}  # type: ignore[arg-type]
    assert len(digests) == len(different)
    assert base not in digests
    assert all(d.startswith("sha256:") and len(d) == 71 for d in digests)


def test_agent_messages_and_schema_violations_are_refused_with_0_1_paths() -> None:
    with pytest.raises(InvalidParams) as caught:
        send(id="t", message={"role": "agent", "parts": []})
    assert caught.value.violations[0][0] == "params.message.role"
    with pytest.raises(InvalidParams) as caught:
        send(id="t", message={"role": "user", "parts": [{"type": "file", "file": {}}]})
    assert caught.value.violations[0][0] == "params.message.parts[0].file"


def test_results_take_0_1_shapes() -> None:
    message = {"messageId": "m", "role": "ROLE_AGENT", "contextId": "c", "taskId": SERVER_ID,
               "parts": [{"text": "x", "mediaType": "text/plain"}, {"data": [1]},
                         {"raw": "aGk=", "mediaType": "text/plain", "filename": "a.txt",
                          "metadata": {"k": 1}}]}  # fmt: skip
    task = {
        "id": SERVER_ID,
        "contextId": "c",
        "status": {"state": "TASK_STATE_INPUT_REQUIRED", "message": message, "timestamp": "T"},
        "artifacts": [{"artifactId": "a", "name": "n", "parts": [{"url": "https://u"}]}],
        "history": [message],
        "metadata": {"k": "v"},
    }
    mapped = v01.task(task, "t-1")
    assert mapped == {
        "id": "t-1",
        "sessionId": "c",
        "status": {
            "state": "input-required",
            "message": {
                "role": "agent",
                "parts": [
                    {"type": "text", "text": "x"},
                    {"type": "data", "data": {"value": [1]}},
                    {"type": "file", "file": {"bytes": "aGk=", "mimeType": "text/plain",
                                              "name": "a.txt"}, "metadata": {"k": 1}},
                ],
            },
            "timestamp": "T",
        },
        "artifacts": [
            {"name": "n", "parts": [{"type": "file", "file": {"uri": "https://u"}}], "index": 0}
        ],
        "metadata": {"k": "v"},
    }  # fmt: skip
    assert v01.task(task, "t-1", history=True)["history"] == [mapped["status"]["message"]]
    assert v01.result("SendMessage", {"task": task}, "t-1", history=False) == mapped
    assert SERVER_ID not in msgspec.json.encode(mapped).decode()


def test_stream_events_put_final_on_the_last_event() -> None:
    indexes: dict[str, int] = {}
    task = {
        "id": SERVER_ID,
        "contextId": "c",
        "status": {"state": "TASK_STATE_COMPLETED", "timestamp": "T"},
        "artifacts": [{"artifactId": "b", "parts": []}, {"artifactId": "a", "parts": []}],
        "metadata": {"k": "v"},
    }
    first = v01.stream_events({"task": task}, "t-1", indexes)
    assert [("artifact" in e, e["final"]) for e in first] == [(True, False), (True, False),
                                                              (False, True)]  # fmt: skip
    assert [e["artifact"]["index"] for e in first[:2]] == [0, 1]
    assert first[2] == {"id": "t-1", "status": {"state": "completed", "timestamp": "T"},
                        "final": True, "metadata": {"k": "v"}}  # fmt: skip
    update = {
        "artifactUpdate": {
            "taskId": SERVER_ID,
            "contextId": "c",
            "append": True,
            "lastChunk": False,
            "artifact": {"artifactId": "c", "parts": []},
        }
    }
    (event,) = v01.stream_events(update, "t-1", indexes)
    assert event == {
        "id": "t-1",
        "final": False,
        "artifact": {"parts": [], "index": 2, "append": True, "lastChunk": False},
    }
    status = {"statusUpdate": {"taskId": SERVER_ID, "contextId": "c",
                               "status": {"state": "TASK_STATE_INPUT_REQUIRED"}}}  # fmt: skip
    assert v01.stream_events(status, "t-1", indexes) == [
        {"id": "t-1", "status": {"state": "input-required"}, "final": False}  # not final
    ]
    rejected = {"task": {**task, "artifacts": [], "status": {"state": "TASK_STATE_REJECTED"}}}
    assert v01.stream_events(rejected, "t-1", {})[-1]["final"] is True
    assert v01.stream_events({"message": {"role": "ROLE_AGENT", "parts": []}}, "t", {}) == []


def _v01_error(error: ServiceError, client_id: str | None = None, server_id: str | None = None):
    codec = V01Codec("https://aim.example")
    codec.ids.client, codec.ids.server = client_id, server_id
    return codec.error(error)


def test_errors_name_the_0_1_id_states_and_paths() -> None:
    task, state = task_ref(SERVER_ID), task_state("TASK_STATE_CANCELED")
    not_cancelable = TaskNotCancelable(
        ("Task ", task, " is ", state, " and can no longer be canceled."),
        details={"taskId": task, "state": state},
    )
    assert not_cancelable.message == (
        f"Task {SERVER_ID} is TASK_STATE_CANCELED and can no longer be canceled."
    )
    mapped = _v01_error(not_cancelable, client_id="t-1", server_id=SERVER_ID)
    assert mapped == {
        "code": -32002,
        "message": "Task t-1 is canceled and can no longer be canceled.",
        "data": {
            "reason": "TASK_NOT_CANCELABLE",
            "domain": "a2a-protocol.org",
            "metadata": {"taskId": "t-1", "state": "canceled"},
        },
    }
    over = UnsupportedOperation(
        ("Task ", task, " is over. Read it with ", method_name("GetTask"), ".")
    )
    assert _v01_error(over, client_id="t", server_id=SERVER_ID)["message"] == (
        "Task t is over. Read it with tasks/get."
    )
    # another task's id stays as it is
    assert _v01_error(over, client_id="t", server_id="other")["message"] == (
        f"Task {SERVER_ID} is over. Read it with tasks/get."
    )
    # a client id is never rewritten, even one that looks like a state, a method or a path
    for client_id in ("GetTask", "TASK_STATE_FAILED", "params.message.contextId"):
        error = _v01_error(over, client_id=client_id, server_id=SERVER_ID)
        assert error["message"] == f"Task {client_id} is over. Read it with tasks/get."
    # the service's own hints about 1.0 methods keep their names
    hint = UnsupportedOperation("SendMessage is an A2A 1.0 method")
    assert _v01_error(hint, client_id="t")["message"] == hint.message
    for path, renamed in [
        ("params.message.contextId", "params.sessionId"),
        ("params.configuration.historyLength", "params.historyLength"),
        ("params.message.parts[3].raw", "params.message.parts[3].file.bytes"),
        ("params.message.parts[0].url", "params.message.parts[0].file.uri"),
        ("params.message.parts[1].mediaType", "params.message.parts[1].file.mimeType"),
        ("params.message.parts[2].filename", "params.message.parts[2].file.name"),
        ("params.message.parts[0].data.recording", "params.message.parts[0].data.recording"),
        ("params.message.parts[0].file.bytes", "params.message.parts[0].file.bytes"),
        ("Last-Event-ID", "Last-Event-ID"),
    ]:
        error = _v01_error(invalid_params(path, "bad"), client_id="t")
        assert error["message"] == f"Invalid params: {renamed}: bad"
        assert error["data"]["fieldViolations"] == [{"field": renamed, "description": "bad"}]
    unavailable = _v01_error(Unavailable("retry", service="livekit"))
    assert unavailable["data"]["metadata"] == {"service": "livekit", "retryable": "true"}
    assert "fieldViolations" not in unavailable["data"]


def test_the_0_1_card_is_derived_from_the_1_0_card() -> None:
    settings = Settings(public_base_url="https://aim.example")
    v10 = build_agent_card(settings)
    card = agent_card_v01(v10, settings)
    assert card["url"] == "https://aim.example/a2a/v0.1"
    assert "A2A 1.0 at https://aim.example/a2a." in card["description"]
    assert (
        "a2a.invoke (tasks/send, tasks/sendSubscribe, tasks/pushNotification/set); "
        "a2a.tasks.read (tasks/get, tasks/resubscribe, tasks/pushNotification/get); "
        "a2a.tasks.cancel (tasks/cancel)."
    ) in card["description"]
    assert set(card) == {
        "name",
        "description",
        "url",
        "version",
        "capabilities",
        "authentication",
        "defaultInputModes",
        "defaultOutputModes",
        "skills",
    }
    assert card["skills"][0]["inputModes"] == ["application/json"]
    assert "credentials" not in card["authentication"]


def test_an_absent_jsonrpc_reads_as_2_0_only_where_asked() -> None:
    body = b'{"id":1,"method":"tasks/get","params":{"id":"t"}}'
    envelope, error, _ = decode_envelope(body, jsonrpc_optional=True)
    assert error is None
    assert envelope is not None
    assert envelope.method == "tasks/get"
    _, error, _ = decode_envelope(body)
    assert error is not None
    assert error.violations[0][0] == "jsonrpc"
    _, error, _ = decode_envelope(b'{"jsonrpc":"1.0","id":1,"method":"m","params":{}}',
                                  jsonrpc_optional=True)  # fmt: skip
    assert error is not None


class FailingStream:
    """Two frames, then the store fails (as a resumed stream may while reading)."""

    async def frames(self) -> AsyncIterator[Any]:
        task = {"id": SERVER_ID, "contextId": "c", "status": {"state": "TASK_STATE_WORKING"},
                "artifacts": [{"artifactId": "a", "parts": []}]}  # fmt: skip
        yield "1-0", {"task": task}
        yield Comment.KEEPALIVE
        raise Unavailable(
            ("Redis is down while streaming ", task_ref(SERVER_ID), "."), service="redis"
        )


async def test_an_error_inside_a_0_1_stream_is_a_plain_data_event() -> None:
    codec = V01Codec("https://aim.example")
    codec.ids.client, codec.ids.server = "t-1", SERVER_ID
    sent = [event async for event in events(codec, FailingStream(), 7)]  # type: ignore[arg-type]
    assert [(e.id, e.event) for e in sent] == [(None, None), ("1-0", None), (None, None),
                                               (None, None)]  # fmt: skip
    assert sent[2].data is None  # the heartbeat
    assert [msgspec.json.decode(e.data)["result"]["final"] for e in sent[:2]] == [False, False]
    last = msgspec.json.decode(sent[3].data)
    assert last["id"] == 7
    assert last["error"]["code"] == -31012
    assert last["error"]["message"] == "Redis is down while streaming t-1."
    assert last["error"]["data"]["reason"] == "UPSTREAM_UNAVAILABLE"
