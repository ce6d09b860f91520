"""Handoffs per session per minute are bounded (AIM_MAX_HANDOFFS_PER_MINUTE): past the bound a
JoinSession that would hand off answers -31011 with Retry-After and stores nothing, and the same
command goes through once the minute has passed on the app's clock. A real Redis, the LiveKit
stand-in, the service on a socket."""

from __future__ import annotations

from typing import Any

import httpx
import msgspec
import pytest

from realtime.store.redis_client import RedisClient
from tests.clocks import Clock
from tests.conftest import error_info, headers, service
from tests.e2e.agent_operation_helpers import open_session
from tests.e2e.operator_api_helpers import timeline_of
from tests.e2e.realtime_helpers import call, new_id, register

pytestmark = pytest.mark.e2e

BOUND = 2


async def join(
    http: httpx.AsyncClient, sid: str, epoch: int, endpoint: str, command_id: str
) -> httpx.Response:
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "aim.realtime.JoinSession",
        "params": {
            "sessionId": sid,
            "sessionEpoch": epoch,
            "endpointId": endpoint,
            "commandId": command_id,
        },
    }
    return await http.post(
        "/a2a", content=msgspec.json.encode(body), headers=headers(realtime=True)
    )


async def endpoint_of(http: httpx.AsyncClient, sid: str, epoch: int, key: str) -> str:
    registered = await register(http, sid, epoch, key)
    return str(registered["result"]["endpoint"]["endpointId"])


async def session(http: httpx.AsyncClient, sid: str) -> dict[str, Any]:
    found: dict[str, Any] = (await call(http, "GetSession", sessionId=sid))["result"]["session"]
    return found


async def test_handoffs_past_the_bound_answer_limit_exceeded_until_the_minute_passed(
    livekit, store: RedisClient
) -> None:
    clock = Clock()
    async with service(livekit, store, clock=clock, max_handoffs_per_minute=BOUND) as http:
        live = await open_session(http, livekit)  # the phone joined at epoch 1
        epoch = 1
        for key in ("laptop", "phone")[:BOUND]:  # the bound's handoffs, one after another
            endpoint = await endpoint_of(http, live.sid, epoch, key)
            handed = await join(http, live.sid, epoch, endpoint, new_id())
            assert "result" in handed.json(), handed.json()
            epoch = handed.json()["result"]["session"]["sessionEpoch"]
        assert epoch == 1 + BOUND
        clock.advance(15)

        laptop = await endpoint_of(http, live.sid, epoch, "laptop")
        before = await session(http, live.sid)
        command = new_id()
        refused = await join(http, live.sid, epoch, laptop, command)
        answer = refused.json()
        assert answer["error"]["code"] == -31011, answer
        info = error_info(answer)
        assert info["reason"] == "LIMIT_EXCEEDED"
        assert info["metadata"]["limit"] == "handoffs_per_minute"
        wait = int(refused.headers["Retry-After"])
        assert 44 <= wait <= 46  # the first handoff leaves the minute 45 s from now
        assert info["metadata"]["retryAfterSeconds"] == str(wait)
        assert f"at most {BOUND} times a minute" in answer["error"]["message"]
        # nothing stored: the session as it was, no outcome under the command's id
        after = await session(http, live.sid)
        assert (after["sessionEpoch"], after["version"]) == (epoch, before["version"])
        assert after["activeEndpointId"] == before["activeEndpointId"]
        timeline = await timeline_of(http, live.sid)
        assert [e for e in timeline if e.get("commandId") == command] == []
        unknown = await call(http, "GetCommand", sessionId=live.sid, commandId=command)
        assert unknown["error"]["code"] == -31005

        clock.advance(wait)  # on the app's clock, the minute has passed
        allowed = await join(http, live.sid, epoch, laptop, command)
        result = allowed.json()["result"]
        assert result["session"]["sessionEpoch"] == epoch + 1
        assert result["session"]["activeEndpointId"] == laptop
