"""The tenant scripts on a real Redis (profile §24, store/tenants.py): model-based, any sequence
of admissions, releases and reclaims keeps a tenant within its live sessions, frees a place once
and counts a session's minutes once; concurrent duplicates do the same."""

from __future__ import annotations

import asyncio
import uuid

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from realtime.policy import Limits
from realtime.store import keys
from realtime.store.admissions import Admitted, Refused
from realtime.store.redis_client import RedisClient
from realtime.store.tenants import TenantStore
from state_machines.usage import Usage

pytestmark = pytest.mark.redis

LIVE = 3
SESSIONS = 6
TTL_S = 3600


def limits(live: int | None = LIVE, per_minute: int | None = None) -> Limits:
    return Limits(
        live_sessions=live,
        starts_per_minute=per_minute,
        day_ms=None,
        month_ms=None,
        max_session_s=3600,
        per_principal=5,
    )


def usage(ms: int) -> Usage:
    return Usage(session_ms=ms, connected_ms=0, agent_ms=0, handoffs=0, rotations=0)


async def redis_now_ms(store: RedisClient) -> int:
    seconds, micros = await store.client.time()
    return int(seconds) * 1000 + int(micros) // 1000


steps = st.lists(
    st.tuples(st.sampled_from(["admit", "release", "forget"]), st.integers(0, SESSIONS - 1)),
    min_size=1,
    max_size=20,
)


@settings(
    max_examples=40,
    derandomize=True,
    deadline=None,
    database=None,
    phases=(Phase.explicit, Phase.generate),
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(steps=steps)
async def test_any_sequence_keeps_the_limit_and_counts_each_end_once(store, steps):
    tenants = TenantStore(store)
    tenant = f"prop-{uuid.uuid4()}"
    ids = [str(uuid.uuid4()) for _ in range(SESSIONS)]
    live: set[str] = set()  # the model
    ended: set[str] = set()
    total_ms = 0
    ended_ms = await redis_now_ms(store)
    for step, index in steps:
        sid = ids[index]
        if step == "admit":
            answer = await tenants.admit(tenant, sid, limits(), TTL_S)
            if sid in live or len(live) < LIVE:
                assert isinstance(answer, Admitted)
                live.add(sid)
            else:
                assert answer == Refused("live", LIVE, LIVE, answer.at_ms)
        elif step == "release":
            left, counted = await tenants.release(tenant, sid, usage(1000 + index), ended_ms, TTL_S)
            assert left is (sid in live)
            assert counted is (sid not in ended)
            if counted:
                total_ms += 1000 + index
            live.discard(sid)
            ended.add(sid)
        else:  # a reclaim of a session that is gone: only past the grace
            assert await tenants.forget(tenant, sid, 60_000) is False
            assert await tenants.forget(tenant, sid, 0) is (sid in live)
            live.discard(sid)
        assert await store.client.zcard(keys.tenant_live_key(tenant)) == len(live) <= LIVE
    assert set(await tenants.live(tenant)) == live
    used = await tenants.used(tenant)
    assert used.live == len(live)
    assert used.day_ms == used.month_ms == total_ms
    # the time the live sessions have run, kept as a sum beside them, is theirs
    now = await redis_now_ms(store)
    scores = await store.client.zrange(keys.tenant_live_key(tenant), 0, -1, withscores=True)
    assert abs(used.running_ms - sum(now - s for _, s in scores)) <= 50 * len(live)


async def test_concurrent_admissions_at_the_limit_admit_exactly_the_limit(store):
    tenants = TenantStore(store)
    tenant = f"race-{uuid.uuid4()}"
    answers = await asyncio.gather(
        *(tenants.admit(tenant, str(uuid.uuid4()), limits(), TTL_S) for _ in range(40))
    )
    assert sum(isinstance(a, Admitted) for a in answers) == LIVE
    assert {a.by for a in answers if isinstance(a, Refused)} == {"live"}


async def test_concurrent_releases_of_one_end_count_it_once(store):
    tenants = TenantStore(store)
    tenant = f"race-{uuid.uuid4()}"
    sid = str(uuid.uuid4())
    assert isinstance(await tenants.admit(tenant, sid, limits(), TTL_S), Admitted)
    ended_ms = await redis_now_ms(store)
    answers = await asyncio.gather(
        *(tenants.release(tenant, sid, usage(60_000), ended_ms, TTL_S) for _ in range(30))
    )
    assert sorted(answers).count((True, True)) == 1
    assert answers.count((False, False)) == 29
    used = await tenants.used(tenant)
    assert (used.day_ms, used.month_ms, used.live, used.running_ms) == (60_000, 60_000, 0, 0)


async def test_a_start_rate_counts_admissions_of_the_last_minute(store):
    tenants = TenantStore(store)
    tenant = f"rate-{uuid.uuid4()}"
    rate = limits(live=None, per_minute=2)
    first = str(uuid.uuid4())
    assert isinstance(await tenants.admit(tenant, first, rate, TTL_S), Admitted)
    assert isinstance(await tenants.admit(tenant, str(uuid.uuid4()), rate, TTL_S), Admitted)
    refused = await tenants.admit(tenant, str(uuid.uuid4()), rate, TTL_S)
    assert isinstance(refused, Refused)
    assert (refused.by, refused.reached, refused.limit) == ("rate", 2, 2)
    assert 0 < refused.wait_ms <= 60_000
    # the same session again is admitted already: a retried create takes no second start
    assert isinstance(await tenants.admit(tenant, first, rate, TTL_S), Admitted)
    # a start leaves the minute 60 s after it was made
    starts = keys.tenant_starts_key(tenant)
    old = await redis_now_ms(store) - 61_000
    await store.client.zadd(starts, {first: old})
    assert isinstance(await tenants.admit(tenant, str(uuid.uuid4()), rate, TTL_S), Admitted)


async def test_an_end_of_an_earlier_day_counts_in_neither_todays_nor_this_months_minutes(store):
    tenants = TenantStore(store)
    tenant = f"days-{uuid.uuid4()}"
    now = await redis_now_ms(store)
    await tenants.release(tenant, str(uuid.uuid4()), usage(5_000), now, TTL_S)
    # released late (a compaction) for a session that ended 40 days ago: its day is not today
    long_ago = now - 40 * 86_400_000
    _, counted = await tenants.release(tenant, str(uuid.uuid4()), usage(7_000), long_ago, TTL_S)
    assert counted  # its usage is written in its own day …
    used = await tenants.used(tenant)
    assert (used.day_ms, used.month_ms) == (5_000, 5_000)  # … and counted in no current total
