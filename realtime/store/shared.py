"""The one private redis-server of a data directory, shared by every process over it (§16).

Every process started without `AIM_REDIS_URL` (`serve`, `worker`, `check`) uses the server of
its data directory: the first one starts it, the others connect to it, and the last one to
leave stops it. The files in `<AIM_DATA_DIR>/redis`:

- `start.lock`: held (flock, exclusive) while a process starts, joins or stops the server, so
  these decisions happen one at a time, also when processes start at the same instant.
- `server.lock`: held (flock, exclusive) by the running redis-server itself, through a
  descriptor it inherits from its starter. It is free exactly when no server of ours runs over
  the directory, whatever the state file says and however the server died (kill -9 included),
  so a stale state is recognised without trusting pids.
- `users.lock`: held (flock, shared) by each process using the server, for as long as it
  does. The kernel keeps the count and drops crashed processes from it; the process that can
  take it exclusively on its way out is the last one, and stops the server.
- `server.json`: `{"pid", "socket"}` of the running server, written by its starter.
- `redis-server.log`, `redis-server.pid`, `appendonlydir/`, and `redis.sock` when that path
  fits a unix socket (about 100 bytes); otherwise the socket is in a short temp directory.

The server runs daemonized (its own session, parent init): it outlives its starter while
others use it, and a Ctrl-C in the starter's terminal does not reach it.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from realtime.store.server import (
    MAX_SOCKET_PATH_BYTES,
    START_TIMEOUT_S,
    RedisUnavailableError,
    redis_server_args,
    redis_server_binary,
    wait_until_answering,
)

log = logging.getLogger(__name__)

STOP_TIMEOUT_S = 10.0  # SIGTERM (the server fsyncs its AOF), then SIGKILL
# the longest another process may hold start.lock: a start or a stop, with a margin
LOCK_WAIT_S = START_TIMEOUT_S + 2 * STOP_TIMEOUT_S
STATE_FILE = "server.json"
SOCKET_DIR_PREFIX = "aim-redis-"


class SharedRedis:
    """This process's use of the data directory's redis-server; `release()` ends it."""

    def __init__(self, redis_dir: Path, sock: Path, pid: int | None, *, started: bool) -> None:
        self.redis_dir = redis_dir
        self.socket = sock
        self.pid = pid
        self.started = started
        self._users: int | None = None

    @property
    def url(self) -> str:
        return f"unix://{self.socket}"

    @classmethod
    def open(cls, redis_dir: Path) -> SharedRedis:
        """Join the directory's server, starting it when none runs."""
        binary = redis_server_binary()
        redis_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        with _locked(redis_dir / "start.lock"):
            shared = _join(redis_dir) if _held(redis_dir / "server.lock") else None
            if shared is None:
                shared = _start(binary, redis_dir)
            users = _open(redis_dir / "users.lock")
            # never waits: only a process holding start.lock takes users.lock exclusively
            fcntl.flock(users, fcntl.LOCK_SH)
            shared._users = users
        return shared

    def release(self) -> None:
        """Stop using the server; the last process over the directory stops it."""
        users, self._users = self._users, None
        if users is None:
            return
        closed = False
        try:
            with _locked(self.redis_dir / "start.lock"):
                try:
                    fcntl.flock(users, fcntl.LOCK_UN)
                    if _try_lock(users, fcntl.LOCK_EX):
                        _stop(self.redis_dir)
                finally:
                    os.close(users)  # before start.lock goes: joiners take it shared at once
                    closed = True
        except RedisUnavailableError as exc:
            log.warning("left the private redis-server of %s running: %s", self.redis_dir, exc)
        finally:
            if not closed:
                os.close(users)


def _start(binary: str, redis_dir: Path) -> SharedRedis:
    _forget(redis_dir)  # what a server that died left: its state file, its socket directory
    sock = _socket_path(redis_dir)
    pid_file = redis_dir / "redis-server.pid"
    log_file = redis_dir / "redis-server.log"
    pid_file.unlink(missing_ok=True)
    # written before the server exists, so that a process finding it running (server.lock
    # held) can always find its socket, even if this process dies while it starts
    _write_state(redis_dir, None, sock)
    server_lock = _open(redis_dir / "server.lock")
    try:
        if not _try_lock(server_lock, fcntl.LOCK_EX):
            raise RedisUnavailableError(f"{redis_dir / 'server.lock'} is held by another process")
        args = [
            *redis_server_args(binary, redis_dir, sock),
            "--daemonize", "yes",
            "--pidfile", str(pid_file.resolve()),
            "--logfile", str(log_file.resolve()),
        ]  # fmt: skip
        spawned = subprocess.run(  # noqa: S603 - fixed argv, binary from PATH
            args,
            pass_fds=(server_lock,),  # the server holds server.lock for as long as it runs
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=START_TIMEOUT_S,
            check=False,
        )
    finally:
        os.close(server_lock)
    if spawned.returncode != 0:
        output = (spawned.stderr or spawned.stdout).decode(errors="replace").strip()
        _forget(redis_dir)
        raise RedisUnavailableError(f"redis-server did not start: {output}")
    try:
        wait_until_answering(sock, lambda: _held(redis_dir / "server.lock"))
    except RedisUnavailableError as exc:
        _kill(_read_pid(pid_file), signal.SIGKILL)
        _forget(redis_dir)
        raise RedisUnavailableError(f"{exc}; see {log_file}") from None
    pid = _read_pid(pid_file)
    _write_state(redis_dir, pid, sock)
    return SharedRedis(redis_dir, sock, pid, started=True)


def _join(redis_dir: Path) -> SharedRedis | None:
    """The running server, or None when it turns out to have died meanwhile."""
    state_file = redis_dir / STATE_FILE
    try:
        state = json.loads(state_file.read_text())
        sock = Path(state["socket"])
    except (OSError, ValueError, KeyError, TypeError):
        raise RedisUnavailableError(
            f"a redis-server holds {redis_dir / 'server.lock'} but {state_file} does not say "
            "where it listens; stop that server (`fuser -k` on the lock file) and start again"
        ) from None
    pid = state.get("pid") or _read_pid(redis_dir / "redis-server.pid")
    try:
        wait_until_answering(sock, lambda: _held(redis_dir / "server.lock"))
    except RedisUnavailableError:
        if not _held(redis_dir / "server.lock"):
            return None
        raise RedisUnavailableError(
            f"the private redis-server of {redis_dir} (pid {pid}) does not answer on {sock} "
            f"within {START_TIMEOUT_S:g} s; see {redis_dir / 'redis-server.log'}"
        ) from None
    return SharedRedis(redis_dir, sock, pid, started=False)


def _stop(redis_dir: Path) -> None:
    try:
        pid = json.loads((redis_dir / STATE_FILE).read_text())["pid"]
    except (OSError, ValueError, KeyError, TypeError):
        pid = None
    pid = pid or _read_pid(redis_dir / "redis-server.pid")
    for sig in (signal.SIGTERM, signal.SIGKILL):
        if not _held(redis_dir / "server.lock"):
            break
        _kill(pid, sig)
        deadline = time.monotonic() + STOP_TIMEOUT_S
        while _held(redis_dir / "server.lock") and time.monotonic() < deadline:
            time.sleep(0.02)
    if _held(redis_dir / "server.lock"):
        raise RedisUnavailableError(f"redis-server (pid {pid}) did not stop")
    _forget(redis_dir)


def _socket_path(redis_dir: Path) -> Path:
    beside = redis_dir.resolve() / "redis.sock"
    if len(os.fsencode(beside)) <= MAX_SOCKET_PATH_BYTES:
        return beside
    return Path(tempfile.mkdtemp(prefix=SOCKET_DIR_PREFIX)) / "redis.sock"


def _forget(redis_dir: Path) -> None:
    """Remove the state file, and the temp directory of the socket it names."""
    state_file = redis_dir / STATE_FILE
    with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
        sock_dir = Path(json.loads(state_file.read_text())["socket"]).parent
        if sock_dir.name.startswith(SOCKET_DIR_PREFIX) and sock_dir != redis_dir.resolve():
            shutil.rmtree(sock_dir, ignore_errors=True)
    state_file.unlink(missing_ok=True)


def _write_state(redis_dir: Path, pid: int | None, sock: Path) -> None:
    partial = redis_dir / (STATE_FILE + ".tmp")
    partial.write_text(json.dumps({"pid": pid, "socket": str(sock)}))
    partial.replace(redis_dir / STATE_FILE)  # readers see the old state or the new, never half


def _read_pid(pid_file: Path) -> int | None:
    with contextlib.suppress(OSError, ValueError):
        return int(pid_file.read_text().strip())
    return None


def _kill(pid: int | None, sig: signal.Signals) -> None:
    # only called while server.lock is held: the pid is that of the server holding it
    if pid is not None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)


def _open(path: Path) -> int:
    return os.open(path, os.O_RDWR | os.O_CREAT, 0o600)


def _try_lock(fd: int, kind: int) -> bool:
    try:
        fcntl.flock(fd, kind | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


def _held(path: Path) -> bool:
    """Whether another open file (another process, or another use in this one) locks `path`."""
    fd = _open(path)
    try:
        return not _try_lock(fd, fcntl.LOCK_EX)
    finally:
        os.close(fd)  # closing drops the lock this probe may have taken


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """`path` locked exclusively, waiting at most LOCK_WAIT_S for whoever holds it."""
    fd = _open(path)
    try:
        deadline = time.monotonic() + LOCK_WAIT_S
        while not _try_lock(fd, fcntl.LOCK_EX):
            if time.monotonic() > deadline:
                raise RedisUnavailableError(
                    f"another process has held {path} for more than {LOCK_WAIT_S:g} s"
                )
            time.sleep(0.02)
        yield
    finally:
        os.close(fd)
