"""Processes over one data directory share one private redis-server (profile §16), whichever
starts first, however many start at once, and whatever a crashed one left behind."""

from __future__ import annotations

import fcntl
import json
import logging
import os
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from realtime.settings import Settings
from realtime.store.selection import open_store
from realtime.store.server import RedisUnavailableError
from tests.redis_processes import (
    StoreUser,
    redis_servers_over,
    wait_for_no_server,
)

pytestmark = [pytest.mark.redis, pytest.mark.slow]


@pytest.fixture
def users(tmp_path: Path, data_dir: Path) -> Iterator[list[StoreUser]]:
    started: list[StoreUser] = []
    yield started
    for user in started:
        user.kill()


def start(users: list[StoreUser], data_dir: Path, name: str) -> StoreUser:
    user = StoreUser(data_dir, name, data_dir.parent / f"{name}.log")
    users.append(user)
    return user


def connected(users: list[StoreUser], data_dir: Path, name: str) -> StoreUser:
    """A user started and connected to the data directory's server (its first message read)."""
    user = start(users, data_dir, name)
    user.message()
    return user


def state(data_dir: Path) -> dict[str, object]:
    loaded: dict[str, object] = json.loads((data_dir / "redis" / "server.json").read_text())
    return loaded


def test_two_processes_over_one_data_dir_share_one_server_and_its_data(
    data_dir: Path, users: list[StoreUser]
) -> None:
    first = start(users, data_dir, "first")
    first_ready = first.message()
    second = start(users, data_dir, "second")
    second_ready = second.message()

    assert first_ready["socket"] == second_ready["socket"]
    servers = redis_servers_over(data_dir / "redis")
    assert len(servers) == 1
    assert state(data_dir) == {"pid": servers[0], "socket": first_ready["socket"]}
    first.go_on()
    second.go_on()
    assert first.message()["keys"] == ["aim:test:first", "aim:test:second"]
    assert second.message()["keys"] == ["aim:test:first", "aim:test:second"]

    # the starter leaves first: the server stays for the other one, then goes with the last
    assert first.finish() == 0
    assert redis_servers_over(data_dir / "redis") == servers
    assert second.finish() == 0
    assert wait_for_no_server(data_dir / "redis") == []
    assert not (data_dir / "redis" / "server.json").exists()


def test_four_processes_starting_at_once_start_one_server(
    data_dir: Path, users: list[StoreUser]
) -> None:
    racers = [start(users, data_dir, f"racer{i}") for i in range(4)]
    sockets = {racer.message()["socket"] for racer in racers}

    assert len(sockets) == 1
    assert len(redis_servers_over(data_dir / "redis")) == 1
    for racer in racers:
        racer.go_on()
    expected = [f"aim:test:racer{i}" for i in range(4)]
    assert all(racer.message()["keys"] == expected for racer in racers)
    assert all(racer.finish() == 0 for racer in racers)
    assert wait_for_no_server(data_dir / "redis") == []


def test_a_crashed_starter_leaves_the_server_to_the_others(
    data_dir: Path, users: list[StoreUser]
) -> None:
    starter = connected(users, data_dir, "starter")
    joiner = connected(users, data_dir, "joiner")
    servers = redis_servers_over(data_dir / "redis")

    starter.kill()
    late = connected(users, data_dir, "late")

    assert redis_servers_over(data_dir / "redis") == servers
    joiner.go_on()
    assert joiner.message()["keys"] == ["aim:test:joiner", "aim:test:late", "aim:test:starter"]
    assert joiner.finish() == 0
    assert redis_servers_over(data_dir / "redis") == servers  # "late" still uses it
    assert late.finish() == 0
    assert wait_for_no_server(data_dir / "redis") == []


def test_a_server_whose_users_all_crashed_is_taken_over_not_doubled(
    data_dir: Path, users: list[StoreUser]
) -> None:
    crashed = connected(users, data_dir, "crashed")
    servers = redis_servers_over(data_dir / "redis")
    crashed.kill()

    heir = connected(users, data_dir, "heir")
    heir.go_on()

    assert heir.message()["keys"] == ["aim:test:crashed", "aim:test:heir"]
    assert redis_servers_over(data_dir / "redis") == servers
    assert heir.finish() == 0
    assert wait_for_no_server(data_dir / "redis") == []


def test_a_state_file_naming_a_dead_server_is_replaced(
    data_dir: Path, users: list[StoreUser]
) -> None:
    gone = subprocess.Popen(["true"])
    gone.wait()
    redis_dir = data_dir / "redis"
    redis_dir.mkdir(parents=True)
    (redis_dir / "server.json").write_text(
        json.dumps({"pid": gone.pid, "socket": str(redis_dir / "gone.sock")})
    )

    user = start(users, data_dir, "after")
    ready = user.message()

    servers = redis_servers_over(redis_dir)
    assert len(servers) == 1
    assert state(data_dir) == {"pid": servers[0], "socket": ready["socket"]}
    assert user.finish() == 0


def test_a_server_killed_under_its_users_is_replaced_by_the_next_process(
    data_dir: Path, users: list[StoreUser]
) -> None:
    first = connected(users, data_dir, "first")
    (old,) = redis_servers_over(data_dir / "redis")
    os.kill(old, signal.SIGKILL)
    assert wait_for_no_server(data_dir / "redis") == []

    second = connected(users, data_dir, "second")

    servers = redis_servers_over(data_dir / "redis")
    assert len(servers) == 1
    assert servers != [old]
    assert first.finish() in (0, 1)  # its connection died with the old server
    assert redis_servers_over(data_dir / "redis") == servers
    assert second.finish() == 0


async def test_one_process_opening_the_store_twice_shares_the_server(data_dir: Path) -> None:
    one, release_one = open_store(Settings(data_dir=str(data_dir)))
    two, release_two = open_store(Settings(data_dir=str(data_dir)))
    try:
        await one.client.set("aim:test:shared", b"yes")
        assert await two.client.get("aim:test:shared") == b"yes"
        assert len(redis_servers_over(data_dir / "redis")) == 1
    finally:
        await one.aclose()
        release_one()
        assert len(redis_servers_over(data_dir / "redis")) == 1
        await two.aclose()
        release_two()
    assert wait_for_no_server(data_dir / "redis") == []


@pytest.mark.usefixtures("redis_servers_ended")
async def test_a_data_dir_too_long_for_a_unix_socket_still_works(tmp_path: Path) -> None:
    deep = tmp_path / ("d" * 60) / ("e" * 60)
    opened, release = open_store(Settings(data_dir=str(deep)))
    sock = Path(opened.client.connection_pool.connection_kwargs["path"])
    try:
        assert len(os.fsencode(sock)) <= 100
        assert state(deep)["socket"] == str(sock)
        assert await opened.ping()
    finally:
        await opened.aclose()
        release()
    assert not sock.parent.exists()  # the short socket directory goes with the server


def test_a_running_server_that_cannot_be_found_is_refused_with_a_clear_message(
    data_dir: Path,
) -> None:
    redis_dir = data_dir / "redis"
    redis_dir.mkdir(parents=True)
    # something holds server.lock (as a running server does) but no state file says where
    with (redis_dir / "server.lock").open("w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        with pytest.raises(RedisUnavailableError, match=r"server\.json does not say where"):
            open_store(Settings(data_dir=str(data_dir)))
    assert redis_servers_over(redis_dir) == []


async def test_one_line_names_the_redis_in_use(
    data_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO, logger="realtime.store.selection"):
        one, release_one = open_store(Settings(data_dir=str(data_dir)))
        two, release_two = open_store(Settings(data_dir=str(data_dir)))
    await one.aclose()
    await two.aclose()
    release_two()
    release_one()
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 2
    assert "started by this process" in lines[0]
    assert "already running" in lines[1]
    assert len({_pid_in(line) for line in lines}) == 1
    assert all("redis.sock" in line for line in lines)


async def test_a_url_is_logged_without_its_password(caplog: pytest.LogCaptureFixture) -> None:
    url = "redis://user:hunter2-secret@127.0.0.1:1/3"
    with caplog.at_level(logging.INFO, logger="realtime.store.selection"):
        opened, release = open_store(Settings(redis_url=url))
    await opened.aclose()
    release()
    assert [r.getMessage() for r in caplog.records] == [
        "redis: redis://127.0.0.1:1/3 (AIM_REDIS_URL)"
    ]


def _pid_in(line: str) -> int:
    return int(line.split("(pid ", 1)[1].split(",", 1)[0])
