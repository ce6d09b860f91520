"""No input gives a 5xx (profile §16): arbitrary bytes, arbitrary JSON and JSON-RPC-shaped soup
sent to each POST endpoint of a running service, with a live session to aim at.

The verdict a client may see: on `/a2a` and `/provider` one JSON-RPC response object with HTTP
200, 401, 403 or 413 and never -32603; on `/livekit/webhook` 200, 400, 401 or 413 with a JSON
body. The service logs no traceback and no error line for any of it.

`AIM_FUZZ_EXAMPLES` (default 300 per test) runs more examples locally.
"""

from __future__ import annotations

import base64
import hashlib
import json
import uuid
from datetime import timedelta
from typing import Any, Final

import httpx
import pytest
from hypothesis import given
from hypothesis import strategies as st
from livekit import api

from realtime.a2a import v03
from realtime.livekit_dev.standin import webhook_headers
from realtime.methods.provider import PROVIDER_METHODS
from realtime.rpc.registry import METHODS
from tests.conftest import LIVEKIT_KEY, LIVEKIT_SECRET, REALTIME, token
from tests.e2e.agent_operation_helpers import Live, open_session
from tests.e2e.fuzz_helpers import (
    FUZZ,
    assert_no_error_logged,
    assert_rpc_answer,
    bodies,
    json_values,
    junk_bytes,
    send,
    spoiled,
)

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]

WEBHOOK_STATUSES: Final = frozenset({200, 400, 401, 413})
ALL_METHODS: Final = (*METHODS, *v03.METHODS, *(f"{m}x" for m in METHODS))
LIVEKIT_EVENTS: Final = (
    "room_started", "room_finished", "participant_joined", "participant_left",
    "participant_connection_aborted", "track_published", "track_unpublished",
    "egress_started", "ingress_started", "agent_job_started", "something_new",
)  # fmt: skip


@pytest.fixture
async def live(rt_client: httpx.AsyncClient, livekit: Any) -> Live:
    return await open_session(rt_client, livekit)


@FUZZ
@given(data=st.data())
async def test_a2a_answers_every_body_with_one_json_rpc_response(rt_client, live, caplog, data):
    body = data.draw(bodies(live, ALL_METHODS), label="body")
    headers = data.draw(
        st.sampled_from(
            [
                [("Authorization", f"Bearer {token()}"), ("A2A-Version", "1.0"),
                 ("A2A-Extensions", REALTIME)],
                [("Authorization", f"Bearer {token()}")],
                [("Authorization", f"Bearer {token()}"), ("Authorization", "junk"),
                 ("A2A-Version", "1.0")],
                [("A2A-Version", "1.0"), ("A2A-Version", "0.3")],
                [],
            ]
        ),
        label="headers",
    )  # fmt: skip
    response = await send(rt_client, "/a2a", body, [("Content-Type", "application/json"), *headers])
    assert_rpc_answer(response, body)
    assert_no_error_logged(caplog)


@FUZZ
@given(data=st.data())
async def test_provider_answers_every_body_with_one_json_rpc_response(
    rt_client, live, caplog, data
):
    body = data.draw(bodies(live, tuple(PROVIDER_METHODS)), label="body")
    authorization = data.draw(
        st.sampled_from([f"Bearer {live.provider_token}", f"Bearer {token()}", "", "Bearer x,y"]),
        label="authorization",
    )
    headers = [("Content-Type", "application/json")]
    if authorization:
        headers.append(("Authorization", authorization))
    response = await send(rt_client, "/provider", body, headers)
    assert_rpc_answer(response, body)
    assert_no_error_logged(caplog)


def signed(body: bytes) -> str:
    """The Authorization value LiveKit would send with `body`."""
    digest = base64.b64encode(hashlib.sha256(body).digest()).decode()
    grant = api.AccessToken(LIVEKIT_KEY, LIVEKIT_SECRET).with_sha256(digest)
    return grant.with_ttl(timedelta(minutes=5)).to_jwt()


def webhook_documents(live: Live) -> st.SearchStrategy[dict[str, Any]]:
    """Webhook JSON as LiveKit shapes it, with members LiveKit may send and we may not know."""
    rooms = st.sampled_from(
        [live.room, f"aim-{live.sid}-e2", f"aim-{live.sid}-e0", f"aim-{live.sid}-e" + "9" * 5000,
         f"aim-{uuid.uuid4()}-e1", "lobby", ""]
    ) | st.text(max_size=20)  # fmt: skip
    identities = st.sampled_from([live.phone, "agent-1", "stranger", ""]) | st.text(max_size=10)
    metadata = st.sampled_from(
        ['{"sessionEpoch":1}', '{"sessionEpoch":' + "9" * 5000 + "}", "[" * 3000, "{}", "x"]
    ) | json_values.map(json.dumps)
    participant = st.fixed_dictionaries(
        {"identity": identities, "metadata": metadata},
        optional={"kind": st.sampled_from(["AGENT", "STANDARD", "SIP", 7, 99]),
                  "state": st.sampled_from(["ACTIVE", "DISCONNECTED", 42])},
    )  # fmt: skip
    track = st.fixed_dictionaries(
        {"sid": st.sampled_from(["TR_1", ""])},
        optional={"source": st.sampled_from(["CAMERA", "MICROPHONE", "SCREEN_SHARE", 99, -1]),
                  "type": st.sampled_from(["AUDIO", "VIDEO", 12])},
    )  # fmt: skip
    return st.fixed_dictionaries(
        {"event": st.sampled_from(LIVEKIT_EVENTS) | st.text(max_size=10),
         "id": st.text(max_size=20),
         "room": st.fixed_dictionaries({"name": rooms})},
        optional={"participant": participant, "track": track,
                  "createdAt": st.sampled_from(["1700000000", "-1", "9" * 30, 5]),
                  "numDropped": st.integers(0, 10)},
    )  # fmt: skip


@FUZZ
@given(data=st.data())
async def test_webhook_answers_every_body_without_a_5xx(rt_client, live, caplog, data):
    """Signed or not, understood or not: LiveKit must never see a 5xx it would retry for ever."""
    document = data.draw(webhook_documents(live), label="document")
    body = data.draw(
        st.just(json.dumps(document).encode())
        | st.builds(spoiled, st.just(json.dumps(document).encode()), st.integers(0, 9999),
                    junk_bytes)
        | st.binary(max_size=300),
        label="body",
    )  # fmt: skip
    authorization = data.draw(st.sampled_from(["signed", "none", "junk", "twice"]), label="auth")
    headers = {
        "signed": webhook_headers(signed(body)),
        "none": {},
        "junk": webhook_headers("x.y.z"),
    }
    sent = list(headers.get(authorization, {}).items())
    if authorization == "twice":
        sent = [("Authorization", signed(body)), ("Authorization", signed(body))]
    response = await rt_client.post("/livekit/webhook", content=body, headers=sent)
    assert response.status_code in WEBHOOK_STATUSES, (response.status_code, body[:300])
    assert isinstance(response.json(), dict)
    if authorization == "signed" and response.status_code == 200:
        assert response.json()["status"] in ("applied", "ignored", "duplicate")
    assert_no_error_logged(caplog)
