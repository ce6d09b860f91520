"""Two `serve` processes admitting one tenant's sessions at once (profile §24): their creates,
sent together as fast as they go, never take more places than the tenant's limit, and a place
freed by an end is taken by exactly one of the next creates."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import httpx
import msgspec
import pytest

from realtime.store import keys
from realtime.store.redis_client import RedisClient
from tests.cli_processes import serve_environ, serving
from tests.conftest import ALL_SCOPES, REALTIME
from tests.e2e.operator_api_helpers import TENANT_CLAIM, bearer, rpc_as
from tests.e2e.realtime_helpers import create_part, new_id, session_of

pytestmark = [pytest.mark.redis, pytest.mark.e2e, pytest.mark.slow]

LIMIT = 4
CREATES = 24  # per process


async def create(http: httpx.AsyncClient, subject: str) -> httpx.Response:
    message = {"messageId": new_id(), "role": "ROLE_USER", "parts": [create_part()]}
    body = {"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": message}}
    return await http.post(
        "/a2a",
        content=msgspec.json.encode(body),
        headers={
            "Authorization": bearer(subject, ALL_SCOPES, tenant="acme"),
            "A2A-Version": "1.0",
            "A2A-Extensions": REALTIME,
            "Content-Type": "application/json",
        },
    )


async def burst(
    clients: list[httpx.AsyncClient], per_client: int, round_: int
) -> list[tuple[str, httpx.Response]]:
    """`per_client` creates through each client at once, each of a principal of its own: the
    principals and their replies."""
    subjects = [f"user-{round_}-{n}-{i}" for n in range(len(clients)) for i in range(per_client)]
    replies = await asyncio.gather(
        *(create(clients[k // per_client], subject) for k, subject in enumerate(subjects))
    )
    return list(zip(subjects, replies, strict=True))


async def test_two_processes_racing_at_a_tenants_limit_never_pass_it(
    tmp_path: Path, redis_url: str, store: RedisClient, livekit: Any
) -> None:
    policy = tmp_path / "policy.toml"
    policy.write_text(f"[tenants.acme]\nlive_sessions = {LIMIT}\n", encoding="utf-8")
    policy.chmod(0o644)
    environ = serve_environ(
        redis_url,
        livekit,
        AIM_AUTH_TENANT_CLAIM=TENANT_CLAIM,
        AIM_TENANT_POLICY_FILE=str(policy),
        AIM_RATE_LIMIT_RPS="0",
    )
    first, second = tmp_path / "one", tmp_path / "two"
    first.mkdir()
    second.mkdir()
    live_key = keys.tenant_live_key("acme")
    with serving(first, **environ) as one, serving(second, **environ) as two:
        await asyncio.gather(
            asyncio.to_thread(one.wait_until_ready), asyncio.to_thread(two.wait_until_ready)
        )
        async with (
            httpx.AsyncClient(base_url=one.base_url, timeout=30) as a,
            httpx.AsyncClient(base_url=two.base_url, timeout=30) as b,
        ):
            peak = 0
            sampling = True

            async def sample() -> None:
                nonlocal peak
                while sampling:
                    peak = max(peak, await store.client.zcard(live_key))
                    await asyncio.sleep(0.002)

            sampler = asyncio.create_task(sample())
            replies = await burst([a, b], CREATES, 1)
            statuses = sorted(r.status_code for _, r in replies)
            assert statuses.count(200) == LIMIT, one.output() + two.output()
            assert statuses.count(429) == 2 * CREATES - LIMIT
            subject, done = next((s, r) for s, r in replies if r.status_code == 200)
            assert await store.client.zcard(live_key) == LIMIT

            # one place freed: of the next burst, exactly one create takes it
            sid = session_of(done.json()["result"]["task"])["sessionId"]
            ended = await rpc_as(
                a, "aim.realtime.EndSession",
                {"sessionId": sid, "commandId": new_id(), "reason": "done"},
                subject=subject, tenant="acme",
            )  # fmt: skip
            assert "result" in ended, ended
            for _ in range(200):  # the room deleted by a process's runner: the end released
                if await store.client.zcard(live_key) < LIMIT:
                    break
                await asyncio.sleep(0.025)
            replies = await burst([a, b], CREATES // 2, 2)
            assert [r.status_code for _, r in replies].count(200) == 1
            sampling = False
            await sampler
            assert peak <= LIMIT
            assert await store.client.zcard(live_key) == LIMIT
