"""`aim-realtime worker` subprocesses beside a service created in this process without a worker
(`create_app(..., run_worker=False)`, what `aim-realtime serve --no-worker` runs), sharing one
Redis and the LiveKit stand-in; what happened read straight from Redis; and the journeys run
both on a single Redis (tests/integration/test_workers.py) and on a Redis Cluster
(tests/cluster/test_workers.py).

Sessions get a short idle timeout, so every ready session without a device arms an idle timer
that comes due within seconds. The `workers` and `runner_log` fixtures are registered by the
conftest.py of the folders that use them.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import sys
import time
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator
from datetime import datetime
from pathlib import Path
from typing import IO, Any

import httpx
import msgspec
import pytest

from realtime.app import create_app
from realtime.settings import Settings
from realtime.store import keys
from realtime.store.redis_client import RedisClient
from realtime.store.sessions import SessionStore
from tests.conftest import LIVEKIT_KEY, LIVEKIT_SECRET, TEST_SECRET, livekit_settings, serving
from tests.e2e.realtime_helpers import call, create_session, session_of

AGENT = "aim-realtime-agent"
IDLE_S = 2  # AIM_IDLE_TIMEOUT_S: a ready session without a device ends this long after
LEASE_S = 2  # AIM_WORKER_LEASE_S: how long a claimed timer / a session's outbox stays claimed
STARTUP_TIMEOUT_S = 30.0  # a worker imports the whole service first (~3 s here)
READY_LINE = "worker running"
FIRED_LINE = "timer idle fired"


def need_redis(redis_url: str | None) -> str:
    """Worker processes share state only through a real Redis."""
    if redis_url is None:
        if os.environ.get("AIM_REQUIRE_REDIS") == "1":
            pytest.fail("AIM_REQUIRE_REDIS=1 but there is no Redis for the worker processes")
        pytest.skip("worker processes need a real Redis (the embedded store is per process)")
    return redis_url


def now_ms() -> int:
    return int(time.time() * 1000)


def at_ms(stamp: str) -> int:
    """An RFC 3339 event time (`...T12:00:00.123Z`) in ms since the epoch."""
    return round(datetime.fromisoformat(stamp).timestamp() * 1000)


# --- worker processes ---------------------------------------------------------------------------


def _log_file(path: Path) -> IO[bytes]:
    return path.open("wb")


class Worker:
    """One `aim-realtime worker` subprocess with its output in a file."""

    def __init__(self, name: str, process: asyncio.subprocess.Process, log: Path) -> None:
        self.name, self.process, self.log = name, process, log

    def output(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    @property
    def running(self) -> bool:
        return self.process.returncode is None

    async def wait_ready(self, within: float = STARTUP_TIMEOUT_S) -> None:
        deadline = time.monotonic() + within
        while READY_LINE not in self.output():
            if not self.running:
                pytest.fail(f"worker {self.name} exited early:\n{self.output()}")
            if time.monotonic() > deadline:
                pytest.fail(f"worker {self.name} not running after {within} s:\n{self.output()}")
            await asyncio.sleep(0.05)

    async def kill(self) -> None:
        """kill -9: no shutdown code runs, claims and leases stay behind in Redis."""
        self.process.send_signal(signal.SIGKILL)
        assert await self.process.wait() == -signal.SIGKILL

    async def stop(self) -> None:
        if self.running:
            self.process.terminate()
            try:
                async with asyncio.timeout(15):
                    await self.process.wait()
            except TimeoutError:
                self.process.kill()
                await self.process.wait()


StartWorker = Callable[..., Awaitable[Worker]]


@pytest.fixture
async def workers(
    redis_url: str | None, store: RedisClient, livekit: Any, tmp_path: Path
) -> AsyncIterator[StartWorker]:
    """`await workers(name, redis=url, env={...})` starts a worker on the test Redis (after
    `store` has flushed it) and the LiveKit stand-in, with `env` added to its environment; every
    worker is stopped when the test ends."""
    url = need_redis(redis_url)
    started: list[Worker] = []
    base = {k: v for k, v in os.environ.items() if not k.startswith(("AIM_", "OTEL_"))}

    async def start(
        name: str, *, redis: str | None = None, env: dict[str, str] | None = None
    ) -> Worker:
        environ = {
            **base,
            "AIM_REDIS_URL": redis or url,
            # on the Cluster pass, workers are started as an operator starts them there
            "AIM_REDIS_CLUSTER": "1" if store.cluster and redis is None else "0",
            "AIM_LIVEKIT_URL": livekit.ws_url,
            "AIM_LIVEKIT_API_KEY": LIVEKIT_KEY,
            "AIM_LIVEKIT_API_SECRET": LIVEKIT_SECRET,
            "AIM_AUTH_HS256_SECRET": TEST_SECRET,
            "AIM_IDLE_TIMEOUT_S": str(IDLE_S),
            "AIM_WORKER_LEASE_S": str(LEASE_S),
            "AIM_DATA_DIR": str(tmp_path / f"data-{name}"),
            "PYTHONUNBUFFERED": "1",
            **(env or {}),
        }
        log = tmp_path / f"worker-{name}.log"
        with _log_file(log) as out:
            process = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "realtime.cli",
                "worker",
                cwd=tmp_path,  # no stray .env is read
                env=environ,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=out,
                stderr=asyncio.subprocess.STDOUT,
            )
        worker = Worker(name, process, log)
        started.append(worker)
        return worker

    try:
        yield start
    finally:
        await asyncio.gather(*(worker.stop() for worker in started))


def outputs(*workers: Worker) -> str:
    return "\n".join(f"--- worker {w.name} ---\n{w.output()[-4000:]}" for w in workers)


# --- reading what happened, straight from Redis --------------------------------------------------


def settings_for(livekit: Any, **overrides: Any) -> Settings:
    values: dict[str, Any] = {
        "idle_timeout_s": IDLE_S,
        "worker_lease_s": LEASE_S,
        "max_sessions_per_principal": 64,
        **overrides,
    }
    return livekit_settings(livekit, **values)


async def create_ready(http: httpx.AsyncClient, count: int) -> list[str]:
    """`count` sessions created at once; each is ready (provisioned inline) on return."""
    bodies = await asyncio.gather(*(create_session(http) for _ in range(count)))
    session_ids = []
    for body in bodies:
        assert "result" in body, body
        found = session_of(body["result"]["task"])
        assert found["sessionState"] == "ready", found
        session_ids.append(found["sessionId"])
    return session_ids


async def states(store: RedisClient, session_ids: Iterable[str]) -> dict[str, str | None]:
    sessions = SessionStore(store)
    ids = list(session_ids)
    loaded = await asyncio.gather(*(sessions.load(sid) for sid in ids))
    return {
        sid: (got.record.session.state if got.record else None)
        for sid, got in zip(ids, loaded, strict=True)
    }


async def transitions(store: RedisClient, session_id: str) -> list[dict[str, Any]]:
    """The session's event stream (`e`: JSON with `from`, `to`, `version`, `at`)."""
    entries = await store.client.xrange(keys.events_key(session_id))
    return [msgspec.json.decode(fields[b"e"]) for _, fields in entries]


async def idle_timers(store: RedisClient, session_ids: Iterable[str]) -> dict[str, int]:
    """The idle timers of these sessions still in `aim:timers:due`, with their scores (ms)."""
    wanted = set(session_ids)
    members = await store.client.zrange(keys.timers_due_key(), 0, -1, withscores=True)
    found = {}
    for raw, score in members:
        member = raw.decode()
        session_id, kind = member.split("|")[:2]
        if kind == "idle" and session_id in wanted:
            found[member] = int(score)
    return found


async def wait_until(
    check: Callable[[], Awaitable[bool]], *, within: float, what: str, logs: str = ""
) -> None:
    deadline = time.monotonic() + within
    while not await check():
        if time.monotonic() > deadline:
            pytest.fail(f"not {what} within {within} s\n{logs}")
        await asyncio.sleep(0.05)


def all_in(store: RedisClient, session_ids: list[str], state: str) -> Callable[[], Awaitable[bool]]:
    async def check() -> bool:
        return set((await states(store, session_ids)).values()) == {state}

    return check


async def assert_ended_once_by_idle_timer(
    store: RedisClient, http: httpx.AsyncClient, session_ids: list[str]
) -> dict[str, int]:
    """Each session ended by its idle timer with exactly one move into `ending` and one into
    `ended`; returns when each moved into `ending` (ms)."""
    ending_at = {}
    for sid in session_ids:
        body = await call(http, "GetSession", sessionId=sid)
        session = body["result"]["session"]
        assert (session["state"], session.get("endReason")) == ("ended", "idle_timeout"), session
        moves = await transitions(store, sid)
        into = Counter(event["to"] for event in moves)
        assert (into["ending"], into["ended"]) == (1, 1), moves
        [ending] = [event for event in moves if event["to"] == "ending"]
        assert ending["from"] == "ready", moves
        ending_at[sid] = at_ms(ending["at"])
    return ending_at


def delete_room_calls(livekit: Any, session_ids: list[str]) -> dict[str, list[str]]:
    """DeleteRoom answers (`ok`, `not_found`, ...) per room of these sessions."""
    rooms = {f"aim-{sid}-e1" for sid in session_ids}
    found: dict[str, list[str]] = {}
    for c in livekit.calls_to("DeleteRoom"):
        if c.request is not None and c.request.room in rooms:
            found.setdefault(c.request.room, []).append(c.code)
    return found


class Collect(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


@pytest.fixture
def runner_log() -> Iterator[list[str]]:
    """What this process's outbox runner logs. On its logger itself: creating the Litestar app
    replaces the root logger's handlers (its default logging config), caplog's included."""
    logger = logging.getLogger("realtime.worker.runner")
    handler = Collect()
    logger.addHandler(handler)
    try:
        yield handler.messages
    finally:
        logger.removeHandler(handler)


# --- the journeys ---------------------------------------------------------------------------------

SESSIONS = 40


async def two_workers_and_a_kill_9_fire_every_timer_once(store, livekit, workers):
    """Two workers share the due timers; once about half of the sessions have left `ready`, the
    worker that has fired more of them is killed with SIGKILL, its room deletions still in
    flight. The survivor takes over what the dead one held: timers it had claimed (after their
    lease) and deletions it had started (after the outbox's retry grace and the dead runner's
    lease)."""
    a, b = await workers("a"), await workers("b")
    await asyncio.gather(a.wait_ready(), b.wait_ready())
    # LiveKit deletes at once but answers 1 s later, so the kill finds deletions in flight
    livekit.delay(1.0, method="DeleteRoom", effect_first=True)
    app = create_app(settings_for(livekit), store=store, run_worker=False)
    async with serving(app) as base, httpx.AsyncClient(base_url=base, timeout=30) as http:
        session_ids = await create_ready(http, SESSIONS)

        async def half_gone() -> bool:
            gone = [s for s in (await states(store, session_ids)).values() if s != "ready"]
            return len(gone) >= SESSIONS // 2

        await wait_until(half_gone, within=20, what="half of the sessions idle", logs=outputs(a, b))
        victim, survivor = sorted((a, b), key=lambda w: -w.output().count(FIRED_LINE))
        assert FIRED_LINE in victim.output()
        await victim.kill()
        await wait_until(
            all_in(store, session_ids, "ended"),
            within=25,
            what="every session ended after the kill",
            logs=outputs(a, b),
        )
        await assert_ended_once_by_idle_timer(store, http, session_ids)

    # one deletion per room; a second one only where the dead worker's call was cut off: it
    # had deleted the room but never recorded that, so the survivor retried and LiveKit said
    # not_found (which counts as done) — and the session still moved to `ended` only once
    deletions = delete_room_calls(livekit, session_ids)
    assert set(deletions) == {f"aim-{sid}-e1" for sid in session_ids}
    for room, codes in deletions.items():
        assert codes in (["ok"], ["ok", "not_found"]), (room, codes)
    retried = [room for room, codes in deletions.items() if len(codes) == 2]
    assert retried, "the kill cut off no deletion: this run did not exercise the takeover"
    assert not any(f"aim-{sid}-e1" in livekit.rooms for sid in session_ids)
    assert await idle_timers(store, session_ids) == {}
    assert survivor.running, outputs(survivor)
    assert "Traceback" not in survivor.output(), outputs(survivor)


async def a_worker_process_retries_provisioning_once_livekit_is_back(
    store, livekit, workers, runner_log
):
    """LiveKit is down while a session is created (returnImmediately) by a service without a
    worker: the effects stay in the session's outbox. Nothing retries them until a worker
    process runs; it provisions the session once LiveKit is back: ready, one dispatch."""
    sessions = SessionStore(store)
    await livekit.set_down(True)
    app = create_app(settings_for(livekit), store=store, run_worker=False)
    async with serving(app) as base, httpx.AsyncClient(base_url=base, timeout=30) as http:
        created = await create_session(http, returnImmediately=True)
        found = session_of(created["result"]["task"])
        assert found["sessionState"] == "provisioning"
        session_id = found["sessionId"]
        room = f"aim-{session_id}-e1"

        async def attempted() -> bool:
            return any(entry.attempts >= 1 for _, entry in await sessions.pending(session_id))

        await wait_until(attempted, within=10, what="the inline attempt failed")
        failed = f"effect CreateRoom of session {session_id} failed (attempt 1): LiveKit"
        assert any(message.startswith(failed) for message in runner_log), runner_log
        await livekit.set_down(False)
        await asyncio.sleep(1.5)  # past the 0.5 s backoff: still nobody retries
        assert (await states(store, [session_id]))[session_id] == "provisioning"
        assert await store.client.hlen(keys.outbox_key(session_id)) >= 1
        assert await store.client.zscore(keys.outbox_due_key(), session_id) is not None
        assert not livekit.calls  # the service without a worker did not try again
        body = await call(http, "GetSession", sessionId=session_id)
        assert body["result"]["session"]["state"] == "provisioning"

        worker = await workers("solo")
        await worker.wait_ready()
        await wait_until(
            all_in(store, [session_id], "ready"),
            within=15,
            what="provisioned by the worker",
            logs=outputs(worker),
        )
        body = await call(http, "GetSession", sessionId=session_id)
        assert body["result"]["session"]["state"] == "ready"

    assert len(livekit.dispatches_in(room, AGENT)) == 1
    # the worker's retry created the room with its dispatch, then looked: nothing more to make
    created_rooms = [
        c for c in livekit.calls_to("CreateRoom") if c.request and c.request.name == room
    ]
    assert [c.code for c in created_rooms] == ["ok"]
    assert livekit.calls_to("CreateDispatch") == []
    assert await sessions.pending(session_id) == []
    assert await store.client.zscore(keys.outbox_due_key(), session_id) is None
    assert "Traceback" not in worker.output(), outputs(worker)
