"""`redis-server` processes that listen only on a unix socket, and asking one whether it answers.

`PrivateRedis` is a child process of its own in a fresh directory (tests and benchmarks);
the service's first-run default is `realtime.store.shared`, one server per data directory.
This module speaks just enough RESP to PING and SHUTDOWN, so that only `redis_client` imports
redis.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

START_TIMEOUT_S = 30.0  # spawn, load the AOF, answer PING
# unix socket paths are limited to 108 bytes on Linux, 104 on macOS (NUL included)
MAX_SOCKET_PATH_BYTES = 100
PROC = Path("/proc")  # Linux: what a pid is, and which files it holds open


class RedisUnavailableError(RuntimeError):
    """A real Redis is required but none can be had."""


def redis_server_binary() -> str:
    binary = shutil.which("redis-server")
    if binary is None:
        raise RedisUnavailableError("no redis-server binary on PATH")
    return binary


def redis_server_args(
    binary: str, data_dir: Path, sock: Path, *, appendonly: bool = True
) -> list[str]:
    """The command line of a server on `sock` only (mode 700), keeping its files in `data_dir`."""
    # a table, one option and its value a line (hence `fmt: skip`)
    return [
        binary,
        "--port", "0",
        "--unixsocket", str(sock),
        "--unixsocketperm", "700",
        "--dir", str(data_dir.resolve()),
        "--appendonly", "yes" if appendonly else "no",
        "--save", "",
        "--loglevel", "warning",
    ]  # fmt: skip


def ping(sock: Path, timeout_s: float = 1.0) -> str:
    """`ok` when the server on `sock` answers PING, `loading` while it loads its data, else
    `down` (no socket, refused, no answer within `timeout_s`)."""
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
            conn.settimeout(timeout_s)
            conn.connect(str(sock))
            conn.sendall(b"PING\r\n")
            reply = conn.recv(64)
    except OSError:
        return "down"
    if reply.startswith(b"+PONG"):
        return "ok"
    return "loading" if reply.startswith(b"-LOADING") else "down"


def shutdown(sock: Path, timeout_s: float = 1.0) -> bool:
    """Send SHUTDOWN to the server on `sock` (it fsyncs its AOF and exits, as on SIGTERM).
    True when it took the command: no error reply (it closes the connection as it exits)."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
        conn.settimeout(timeout_s)
        try:
            conn.connect(str(sock))
            conn.sendall(b"*1\r\n$8\r\nSHUTDOWN\r\n")
        except OSError:
            return False
        try:
            reply = conn.recv(256)
        except OSError:
            return True  # no answer yet (still writing its AOF), or gone
    return not reply.startswith(b"-")


def proc_available() -> bool:
    return (PROC / "self" / "fd").is_dir()


def redis_server_holding(pid: int, lock: Path) -> bool:
    """Whether process `pid` is a redis-server with the file `lock` open (Linux /proc:
    its comm, and a descriptor in /proc/<pid>/fd on the same device and inode)."""
    proc = PROC / str(pid)
    try:
        if (proc / "comm").read_text().strip() != "redis-server":
            return False
        status = os.stat(lock, follow_symlinks=False)
        fds = list((proc / "fd").iterdir())
    except OSError:
        return False
    for fd in fds:
        with contextlib.suppress(OSError):
            opened = os.stat(fd)
            if (opened.st_dev, opened.st_ino) == (status.st_dev, status.st_ino):
                return True
    return False


def wait_until_answering(
    sock: Path, alive: Callable[[], bool], timeout_s: float = START_TIMEOUT_S
) -> None:
    """Return once the server on `sock` answers PING; raise RedisUnavailableError when
    `alive()` says it died or `timeout_s` passed."""
    deadline = time.monotonic() + timeout_s
    while ping(sock) != "ok":
        if not alive():
            raise RedisUnavailableError("redis-server exited during start-up")
        if time.monotonic() > deadline:
            raise RedisUnavailableError(f"redis-server did not answer within {timeout_s:g} s")
        time.sleep(0.02)


class PrivateRedis:
    """A `redis-server` child process listening only on a unix socket in a temp dir."""

    def __init__(self, data_dir: Path, *, appendonly: bool = True) -> None:
        binary = redis_server_binary()
        data_dir.mkdir(parents=True, exist_ok=True)
        # unix socket paths are limited to ~100 bytes: keep the socket in a short temp dir
        self._socket_dir = Path(tempfile.mkdtemp(prefix="aim-redis-"))
        self.socket = self._socket_dir / "redis.sock"
        self.data_dir = data_dir
        args = redis_server_args(binary, data_dir, self.socket, appendonly=appendonly)
        self.process = subprocess.Popen(  # noqa: S603 - fixed argv, binary from PATH
            args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
        )
        try:
            wait_until_answering(self.socket, lambda: self.process.poll() is None)
        except RedisUnavailableError as exc:
            if self.process.poll() is None:
                self.process.kill()
                self.process.wait()
            error = self.process.stderr.read().decode() if self.process.stderr else ""
            self.stop()
            raise RedisUnavailableError(f"{exc}: {error.strip()}") from None

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
