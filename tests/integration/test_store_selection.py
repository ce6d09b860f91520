"""Which Redis the service opens (profile §14), and the task store against a real Redis."""

from __future__ import annotations

import asyncio
import logging
import time
from pathlib import Path

import pytest

from realtime.a2a.types import Task, TaskStatus
from realtime.errors import ServiceError
from realtime.rpc.errors import code_of, error_object
from realtime.settings import Settings
from realtime.store import keys
from realtime.store.indexes import TaskInfo
from realtime.store.records import TaskRecord
from realtime.store.redis_client import RedisClient
from realtime.store.selection import EMBEDDED_WARNING, open_store
from realtime.store.server import RedisUnavailableError, redis_server_available
from realtime.store.tasks import Claim, TaskStore
from tests.redis_processes import needs_redis_server
from tests.tcp_proxy import dead_tcp_url

pytestmark = pytest.mark.redis

UNAVAILABLE = -31012
OWNER = "owner-0123456789abcdef"
TASK_TTL_S = 3600


def record(task_id: str, *, owner: str = OWNER, status_ms: int = 1_000) -> TaskRecord:
    return TaskRecord(
        owner=owner,
        version=1,
        created_at="2030-01-01T00:00:00Z",
        status_ms=status_ms,
        task=Task(
            id=task_id,
            context_id=f"ctx-{task_id}",
            status=TaskStatus(state="TASK_STATE_WORKING", timestamp="2030-01-01T00:00:00Z"),
        ),
    )


def info(task_id: str) -> TaskInfo:
    return TaskInfo("TASK_STATE_REJECTED", f"ctx-{task_id}")


async def claim_of(
    task_store: TaskStore,
    owner: str,
    message_id: str,
    task_id: str,
    *,
    now_ms: int,
    ttl_s: int = 60,
) -> Claim:
    """SendMessage's claim of a message id for a REJECTED task kept `ttl_s` (a task lifetime of
    `TASK_TTL_S`, at most 1,000 tasks held)."""
    return await task_store.claim_message(
        owner,
        message_id,
        task_id,
        info(task_id),
        now_ms=now_ms,
        task_ttl_s=TASK_TTL_S,
        ttl_s=ttl_s,
        limit=1000,
    )


async def sent(task_store: TaskStore, task: TaskRecord, *, ttl_s: int = 60) -> None:
    """Store a task the way SendMessage does: claim its message id (which indexes it), then
    write it."""
    message_id, task_id = f"msg-{task.task.id}", task.task.id
    await claim_of(task_store, task.owner, message_id, task_id, now_ms=task.status_ms, ttl_s=ttl_s)
    await task_store.put(task, ttl_s=ttl_s)


async def listed(task_store: TaskStore, owner: str, *, cut_off_ms: int) -> list[TaskRecord]:
    """The owner's tasks as ListTasks reads them: the index, pruned of entries older than
    `cut_off_ms` (the task lifetime before now), then the tasks it names."""
    entries = await task_store.index(
        owner, now_ms=cut_off_ms + TASK_TTL_S * 1000, ttl_s=TASK_TTL_S, limit=1000
    )
    return await task_store.tasks(owner, [entry.task_id for entry in entries])


def unix_socket_path(store: RedisClient) -> Path:
    return Path(store.client.connection_pool.connection_kwargs["path"])


@pytest.fixture
def no_redis_server_on_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    assert not redis_server_available()


# --- selection ---------------------------------------------------------------------------------


async def test_a_configured_url_is_the_store_that_is_opened(
    redis_url: str | None, store: RedisClient, tmp_path: Path
) -> None:
    if redis_url is None:
        pytest.skip("no real Redis for this session")
    opened, release = open_store(Settings(redis_url=redis_url, data_dir=str(tmp_path)))
    try:
        assert opened.embedded is False
        await opened.client.set("aim:test:selection", b"through-the-url")
        # the fixture's own client sees the write: both talk to the same server
        assert await store.client.get("aim:test:selection") == b"through-the-url"
    finally:
        await opened.aclose()
        release()
    assert not (tmp_path / "redis").exists()  # no private server was started


async def test_without_a_url_a_private_redis_server_is_started_with_aof_and_stopped(
    tmp_path: Path,
) -> None:
    needs_redis_server()
    data_dir = tmp_path / "data"
    opened, release = open_store(Settings(data_dir=str(data_dir)))
    sock = unix_socket_path(opened)
    try:
        assert opened.embedded is False
        assert sock.exists()
        assert await opened.ping()
        await opened.client.set("aim:test:durable", b"kept-in-the-aof")
        config = await opened.client.config_get("appendonly")
        assert {_text(k): _text(v) for k, v in config.items()} == {"appendonly": "yes"}
        assert await asyncio.to_thread(_aof_mentions, data_dir / "redis", b"aim:test:durable")
    finally:
        await opened.aclose()
        release()
    assert not sock.exists()
    after = RedisClient.from_url(f"unix://{sock}")
    try:
        assert await after.ping() is False
    finally:
        await after.aclose()


async def test_without_a_url_or_binary_the_embedded_store_answers_and_warns_loudly(
    no_redis_server_on_path: None, caplog: pytest.LogCaptureFixture, tmp_path: Path
) -> None:
    with caplog.at_level(logging.WARNING, logger="realtime.store.selection"):
        opened, release = open_store(Settings(data_dir=str(tmp_path)))
    try:
        assert opened.embedded is True
        assert await opened.ping() is True
        await opened.client.set("k", b"v")
        assert await opened.client.get("k") == b"v"
    finally:
        await opened.aclose()
        release()
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert [r.getMessage() for r in warnings] == [EMBEDDED_WARNING]
    assert "neither durable nor shared" in warnings[0].getMessage()
    assert not (tmp_path / "redis").exists()


def test_without_a_url_or_binary_a_required_redis_is_an_error(
    no_redis_server_on_path: None, tmp_path: Path
) -> None:
    with pytest.raises(RedisUnavailableError, match="AIM_REQUIRE_REDIS"):
        open_store(Settings(require_redis=True, data_dir=str(tmp_path)))


# --- the task store against the session's Redis ---------------------------------------------


@pytest.fixture
def task_store(store: RedisClient) -> TaskStore:
    return TaskStore(store)


async def test_claiming_a_message_returns_none_first_and_the_first_task_on_a_repeat(
    store: RedisClient,
    task_store: TaskStore,
) -> None:
    first = await claim_of(task_store, OWNER, "msg-1", "task-a", now_ms=1_000)
    repeat = await claim_of(task_store, OWNER, "msg-1", "task-b", now_ms=2_000)
    again = await claim_of(task_store, OWNER, "msg-1", "task-c", now_ms=3_000)

    assert first == Claim("claimed")
    assert repeat == Claim("earlier", task_id="task-a")
    assert again == Claim("earlier", task_id="task-a")
    index = await store.client.zrange(keys.owner_tasks_key(OWNER), 0, -1, withscores=True)
    assert index == [(b"task-a", 1_000.0)]


async def test_a_rejected_tasks_claim_lives_as_long_as_the_task_and_its_index_longer(
    store: RedisClient, task_store: TaskStore
) -> None:
    await claim_of(task_store, OWNER, "msg-ttl", "task-a", now_ms=1_000, ttl_s=60)

    assert 0 < await store.client.ttl(keys.owner_message_key(OWNER, "msg-ttl")) <= 60
    ttl = await store.client.ttl(keys.owner_tasks_key(OWNER))  # sessions' tasks live there too
    assert TASK_TTL_S < ttl <= TASK_TTL_S + keys.IDEMPOTENCY_GRACE_S


async def test_claims_of_different_owners_do_not_collide(task_store: TaskStore) -> None:
    assert await claim_of(task_store, "alice", "msg-1", "t-alice", now_ms=1) == Claim("claimed")
    assert await claim_of(task_store, "bob", "msg-1", "t-bob", now_ms=1) == Claim("claimed")
    repeat = await claim_of(task_store, "bob", "msg-1", "t-x", now_ms=1)
    assert repeat == Claim("earlier", task_id="t-bob")


async def test_a_stored_task_reads_back_equal(store: RedisClient, task_store: TaskStore) -> None:
    original = record("task-round-trip", status_ms=1_234)

    await task_store.put(original, ttl_s=60)

    assert await task_store.get("task-round-trip") == original
    assert 0 < await store.client.ttl(keys.task_key("task-round-trip")) <= 60


async def test_an_unknown_task_reads_as_none(task_store: TaskStore) -> None:
    assert await task_store.get("no-such-task") is None


async def test_owner_tasks_skips_missing_tasks_and_prunes_old_entries(
    store: RedisClient, task_store: TaskStore
) -> None:
    await sent(task_store, record("old", status_ms=1_000), ttl_s=TASK_TTL_S)
    await sent(task_store, record("recent", status_ms=5_000), ttl_s=TASK_TTL_S)
    # a claim whose task write never happened (a crash between the two steps)
    await claim_of(task_store, OWNER, "msg-lost", "lost", now_ms=6_000, ttl_s=TASK_TTL_S)

    tasks = await listed(task_store, OWNER, cut_off_ms=2_000)

    assert [t.task.id for t in tasks] == ["recent"]
    index = await store.client.zrange(keys.owner_tasks_key(OWNER), 0, -1)
    assert index == [b"recent", b"lost"]  # the old entry is pruned, the missing one kept
    assert await task_store.get("old") is not None  # pruning touches the index only


async def test_owner_tasks_keeps_an_entry_exactly_at_the_cut_off(task_store: TaskStore) -> None:
    # kept past the cut-off (a REJECTED task's own expiry is not the rule this is about)
    await sent(task_store, record("edge", status_ms=2_000), ttl_s=2 * TASK_TTL_S)

    tasks = await listed(task_store, OWNER, cut_off_ms=2_000)

    assert [t.task.id for t in tasks] == ["edge"]


async def test_owner_tasks_of_an_owner_without_tasks_is_empty(task_store: TaskStore) -> None:
    assert await task_store.index("nobody", now_ms=0, ttl_s=TASK_TTL_S, limit=1000) == []
    assert await listed(task_store, "nobody", cut_off_ms=0) == []


async def test_owner_tasks_never_returns_another_owners_task(
    store: RedisClient, task_store: TaskStore
) -> None:
    await task_store.put(record("theirs", owner="someone-else", status_ms=5_000), ttl_s=60)
    await store.client.zadd(keys.owner_tasks_key(OWNER), {"theirs": 5_000})

    assert await listed(task_store, OWNER, cut_off_ms=0) == []
    assert await task_store.index(OWNER, now_ms=0, ttl_s=TASK_TTL_S, limit=1000) == []


# --- an unreachable server ---------------------------------------------------------------------


@pytest.fixture
async def dead_store() -> RedisClient:
    return RedisClient.from_url(dead_tcp_url())


async def read_refused(client: RedisClient) -> ServiceError:
    """The error a read through `client` fails with; the client is closed after it."""
    try:
        with pytest.raises(ServiceError) as caught:
            await TaskStore(client).get("any")
    finally:
        await client.aclose()
    return caught.value


async def test_a_dead_server_fails_reads_with_upstream_unavailable(dead_store: RedisClient) -> None:
    refused = await read_refused(dead_store)

    assert code_of(refused) == UNAVAILABLE
    assert error_object(refused)["data"][0]["metadata"] == {
        "service": "redis",
        "retryable": "true",
    }


async def test_a_dead_server_fails_writes_with_upstream_unavailable(
    dead_store: RedisClient,
) -> None:
    try:
        with pytest.raises(ServiceError) as put:
            await TaskStore(dead_store).put(record("t"), ttl_s=60)
        with pytest.raises(ServiceError) as claim:
            await claim_of(TaskStore(dead_store), OWNER, "m", "t", now_ms=1)
        with pytest.raises(ServiceError) as listing:
            await TaskStore(dead_store).index(OWNER, now_ms=0, ttl_s=60, limit=1000)
    finally:
        await dead_store.aclose()

    assert code_of(put.value) == code_of(claim.value) == code_of(listing.value) == UNAVAILABLE


async def test_a_dead_server_answers_ping_with_false(dead_store: RedisClient) -> None:
    try:
        assert await dead_store.ping() is False
    finally:
        await dead_store.aclose()


async def test_a_vanished_unix_socket_fails_with_upstream_unavailable(tmp_path: Path) -> None:
    gone = RedisClient.from_url(f"unix://{tmp_path / 'gone.sock'}")
    refused = await read_refused(gone)

    assert code_of(refused) == UNAVAILABLE


def _aof_mentions(redis_dir: Path, needle: bytes, timeout_s: float = 3.0) -> bool:
    """Whether an append-only file under `redis_dir` holds `needle` (written within a beat)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for path in redis_dir.rglob("*.aof"):
            if needle in path.read_bytes():
                return True
        time.sleep(0.05)
    return False


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value
