"""Test helpers for a data directory (AIM_DATA_DIR) that is not the running user's own: made
another user's (uid 65534, nobody), writable by group or others, or a symbolic link; and
stand-ins that must never be touched: a listening socket and an unrelated process."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

NOBODY = 65534
# what a data directory, its redis/ folder, its server.json and its dev-secret can be
TARGETS = ("data", "redis", "server.json", "dev-secret")
FLAWS = ("owner", "0777", "0775", "symlink")
PROBLEMS = {
    "owner": f"is owned by uid {NOBODY}, not by you",
    "0777": "is writable by others (mode 0777)",
    "0775": "is writable by its group (mode 0775)",
    "symlink": "is a symbolic link",
}


def target_path(data_dir: Path, target: str) -> Path:
    return {
        "data": data_dir,
        "redis": data_dir / "redis",
        "server.json": data_dir / "redis" / "server.json",
        "dev-secret": data_dir / "dev-secret",
    }[target]


def make_flawed(data_dir: Path, target: str, flaw: str) -> Path:
    """A data directory whose `target` has `flaw` (all else this user's own, mode 700/600);
    the flawed path, which is what the refusal must name."""
    elsewhere = data_dir.parent / "elsewhere"
    elsewhere.mkdir(mode=0o700)
    data_dir.mkdir(mode=0o700)
    (data_dir / "redis").mkdir(mode=0o700)
    _write(data_dir / "redis" / "server.json", json.dumps({"pid": None, "socket": "x"}))
    _write(data_dir / "dev-secret", "0" * 64 + "\n")
    path = target_path(data_dir, target)
    directory = target in ("data", "redis")
    if flaw == "symlink":
        moved = elsewhere / path.name
        path.rename(moved)
        path.symlink_to(moved, target_is_directory=directory)
    elif flaw == "owner":
        os.chown(path, NOBODY, NOBODY)
    else:
        os.chmod(path, int(flaw, 8))
    return path


def _write(path: Path, text: str) -> None:
    path.write_text(text)
    path.chmod(0o600)


@contextlib.contextmanager
def listening(path: Path) -> Iterator[socket.socket]:
    """A unix socket listening on `path`; `connected(it)` says whether anyone connected."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as server:
        server.bind(str(path))
        server.listen()
        server.setblocking(False)
        yield server


def connected(server: socket.socket) -> bool:
    try:
        conn, _ = server.accept()
    except BlockingIOError:
        return False
    conn.close()
    return True


@contextlib.contextmanager
def bystander() -> Iterator[subprocess.Popen[bytes]]:
    """An unrelated process (`sleep 60`), stopped by its pid afterwards."""
    process = subprocess.Popen(["sleep", "60"])
    try:
        yield process
    finally:
        if process.poll() is None:
            process.kill()
        process.wait()


def plant_pid(redis_dir: Path, pid: int) -> None:
    """Name `pid` as the server's in server.json (keeping its socket) and redis-server.pid."""
    state = json.loads((redis_dir / "server.json").read_text())
    _write(redis_dir / "server.json", json.dumps({**state, "pid": pid}))
    (redis_dir / "redis-server.pid").write_text(f"{pid}\n")
