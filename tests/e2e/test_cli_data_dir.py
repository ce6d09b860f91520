"""A data directory that is not the running user's own is refused, as an operator meets it:
`serve` and `dev-secret` exit 2 naming AIM_DATA_DIR, a socket outside it is never joined, and
a pid planted in it is never signalled."""

from __future__ import annotations

import fcntl
import json
import re
import subprocess
from pathlib import Path

import pytest

from tests.cli_processes import SECRET, call_cli, clean_environ, free_port, run_cli, serving
from tests.data_dir_helpers import (
    FLAWS,
    PROBLEMS,
    TARGETS,
    bystander,
    connected,
    listening,
    make_flawed,
    plant_pid,
)
from tests.redis_processes import (
    redis_servers_over,
    wait_for_no_server,
)

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("flaw", FLAWS)
@pytest.mark.parametrize("target", TARGETS)
def test_serve_over_a_data_dir_not_its_own_exits_2_naming_it(
    tmp_path: Path, data_dir: Path, target: str, flaw: str
) -> None:
    flawed = make_flawed(data_dir, target, flaw)

    port = str(free_port())
    result = call_cli("serve", "--port", port, cwd=tmp_path, AIM_DATA_DIR=str(data_dir))

    assert result.returncode == 2, result.stderr
    (line,) = result.stderr.splitlines()
    assert line.startswith(f"AIM_DATA_DIR: {flawed} {PROBLEMS[flaw]}"), line
    assert "owned by you" in line
    assert redis_servers_over(data_dir / "redis") == []


@pytest.mark.parametrize("flaw", FLAWS)
@pytest.mark.parametrize("target", TARGETS)
def test_dev_secret_refuses_a_data_dir_not_its_own(tmp_path: Path, target: str, flaw: str) -> None:
    data_dir = tmp_path / "data"
    flawed = make_flawed(data_dir, target, flaw)

    result = call_cli("dev-secret", cwd=tmp_path, AIM_DATA_DIR=str(data_dir))

    assert result.returncode == 2, result.stderr
    assert result.stdout == ""
    (line,) = result.stderr.splitlines()
    assert line.startswith(f"AIM_DATA_DIR: {flawed} {PROBLEMS[flaw]}"), line


def test_dev_secret_refuses_a_secret_others_can_read(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    data_dir.mkdir(mode=0o700)
    (data_dir / "dev-secret").write_text("f" * 64 + "\n")
    (data_dir / "dev-secret").chmod(0o644)

    result = call_cli("dev-secret", cwd=tmp_path, AIM_DATA_DIR=str(data_dir))

    assert result.returncode == 2
    assert result.stdout == ""
    assert "f" * 64 not in result.stderr
    assert result.stderr.startswith(
        f"AIM_DATA_DIR: {data_dir / 'dev-secret'} is readable by others (mode 0644)"
    )


@pytest.mark.parametrize(("target", "flaw"), [("data", "owner"), ("dev-secret", "symlink")])
def test_scripts_dev_secret_refuses_a_data_dir_not_its_own(
    tmp_path: Path, target: str, flaw: str
) -> None:
    data_dir = tmp_path / "data"
    flawed = make_flawed(data_dir, target, flaw)

    result = scripts_dev_secret(data_dir)

    assert result.returncode == 2, result.stderr
    assert result.stdout == ""
    assert f"AIM_DATA_DIR: {flawed} {PROBLEMS[flaw]}" in result.stderr


def test_scripts_dev_secret_makes_one_secret_readable_by_its_owner_only(tmp_path: Path) -> None:
    data_dir = tmp_path / "deeper" / "data"

    first = scripts_dev_secret(data_dir)
    second = call_cli("dev-secret", cwd=tmp_path, AIM_DATA_DIR=str(data_dir))

    assert first.returncode == 0, first.stderr
    assert re.fullmatch(r"[0-9a-f]{64}\n", first.stdout)
    assert second.returncode == 0, second.stderr
    assert second.stdout == first.stdout
    assert first.stdout.strip() not in first.stderr + second.stderr
    assert data_dir.stat().st_mode & 0o777 == 0o700
    assert (data_dir / "dev-secret").stat().st_mode & 0o777 == 0o600
    assert [p.name for p in data_dir.iterdir()] == ["dev-secret"]


def test_serve_refuses_a_server_json_naming_a_socket_outside_the_data_dir(
    tmp_path: Path, data_dir: Path
) -> None:
    redis_dir = data_dir / "redis"
    redis_dir.mkdir(parents=True, mode=0o700)
    data_dir.chmod(0o700)
    outside = tmp_path / "outside.sock"
    (redis_dir / "server.json").write_text(json.dumps({"pid": None, "socket": str(outside)}))
    (redis_dir / "server.json").chmod(0o600)
    with listening(outside) as lure, (redis_dir / "server.lock").open("w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)  # as a running server would
        port = str(free_port())
        served = run_cli("serve", "--port", port, cwd=tmp_path, AIM_DATA_DIR=str(data_dir))
        checked = call_cli("check", cwd=tmp_path, AIM_DATA_DIR=str(data_dir))

        assert not connected(lure)
    assert served.returncode == 3, served.stderr
    assert f"names the socket '{outside}'" in served.stderr
    assert "refusing to join it" in served.stderr
    assert checked.returncode == 1
    assert "refusing to join it" in checked.stdout
    assert redis_servers_over(redis_dir) == []


def test_serve_starts_a_server_another_process_joins_and_the_last_stops(
    tmp_path: Path, data_dir: Path
) -> None:
    with serving(
        tmp_path, ready=True, AIM_DATA_DIR=str(data_dir), AIM_AUTH_HS256_SECRET=SECRET
    ) as service:
        (server,) = redis_servers_over(data_dir / "redis")
        checked = run_cli("check", cwd=tmp_path, AIM_DATA_DIR=str(data_dir))
        assert checked.returncode == 0, checked.stdout + checked.stderr
        assert "already running" in checked.stderr
        assert redis_servers_over(data_dir / "redis") == [server]
    assert wait_for_no_server(data_dir / "redis") == []
    assert "left the private redis-server" not in service.output()
    assert data_dir.stat().st_mode & 0o777 == 0o700


def test_a_pid_planted_in_the_data_dir_is_never_signalled(tmp_path: Path, data_dir: Path) -> None:
    with bystander() as unrelated:
        with serving(
            tmp_path, ready=True, AIM_DATA_DIR=str(data_dir), AIM_AUTH_HS256_SECRET=SECRET
        ) as service:
            assert len(redis_servers_over(data_dir / "redis")) == 1
            plant_pid(data_dir / "redis", unrelated.pid)

        assert wait_for_no_server(data_dir / "redis") == []  # stopped over its socket
        assert unrelated.poll() is None, service.output()
        assert "left the private redis-server" not in service.output()


def scripts_dev_secret(data_dir: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(ROOT / "scripts" / "dev-secret")],
        env=clean_environ(AIM_DATA_DIR=str(data_dir)),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
