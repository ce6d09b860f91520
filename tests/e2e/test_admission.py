"""Tenant admission (profile §24) on a real Redis: each limit of the policy file, the answers a
refused create gets (code, HTTP status, Retry-After, data), nothing stored by a refusal, the
place a session holds freed by each way it ends with its usage counted once, an allowance used
up ending the tenant's live sessions, and the places of sessions that no longer live reclaimed.

Time in Redis cannot be moved by a test: where an allowance must be used up, the test writes
what ended sessions would have counted (the tenant's `used` hash) or moves a live session's
admission back, as a long-running session would be."""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import os
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import msgspec
import pytest

from aim_realtime_client import AimClient, AllowanceExhaustedError, LimitExceededError
from realtime.app import Running, create_app, running
from realtime.auth import mint_dev_token
from realtime.policy import RELOAD_CHECK_S
from realtime.store import keys
from realtime.store.leases import DutyLease
from realtime.store.redis_client import RedisClient
from realtime.store.timers import TimerStore
from realtime.worker.reconciler import Reconciler
from tests.clocks import Clock
from tests.conftest import ALL_SCOPES, REALTIME, TEST_SECRET, livekit_settings, serving
from tests.e2e.operator_api_helpers import TENANT_CLAIM, bearer, rpc_as
from tests.e2e.realtime_helpers import create_part, new_id, session_of
from tests.tcp_proxy import redis_proxy

pytestmark = pytest.mark.e2e

DAY_MS = 86_400_000


@dataclass
class World:
    http: httpx.AsyncClient
    worker: Running
    clock: Clock
    store: RedisClient
    policy: Path

    async def call(
        self, method: str, params: dict[str, Any], tenant: str | None, subject: str
    ) -> httpx.Response:
        """One /a2a call as `subject` of `tenant`, its token minted on the service's clock."""
        token = mint_dev_token(
            TEST_SECRET, subject=subject, scopes=ALL_SCOPES, ttl_s=600, now=self.clock(),
            tenant_claim=TENANT_CLAIM if tenant is not None else None, tenant=tenant,
        )  # fmt: skip
        body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
        return await self.http.post(
            "/a2a",
            content=msgspec.json.encode(body),
            headers={
                "Authorization": f"Bearer {token}",
                "A2A-Version": "1.0",
                "A2A-Extensions": REALTIME,
                "Content-Type": "application/json",
            },
        )

    async def create(
        self,
        tenant: str | None = "acme",
        subject: str = "alice",
        message_id: str | None = None,
        *,
        immediately: bool = False,
    ) -> httpx.Response:
        """A SendMessage that creates a session, as `subject` of `tenant`: the HTTP reply."""
        message = {
            "messageId": message_id or new_id(),
            "role": "ROLE_USER",
            "parts": [create_part()],
        }
        params: dict[str, Any] = {"message": message}
        if immediately:
            params["configuration"] = {"returnImmediately": True}
        return await self.call("SendMessage", params, tenant, subject)

    async def started(
        self, tenant: str | None = "acme", subject: str = "alice", *, immediately: bool = False
    ) -> str:
        reply = await self.create(tenant, subject, immediately=immediately)
        assert reply.status_code == 200, reply.text
        return str(session_of(reply.json()["result"]["task"])["sessionId"])

    async def end(self, sid: str, tenant: str | None = "acme", subject: str = "alice") -> None:
        params = {"sessionId": sid, "commandId": new_id(), "reason": "done"}
        ended = (await self.call("aim.realtime.EndSession", params, tenant, subject)).json()
        assert "result" in ended, ended
        await self.gone(sid)

    async def gone(self, sid: str) -> None:
        """The end's LiveKit work done (the room deleted): the session is over, and released
        (the step after the commit that ended it: its place freed, its usage written)."""
        for _ in range(100):  # the service's runner deletes the room (5 s at most)
            loaded = await self.worker.commands.engine.sessions.load(sid)
            assert loaded.record is not None
            tenant = loaded.record.tenant
            released = not await self.store.client.zscore(keys.tenant_live_key(tenant), sid)
            if loaded.record.session.state in ("ended", "failed") and released:
                return
            await asyncio.sleep(0.05)
        raise AssertionError(f"session {sid} did not end: {loaded.record.session.state}")

    async def live(self, tenant: str | None = "acme") -> set[str]:
        members = await self.store.client.zrange(keys.tenant_live_key(tenant), 0, -1)
        return {m.decode() for m in members}

    def reconciler(self) -> Reconciler:
        return Reconciler(
            self.worker.commands.engine,
            self.worker.commands.runner.gateway,
            DutyLease(self.store, keys.reconciler_lease_key()),
            self.worker.commands.runner,
            TimerStore(self.store),
        )

    def rewrite(self, text: str) -> None:
        """The operator changes the policy file (the next look picks it up)."""
        replacement = self.policy.with_suffix(".new")
        replacement.write_text(text, encoding="utf-8")
        replacement.chmod(0o644)
        os.replace(replacement, self.policy)
        self.clock.advance(RELOAD_CHECK_S)


@contextlib.asynccontextmanager
async def world_of(
    livekit: Any, store: RedisClient, tmp_path: Path, policy: str, **overrides: Any
) -> AsyncIterator[World]:
    path = tmp_path / "policy.toml"
    path.write_text(policy, encoding="utf-8")
    path.chmod(0o644)
    settings = livekit_settings(
        livekit,
        auth_tenant_claim=TENANT_CLAIM,
        tenant_policy_file=str(path),
        max_sessions_per_principal=50,
        **overrides,
    )
    clock = Clock()
    app = create_app(settings, store=store, clock=clock)
    async with (
        serving(app) as base_url,
        httpx.AsyncClient(base_url=base_url, timeout=30) as http,
        running(settings, store=store, clock=clock, run_worker=False) as worker,
    ):
        yield World(http, worker, clock, store, path)


async def admitted_earlier(store: RedisClient, tenant: str, sid: str, ms: int) -> None:
    """As if the live session `sid` had been admitted `ms` earlier: a session that has run
    that much longer (its admission time, and their sum beside the live sessions)."""
    live = keys.tenant_live_key(tenant)
    admitted = await store.client.zscore(live, sid)
    assert admitted is not None
    await store.client.zadd(live, {sid: admitted - ms})
    await store.client.decrby(keys.tenant_since_key(tenant), ms)


async def held(store: RedisClient, tenant: str, sid: str, admitted_ms: float) -> None:
    """As if a replica had admitted `sid` at `admitted_ms` and died before anything else."""
    await store.client.zadd(keys.tenant_live_key(tenant), {sid: admitted_ms})
    await store.client.incrby(keys.tenant_since_key(tenant), int(admitted_ms))


def refusal(reply: httpx.Response) -> dict[str, str]:
    error = reply.json()["error"]
    info = error["data"][0]
    return {"code": error["code"], "reason": info["reason"], **info["metadata"]}


async def test_a_tenant_at_its_live_sessions_is_refused_with_429_and_nothing_is_stored(
    livekit, store, tmp_path
):
    async with world_of(livekit, store, tmp_path, "[tenants.acme]\nlive_sessions = 2\n") as w:
        first = await w.started(subject="alice")
        await w.started(subject="bob")
        message_id = new_id()
        refused = await w.create(subject="carol", message_id=message_id)
        assert refused.status_code == 429
        assert refused.headers["Retry-After"] == "5"
        assert refusal(refused) == {
            "code": -31011, "reason": "LIMIT_EXCEEDED", "limit": "live_sessions",
            "allowed": "2", "count": "2", "scope": "tenant", "retryAfterSeconds": "5",
        }  # fmt: skip
        assert "Tenant acme has 2 live sessions" in refused.json()["error"]["message"]
        # another tenant is not limited by acme's sessions
        await w.started(tenant="globex", subject="carol")
        # nothing of the refused create stays: carol has no task, and once a place is free
        # the same messageId creates the session
        listed = await rpc_as(w.http, "ListTasks", {}, subject="carol", tenant="acme")
        assert listed["result"]["tasks"] == []
        await w.end(first)
        assert len(await w.live()) == 1
        again = await w.create(subject="carol", message_id=message_id)
        assert again.status_code == 200, again.text
        assert len(await w.live()) == 2


async def test_the_per_principal_cap_comes_from_the_policy_and_says_its_scope(
    livekit, store, tmp_path
):
    policy = "[default]\nlive_sessions_per_principal = 1\n[tenants.acme]\n"
    policy += "live_sessions_per_principal = 2\n"
    async with world_of(livekit, store, tmp_path, policy) as w:
        await w.started(tenant="globex")
        refused = await w.create(tenant="globex")
        assert refused.status_code == 429
        found = refusal(refused)
        assert (found["limit"], found["scope"], found["allowed"]) == (
            "live_sessions_per_principal",
            "principal",
            "1",
        )
        await w.started(tenant="acme")
        await w.started(tenant="acme")
        assert refusal(await w.create(tenant="acme"))["allowed"] == "2"


async def test_starts_per_minute_are_counted_for_the_tenant_with_when_to_retry(
    livekit, store, tmp_path
):
    async with world_of(livekit, store, tmp_path, "[default]\nstarts_per_minute = 2\n") as w:
        first = await w.started(subject="alice")
        await w.started(subject="bob")
        await w.end(first)  # ending a session gives no start back
        refused = await w.create(subject="carol")
        assert refused.status_code == 429
        found = refusal(refused)
        assert (found["limit"], found["count"], found["allowed"], found["scope"]) == (
            "starts_per_minute",
            "2",
            "2",
            "tenant",
        )
        assert 1 <= int(refused.headers["Retry-After"]) <= 60
        assert found["retryAfterSeconds"] == refused.headers["Retry-After"]
        # the minute's starts are the tenant's: its other principals wait too, other tenants not
        assert (await w.create(subject="dave")).status_code == 429
        assert (await w.create(tenant="globex")).status_code == 200


async def test_a_used_up_allowance_is_refused_with_402_and_when_it_resets(livekit, store, tmp_path):
    policy = "[default]\nsession_minutes_per_day = 10\nsession_minutes_per_month = 100\n"
    async with world_of(livekit, store, tmp_path, policy) as w:
        now_ms = int((await store.client.time())[0]) * 1000
        today = now_ms // DAY_MS
        month = dt.datetime.fromtimestamp(now_ms / 1000, dt.UTC)
        used = keys.tenant_used_key("acme")
        # the tenant's ended sessions used its ten minutes today
        await store.client.hset(used, mapping={"day": today, "dms": 10 * 60_000})
        refused = await w.create()
        assert refused.status_code == 402
        assert "Retry-After" not in refused.headers
        found = refusal(refused)
        tomorrow = dt.datetime.fromtimestamp((today + 1) * 86400, dt.UTC)
        assert found == {
            "code": -31013, "reason": "ALLOWANCE_EXHAUSTED",
            "allowance": "session_minutes_per_day", "allowed": "10", "used": "10",
            "scope": "tenant", "resetsAt": tomorrow.strftime("%Y-%m-%dT%H:%M:%S.000Z"),
            "resetsInSeconds": found["resetsInSeconds"],
        }  # fmt: skip
        assert 0 < int(found["resetsInSeconds"]) <= 86400
        # what was counted yesterday does not count today
        await store.client.hset(used, mapping={"day": today - 1})
        assert (await w.create()).status_code == 200

        # the month's minutes used up: refused until the first of the next month
        yyyymm = month.year * 100 + month.month
        await store.client.hset(used, mapping={"month": yyyymm, "mms": 100 * 60_000})
        found = refusal(await w.create(subject="bob"))
        assert found["allowance"] == "session_minutes_per_month"
        first = dt.datetime(month.year + month.month // 12, month.month % 12 + 1, 1, tzinfo=dt.UTC)
        assert found["resetsAt"] == first.strftime("%Y-%m-%dT%H:%M:%S.000Z")
        # another tenant has its own allowance
        assert (await w.create(tenant="globex")).status_code == 200


async def test_a_tenants_live_sessions_end_when_its_allowance_runs_out(livekit, store, tmp_path):
    policy = "[tenants.acme]\nsession_minutes_per_day = 30\n"
    async with world_of(livekit, store, tmp_path, policy) as w:
        one = await w.started(subject="alice")
        two = await w.started(subject="bob")
        other = await w.started(tenant="globex")
        reconciler = w.reconciler()
        report = await reconciler.sweep()
        assert "allowance_ended" not in report.corrections
        # both sessions have run 15 minutes: the tenant's 30 are used up
        await admitted_earlier(store, "acme", one, 15 * 60_000)
        await admitted_earlier(store, "acme", two, 15 * 60_000)
        report = await reconciler.sweep()
        assert report.corrections["allowance_ended"] == 2
        for sid, subject in ((one, "alice"), (two, "bob")):
            got = await rpc_as(
                w.http, "aim.realtime.GetSession", {"sessionId": sid},
                subject=subject, tenant="acme",
            )  # fmt: skip
            session = got["result"]["session"]
            assert session["state"] in ("ending", "ended"), session
            assert session["endReason"] == "allowance_exhausted"
        got = await rpc_as(
            w.http, "aim.realtime.GetSession", {"sessionId": other}, subject="alice",
            tenant="globex",
        )  # fmt: skip
        assert got["result"]["session"]["state"] == "ready"
        # a second sweep ends nothing more
        assert "allowance_ended" not in (await reconciler.sweep()).corrections


async def test_a_session_frees_its_place_and_counts_its_usage_once_however_it_ends(
    livekit, store, tmp_path
):
    async with world_of(livekit, store, tmp_path, "[tenants.acme]\nlive_sessions = 5\n") as w:
        ended = await w.started()
        canceled = await w.started()
        assert await w.live() == {ended, canceled}
        await w.end(ended)
        task_id = (await rpc_as(
            w.http, "aim.realtime.GetSession", {"sessionId": canceled}, tenant="acme",
        ))["result"]["session"]["taskId"]  # fmt: skip
        cancel = await rpc_as(w.http, "CancelTask", {"id": task_id}, tenant="acme")
        assert "result" in cancel, cancel
        await w.gone(canceled)
        assert await w.live() == set()
        now_ms = int((await store.client.time())[0]) * 1000
        day = dt.datetime.fromtimestamp(now_ms / 1000, dt.UTC).date().isoformat()
        usage = await store.client.hgetall(keys.usage_key("acme", day))
        assert set(usage) == {ended.encode(), canceled.encode()}
        used = await store.client.hgetall(keys.tenant_used_key("acme"))
        total = sum(msgspec.json.decode(v)["sessionMs"] for v in usage.values())
        assert int(used[b"dms"]) == total == int(used[b"mms"])
        # a release repeated (the compaction's) counts nothing twice
        admission = w.worker.commands.engine.admission
        assert await admission.reclaim("acme") == []
        for sid in (ended, canceled):
            loaded = await w.worker.commands.engine.sessions.load(sid)
            assert loaded.record is not None
            repeated = await admission.tenants.release_ended(
                loaded.record, sid, await w.worker.commands.engine.sessions.ended_ms(sid), 86400
            )
            assert repeated == (False, False)
        assert int((await store.client.hgetall(keys.tenant_used_key("acme")))[b"dms"]) == total


async def test_a_tenants_maximum_duration_arms_the_sessions_timer(livekit, store, tmp_path):
    async with world_of(livekit, store, tmp_path, "[tenants.acme]\nmax_session_minutes = 2\n") as w:
        created_ms = int(w.clock() * 1000)
        sid = await w.started()
        armed = await store.client.hgetall(keys.session_timers_key(sid))
        [due] = [int(v) for k, v in armed.items() if k.decode().split("|")[1] == "max"]
        assert created_ms + 120_000 <= due <= int(w.clock() * 1000) + 120_000
        other = await w.started(tenant="globex")
        armed = await store.client.hgetall(keys.session_timers_key(other))
        [due] = [int(v) for k, v in armed.items() if k.decode().split("|")[1] == "max"]
        assert due >= created_ms + 3600_000  # AIM_MAX_SESSION_S


async def test_places_of_sessions_that_no_longer_live_are_reclaimed(livekit, store, tmp_path):
    """A replica killed between an admission and its create's commit leaves a place with no
    session; one killed between the commit that ended a session and its release leaves the
    ended session's place. The reconciler reclaims both (the first after a grace, since a
    create may be under way), and so does a refusal, which then admits."""
    async with world_of(livekit, store, tmp_path, "[tenants.acme]\nlive_sessions = 3\n") as w:
        kept = await w.started(subject="alice")
        ended = await w.started(subject="bob")
        await w.end(ended, subject="bob")
        never = new_id()
        admitted = await store.client.zscore(keys.tenant_live_key("acme"), kept)
        # what the killed replicas left: the ended session's place, a place never created
        await held(store, "acme", ended, admitted)
        await held(store, "acme", never, admitted)
        assert len(await w.live()) == 3
        report = await w.reconciler().sweep()
        assert report.corrections["place_reclaimed"] == 1  # the ended one; the other is new
        assert await w.live() == {kept, never}
        await admitted_earlier(store, "acme", never, 61_000)  # past the grace
        report = await w.reconciler().sweep()
        assert report.corrections["place_reclaimed"] == 1
        assert await w.live() == {kept}
        # what is left counts the time of the one live session alone
        used = await w.worker.commands.engine.admission.tenants.used("acme")
        assert (used.live, used.running_ms < 60_000) == (1, True)
        # the same state again, found by a refusal instead: admitted after the reclaim
        await w.started(subject="carol")
        await held(store, "acme", ended, admitted)
        await held(store, "acme", never, admitted - 61_000)
        assert (await w.create(subject="dave")).status_code == 200


async def test_a_policy_changed_while_running_applies_to_the_next_create(
    livekit, store, tmp_path, caplog
):
    async with world_of(livekit, store, tmp_path, "[default]\nlive_sessions = 1\n") as w:
        await w.started()
        assert (await w.create(subject="bob")).status_code == 429
        w.rewrite("[default]\nlive_sessions = 2\n")
        assert (await w.create(subject="bob")).status_code == 200
        w.rewrite("[default]\nlive_sessions = -3\n")  # refused: the last good one stays
        assert (await w.create(subject="carol")).status_code == 429
        assert any("default.live_sessions" in r.getMessage() for r in caplog.records)


async def test_the_python_client_raises_a_distinct_error_for_each_refusal(livekit, store, tmp_path):
    policy = "[tenants.acme]\nlive_sessions = 1\n[tenants.spent]\nsession_minutes_per_day = 0\n"
    async with world_of(livekit, store, tmp_path, policy) as w:
        slept: list[float] = []

        async def sleep(seconds: float) -> None:
            slept.append(seconds)

        def client(tenant: str, subject: str) -> AimClient:
            return AimClient(
                str(w.http.base_url), token=bearer(subject, ALL_SCOPES, tenant=tenant)[7:],
                http=w.http, sleep=sleep,
            )  # fmt: skip

        async with client("spent", "alice") as spent:
            with pytest.raises(AllowanceExhaustedError) as exhausted:
                await spent.create_session("phone")
        assert exhausted.value.allowance == "session_minutes_per_day"
        assert exhausted.value.resets_at is not None
        assert exhausted.value.http_status == 402
        assert not exhausted.value.retryable
        assert slept == []  # said at once, never retried

        async with client("acme", "alice") as first, client("acme", "bob") as second:
            await first.create_session("phone")
            with pytest.raises(LimitExceededError) as limited:
                await second.create_session("phone")
        assert limited.value.metadata["scope"] == "tenant"
        assert limited.value.http_status == 429
        assert limited.value.retry_after_ms == 5000


async def test_redis_lost_during_admission_is_unavailable_and_admits_nothing(
    livekit, store, redis_url, tmp_path
):
    if redis_url is None:
        pytest.skip("cutting the link needs a real Redis")
    async with redis_proxy(redis_url) as (link, proxied_url):
        proxied = RedisClient.from_url(proxied_url)
        try:
            async with world_of(livekit, proxied, tmp_path, "[default]\nlive_sessions = 5\n") as w:
                # the admission's script names the tenant's live sessions: the link is cut as
                # it is sent, after the create's claim went through
                cut = link.arm(keys.tenant_live_key("acme").encode(), forward=False)
                message_id = new_id()
                refused = await w.create(message_id=message_id)
                assert cut.is_set()
                assert refusal(refused)["code"] == -31012
                assert refusal(refused)["service"] == "redis"
                link.restore()
                assert await store.client.zcard(keys.tenant_live_key("acme")) == 0
                # the same request again, once Redis is back: admitted once, created once
                again = await w.create(message_id=message_id)
                assert again.status_code == 200, again.text
                assert await store.client.zcard(keys.tenant_live_key("acme")) == 1
        finally:
            await proxied.aclose()


async def redis_day(store: RedisClient) -> str:
    seconds, _ = await store.client.time()
    return dt.datetime.fromtimestamp(int(seconds), dt.UTC).date().isoformat()


@pytest.mark.parametrize("path", ["end", "cancel", "max_duration", "failed", "allowance"])
async def test_each_way_a_session_ends_frees_its_place_and_counts_its_usage_once(
    livekit, store, tmp_path, path
):
    policy = "[tenants.acme]\nlive_sessions = 5\nmax_session_minutes = 1\n"
    policy += "session_minutes_per_day = 30\n"
    async with world_of(livekit, store, tmp_path, policy) as w:
        if path == "failed":
            await livekit.set_down(True)  # provisioning never finishes
        sid = await w.started(immediately=True)
        assert await w.live() == {sid}
        reason = {"end": "done", "cancel": "canceled", "max_duration": "max_duration"}.get(path)
        if path == "end":
            await w.end(sid)
        elif path == "cancel":
            got = await rpc_as(w.http, "aim.realtime.GetSession", {"sessionId": sid}, tenant="acme")
            canceled = await rpc_as(
                w.http, "CancelTask", {"id": got["result"]["session"]["taskId"]}, tenant="acme"
            )
            assert "result" in canceled, canceled
        elif path == "max_duration":
            w.clock.advance(61)  # the tenant's minute is over: the service's timer fires
        elif path == "failed":
            w.clock.advance(16)  # AIM_PROVISIONING_TIMEOUT_S
            reason = "provisioning_timeout"
        else:
            await admitted_earlier(store, "acme", sid, 30 * 60_000)
            assert (await w.reconciler().sweep()).corrections["allowance_ended"] == 1
            reason = "allowance_exhausted"
        await w.gone(sid)
        if path == "failed":
            await livekit.set_down(False)
        loaded = await w.worker.commands.engine.sessions.load(sid)
        assert loaded.record is not None
        session = loaded.record.session
        if path != "cancel":
            assert session.end_reason == reason
        assert await w.live() == set()
        usage = await store.client.hgetall(keys.usage_key("acme", await redis_day(store)))
        assert set(usage) == {sid.encode()}
        counted = msgspec.json.decode(usage[sid.encode()])["sessionMs"]
        used = await store.client.hgetall(keys.tenant_used_key("acme"))
        assert int(used[b"dms"]) == counted == int(used[b"mms"])
        # the repeats (the compaction, a sweep) count nothing twice
        await w.worker.commands.engine.admission.reclaim("acme")
        await w.worker.commands.engine.admission.release(
            loaded.record, sid, await w.worker.commands.engine.sessions.ended_ms(sid)
        )
        assert int((await store.client.hgetall(keys.tenant_used_key("acme")))[b"dms"]) == counted


async def test_the_redis_clock_decides_the_day_a_sessions_usage_counts_in(livekit, store, tmp_path):
    async with world_of(livekit, store, tmp_path, "[default]\nlive_sessions = 5\n") as w:
        sid = await w.started()
        w.clock.advance(2 * 86400)  # this replica's clock is two days ahead
        await w.end(sid)
        got = await w.call("aim.realtime.GetSession", {"sessionId": sid}, "acme", "alice")
        ended_at = got.json()["result"]["session"]["endedAt"]
        today = await redis_day(store)
        assert ended_at[:10] != today  # what the replica's clock said
        assert await store.client.hexists(keys.usage_key("acme", today), sid)
        assert not await store.client.exists(keys.usage_key("acme", ended_at[:10]))
