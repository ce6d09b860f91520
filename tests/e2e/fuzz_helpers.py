"""Hypothesis strategies and verdicts for sending arbitrary input to a running service: bytes,
JSON and JSON-RPC-shaped soup aimed at a live session, and what a client may see in answer (one
JSON-RPC response object with HTTP 200, 401, 403 or 413, never -32603; nothing logged as an error).

`AIM_FUZZ_EXAMPLES` (default 300 per test) runs more examples locally.
"""

from __future__ import annotations

import json
import logging
import os
import uuid
from typing import Any, Final

import httpx
import pytest
from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st

from tests.e2e.agent_operation_helpers import Live

EXAMPLES: Final = int(os.environ.get("AIM_FUZZ_EXAMPLES", "300"))
FUZZ: Final = settings(
    max_examples=EXAMPLES,
    derandomize=True,
    database=None,
    deadline=None,
    # one service and one live session serve every example; shrinking over HTTP takes long and
    # a failing body is printed as it is
    phases=(Phase.explicit, Phase.generate),
    suppress_health_check=[
        HealthCheck.function_scoped_fixture,
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
    ],
)
RPC_STATUSES: Final = frozenset({200, 401, 403, 413})
PARAM_NAMES: Final = (
    "id", "sessionId", "sessionEpoch", "commandId", "endpointId", "clientEndpointKey",
    "capabilities", "type", "payload", "message", "historyLength", "pageSize", "pageToken",
    "operationId", "state", "requestId", "itemId", "role", "text", "action", "status",
    "contextId", "configuration", "metadata", "returnImmediately", "reason", "parts",
)  # fmt: skip

scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=40)
)
json_values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4)
    ),
    max_leaves=20,
)


def interesting(live: Live) -> st.SearchStrategy[Any]:
    """Values that reach further than random ones: the live session's own ids and epochs."""
    return st.sampled_from(
        [live.sid, live.task_id, live.phone, live.context_id, str(uuid.uuid4()), 1, 2, 0, -1,
         2**53, 2**64, "1" * 5000, "input.text", "media.request", "camera", "listening",
         {"text": "hi"}, {"source": "camera"}, [], {}]
    ) | json_values  # fmt: skip


def soup(live: Live, methods: tuple[str, ...]) -> st.SearchStrategy[dict[str, Any]]:
    """JSON-RPC envelopes naming real methods, with params built from real member names."""
    params = st.dictionaries(
        st.sampled_from(PARAM_NAMES) | st.text(max_size=8), interesting(live), max_size=7
    )
    return st.fixed_dictionaries(
        {
            "jsonrpc": st.sampled_from(["2.0", "2.0", "1.0", 2]),
            "id": st.integers(-5, 2**60) | st.text(max_size=5) | st.none(),
            "method": st.sampled_from(methods) | st.text(max_size=10),
            "params": params | json_values,
        }
    )


def deep(levels: int, inner: bytes = b"1") -> bytes:
    return b"[" * levels + inner + b"]" * levels


def spoiled(document: bytes, cut: int, junk: bytes) -> bytes:
    """`document` with `junk` (invalid UTF-8, stray brackets, a deep array…) spliced in."""
    at = cut % (len(document) + 1)
    return document[:at] + junk + document[at:]


junk_bytes = st.sampled_from([b"\xff", b"\xc3", b"\xed\xa0\x80", b"\x00", b"[", b"}", b'"',
                              b"\\u0000", deep(70), deep(2000), b"1e400", b"9" * 5000])  # fmt: skip


def bodies(live: Live, methods: tuple[str, ...]) -> st.SearchStrategy[bytes]:
    encoded = (soup(live, methods) | json_values).map(lambda v: json.dumps(v).encode())
    return (
        st.binary(max_size=600)
        | encoded
        | st.builds(spoiled, encoded, st.integers(0, 10_000), junk_bytes)
    )


def assert_rpc_answer(response: httpx.Response, body: bytes) -> None:
    assert response.status_code in RPC_STATUSES, (response.status_code, body[:300])
    if response.headers.get("content-type", "").startswith("text/event-stream"):
        return  # a stream opened: a valid call, answered 200
    answer = response.json()
    assert isinstance(answer, dict), (answer, body[:300])
    assert answer.get("jsonrpc") == "2.0"
    assert ("result" in answer) != ("error" in answer), (answer, body[:300])
    if "error" in answer:
        assert answer["error"]["code"] != -32603, (answer, body[:300])


async def send(client: httpx.AsyncClient, path: str, body: bytes, headers: list) -> httpx.Response:
    async with client.stream("POST", path, content=body, headers=headers) as response:
        if response.headers.get("content-type", "").startswith("text/event-stream"):
            return response  # not read to its end: streams close when the session does
        await response.aread()
        return response


def assert_no_error_logged(caplog: pytest.LogCaptureFixture) -> None:
    loud = [r for r in caplog.records if r.exc_info or r.levelno >= logging.ERROR]
    assert not loud, [r.getMessage() for r in loud]
