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
  fits a unix socket (about 100 bytes); otherwise the socket is in a short temp directory,
  `aim-redis-*` directly under the system temp directory (`tempfile.gettempdir()`).

The server runs daemonized (its own session, parent init): it outlives its starter while
others use it, and a Ctrl-C in the starter's terminal does not reach it.

Nothing in these files is taken on trust. The data directory and `redis/` must be this user's
own (`realtime.store.datadir`), and every file is opened with O_NOFOLLOW. A process joins only
the socket `<redis_dir>/redis.sock`, or, when that path is too long for a unix socket,
`redis.sock` in an `aim-redis-*` directory directly under the temp directory that is owned
by this user, not a link, mode 700; any other socket in `server.json` is refused. The last
user stops the server with SHUTDOWN over that socket; only if the server does not stop does
it SIGKILL the recorded pid, and only once /proc shows that pid is a `redis-server` with
`server.lock` open. Without /proc it sends no signal and says the server was left running.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import shutil
import signal
import stat
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from realtime.store.datadir import (
    STATE_FILE,
    UnsafeDataDirError,
    open_nofollow,
    private_dir,
    read_nofollow,
    read_private,
    write_private,
)
from realtime.store.server import (
    MAX_SOCKET_PATH_BYTES,
    START_TIMEOUT_S,
    RedisUnavailableError,
    proc_available,
    redis_server_args,
    redis_server_binary,
    redis_server_holding,
    shutdown,
    wait_until_answering,
)

log = logging.getLogger(__name__)

STOP_TIMEOUT_S = 10.0  # SHUTDOWN (the server fsyncs its AOF), then SIGKILL
# the longest another process may hold start.lock: a start or a stop, with a margin
LOCK_WAIT_S = START_TIMEOUT_S + 2 * STOP_TIMEOUT_S + 5.0
SOCKET_NAME = "redis.sock"
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
        try:
            return cls._open(binary, redis_dir)
        except UnsafeDataDirError as exc:
            raise RedisUnavailableError(str(exc)) from None

    @classmethod
    def _open(cls, binary: str, redis_dir: Path) -> SharedRedis:
        private_dir(redis_dir.parent)  # the data directory
        private_dir(redis_dir)
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
        except (RedisUnavailableError, UnsafeDataDirError) as exc:
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
        # a table, one option and its value a line (hence `fmt: skip`)
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
        problem = f"{exc}; see {log_file}"
        try:
            _end(redis_dir, sock, _read_pid(pid_file))
        except RedisUnavailableError as left:
            problem = f"{problem}; {left}"
        _forget(redis_dir)
        raise RedisUnavailableError(problem) from None
    pid = _read_pid(pid_file)
    _write_state(redis_dir, pid, sock)
    return SharedRedis(redis_dir, sock, pid, started=True)


def _join(redis_dir: Path) -> SharedRedis | None:
    """The running server, or None when it turns out to have died meanwhile."""
    state_file = redis_dir / STATE_FILE
    state = _read_state(redis_dir)
    if "socket" not in state:
        raise RedisUnavailableError(
            f"a redis-server holds {redis_dir / 'server.lock'} but {state_file} does not say "
            "where it listens; stop that server (`fuser -k` on the lock file) and start again"
        )
    sock = _trusted_socket(redis_dir, state["socket"])
    if sock is None:
        raise RedisUnavailableError(
            f"{state_file} names the socket {state['socket']!r}, which is neither "
            f"{redis_dir.resolve() / SOCKET_NAME} nor ours in {tempfile.gettempdir()}: refusing "
            f"to join it; stop the process holding {redis_dir / 'server.lock'} "
            "(`fuser -k` on the lock file) and start again"
        )
    pid = _pid(state) or _read_pid(redis_dir / "redis-server.pid")
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
    state = _read_state(redis_dir)
    sock = _trusted_socket(redis_dir, state.get("socket"))
    _end(redis_dir, sock, _pid(state) or _read_pid(redis_dir / "redis-server.pid"))
    _forget(redis_dir)


def _end(redis_dir: Path, sock: Path | None, pid: int | None) -> None:
    """Stop the server holding server.lock: SHUTDOWN over its socket, else SIGKILL of `pid`
    once /proc shows it is that server; RedisUnavailableError when it is left running."""
    lock = redis_dir / "server.lock"
    if sock is not None and _held(lock) and shutdown(sock):
        _wait_until_free(lock)
    if _held(lock):
        _kill_server(pid, lock)
        _wait_until_free(lock)
    if _held(lock):
        raise RedisUnavailableError(f"redis-server (pid {pid}) did not stop")


def _wait_until_free(lock: Path) -> None:
    deadline = time.monotonic() + STOP_TIMEOUT_S
    while _held(lock) and time.monotonic() < deadline:
        time.sleep(0.02)


def _kill_server(pid: int | None, lock: Path) -> None:
    """SIGKILL `pid` if it is the redis-server holding `lock`; else send nothing and raise."""
    if not proc_available():
        raise RedisUnavailableError(
            f"it did not stop on SHUTDOWN, and without /proc pid {pid} cannot be checked: "
            "sent no signal"
        )
    pidfd = None
    if pid is not None:
        with contextlib.suppress(AttributeError, OSError):
            pidfd = os.pidfd_open(pid)  # the pid cannot name another process from here on
    try:
        if pid is None or not redis_server_holding(pid, lock):
            raise RedisUnavailableError(
                f"it did not stop on SHUTDOWN, and pid {pid} is not the redis-server holding "
                f"{lock}: sent no signal"
            )
        with contextlib.suppress(ProcessLookupError):
            if pidfd is not None:
                signal.pidfd_send_signal(pidfd, signal.SIGKILL)
            else:
                os.kill(pid, signal.SIGKILL)
    finally:
        if pidfd is not None:
            os.close(pidfd)


def _trusted_socket(redis_dir: Path, named: object) -> Path | None:
    """The socket `named` by server.json if it can be ours (the module docstring), else None."""
    if not isinstance(named, str):
        return None
    sock, beside = Path(named), redis_dir.resolve() / SOCKET_NAME
    if sock == beside:
        return sock
    if len(os.fsencode(beside)) > MAX_SOCKET_PATH_BYTES and _our_socket_dir(sock):
        return sock
    return None


def _our_socket_dir(sock: Path) -> bool:
    """Whether `sock` is redis.sock in an aim-redis-* directory of ours directly under the temp
    directory (owned by this user, not a link, mode 700)."""
    folder = sock.parent
    if sock.name != SOCKET_NAME or not folder.name.startswith(SOCKET_DIR_PREFIX):
        return False
    if folder.parent != Path(tempfile.gettempdir()):
        return False
    try:
        status = os.lstat(folder)
    except (OSError, ValueError):
        return False
    return (
        stat.S_ISDIR(status.st_mode)
        and status.st_uid == os.geteuid()
        and stat.S_IMODE(status.st_mode) == 0o700
    )


def _socket_path(redis_dir: Path) -> Path:
    beside = redis_dir.resolve() / SOCKET_NAME
    if len(os.fsencode(beside)) <= MAX_SOCKET_PATH_BYTES:
        return beside
    return Path(tempfile.mkdtemp(prefix=SOCKET_DIR_PREFIX)) / SOCKET_NAME


def _forget(redis_dir: Path) -> None:
    """Remove the state file, and the temp directory of the socket it names (if ours)."""
    named = _read_state(redis_dir).get("socket")
    if isinstance(named, str) and _our_socket_dir(Path(named)):
        shutil.rmtree(Path(named).parent, ignore_errors=True)
    (redis_dir / STATE_FILE).unlink(missing_ok=True)


def _read_state(redis_dir: Path) -> dict[str, object]:
    """What server.json says ({} when it is missing or unreadable)."""
    try:
        content = read_private(redis_dir / STATE_FILE)
        state = json.loads(content) if content is not None else {}
    except (OSError, ValueError):
        return {}
    return state if isinstance(state, dict) else {}


def _pid(state: dict[str, object]) -> int | None:
    pid = state.get("pid")
    return pid if isinstance(pid, int) and not isinstance(pid, bool) and pid > 0 else None


def _write_state(redis_dir: Path, pid: int | None, sock: Path) -> None:
    # readers see the old state or the new, never half
    write_private(redis_dir / STATE_FILE, json.dumps({"pid": pid, "socket": str(sock)}).encode())


def _read_pid(pid_file: Path) -> int | None:
    with contextlib.suppress(OSError, ValueError):
        pid = int((read_nofollow(pid_file) or b"").strip())
        return pid if pid > 0 else None
    return None


def _open(path: Path) -> int:
    return open_nofollow(path, os.O_RDWR | os.O_CREAT)


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
