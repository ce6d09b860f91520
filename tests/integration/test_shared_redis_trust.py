"""The private redis-server of a data directory trusts nothing in it (profile §16): a socket
server.json names outside the data directory is not joined, a recorded pid is signalled only
once /proc shows it is the server holding server.lock, and SHUTDOWN comes first."""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import re
import signal
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from realtime.settings import Settings
from realtime.store import server as server_module
from realtime.store import shared
from realtime.store.datadir import UnsafeDataDirError, check_data_dir, dev_secret
from realtime.store.selection import open_store
from realtime.store.server import PrivateRedis, RedisUnavailableError
from tests.data_dir_helpers import (
    NOBODY,
    bystander,
    connected,
    listening,
    make_flawed,
    plant_pid,
)
from tests.redis_processes import (
    StoreUser,
    redis_servers_over,
    wait_for_no_server,
)

pytestmark = [pytest.mark.redis, pytest.mark.slow]


def own_dirs(data_dir: Path) -> Path:
    redis_dir = data_dir / "redis"
    redis_dir.mkdir(parents=True, mode=0o700)
    data_dir.chmod(0o700)
    return redis_dir


def write_state(redis_dir: Path, socket_path: str) -> None:
    (redis_dir / "server.json").write_text(json.dumps({"pid": None, "socket": socket_path}))
    (redis_dir / "server.json").chmod(0o600)


def refused_socket(data_dir: Path, named: Path) -> str:
    """What opening the store says when server.json names `named` while a server runs."""
    redis_dir = data_dir / "redis"
    write_state(redis_dir, str(named))
    with (redis_dir / "server.lock").open("w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)  # as a running server would
        with pytest.raises(RedisUnavailableError, match="refusing to join it") as refused:
            open_store(Settings(data_dir=str(data_dir)))
    return str(refused.value)


def test_a_socket_outside_the_data_dir_is_not_joined(tmp_path: Path, data_dir: Path) -> None:
    own_dirs(data_dir)
    outside = tmp_path / "outside.sock"
    with listening(outside) as lure:
        message = refused_socket(data_dir, outside)
        assert not connected(lure)
    assert str(outside) in message
    assert redis_servers_over(data_dir / "redis") == []


def test_a_temp_socket_is_refused_when_the_data_dir_socket_fits(data_dir: Path) -> None:
    own_dirs(data_dir)
    ours = Path(tempfile.mkdtemp(prefix=shared.SOCKET_DIR_PREFIX))
    try:
        with listening(ours / "redis.sock") as lure:
            refused_socket(data_dir, ours / "redis.sock")
            assert not connected(lure)
    finally:
        (ours / "redis.sock").unlink(missing_ok=True)
        ours.rmdir()


@pytest.mark.usefixtures("redis_servers_ended")
@pytest.mark.parametrize("flaw", ["owner", "0755"])
def test_a_temp_socket_directory_not_ours_is_refused_and_left_alone(
    tmp_path: Path, flaw: str
) -> None:
    deep = tmp_path / ("d" * 60) / ("e" * 60)  # too long for <redis_dir>/redis.sock
    foreign = Path(tempfile.mkdtemp(prefix=shared.SOCKET_DIR_PREFIX))
    try:
        if flaw == "owner":
            os.chown(foreign, NOBODY, NOBODY)
        else:
            foreign.chmod(0o755)
        own_dirs(deep)
        with listening(foreign / "redis.sock") as lure:
            refused_socket(deep, foreign / "redis.sock")
            assert not connected(lure)
        # the stale state names it: the next start replaces the state, and keeps the directory
        user = StoreUser(deep, "next", tmp_path / "next.log")
        assert user.message()["socket"] != str(foreign / "redis.sock")
        assert user.finish() == 0, user.errors()
        assert (foreign / "redis.sock").exists()
    finally:
        (foreign / "redis.sock").unlink(missing_ok=True)
        foreign.rmdir()


@pytest.mark.usefixtures("redis_servers_ended")
async def test_a_second_process_joins_a_temp_socket_of_ours(tmp_path: Path) -> None:
    deep = tmp_path / ("d" * 60) / ("e" * 60)
    one, release_one = open_store(Settings(data_dir=str(deep)))
    two, release_two = open_store(Settings(data_dir=str(deep)))
    try:
        await one.client.set("aim:test:temp", b"joined")
        assert await two.client.get("aim:test:temp") == b"joined"
    finally:
        await one.aclose()
        await two.aclose()
        release_one()
        release_two()
    assert wait_for_no_server(deep / "redis") == []


def test_a_planted_pid_is_not_signalled_when_the_last_user_stops_the_server(
    data_dir: Path,
) -> None:
    user = StoreUser(data_dir, "user", data_dir.parent / "user.log")
    try:
        user.message()
        with bystander() as unrelated:
            plant_pid(data_dir / "redis", unrelated.pid)
            assert user.finish() == 0, user.errors()
            assert wait_for_no_server(data_dir / "redis") == []  # SHUTDOWN over its socket
            assert unrelated.poll() is None
        assert "left the private redis-server" not in user.errors()
    finally:
        user.kill()


@pytest.fixture
def stuck_server(data_dir: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[shared.SharedRedis]:
    """The data directory's server, opened by this process, stopped (SIGSTOP): SHUTDOWN cannot
    stop it; a short stop timeout."""
    monkeypatch.setattr(shared, "STOP_TIMEOUT_S", 0.5)
    opened = shared.SharedRedis.open(own_dirs(data_dir))
    assert opened.pid is not None
    os.kill(opened.pid, signal.SIGSTOP)
    yield opened
    with contextlib.suppress(ProcessLookupError):
        os.kill(opened.pid, signal.SIGKILL)


def test_a_server_that_does_not_stop_on_shutdown_is_killed_once_proc_vouches(
    data_dir: Path, stuck_server: shared.SharedRedis
) -> None:
    stuck_server.release()
    assert wait_for_no_server(data_dir / "redis") == []
    assert not (data_dir / "redis" / "server.json").exists()


def test_a_planted_redis_server_pid_without_the_lock_is_not_killed(
    tmp_path: Path,
    data_dir: Path,
    stuck_server: shared.SharedRedis,
    caplog: pytest.LogCaptureFixture,
) -> None:
    other = PrivateRedis(tmp_path / "other", appendonly=False)
    try:
        plant_pid(data_dir / "redis", other.process.pid)
        with caplog.at_level(logging.WARNING, logger="realtime.store.shared"):
            stuck_server.release()
        assert other.process.poll() is None
        assert redis_servers_over(data_dir / "redis") == [stuck_server.pid]
        (warning,) = [r.getMessage() for r in caplog.records]
        assert f"pid {other.process.pid} is not the redis-server holding" in warning
        assert "sent no signal" in warning
    finally:
        other.stop()


def test_without_proc_no_signal_is_sent_and_the_server_is_left_running(
    tmp_path: Path,
    data_dir: Path,
    stuck_server: shared.SharedRedis,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    monkeypatch.setattr(server_module, "PROC", tmp_path / "no-proc")
    with caplog.at_level(logging.WARNING, logger="realtime.store.shared"):
        stuck_server.release()
    assert redis_servers_over(data_dir / "redis") == [stuck_server.pid]
    (warning,) = [r.getMessage() for r in caplog.records]
    assert "left the private redis-server" in warning
    assert "without /proc" in warning


@pytest.mark.parametrize("target", ["data", "redis", "server.json"])
def test_opening_the_store_refuses_a_data_dir_not_its_own(data_dir: Path, target: str) -> None:
    flawed = make_flawed(data_dir, target, "owner")
    expected = re.escape(f"AIM_DATA_DIR: {flawed} is owned by uid {NOBODY}, not by you")
    with pytest.raises(RedisUnavailableError, match=expected):
        open_store(Settings(data_dir=str(data_dir)))
    assert redis_servers_over(data_dir / "redis") == []


def test_a_missing_data_dir_is_made_mode_700(tmp_path: Path) -> None:
    data_dir = tmp_path / "a" / "data"
    check_data_dir(data_dir)
    assert data_dir.stat().st_mode & 0o777 == 0o700


def test_a_symlinked_server_json_is_not_followed(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    make_flawed(data_dir, "server.json", "symlink")
    with pytest.raises(UnsafeDataDirError, match=r"server\.json is a symbolic link"):
        shared._read_state(data_dir / "redis")


def test_the_dev_secret_is_made_once_64_hex_digits_mode_600(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    first = dev_secret(data_dir)
    assert len(first) == 64
    assert int(first, 16) >= 0
    assert dev_secret(data_dir) == first
    assert (data_dir / "dev-secret").stat().st_mode & 0o777 == 0o600
    assert sorted(p.name for p in data_dir.iterdir()) == ["dev-secret"]
