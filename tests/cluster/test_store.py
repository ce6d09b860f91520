"""The store on a real Redis Cluster: each session's keys, written through the service, sit on
the slot of the session id and on one master, as `CLUSTER KEYSLOT`, `CLUSTER COUNTKEYSINSLOT`
and `CLUSTER GETKEYSINSLOT` of that master say (what `test_commit_path` computes locally); a
principal's keys share a slot too; and `AIM_REDIS_CLUSTER` opens a cluster client."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from realtime.app import create_app
from realtime.settings import Settings
from realtime.store import keys
from realtime.store.redis_client import RedisClient, slot_of
from realtime.store.selection import open_store
from tests.cluster import only_on_cluster
from tests.conftest import livekit_settings, serving
from tests.e2e.realtime_helpers import call, create_session, new_id, register, session_of

pytestmark = [pytest.mark.redis, only_on_cluster]

SESSIONS = 12  # spread over the three masters (all on one: about 1 in 60,000)


def text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


async def keys_per_master(store: RedisClient, pattern: str) -> dict[str, set[str]]:
    """The keys matching `pattern` on each master that holds any (KEYS asked of each)."""
    client = store.client
    found = {}
    for node in client.get_primaries():
        held = await client.keys(pattern, target_nodes=node)
        if held:
            found[node.name] = {text(key) for key in held}
    return found


async def slot_on(store: RedisClient, node_name: str, *command: Any) -> Any:
    """A CLUSTER command asked of one master."""
    client = store.client
    return await client.execute_command(*command, target_nodes=client.get_node(node_name=node_name))


@pytest.fixture
async def rt_client(livekit: Any, store: RedisClient) -> AsyncIterator[httpx.AsyncClient]:
    """A service on the cluster that lets one principal hold every session of the test."""
    settings = livekit_settings(livekit, max_sessions_per_principal=SESSIONS)
    app = create_app(settings, store=store, run_worker=False)
    async with serving(app) as base_url, httpx.AsyncClient(base_url=base_url, timeout=30) as http:
        yield http


async def test_every_key_of_a_session_lives_on_its_slot_on_one_master(
    rt_client: httpx.AsyncClient, store: RedisClient
) -> None:
    created = []
    for _ in range(SESSIONS):
        body = await create_session(rt_client)
        assert "result" in body, body
        task = body["result"]["task"]
        session_id = session_of(task)["sessionId"]
        endpoint = (await register(rt_client, session_id, 1, "phone"))["result"]["endpoint"]
        joined = await call(
            rt_client, "JoinSession", sessionId=session_id, sessionEpoch=1,
            endpointId=endpoint["endpointId"], commandId=new_id(),
        )  # fmt: skip
        assert joined["result"]["session"]["state"] == "joining", joined
        created.append((session_id, task["id"]))

    masters = set()
    for session_id, task_id in created:
        slot = slot_of(session_id)
        per_master = await keys_per_master(store, f"aim:{{{session_id}}}:*")
        assert len(per_master) == 1, per_master  # one master holds all of them
        [(master, held)] = per_master.items()
        masters.add(master)
        # what the commits wrote: snapshot, task (also GetTask's key), outcomes, events
        assert {
            keys.session_key(session_id),
            keys.session_task_key(session_id),
            keys.task_key(task_id),
            keys.commands_key(session_id),
            keys.events_key(session_id),
        } <= held, held
        for key in held:  # the server's own hash of each key
            assert await slot_on(store, master, "CLUSTER", "KEYSLOT", key) == slot, key
        # the slot holds these keys and no others, but for those of another session of this
        # test whose id hashes to the same slot (12 sessions: about 1 run in 250)
        sharing = held.copy()
        for other, _ in created:
            if other != session_id and slot_of(other) == slot:
                sharing |= (await keys_per_master(store, f"aim:{{{other}}}:*"))[master]
        in_slot = await slot_on(store, master, "CLUSTER", "GETKEYSINSLOT", slot, 100)
        assert {text(key) for key in in_slot} == sharing
        assert await slot_on(store, master, "CLUSTER", "COUNTKEYSINSLOT", slot) == len(sharing)
        # and the client routes the session there: GetSession reads it back
        got = await call(rt_client, "GetSession", sessionId=session_id)
        assert got["result"]["session"]["state"] == "joining"
    assert len(masters) >= 2, masters  # the sessions are spread: the pass uses the cluster

    # a principal's keys (live sessions, the task index and what it filters on, message and
    # clientSessionId claims)
    owners = await keys_per_master(store, "aim:{o:*}*")
    assert len(owners) == 1, owners
    [(master, owner_keys)] = owners.items()
    assert len(owner_keys) == 3 + 2 * SESSIONS, owner_keys
    slots = {await slot_on(store, master, "CLUSTER", "KEYSLOT", key) for key in owner_keys}
    assert len(slots) == 1, slots


async def test_the_cluster_url_opens_a_cluster_client(
    redis_url: str, store: RedisClient, tmp_path: Path
) -> None:
    opened, release = open_store(
        Settings(redis_url=redis_url, redis_cluster=True, data_dir=str(tmp_path))
    )
    try:
        assert (opened.cluster, opened.embedded, opened.can_block) == (True, False, False)
        assert await opened.ping()
        names = [f"aim:test:{{{index}}}" for index in range(30)]  # 30 slots, every master
        for name in names:
            await opened.client.set(name, name)
        assert [await store.client.get(name) for name in names] == [n.encode() for n in names]
        per_master = await keys_per_master(store, "aim:test:*")
        assert len(per_master) == 3, per_master
    finally:
        await opened.aclose()
        release()
    assert not (tmp_path / "redis").exists()  # no private server was started
