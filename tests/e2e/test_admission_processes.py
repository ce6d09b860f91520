"""`serve` processes admitting one tenant's sessions (profile §24): two of them, sent creates
together as fast as they go, never take more places than the tenant's limit, and a place freed
by an end is taken by exactly one of the next creates; one killed in the middle of creates
leaves nothing the reconciler does not give back."""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import hashlib
from pathlib import Path
from typing import Any

import httpx
import msgspec
import pytest

from realtime.app import running
from realtime.store import keys
from realtime.store.compaction import Compactor
from realtime.store.redis_client import RedisClient
from realtime.store.scripts import SOURCES
from realtime.store.sessions import SessionStore
from realtime.store.tenants import TenantStore
from tests.cli_processes import serve_environ, serving
from tests.conftest import ALL_SCOPES, REALTIME, livekit_settings
from tests.e2e.operator_api_helpers import TENANT_CLAIM, bearer, rpc_as
from tests.e2e.realtime_helpers import create_part, new_id, session_of
from tests.tcp_proxy import redis_proxy

pytestmark = [pytest.mark.redis, pytest.mark.e2e, pytest.mark.slow]

LIMIT = 4
CREATES = 24  # per process


def policy_environ(tmp_path: Path, redis_url: str, livekit: Any, acme: str) -> dict[str, str]:
    """A `serve`'s settings with a tenant claim and a policy giving tenant acme `acme`."""
    policy = tmp_path / "policy.toml"
    policy.write_text(f"[tenants.acme]\n{acme}\n", encoding="utf-8")
    policy.chmod(0o644)
    return serve_environ(
        redis_url,
        livekit,
        AIM_AUTH_TENANT_CLAIM=TENANT_CLAIM,
        AIM_TENANT_POLICY_FILE=str(policy),
        AIM_RATE_LIMIT_RPS="0",
    )


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
    environ = policy_environ(tmp_path, redis_url, livekit, f"live_sessions = {LIMIT}")
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


def sha_of(script: str) -> bytes:
    """What redis-py sends to run `script` (EVALSHA <sha1 of its source>)."""
    return hashlib.sha1(SOURCES[script].encode()).hexdigest().encode()  # noqa: S324 - Redis' id


async def killed_at(
    tmp_path: Path, environ: dict[str, str], redis_url: str, script: str, call: Any
) -> None:
    """A `serve` reaching Redis through a proxy, killed (SIGKILL) the moment it sends `script`:
    that script never runs, and nothing after it. `call(http)` is what makes it send it."""
    async with redis_proxy(redis_url) as (proxy, proxied_url):
        tripped = proxy.arm(sha_of(script), forward=False)
        home = tmp_path / script
        home.mkdir()
        with serving(home, **{**environ, "AIM_REDIS_URL": proxied_url}) as replica:
            await asyncio.to_thread(replica.wait_until_ready)
            async with httpx.AsyncClient(base_url=replica.base_url, timeout=30) as http:
                answer = asyncio.create_task(call(http))
                await asyncio.wait_for(tripped.wait(), timeout=30)
                replica.process.kill()
                replica.process.wait()
                with contextlib.suppress(httpx.TransportError):
                    await answer


async def test_places_a_killed_replica_left_are_reclaimed(
    tmp_path: Path, redis_url: str, store: RedisClient, livekit: Any
) -> None:
    """A replica killed between a session's admission and its create's commit leaves a place
    with no session; one killed between the commit that ended a session and its release leaves
    the ended session's place. The next refusal of the tenant reclaims the first (once it is a
    minute old: tests/e2e/test_admission.py shows the grace) and admits; the ended session's
    compaction releases the second, counting its usage (so would the reconciler, while the
    tenant has a live session)."""
    environ = policy_environ(tmp_path, redis_url, livekit, "live_sessions = 1")
    policy = tmp_path / "policy.toml"
    live_key = keys.tenant_live_key("acme")

    # 1. killed as it sends the create's commit: the tenant's one place is taken by nothing
    await killed_at(tmp_path, environ, redis_url, "commit", lambda http: create(http, "alice"))
    [never] = [m.decode() for m in await store.client.zrange(live_key, 0, -1)]
    assert not await store.client.exists(keys.session_key(never))
    (tmp_path / "b").mkdir()
    with serving(tmp_path / "b", **environ) as b:
        await asyncio.to_thread(b.wait_until_ready)
        async with httpx.AsyncClient(base_url=b.base_url, timeout=30) as http:
            # a minute on (the grace that spares a create under way: Redis time, not movable)
            admitted = await store.client.zscore(live_key, never)
            await store.client.zadd(live_key, {never: admitted - 61_000})
            await store.client.decrby(keys.tenant_since_key("acme"), 61_000)
            reply = await create(http, "carol")
            assert reply.status_code == 200, reply.text
            kept = session_of(reply.json()["result"]["task"])["sessionId"]
            assert {m.decode() for m in await store.client.zrange(live_key, 0, -1)} == {kept}

    # 2. killed as it sends the release of a session's end: the place of an ended session
    async def end(http: httpx.AsyncClient) -> None:
        ended = await rpc_as(
            http, "aim.realtime.EndSession",
            {"sessionId": kept, "commandId": new_id(), "reason": "done"},
            subject="carol", tenant="acme",
        )  # fmt: skip
        assert "result" in ended, ended

    await killed_at(tmp_path, environ, redis_url, "release_tenant", end)
    record = (await SessionStore(store).load(kept)).record
    assert record is not None
    assert record.session.state == "ended"
    assert {m.decode() for m in await store.client.zrange(live_key, 0, -1)} == {kept}
    # another worker finishes the killed one's work (its outbox), then the ended session's
    # compaction releases it once more (its timer, fired here)
    settings = livekit_settings(
        livekit, auth_tenant_claim=TENANT_CLAIM, tenant_policy_file=str(policy)
    )
    await store.client.delete(keys.runner_lease_key(kept))  # its lease ran out (a while on)
    async with running(settings, store=store, run_worker=False) as worker:
        await worker.commands.runner.run(kept)
    sessions = SessionStore(store)
    compactor = Compactor(store, sessions, TenantStore(store), usage_ttl_s=86400)
    assert await compactor.compact(kept) == "done"
    assert await store.client.zcard(live_key) == 0
    seconds, _ = await store.client.time()
    day = dt.datetime.fromtimestamp(int(seconds), dt.UTC).date().isoformat()
    assert await store.client.hexists(keys.usage_key("acme", day), kept)
