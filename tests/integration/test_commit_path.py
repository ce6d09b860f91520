"""The commit path against a real Redis (profile §6, §11): one slot per session, one atomic script
per commit, version conflicts retried, replays writing nothing, NOSCRIPT survived, events capped."""

from __future__ import annotations

import asyncio
from typing import Any

import msgspec
import pytest
from redis.crc import key_slot

from realtime.a2a.projection import follow, task_metadata
from realtime.engine.core import MAX_ATTEMPTS, CreateClaim, Engine
from realtime.engine.entries import Command, params_digest
from realtime.engine.outcomes import Applied, Decided, Replayed
from realtime.errors import ServiceError
from realtime.methods.commands import apply_command, outcome_of, stored_result
from realtime.rpc.errors import code_of, error_object
from realtime.settings import Settings
from realtime.store import keys
from realtime.store.records import (
    OUTCOME_DECODER,
    TASK_DECODER,
    Loaded,
    PendingEffect,
)
from realtime.store.redis_client import RedisClient
from realtime.store.sessions import Commit, Committed, SessionStore
from state_machines import Capabilities, CreateRoom, DeleteRoom
from state_machines import session as machine
from tests.conftest import TEST_SECRET
from tests.integration.engine_helpers import OWNER, new_id, new_session

pytestmark = pytest.mark.redis

REGISTER = "aim.realtime.RegisterEndpoint"
END = "aim.realtime.EndSession"
CAPS = Capabilities(True, True, False, False, ("text",))


def settings() -> Settings:
    return Settings(auth_hs256_secret=TEST_SECRET, rate_limit_rps=0)


def engine_on(sessions: SessionStore) -> Engine:
    return Engine(settings(), sessions, project=follow)


def render(decided: Decided) -> dict[str, Any]:
    return {
        "version": decided.version,
        "state": decided.session.state,
        "endpoints": [e.client_endpoint_key for e in decided.session.endpoints],
    }


def response(done: Applied | Replayed) -> bytes:
    """What the client receives: the stored result."""
    return stored_result(settings(), outcome_of(done))


async def register(
    engine: Engine, session_id: str, device: str, command_id: str | None = None
) -> Applied | Replayed:
    command_id = command_id or new_id()
    params = {
        "sessionId": session_id,
        "sessionEpoch": 1,
        "commandId": command_id,
        "clientEndpointKey": device,
    }
    event = machine.RegisterEndpoint(
        epoch=1,
        endpoint_id=new_id(),
        client_endpoint_key=device,
        capabilities=CAPS,
        max_endpoints=8,
    )
    command = Command(REGISTER, command_id, params_digest(REGISTER, params))
    return await apply_command(
        engine, session_id, event, owner=OWNER, command=command, render=render
    )


async def end(engine: Engine, session_id: str, command_id: str) -> Applied | Replayed:
    params = {"sessionId": session_id, "commandId": command_id, "reason": "done"}
    command = Command(END, command_id, params_digest(END, params))
    return await apply_command(
        engine, session_id, machine.End("done"), owner=OWNER, command=command, render=render
    )


class Layout(msgspec.Struct):
    """Everything one commit writes, read straight from Redis."""

    version: int
    snapshot: bytes | None
    task: bytes | None
    outcomes: int
    events: int
    outbox: int


async def layout(store: RedisClient, session_id: str) -> Layout:
    client = store.client
    version, snapshot = await client.hmget(keys.session_key(session_id), "v", "s")
    return Layout(
        int(version or 0),
        snapshot,
        await client.get(keys.session_task_key(session_id)),
        await client.hlen(keys.commands_key(session_id)),
        await client.xlen(keys.events_key(session_id)),
        await client.hlen(keys.outbox_key(session_id)),
    )


async def events_of(store: RedisClient, session_id: str) -> list[dict[str, Any]]:
    entries = await store.client.xrange(keys.events_key(session_id))
    return [msgspec.json.decode(fields[b"e"]) for _, fields in entries]


# --- one slot per session ------------------------------------------------------------------------


def session_keys(session_id: str, task_id: str) -> list[str]:
    return [
        keys.session_key(session_id),
        keys.session_task_key(session_id),
        keys.commands_key(session_id),
        keys.events_key(session_id),
        keys.outbox_key(session_id),
        keys.runner_lease_key(session_id),
        keys.timeline_key(session_id),
        keys.session_timers_key(session_id),
        keys.task_key(task_id),
    ]


def test_every_key_of_a_session_is_on_one_cluster_slot():
    slots = set()
    for _ in range(32):
        task_id = new_id()
        session_id = keys.tag_for_task(task_id)  # a realtime session's id is its task's tag
        assert keys.session_task_key(session_id) == keys.task_key(task_id)
        assert keys.task_key(task_id.upper()) == keys.task_key(task_id)
        found = {key_slot(key.encode()) for key in session_keys(session_id, task_id)}
        assert len(found) == 1, found
        assert found == {key_slot(session_id.encode())}
        slots |= found
    assert len(slots) > 16  # different sessions spread over the slots


def test_owner_keys_share_one_slot_per_owner():
    slots = set()
    for index in range(16):
        owner = f"{index:032x}"
        owner_keys = [
            keys.owner_tasks_key(owner),
            keys.owner_live_sessions_key(owner),
            keys.owner_message_key(owner, new_id()),
            keys.owner_message_key(owner, "a message id with {braces} and spaces"),
            keys.owner_client_session_key(owner, new_id()),
            keys.owner_client_session_key(owner, "CLIENT-SESSION-{x}"),
        ]
        found = {key_slot(key.encode()) for key in owner_keys}
        assert len(found) == 1, (owner, found)
        slots |= found
    assert len(slots) > 8


# --- the commit script ---------------------------------------------------------------------------


async def test_commit_writes_everything_at_once_and_a_replay_writes_nothing(store):
    sessions = SessionStore(store)
    engine = engine_on(sessions)
    session_id = await new_session(engine, provisioned=False)

    created = await layout(store, session_id)
    assert (created.version, created.outcomes, created.events, created.outbox) == (1, 0, 1, 1)
    assert await store.client.zscore(keys.outbox_due_key(), session_id) is not None
    for key in (keys.session_key, keys.session_task_key, keys.events_key, keys.outbox_key):
        assert await store.client.ttl(key(session_id)) > 0

    command_id = new_id()
    ended = await end(engine, session_id, command_id)
    assert isinstance(ended, Applied)
    after = await layout(store, session_id)
    assert (after.version, after.outcomes, after.events, after.outbox) == (2, 1, 2, 2)
    assert await store.client.ttl(keys.commands_key(session_id)) > 0
    loaded = await sessions.load(session_id, command_id)
    assert loaded.record is not None
    assert loaded.task is not None
    assert loaded.outcome is not None
    session = loaded.record.session
    assert session.state == "ending"
    # the task record was written by the same commit: it agrees with the snapshot
    task = TASK_DECODER.decode(after.task)
    assert task.version == session.task_version
    assert task.task.status.state == "TASK_STATE_COMPLETED"
    assert task.task.metadata == msgspec.to_builtins(task_metadata(session))
    outcome = OUTCOME_DECODER.decode(
        await store.client.hget(keys.commands_key(session_id), command_id)
    )
    assert (outcome.method, outcome.session_epoch) == (END, session.epoch)
    assert msgspec.json.decode(outcome.result) == {"version": 2, "state": "ending", "endpoints": []}
    assert [e["to"] for e in await events_of(store, session_id)] == ["provisioning", "ending"]
    effects = [type(e.effect) for _, e in await sessions.pending(session_id)]
    assert effects == [CreateRoom, DeleteRoom]

    # the same command again: the stored outcome, nothing written
    replayed = await end(engine, session_id, command_id)
    assert isinstance(replayed, Replayed)
    assert response(replayed) == response(ended)
    assert await layout(store, session_id) == after

    # even a commit whose expected version matches is a replay when its commandId is known
    direct = await sessions.commit(
        Commit(
            session_id,
            expected_version=after.version,
            record=loaded.record,
            task=loaded.task,
            command_id=command_id,
            outcome=b"{}",
            events=[b'{"must":"not be written"}'],
            effects=[("999999999999-00", PendingEffect(effect=DeleteRoom("x", 1), epoch=1))],
            ttl_s=60,
            window_s=60,
            due_ms=0,
            now_ms=0,
        )
    )
    assert direct.status == "replay"
    assert direct.outcome == outcome
    assert await layout(store, session_id) == after

    # a stale version is a conflict that writes nothing either
    stale = await sessions.commit(
        Commit(
            session_id,
            expected_version=1,
            record=loaded.record,
            task=loaded.task,
            command_id=None,
            outcome=b"",
            events=[b'{"must":"not be written"}'],
            effects=[],
            ttl_s=60,
            window_s=60,
            due_ms=0,
            now_ms=0,
        )
    )
    assert stale == Committed("conflict", 2, None)
    assert await layout(store, session_id) == after


async def test_commits_survive_a_script_flush(store):
    sessions = SessionStore(store)
    engine = engine_on(sessions)
    session_id = await new_session(engine)
    before = await layout(store, session_id)

    await store.client.script_flush()
    assert await store.client.script_exists(store.scripts.commit.sha) == [False]
    applied = await register(engine, session_id, "phone")
    assert isinstance(applied, Applied)
    assert (await layout(store, session_id)).version == before.version + 1
    assert await store.client.script_exists(store.scripts.commit.sha) == [True]

    await store.client.script_flush()  # the other scripts load themselves as well
    status, _ = await sessions.claim_create(
        OWNER,
        message_id=new_id(),
        client_session_id=new_id(),
        task_id=new_id(),
        session_id=new_id(),
        digest="sha256:0",
        score_ms=1,
        ttl_s=60,
        limit=100,
        task_limit=100,
    )
    assert status == "ok"
    assert await sessions.lease(session_id, "token", 10_000)
    await sessions.release(session_id, "token")
    assert await store.client.exists(keys.runner_lease_key(session_id)) == 0


# --- version conflicts ---------------------------------------------------------------------------


class GatedSessions(SessionStore):
    """Holds its first load until `gate` opens, and records what each commit returned."""

    def __init__(self, store: RedisClient) -> None:
        super().__init__(store)
        self.gate = asyncio.Event()
        self.loaded = asyncio.Event()
        self.loads = 0
        self.statuses: list[str] = []

    async def load(self, session_id: str, command_id: str | None = None) -> Loaded:
        loaded = await super().load(session_id, command_id)
        self.loads += 1
        if self.loads == 1:
            self.loaded.set()
            await self.gate.wait()
        return loaded

    async def commit(self, commit: Commit) -> Committed:
        committed = await super().commit(commit)
        self.statuses.append(committed.status)
        return committed


async def race(store: RedisClient, session_id: str, first_id: str, second_id: str, devices):
    """Both engines load the same version; the first commits, then the second tries."""
    one, two = GatedSessions(store), GatedSessions(store)
    first = asyncio.create_task(register(engine_on(one), session_id, devices[0], first_id))
    second = asyncio.create_task(register(engine_on(two), session_id, devices[1], second_id))
    async with asyncio.timeout(5):
        await one.loaded.wait()
        await two.loaded.wait()
        one.gate.set()
        applied_one = await first
        two.gate.set()
        applied_two = await second
    return (one, applied_one), (two, applied_two)


async def test_a_version_conflict_reloads_and_applies_both_in_order(store):
    engine = engine_on(SessionStore(store))
    session_id = await new_session(engine)
    before = await layout(store, session_id)
    first_id, second_id = new_id(), new_id()

    (one, a), (two, b) = await race(store, session_id, first_id, second_id, ("phone", "laptop"))

    assert (one.statuses, one.loads) == (["ok"], 1)
    assert (two.statuses, two.loads) == (["conflict", "ok"], 2)  # reloaded and decided again
    assert msgspec.json.decode(response(a)) == {
        "version": before.version + 1,
        "state": "ready",
        "endpoints": ["phone"],
    }
    assert msgspec.json.decode(response(b)) == {
        "version": before.version + 2,
        "state": "ready",
        "endpoints": ["phone", "laptop"],
    }
    after = await layout(store, session_id)
    assert (after.version, after.events, after.outcomes) == (
        before.version + 2,
        before.events + 2,
        before.outcomes + 2,
    )
    loaded = await SessionStore(store).load(session_id)
    assert loaded.record is not None
    assert [e.client_endpoint_key for e in loaded.record.session.endpoints] == ["phone", "laptop"]
    tail = (await events_of(store, session_id))[-2:]
    assert [(e["commandId"], e["version"]) for e in tail] == [
        (first_id, before.version + 1),
        (second_id, before.version + 2),
    ]


async def test_concurrent_duplicates_apply_once(store):
    engine = engine_on(SessionStore(store))
    session_id = await new_session(engine)
    before = await layout(store, session_id)
    command_id = new_id()

    (one, a), (two, b) = await race(store, session_id, command_id, command_id, ("phone", "phone"))

    assert one.statuses == ["ok"]
    assert two.statuses == ["replay"]  # the script finds the outcome before the version check
    assert isinstance(a, Applied)
    assert isinstance(b, Replayed)
    assert response(b) == response(a)
    after = await layout(store, session_id)
    assert (after.version, after.events, after.outcomes) == (
        before.version + 1,
        before.events + 1,
        before.outcomes + 1,
    )


async def test_conflicts_are_retried_a_bounded_number_of_times(store):
    class AlwaysBehind(SessionStore):
        commits = 0

        async def commit(self, session_id: str, **kwargs: Any) -> Committed:
            self.commits += 1
            return Committed("conflict", 999, None)

    sessions = AlwaysBehind(store)
    session_id = await new_session(engine_on(SessionStore(store)))
    with pytest.raises(ServiceError) as raised:
        await register(engine_on(sessions), session_id, "phone")
    assert code_of(raised.value) == -31012
    assert error_object(raised.value)["data"][0]["metadata"] == {
        "service": "redis",
        "retryable": "true",
    }
    assert sessions.commits == MAX_ATTEMPTS


# --- the event stream ----------------------------------------------------------------------------


async def test_the_event_stream_is_capped(store):
    sessions = SessionStore(store)
    session_id = await new_session(engine_on(sessions), provisioned=False)
    loaded = await sessions.load(session_id)
    assert loaded.record is not None
    assert loaded.task is not None
    version = loaded.version
    total = keys.EVENTS_MAXLEN + 300
    for index in range(total - 1):
        committed = await sessions.commit(
            Commit(
                session_id,
                expected_version=version,
                record=loaded.record,
                task=loaded.task,
                command_id=None,
                outcome=b"",
                events=[msgspec.json.encode({"n": index})],
                effects=[],
                ttl_s=600,
                window_s=600,
                due_ms=0,
                now_ms=0,
            )
        )
        assert committed.status == "ok"
        version = committed.version
    assert version == total
    length = await store.client.xlen(keys.events_key(session_id))
    # MAXLEN ~ trims whole stream nodes (100 entries by default): never below the cap
    assert keys.EVENTS_MAXLEN <= length < keys.EVENTS_MAXLEN + 200
    assert length < total
    newest = await store.client.xrevrange(keys.events_key(session_id), count=1)
    assert msgspec.json.decode(newest[0][1][b"e"]) == {"n": total - 2}
    info = await store.client.xinfo_stream(keys.events_key(session_id))
    assert info["entries-added"] == total


# --- the create claim and the live index ---------------------------------------------------------


async def test_a_create_at_the_live_limit_forgets_what_is_over_or_gone_and_claims_again(store):
    engine = Engine(
        Settings(auth_hs256_secret=TEST_SECRET, rate_limit_rps=0, max_sessions_per_principal=3),
        SessionStore(store),
        project=follow,
    )
    live_key = keys.owner_live_sessions_key(OWNER)

    async def indexed() -> set[str]:
        return {member.decode() for member in await store.client.zrange(live_key, 0, -1)}

    def claim() -> CreateClaim:
        task_id = new_id()
        return CreateClaim(
            new_id(), new_id(), task_id, keys.tag_for_task(task_id), "sha256:x", 3, live_limit=3
        )

    live, ending = await new_session(engine), await new_session(engine)
    assert isinstance(await end(engine, ending, new_id()), Applied)  # no longer live
    await store.client.zadd(live_key, {live: 1, ending: 2})
    gone = claim()  # claimed, never committed (the process stopped before its commit)
    assert (await engine.claim_create(OWNER, gone)).status == "ok"
    assert await indexed() == {live, ending, gone.session_id}  # the limit: 3

    second = claim()
    assert (await engine.claim_create(OWNER, second)).status == "ok"
    assert await indexed() == {live, second.session_id}
