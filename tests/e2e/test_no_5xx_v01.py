"""No input gives a 5xx on the A2A 0.1 endpoint either (profile §16; A2A 0.1 notes §4):
arbitrary bytes, arbitrary JSON and 0.1-shaped soup (TaskSendParams built from the 0.1 members,
with the ids of a live 0.1 task) sent to `POST /a2a/v0.1`; and the 0.1 names sent to `/a2a`.

The verdict is `test_no_5xx`'s: one JSON-RPC response object (or a stream) with HTTP 200, 401,
403 or 413, never -32603, and nothing logged as an error.
"""

from __future__ import annotations

import json
from typing import Any, Final

import httpx
import pytest
from hypothesis import given
from hypothesis import strategies as st

from realtime.a2a import v01
from tests.conftest import REALTIME, token
from tests.e2e import fuzz_helpers as fuzz
from tests.e2e.agent_operation_helpers import Live, open_session
from tests.e2e.realtime_helpers import create_part

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]

LIVE_ID: Final = "t-live"
METHODS_V01: Final = (
    *v01.METHODS,
    *v01.PUSH_METHODS,
    "message/send",
    "aim.realtime.GetSession",
    "SendMessage",
    "tasks/getHistory",
)
MEMBERS: Final = ("id", "sessionId", "message", "pushNotification", "historyLength", "metadata",
                  "role", "parts", "type", "text", "data", "file", "bytes", "uri", "mimeType",
                  "name", "acceptedOutputModes")  # fmt: skip


@pytest.fixture
async def live(rt_client: httpx.AsyncClient, livekit: Any) -> Live:
    """A live 1.0 session, and a 0.1 task `t-live` of the same principal."""
    session = await open_session(rt_client, livekit)
    message = {"role": "user", "parts": [{"type": "data", "data": create_part()["data"]}]}
    body = {"jsonrpc": "2.0", "id": 1, "method": "tasks/send",
            "params": {"id": LIVE_ID, "message": message}}  # fmt: skip
    sent = await rt_client.post(
        v01.PATH, content=json.dumps(body), headers={"Authorization": f"Bearer {token()}"}
    )
    assert sent.json()["result"]["id"] == LIVE_ID
    return session


def mostly(usual: st.SearchStrategy[Any], *rare: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """`usual` eight times in ten, else one of `rare` (`|` lets hypothesis favour any branch)."""
    return st.integers(0, 9).flatmap(lambda k: usual if k < 8 else rare[k % len(rare)])


def v01_soup(live: Live) -> st.SearchStrategy[dict[str, Any]]:
    """0.1 envelopes (`jsonrpc` optional) with params made of 0.1 members, mostly well formed
    so that they reach the params checks, the id map and the handlers."""
    ids = st.sampled_from([LIVE_ID, LIVE_ID, "t-new", live.task_id, "", "x" * 129]) | st.text(
        max_size=6
    )
    values = (
        st.sampled_from([None, -1, 0, 1, 1.5, 2**53, 2**64, "", "text", "data", "file", "user",
                         "agent", "aGk=", "not base64", {}, [], create_part()["data"]])
        | fuzz.json_values
    )  # fmt: skip
    file = st.dictionaries(st.sampled_from(["bytes", "uri", "mimeType", "name"]), values)
    part = st.fixed_dictionaries(
        {"type": st.sampled_from(["text", "data", "file", "data", "kind"])},
        optional={"text": st.just("hi") | values, "data": st.just(create_part()["data"]) | values,
                  "file": file | values, "metadata": values},
    )  # fmt: skip
    message = st.fixed_dictionaries(
        {"role": st.sampled_from(["user", "user", "agent", "ROLE_USER"]),
         "parts": st.lists(part, min_size=1, max_size=2) | values},
        optional={"metadata": values},
    )  # fmt: skip
    loose = st.dictionaries(st.sampled_from(MEMBERS) | st.text(max_size=6), values, max_size=5)
    params = st.fixed_dictionaries(
        {"id": ids},
        optional={"sessionId": st.just("s-1") | values, "message": message,
                  "pushNotification": values, "historyLength": st.integers(-1, 3) | values,
                  "metadata": values},
    )  # fmt: skip
    return st.fixed_dictionaries(
        {"jsonrpc": mostly(st.just("2.0"), st.sampled_from(["1.0", None, 2])),
         "id": st.integers(-5, 2**60) | st.text(max_size=5),
         "method": mostly(st.sampled_from(METHODS_V01), st.text(max_size=10)),
         "params": mostly(params, loose, fuzz.json_values)},
    ).map(lambda envelope: envelope if envelope["jsonrpc"] else {  # None: absent (decision 119)
        k: v for k, v in envelope.items() if k != "jsonrpc"})  # fmt: skip


def v01_bodies(live: Live) -> st.SearchStrategy[bytes]:
    """Mostly soup, else any JSON, any bytes, or soup with junk spliced in."""
    encoded = v01_soup(live).map(lambda v: json.dumps(v).encode())
    others = [
        fuzz.json_values.map(lambda v: json.dumps(v).encode()),
        st.binary(max_size=600),
        st.builds(fuzz.spoiled, encoded, st.integers(0, 10_000), fuzz.junk_bytes),
    ]
    return mostly(encoded, *others)


@fuzz.FUZZ
@given(data=st.data())
async def test_the_0_1_endpoint_answers_every_body_with_one_json_rpc_response(
    rt_client, live, caplog, data
):
    body = data.draw(v01_bodies(live), label="body")
    headers = data.draw(
        st.sampled_from(
            [
                [("Authorization", f"Bearer {token()}")],
                [("Authorization", f"Bearer {token('mallory')}"), ("Last-Event-ID", "0-1")],
                [("Authorization", f"Bearer {token()}"), ("Last-Event-ID", "yesterday"),
                 ("A2A-Extensions", REALTIME), ("A2A-Version", "1.0")],
                [("Authorization", f"Bearer {token(scopes=('a2a.tasks.read',))}")],
                [("Authorization", f"Bearer {token()}"), ("Authorization", "junk")],
                [],
            ]
        ),
        label="headers",
    )  # fmt: skip
    response = await fuzz.send(
        rt_client, v01.PATH, body, [("Content-Type", "application/json"), *headers]
    )
    fuzz.assert_rpc_answer(response, body)
    fuzz.assert_no_error_logged(caplog)


@fuzz.FUZZ
@given(data=st.data())
async def test_a2a_answers_0_1_names_with_one_json_rpc_response(rt_client, live, caplog, data):
    body = data.draw(fuzz.bodies(live, (*v01.ONLY_V01, *v01.METHODS)), label="body")
    version = data.draw(st.sampled_from([[], [("A2A-Version", "1.0")]]), label="version")
    headers = [("Content-Type", "application/json"), ("Authorization", f"Bearer {token()}")]
    response = await fuzz.send(rt_client, "/a2a", body, [*headers, *version])
    fuzz.assert_rpc_answer(response, body)
    fuzz.assert_no_error_logged(caplog)
