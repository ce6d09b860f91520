"""Which Redis the process uses, and a private `redis-server` when none is configured.

Selection (profile §14): `AIM_REDIS_URL`; else a private `redis-server` from PATH on a unix
socket in the data directory with AOF on, stopped on exit; else the embedded store (fakeredis),
announced loudly, unless a real Redis is required.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

START_TIMEOUT_S = 10.0


class RedisUnavailableError(RuntimeError):
    """A real Redis is required but none can be had."""


class PrivateRedis:
    """A `redis-server` child process listening only on a unix socket."""

    def __init__(self, data_dir: Path, *, appendonly: bool = True) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            raise RedisUnavailableError("no redis-server binary on PATH")
        data_dir.mkdir(parents=True, exist_ok=True)
        # unix socket paths are limited to ~100 bytes: keep the socket in a short temp dir
        self._socket_dir = Path(tempfile.mkdtemp(prefix="aim-redis-"))
        self.socket = self._socket_dir / "redis.sock"
        self.data_dir = data_dir
        args = [
            binary,
            "--port", "0",
            "--unixsocket", str(self.socket),
            "--unixsocketperm", "700",
            "--dir", str(data_dir.resolve()),
            "--appendonly", "yes" if appendonly else "no",
            "--save", "",
            "--daemonize", "no",
            "--loglevel", "warning",
        ]  # fmt: skip
        self.process = subprocess.Popen(  # noqa: S603 - fixed argv, binary from PATH
            args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
        )
        deadline = time.monotonic() + START_TIMEOUT_S
        while not self.socket.exists():
            if self.process.poll() is not None or time.monotonic() > deadline:
                error = self.process.stderr.read().decode() if self.process.stderr else ""
                self.stop()
                raise RedisUnavailableError(f"redis-server did not start: {error.strip()}")
            time.sleep(0.02)

    @property
    def url(self) -> str:
        return f"unix://{self.socket}"

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        if self.process.stderr:
            self.process.stderr.close()
        shutil.rmtree(self._socket_dir, ignore_errors=True)


def redis_server_available() -> bool:
    return shutil.which("redis-server") is not None and os.access(
        shutil.which("redis-server") or "", os.X_OK
    )
