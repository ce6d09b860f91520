"""`aim-realtime serve --workers N` (profile §14): N HTTP processes on one socket and one worker
process, sharing one development secret; a process that dies is replaced; SIGTERM stops all."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.cli_processes import (
    SHUTDOWN_TIMEOUT_S,
    STARTUP_TIMEOUT_S,
    clean_environ,
    free_port,
    needs,
    run_cli,
)
from tests.redis_processes import needs_redis_server

pytestmark = pytest.mark.redis


def cmdline(pid: int) -> list[str]:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")
    except OSError:
        return []


def children(pid: int) -> dict[str, list[int]]:
    """The supervisor's live children by role: `http` (serve --socket-fd) and `worker`."""
    found: dict[str, list[int]] = {"http": [], "worker": []}
    for status in Path("/proc").glob("[0-9]*/status"):
        with contextlib.suppress(OSError, ValueError):
            text = status.read_text()
            ppid = int(re.search(r"^PPid:\s+(\d+)", text, re.M).group(1))  # type: ignore[union-attr]
            if ppid != pid or re.search(r"^State:\s+Z", text, re.M):
                continue
            args = cmdline(int(status.parent.name))
            if "--socket-fd" in args:
                found["http"].append(int(status.parent.name))
            elif "worker" in args:
                found["worker"].append(int(status.parent.name))
    return found


@contextlib.contextmanager
def supervised(
    tmp_path: Path, *args: str, **variables: str
) -> Iterator[tuple[subprocess.Popen[str], str, Path]]:
    port = free_port()
    log = tmp_path / "serve.log"
    with log.open("w") as sink:
        process = subprocess.Popen(
            [sys.executable, "-m", "realtime.cli", "serve", "--port", str(port), *args],
            cwd=tmp_path,
            env=clean_environ(AIM_DATA_DIR=str(tmp_path / "data"), **variables),
            stdout=sink,
            stderr=subprocess.STDOUT,
            text=True,
        )
    try:
        yield process, f"http://127.0.0.1:{port}", log
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        for pid in (pid for pids in children(process.pid).values() for pid in pids):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def wait_ready(process: subprocess.Popen[str], base_url: str, log: Path) -> None:
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    while time.monotonic() < deadline:
        assert process.poll() is None, log.read_text()
        with contextlib.suppress(httpx.TransportError):
            if httpx.get(f"{base_url}/readyz", timeout=1.0).status_code == 200:
                return
        time.sleep(0.1)
    pytest.fail(f"not ready within {STARTUP_TIMEOUT_S} s:\n{log.read_text()}")


def list_tasks(base_url: str, token: str) -> int:
    """ListTasks on a new connection each time, so the calls spread over the processes."""
    body = {"jsonrpc": "2.0", "id": 1, "method": "ListTasks", "params": {}}
    headers = {"Authorization": f"Bearer {token}", "A2A-Version": "1.0"}
    with httpx.Client(base_url=base_url, timeout=5.0) as http:
        reply = http.post("/a2a", json=body, headers=headers)
    assert "result" in reply.json(), reply.text
    return reply.status_code


def test_workers_share_one_socket_one_secret_and_one_worker_process(tmp_path):
    # the development mode (the private redis-server), where a development token is printed
    needs_redis_server()
    with supervised(tmp_path, "--workers", "2") as (process, base_url, log):
        wait_ready(process, base_url, log)
        roles = children(process.pid)
        assert (len(roles["http"]), len(roles["worker"])) == (2, 1), roles
        # the development token printed once is accepted by every HTTP process
        found = re.search(r"A development token[^\n]*\n\s+(\S+)", log.read_text())
        assert found, log.read_text()
        assert log.read_text().count("A development token") == 1
        token = found.group(1)
        assert {list_tasks(base_url, token) for _ in range(20)} == {200}

        # an HTTP process that dies is replaced, and the service keeps answering
        victim = roles["http"][0]
        os.kill(victim, signal.SIGKILL)
        deadline = time.monotonic() + STARTUP_TIMEOUT_S  # a new process starts
        while True:
            now = children(process.pid)["http"]
            started = log.read_text().count("Application startup complete")
            if len(now) == 2 and victim not in now and started == 3:
                break
            assert time.monotonic() < deadline, now
            time.sleep(0.1)
        assert {list_tasks(base_url, token) for _ in range(10)} == {200}

        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=SHUTDOWN_TIMEOUT_S + 10) == 0, log.read_text()
        assert children(process.pid) == {"http": [], "worker": []}
        assert log.read_text().count("Application shutdown complete") >= 2


def test_workers_on_a_port_in_use_exit_3_saying_so(tmp_path, redis_url):
    url = needs(redis_url)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        data = str(tmp_path / "data")
        serve = ("serve", "--port", str(port), "--workers", "2")
        result = run_cli(*serve, cwd=tmp_path, AIM_REDIS_URL=url, AIM_DATA_DIR=data)
    assert result.returncode == 3, result.stderr
    assert f"cannot listen on 127.0.0.1:{port}" in result.stderr


def test_workers_need_a_redis_the_processes_can_share(tmp_path):
    bare_path = str(Path(sys.executable).parent)  # python, but no redis-server
    data = str(tmp_path / "data")
    result = run_cli("serve", "--workers", "2", cwd=tmp_path, PATH=bare_path, AIM_DATA_DIR=data)
    assert result.returncode == 2, result.stderr
    assert "needs Redis" in result.stderr


@pytest.mark.parametrize("value", ["-1", "lots", "257"])
def test_a_bad_workers_value_is_a_usage_error(tmp_path, value):
    result = subprocess.run(
        [sys.executable, "-m", "realtime.cli", "serve", "--workers", value],
        cwd=tmp_path,
        env=clean_environ(),
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert result.returncode == 2
    assert "--workers" in result.stderr
