"""The A2A 0.3 mapping tables (A2A notes §5), value by value."""

from __future__ import annotations

import msgspec
import pytest

from realtime.a2a import v03
from realtime.errors import InternalError, invalid_params
from realtime.rpc.errors import error_object
from tests.unit.a2a_task_states import V03_STATES


@pytest.mark.parametrize(
    ("state", "expected"),
    V03_STATES,
)
def test_task_states_are_kebab_case(state: str, expected: str) -> None:
    assert v03.state(state) == expected


def test_parts_go_back_with_kinds() -> None:
    assert v03.part({"text": "hi", "metadata": {"a": 1}}) == {
        "kind": "text",
        "text": "hi",
        "metadata": {"a": 1},
    }
    assert v03.part({"data": [1, 2]}) == {"kind": "data", "data": {"value": [1, 2]}}
    assert v03.part({"raw": "aGk=", "mediaType": "text/plain", "filename": "a.txt"}) == {
        "kind": "file",
        "file": {"bytes": "aGk=", "mimeType": "text/plain", "name": "a.txt"},
    }
    assert v03.part({"url": "https://x.example/a"}) == {
        "kind": "file",
        "file": {"uri": "https://x.example/a"},
    }


def test_requests_are_translated_to_1_0_params() -> None:
    raw = msgspec.json.encode(
        {
            "message": {
                "kind": "message",
                "messageId": "m1",
                "role": "user",
                "contextId": "c1",
                "parts": [
                    {"kind": "file", "file": {"bytes": "aGk="}},
                    {"kind": "data", "data": {"k": 1}, "metadata": {"m": 2}},
                ],
            },
            "configuration": {"blocking": False, "historyLength": 2},
            "metadata": {"x": 1},
        }
    )
    assert msgspec.json.decode(v03.to_v10_params("message/send", raw)) == {
        "message": {
            "messageId": "m1",
            "role": "ROLE_USER",
            "contextId": "c1",
            "parts": [
                {"raw": "aGk=", "mediaType": "application/octet-stream"},
                {"data": {"k": 1}, "mediaType": "application/json", "metadata": {"m": 2}},
            ],
        },
        "configuration": {"historyLength": 2, "returnImmediately": True},
        "metadata": {"x": 1},
    }
    get = v03.to_v10_params("tasks/get", b'{"id":"t","historyLength":0,"metadata":{}}')
    assert msgspec.json.decode(get) == {"id": "t", "historyLength": 0}


def test_stream_results_and_errors_take_0_3_shapes() -> None:
    message = {"messageId": "m", "role": "ROLE_AGENT", "parts": [{"text": "x"}]}
    assert v03.stream_result({"message": message}) == {
        "kind": "message",
        "messageId": "m",
        "role": "agent",
        "parts": [{"kind": "text", "text": "x"}],
    }
    assert v03.result("SendMessage", {"message": message})["kind"] == "message"
    task = {
        "id": "t",
        "contextId": "c",
        "status": {"state": "TASK_STATE_WORKING"},
        "artifacts": [{"artifactId": "a", "parts": [{"text": "y"}]}],
    }
    assert v03.result("GetTask", task)["artifacts"] == [
        {"artifactId": "a", "parts": [{"kind": "text", "text": "y"}]}
    ]
    error = v03.error(error_object(invalid_params("params.id", "bad")))
    assert error["data"]["fieldViolations"] == [{"field": "params.id", "description": "bad"}]
    assert "metadata" not in v03.error(error_object(InternalError("oops")))["data"]


def test_the_0_3_words_name_0_3_methods_states_and_file_members() -> None:
    words = v03.WORDS
    assert words.method("GetTask") == "tasks/get"
    assert words.method("aim.realtime.JoinSession") == "aim.realtime.JoinSession"
    assert words.state("TASK_STATE_INPUT_REQUIRED") == "input-required"
    assert words.field("params.message.parts[2].filename") == "params.message.parts[2].file.name"
    for same in ("params.message.parts[x].raw", "params.raw", "params.message.parts[0].text"):
        assert words.field(same) == same
    assert words.task("t-1") == "t-1"
