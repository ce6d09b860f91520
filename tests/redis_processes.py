"""Test helpers for the private redis-server that processes over one data directory share
(profile §16): processes that open the store, and which redis-servers run over a directory."""

from __future__ import annotations

import contextlib
import json
import os
import selectors
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from realtime.store.server import redis_server_available
from tests.cli_processes import clean_environ

WAIT_S = 30.0

# opens the store as `serve`, `worker` and `check` do, writes its own key, says so, then waits
# for a line on stdin before it lists every test key it sees, and for another before it exits
USER_SCRIPT = """
import asyncio, json, sys
from realtime.settings import Settings
from realtime.store.selection import open_store

async def main():
    name = sys.argv[2]
    store, release = open_store(Settings(data_dir=sys.argv[1]))
    try:
        await store.client.set("aim:test:" + name, name)
        path = store.client.connection_pool.connection_kwargs["path"]
        print(json.dumps({"ready": name, "socket": path}), flush=True)
        await asyncio.to_thread(sys.stdin.readline)
        seen = sorted(k.decode() for k in await store.client.keys("aim:test:*"))
        print(json.dumps({"keys": seen}), flush=True)
        await asyncio.to_thread(sys.stdin.readline)
    finally:
        await store.aclose()
        release()

asyncio.run(main())
"""


def needs_redis_server() -> None:
    if not redis_server_available():
        if os.environ.get("AIM_REQUIRE_REDIS") == "1":
            pytest.fail("AIM_REQUIRE_REDIS=1 but there is no redis-server on PATH")
        pytest.skip("no redis-server on PATH")


class StoreUser:
    """A `python -c USER_SCRIPT` subprocess over one data directory."""

    def __init__(self, data_dir: Path, name: str, log: Path) -> None:
        self.name = name
        self.log = log
        with log.open("wb") as sink:
            self.process = subprocess.Popen(
                [sys.executable, "-c", USER_SCRIPT, str(data_dir), name],
                env=clean_environ(),
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=sink,
            )

    def message(self, timeout_s: float = WAIT_S) -> dict[str, Any]:
        """The next JSON line the process prints, within `timeout_s`."""
        assert self.process.stdout is not None
        with selectors.DefaultSelector() as selector:
            selector.register(self.process.stdout, selectors.EVENT_READ)
            if not selector.select(timeout_s):
                pytest.fail(f"{self.name} printed nothing within {timeout_s} s:\n{self.errors()}")
        line = self.process.stdout.readline()
        if not line:
            pytest.fail(f"{self.name} exited ({self.process.wait(5)}):\n{self.errors()}")
        message: dict[str, Any] = json.loads(line)
        return message

    def go_on(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(b"\n")
        self.process.stdin.flush()

    def finish(self) -> int:
        """Let the process release the store and exit; its exit code."""
        with contextlib.suppress(BrokenPipeError):
            self.go_on()
            self.go_on()
        code = self.process.wait(timeout=WAIT_S)
        self._close_pipes()
        return code

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=WAIT_S)
        self._close_pipes()

    def _close_pipes(self) -> None:
        for pipe in (self.process.stdin, self.process.stdout):
            if pipe is not None:
                with contextlib.suppress(OSError):
                    pipe.close()

    def errors(self) -> str:
        return self.log.read_text(errors="replace")


def redis_servers_over(redis_dir: Path) -> list[int]:
    """Pids of the live redis-servers whose working directory is `redis_dir` (redis-server
    changes into its `--dir`; it rewrites its command line, so that cannot be matched)."""
    wanted = redis_dir.resolve()
    found = []
    for proc in Path("/proc").glob("[0-9]*"):
        with contextlib.suppress(OSError):
            if not (proc / "comm").read_text().startswith("redis-server"):
                continue
            state = (proc / "stat").read_text().rsplit(")", 1)[1].split()[0]
            if state != "Z" and Path(os.readlink(proc / "cwd")) == wanted:
                found.append(int(proc.name))
    return found


def wait_for_no_server(redis_dir: Path, timeout_s: float = 10.0) -> list[int]:
    """The redis-servers still running over `redis_dir` after waiting up to `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while (left := redis_servers_over(redis_dir)) and time.monotonic() < deadline:
        time.sleep(0.05)
    return left


def kill_servers_under(root: Path) -> None:
    """Stop (by pid) every redis-server a test left running in a directory below `root`."""
    root = root.resolve()
    for proc in Path("/proc").glob("[0-9]*"):
        with contextlib.suppress(OSError, ProcessLookupError):
            if not (proc / "comm").read_text().startswith("redis-server"):
                continue
            if Path(os.readlink(proc / "cwd")).is_relative_to(root):
                os.kill(int(proc.name), signal.SIGKILL)


@pytest.fixture
def redis_servers_ended(tmp_path: Path) -> Iterator[None]:
    """Skips without a redis-server on PATH; every redis-server the test started below
    `tmp_path` is ended after it."""
    needs_redis_server()
    yield
    kill_servers_under(tmp_path)


@pytest.fixture
def data_dir(tmp_path: Path, redis_servers_ended: None) -> Path:
    """A data directory in `tmp_path` for a private redis-server; servers over it are ended."""
    return tmp_path / "data"
