"""`aim-realtime check` and `serve` on Redis Cluster, configured as an operator configures them
(AIM_REDIS_URL of one node and AIM_REDIS_CLUSTER=1): a whole session streamed over SSE from the
polling hub, its room deleted by the worker loop that `serve` runs."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from realtime.environment import without_credentials
from realtime.store import keys
from realtime.store.redis_client import RedisClient
from tests.cli_processes import run_cli, serving
from tests.cluster import only_on_cluster
from tests.conftest import LIVEKIT_KEY, LIVEKIT_SECRET, TEST_SECRET
from tests.e2e.realtime_helpers import call, create_part
from tests.e2e.sse_helpers import create_message, stream
from tests.e2e.streaming_helpers import (
    JOURNEY,
    condensed,
    journey_to_the_end,
    session_state,
)

pytestmark = [pytest.mark.redis, pytest.mark.e2e, pytest.mark.slow, only_on_cluster]


def test_check_reaches_the_cluster(tmp_path: Path, redis_url: str) -> None:
    result = run_cli("check", cwd=tmp_path, AIM_REDIS_URL=redis_url, AIM_REDIS_CLUSTER="1")

    assert result.returncode == 0, result.stdout + result.stderr
    assert f"redis: {without_credentials(redis_url)} (AIM_REDIS_URL): reachable" in result.stdout


async def test_serve_on_the_cluster_streams_a_session_and_its_worker_ends_it(
    tmp_path: Path, redis_url: str, store: RedisClient, livekit: Any
) -> None:
    with serving(
        tmp_path,
        AIM_REDIS_URL=redis_url,
        AIM_REDIS_CLUSTER="1",
        AIM_AUTH_HS256_SECRET=TEST_SECRET,
        AIM_LIVEKIT_URL=livekit.ws_url,
        AIM_LIVEKIT_API_KEY=LIVEKIT_KEY,
        AIM_LIVEKIT_API_SECRET=LIVEKIT_SECRET,
    ) as svc:
        await asyncio.to_thread(svc.wait_until_ready)
        async with httpx.AsyncClient(base_url=svc.base_url, timeout=30.0) as client:
            async with stream(
                client, "SendStreamingMessage", create_message(create_part()), realtime=True
            ) as reader:
                first = await reader.next_data()
                assert first is not None, svc.output()
                session_id = first.result["task"]["metadata"]["urn:aim:a2a:realtime:v1"][
                    "sessionId"
                ]
                seen = await journey_to_the_end(client, reader, first, session_id)
                assert reader.closed
            assert condensed([session_state(event.result) for event in seen]) == JOURNEY

            # the worker loop deletes the room, and the session moves on to `ended`
            deadline = time.monotonic() + 15
            while True:
                got = await call(client, "GetSession", sessionId=session_id)
                if got["result"]["session"]["state"] == "ended":
                    break
                assert time.monotonic() < deadline, (got, svc.output())
                await asyncio.sleep(0.1)
        await asyncio.to_thread(svc.terminate)

    room = f"aim-{session_id}-e1"
    assert [c.code for c in livekit.calls_to("DeleteRoom") if c.request.room == room] == ["ok"]
    assert room not in livekit.rooms
    # the service wrote to the cluster the test reads
    assert await store.client.hlen(keys.outbox_key(session_id)) == 0
    assert await store.client.exists(keys.session_key(session_id)) == 1
    assert f"redis: {redis_url} (AIM_REDIS_URL)" in svc.output()
    assert "Traceback" not in svc.output()
