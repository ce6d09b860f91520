"""A service without LiveKit configured says so at once when a session is asked for, and stores
nothing (profile §14: media calls fail with -31012), instead of waiting as if LiveKit were down;
the answer says it is not retryable and names what to set, so the clients do not retry it."""

from __future__ import annotations

import time

import httpx
import pytest

from aim_realtime_client import AimClient, UnavailableError
from tests.conftest import error_info, rpc, token
from tests.e2e.operator_api_helpers import operator_json
from tests.e2e.realtime_helpers import create_session

pytestmark = pytest.mark.e2e


async def test_a_session_asked_of_a_service_without_livekit_is_31012_at_once_not_retryable(
    client, store
):
    started = time.monotonic()
    body = await create_session(client)
    took = time.monotonic() - started

    assert body["error"]["code"] == -31012
    assert "LiveKit is not configured on this service" in body["error"]["message"]
    assert "AIM_LIVEKIT_URL" in body["error"]["message"]
    assert error_info(body)["metadata"] == {
        "service": "livekit",
        "retryable": "false",  # the same request fails the same way until LiveKit is configured
        "unset": "AIM_LIVEKIT_URL,AIM_LIVEKIT_API_KEY,AIM_LIVEKIT_API_SECRET",
    }
    assert error_info(body)["reason"] == "UPSTREAM_UNAVAILABLE"
    assert took < 2.0  # not the 5 s a blocking create waits for an unreachable LiveKit
    listed = await rpc(client, "ListTasks", {})
    assert listed["result"]["tasks"] == []
    assert (await operator_json(client, "/ops/api/sessions"))["sessions"] == []


async def test_the_python_client_raises_it_at_once_without_retrying(client, store):
    sent: list[httpx.Request] = []
    waits: list[float] = []

    async def counted(request: httpx.Request) -> None:
        sent.append(request)

    async def sleep(seconds: float) -> None:
        waits.append(seconds)

    http = httpx.AsyncClient(event_hooks={"request": [counted]})
    async with AimClient(str(client.base_url), token=token("alice"), http=http, sleep=sleep) as aim:
        with pytest.raises(UnavailableError) as refused:
            await aim.create_session("alice-phone")
    await http.aclose()

    assert (refused.value.code, refused.value.retryable) == (-31012, False)
    assert refused.value.metadata["unset"].split(",") == [
        "AIM_LIVEKIT_URL", "AIM_LIVEKIT_API_KEY", "AIM_LIVEKIT_API_SECRET"
    ]  # fmt: skip
    assert "LiveKit is not configured" in refused.value.message
    assert len(sent) == 1  # one SendMessage, not one per retry
    assert waits == []


async def test_plain_text_still_gets_its_realtime_only_task(client):
    # not a session: no LiveKit needed, the profile's rejected task as before
    sent = await rpc(
        client,
        "SendMessage",
        {"message": {"messageId": "m-1", "role": "ROLE_USER", "parts": [{"text": "hello"}]}},
    )
    assert sent["result"]["task"]["status"]["state"] == "TASK_STATE_REJECTED"
