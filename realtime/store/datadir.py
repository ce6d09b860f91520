"""The data directory (`AIM_DATA_DIR`) is this user's own, or it is not used.

What is in it decides what the service trusts: `redis/server.json` names the socket it joins
and the pid of the server it stops, `dev-secret` signs tokens of every scope. So before a
process uses it (the private redis-server, `aim-realtime dev-secret`), the directory, its
`redis/` folder, `redis/server.json` and `dev-secret` (those that exist) must be owned by the
running user, not be symbolic links, and not be writable by group or others; `dev-secret` must
not be readable by them either. A missing data directory is made, mode 700. The files are
opened with O_NOFOLLOW, so a link put in their place after the check is not followed.
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import stat
from pathlib import Path

DEV_SECRET = "dev-secret"  # noqa: S105 - the file name, not a secret
REDIS_DIR = "redis"
STATE_FILE = "server.json"


class UnsafeDataDirError(RuntimeError):
    """The data directory, or a file in it, could be another user's: one line saying which."""


def check_data_dir(data_dir: Path) -> None:
    """Make `data_dir` (mode 700) when missing; raise UnsafeDataDirError when it, `redis/`,
    `redis/server.json` or `dev-secret` is not this user's own."""
    private_dir(data_dir)
    redis_dir = data_dir / REDIS_DIR
    for path, kind in (
        (redis_dir, "directory"),
        (redis_dir / STATE_FILE, "file"),
        (data_dir / DEV_SECRET, "secret"),
    ):
        try:
            status = os.lstat(path)
        except FileNotFoundError:
            continue
        except OSError as exc:
            raise _unsafe(path, f"cannot be examined ({exc.strerror})", kind) from None
        _require_own(path, status, kind)


def unsafe_data_dir(data_dir: Path, redis_url: str | None) -> str | None:
    """Why `data_dir` cannot be used (one line), or None; checked only when the private
    redis-server would use it (no `redis_url`, a redis-server binary on PATH)."""
    from realtime.store.server import redis_server_available

    if redis_url or not redis_server_available():
        return None
    try:
        check_data_dir(data_dir)
    except UnsafeDataDirError as exc:
        return str(exc)
    return None


def private_dir(path: Path) -> Path:
    """`path`, made (mode 700) when missing; UnsafeDataDirError unless it is this user's own."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    except OSError as exc:
        raise _unsafe(path, f"cannot be made ({exc.strerror})", "directory") from None
    else:  # mode 700 whatever the umask is
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
        try:
            os.fchmod(fd, 0o700)
        finally:
            os.close(fd)
    try:
        status = os.lstat(path)
    except OSError as exc:
        raise _unsafe(path, f"cannot be examined ({exc.strerror})", "directory") from None
    _require_own(path, status, "directory")
    return path


def open_nofollow(path: Path, flags: int, mode: int = 0o600) -> int:
    """`os.open(path, flags | O_NOFOLLOW)`; a symbolic link is an UnsafeDataDirError."""
    try:
        return os.open(path, flags | os.O_NOFOLLOW, mode)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise _unsafe(path, "is a symbolic link", "file") from None
        raise


def read_nofollow(path: Path) -> bytes | None:
    """The content of `path` (a link is not followed), or None when there is none."""
    try:
        fd = open_nofollow(path, os.O_RDONLY)
    except FileNotFoundError:
        return None
    with os.fdopen(fd, "rb") as handle:
        return handle.read()


def read_private(path: Path, *, secret: bool = False) -> bytes | None:
    """The content of `path`, or None when it does not exist; UnsafeDataDirError when it is
    not this user's own file (or, for a `secret`, is readable by others)."""
    try:
        fd = open_nofollow(path, os.O_RDONLY | os.O_NONBLOCK)
    except FileNotFoundError:
        return None
    with os.fdopen(fd, "rb") as handle:
        _require_own(path, os.fstat(fd), "secret" if secret else "file")
        return handle.read()


def write_private(path: Path, content: bytes) -> None:
    """Replace `path` with `content` (mode 600) at once: readers see the old or the new."""
    partial = path.with_name(path.name + ".tmp")
    partial.unlink(missing_ok=True)
    fd = open_nofollow(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL)
    with os.fdopen(fd, "wb") as handle:
        handle.write(content)
    os.replace(partial, path)


def dev_secret(data_dir: Path) -> str:
    """The development token secret in `<data_dir>/dev-secret`, made on first use: 64 hex
    digits in a file of mode 600, made at once (a reader never sees it half written)."""
    check_data_dir(data_dir)
    path = data_dir / DEV_SECRET
    for _ in range(3):
        content = read_private(path, secret=True)
        if content is None:
            _make_secret(path)
            continue
        try:
            text = content.decode().strip()
        except UnicodeDecodeError:
            raise _unsafe(path, "does not hold a text secret", "secret") from None
        if text:
            return text
        path.unlink()  # empty: made by an earlier version interrupted while writing it
    raise _unsafe(path, "keeps changing", "secret")


def _make_secret(path: Path) -> None:
    partial = path.with_name(f"{path.name}.{secrets.token_hex(8)}.tmp")
    fd = open_nofollow(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL)
    try:
        with os.fdopen(fd, "wb") as handle:
            os.fchmod(fd, 0o600)
            handle.write(f"{secrets.token_hex(32)}\n".encode())
            handle.flush()
            os.fsync(fd)
        with contextlib.suppress(FileExistsError):  # a process that made one first wins
            os.link(partial, path)  # never replaces
    finally:
        partial.unlink(missing_ok=True)


def _require_own(path: Path, status: os.stat_result, kind: str) -> None:
    problem = _problem(status, kind)
    if problem is not None:
        raise _unsafe(path, problem, kind)


def _problem(status: os.stat_result, kind: str) -> str | None:
    mode = stat.S_IMODE(status.st_mode)
    if stat.S_ISLNK(status.st_mode):
        return "is a symbolic link"
    if kind == "directory" and not stat.S_ISDIR(status.st_mode):
        return "is not a directory"
    if kind != "directory" and not stat.S_ISREG(status.st_mode):
        return "is not a regular file"
    if status.st_uid != os.geteuid():
        return f"is owned by uid {status.st_uid}, not by you (uid {os.geteuid()})"
    if mode & 0o002:
        return f"is writable by others (mode {mode:04o})"
    if mode & 0o020:
        return f"is writable by its group (mode {mode:04o})"
    if kind == "secret" and mode & 0o044:
        return f"is readable by {'others' if mode & 0o004 else 'its group'} (mode {mode:04o})"
    return None


def _unsafe(path: Path, problem: str, kind: str) -> UnsafeDataDirError:
    wanted = "a directory owned by you, mode 700" if kind == "directory" else None
    if wanted is None:
        wanted = "a file owned by you, mode 600 (or remove it)"
    return UnsafeDataDirError(f"AIM_DATA_DIR: {os.path.abspath(path)} {problem}; make it {wanted}")
