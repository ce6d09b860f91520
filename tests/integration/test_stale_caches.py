"""Two `serve` processes over one Redis, each deciding commands on the sessions as it last saw
them: whichever process a command reaches, and however stale its copy, every command applies
exactly once, at a version no other command took, and a retry replays it on either process."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from realtime.a2a.projection import follow
from realtime.engine.core import Engine
from realtime.engine.entries import Command, params_digest
from realtime.engine.outcomes import Applied, Decided, Replayed
from realtime.errors import ServiceError
from realtime.methods.commands import apply_command
from realtime.rpc.errors import code_of
from realtime.settings import Settings
from realtime.store import keys
from realtime.store.redis_client import RedisClient
from realtime.store.sessions import SessionStore
from state_machines import Capabilities
from state_machines import session as machine
from tests.cli_processes import Service, needs, serve_environ, serving
from tests.conftest import TEST_SECRET
from tests.e2e.realtime_helpers import CAPS, call, create_session, new_id, session_of
from tests.integration.engine_helpers import OWNER, new_session

pytestmark = pytest.mark.redis


@pytest.fixture
def services(tmp_path: Path, redis_url: str | None, livekit: Any) -> Iterator[list[Service]]:
    url = needs(redis_url)
    started: list[Service] = []
    with (
        serving(_dir(tmp_path, "a"), **_environ(url, livekit)) as first,
        serving(_dir(tmp_path, "b"), **_environ(url, livekit)) as second,
    ):
        started.extend((first, second))
        yield started


def _dir(tmp_path: Path, name: str) -> Path:
    path = tmp_path / name
    path.mkdir(mode=0o700)
    return path


def _environ(redis_url: str, livekit: Any) -> dict[str, str]:
    return serve_environ(
        redis_url, livekit, AIM_RATE_LIMIT_RPS="0", AIM_LIVEKIT_PUBLIC_URL="wss://media.example"
    )


async def _register(http: httpx.AsyncClient, session_id: str, key: str, command_id: str) -> Any:
    return await call(
        http, "RegisterEndpoint", sessionId=session_id, sessionEpoch=1, commandId=command_id,
        clientEndpointKey=key, capabilities=CAPS,
    )  # fmt: skip


@pytest.mark.slow
async def test_commands_through_stale_caches_apply_once_each(services: list[Service]) -> None:
    for service in services:  # the stand-in answers in this loop: wait for them off it
        await asyncio.to_thread(service.wait_until_ready)
    async with (
        httpx.AsyncClient(base_url=services[0].base_url, timeout=30) as a,
        httpx.AsyncClient(base_url=services[1].base_url, timeout=30) as b,
    ):
        sessions = []
        for http in (a, b):
            task = (await create_session(http))["result"]["task"]
            sessions.append(session_of(task)["sessionId"])
        versions: dict[str, list[int]] = {session_id: [] for session_id in sessions}
        replies: dict[str, Any] = {}
        # each process's copy is stale for every other command: they alternate, per session
        for index in range(6):
            for session_id in sessions:
                http, other = (a, b) if index % 2 else (b, a)
                command_id = new_id()
                got = await _register(http, session_id, f"device-{index}", command_id)
                version = got["result"]["session"]["version"]
                versions[session_id].append(version)
                # the retry reaches the other process, whose copy predates the command
                again = await _register(other, session_id, f"device-{index}", command_id)
                assert again == got
                replies[command_id] = got
        # both processes at once, one commandId: it applies once; both answer its result
        session_id = sessions[0]
        command_id = new_id()
        both = await asyncio.gather(
            _register(a, session_id, "device-both", command_id),
            _register(b, session_id, "device-both", command_id),
        )
        assert both[0] == both[1]
        versions[session_id].append(both[0]["result"]["session"]["version"])

        for session_id, seen in versions.items():
            assert seen == sorted(set(seen)), seen  # every command at a version of its own
            for http in (a, b):
                now = (await call(http, "GetSession", sessionId=session_id))["result"]["session"]
                keys = sorted(e["clientEndpointKey"] for e in now["endpoints"])
                expected = [f"device-{i}" for i in range(6)]
                if session_id == sessions[0]:
                    expected.append("device-both")
                assert keys == sorted(expected)
                assert now["version"] >= seen[-1]


# --- two engines, one Redis, each with its own session cache (as two replicas) ---------------

REGISTER = "aim.realtime.RegisterEndpoint"


def _engine(store: RedisClient) -> Engine:
    settings = Settings(auth_hs256_secret=TEST_SECRET, rate_limit_rps=0)
    return Engine(settings, SessionStore(store, cache_entries=64), project=follow)


def _render(decided: Decided) -> dict[str, Any]:
    return {"version": decided.version, "epoch": decided.session.epoch}


async def _register_at(engine: Engine, session_id: str, epoch: int, device: str) -> Any:
    command_id = new_id()
    params = {"sessionId": session_id, "sessionEpoch": epoch, "commandId": command_id,
              "clientEndpointKey": device}  # fmt: skip
    event = machine.RegisterEndpoint(
        epoch=epoch,
        endpoint_id=new_id(),
        client_endpoint_key=device,
        capabilities=Capabilities(True, True, False, False, ("text",)),
        max_endpoints=8,
    )
    command = Command(REGISTER, command_id, params_digest(REGISTER, params))
    return await apply_command(
        engine, session_id, event, owner=OWNER, command=command, render=_render
    )


async def test_a_refusal_on_a_stale_copy_is_decided_again_on_the_session_as_it_is(store):
    first, second, third = _engine(store), _engine(store), _engine(store)
    session_id = await new_session(first)
    await _register_at(first, session_id, 1, "phone")  # `first` keeps the session at epoch 1
    await third.sessions.load(session_id)  # and so does `third`
    room = first.sessions.recent(session_id).record.session.room
    lost = await second.execute(session_id, machine.RoomLost(room))  # the room moves to epoch 2
    assert isinstance(lost, Applied)
    assert lost.session.epoch == 2
    assert first.sessions.recent(session_id).record.session.epoch == 1  # stale
    # epoch 2 is refused by the stale copy (a future epoch); the fresh read accepts it
    done = await _register_at(first, session_id, 2, "laptop")
    assert isinstance(done, Applied)
    assert done.session.epoch == 2
    assert done.version == lost.version + 1
    # epoch 1, which `third`'s stale copy accepts, is fenced: its commit finds the session moved
    with pytest.raises(ServiceError) as fenced:
        await _register_at(third, session_id, 1, "tablet")
    assert code_of(fenced.value) == -31002
    assert third.sessions.recent(session_id).version == done.version


async def test_a_stale_copy_of_a_session_that_expired_answers_not_found(store):
    first = _engine(store)
    session_id = await new_session(first)
    await store.client.delete(keys.session_key(session_id), keys.session_task_key(session_id))
    with pytest.raises(ServiceError) as missing:
        await _register_at(first, session_id, 1, "phone")
    assert code_of(missing.value) == -31001
    assert first.sessions.recent(session_id) is None


async def test_a_retry_of_a_command_this_process_committed_is_answered_from_its_outcome(store):
    engine = _engine(store)
    session_id = await new_session(engine)
    command_id = new_id()
    params = {"sessionId": session_id, "sessionEpoch": 1, "commandId": command_id,
              "clientEndpointKey": "phone"}  # fmt: skip
    event = machine.RegisterEndpoint(
        epoch=1,
        endpoint_id=new_id(),
        client_endpoint_key="phone",
        capabilities=Capabilities(True, True, False, False, ("text",)),
        max_endpoints=8,
    )
    command = Command(REGISTER, command_id, params_digest(REGISTER, params))
    applied = await apply_command(
        engine, session_id, event, owner=OWNER, command=command, render=_render
    )
    assert isinstance(applied, Applied)
    # the retry is not decided on the kept copy (it would commit, only for the script to find
    # the outcome): the read finds the outcome, which is the answer
    retried = await engine.decide(session_id, event, owner=OWNER, command=command)
    assert isinstance(retried, Replayed)
    assert retried.outcome.command_id == command_id
    # another process, which never saw the command, decides it on its copy and its commit
    # replays it (one round trip either way)
    other = _engine(store)
    await other.sessions.load(session_id)
    assert isinstance(await other.decide(session_id, event, owner=OWNER, command=command), Decided)
