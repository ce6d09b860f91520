"""A local Redis Cluster of three masters from the `redis-server` binary (the cluster pass).

`start(directory)` runs three `redis-server --cluster-enabled yes` daemons on free loopback
ports, each in a sub-directory of its own (nodes.conf, log, pid file), joins them with
`redis-cli --cluster create … --cluster-replicas 0`, and returns once every node answers
`cluster_state:ok`; `stop(directory)` ends them by pid: SIGTERM, then SIGKILL. Every wait is
bounded. As a program (`scripts/redis-cluster start|stop DIR`) `start` prints the cluster's URL.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import redis

MASTERS = 3
HOST = "127.0.0.1"
BUS_OFFSET = 10_000  # a node's cluster bus listens on its port + 10000
START_TIMEOUT_S = 30.0  # each node answering PING, then every node saying cluster_state:ok
CREATE_TIMEOUT_S = 60.0  # redis-cli --cluster create
PID_FILE_TIMEOUT_S = 10.0  # a node that wrote no pid file by then failed to start (a port taken)
STOP_TIMEOUT_S = 10.0  # SIGTERM to exit, then as long again after SIGKILL
ATTEMPTS = 3  # fresh ports each time: another process may take a port between probe and bind
STATE_FILE = "cluster.json"


class ClusterError(RuntimeError):
    """The cluster could not be started."""


@dataclass(frozen=True)
class LocalCluster:
    directory: Path
    ports: tuple[int, ...]
    pids: tuple[int, ...]

    @property
    def url(self) -> str:
        """A URL of one node: a cluster client finds the others from it."""
        return f"redis://{HOST}:{self.ports[0]}"


def _binary(name: str) -> str:
    found = shutil.which(name)
    if found is None:
        raise ClusterError(f"no {name} binary on PATH")
    return found


def free_ports(count: int) -> list[int]:
    """`count` loopback ports that are free, each with its bus port (+10000) free as well."""
    rng = random.SystemRandom()
    chosen: list[int] = []
    with contextlib.ExitStack() as held:  # held bound until all are chosen: no duplicates
        for _ in range(500):
            port = rng.randrange(20_000, 30_000)
            if port in chosen:
                continue
            try:
                for candidate in (port, port + BUS_OFFSET):
                    probe = held.enter_context(socket.socket())
                    probe.bind((HOST, candidate))
            except OSError:
                continue
            chosen.append(port)
            if len(chosen) == count:
                return chosen
    raise ClusterError(f"found only {len(chosen)} of {count} free port pairs")


def _node_dir(directory: Path, port: int) -> Path:
    return directory / f"node-{port}"


def _node_args(binary: str, node_dir: Path, port: int) -> list[str]:
    return [
        binary,
        "--port", str(port),
        "--bind", HOST,
        "--cluster-enabled", "yes",
        "--cluster-config-file", str(node_dir / "nodes.conf"),
        "--cluster-node-timeout", "5000",
        "--dir", str(node_dir),
        "--save", "",
        "--appendonly", "no",
        "--daemonize", "yes",
        "--pidfile", str(node_dir / "redis.pid"),
        "--logfile", str(node_dir / "redis.log"),
        "--loglevel", "warning",
    ]  # fmt: skip


def _log_tail(node_dir: Path, lines: int = 20) -> str:
    try:
        return "\n".join((node_dir / "redis.log").read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def _connection(port: int) -> redis.Redis:
    return redis.Redis(host=HOST, port=port, socket_timeout=2, socket_connect_timeout=2)


def _answers(port: int) -> bool:
    with contextlib.suppress(redis.RedisError, OSError), _connection(port) as conn:
        return bool(conn.ping())
    return False


def _cluster_info(port: int) -> dict[str, str]:
    with contextlib.suppress(redis.RedisError, OSError), _connection(port) as conn:
        info = conn.cluster("INFO")  # redis-py parses the reply into a dict
        return {str(name): str(value) for name, value in info.items()}
    return {}


def _read_pid(node_dir: Path) -> int | None:
    try:
        return int((node_dir / "redis.pid").read_text().strip())
    except (OSError, ValueError):
        return None


def _start_node(binary: str, directory: Path, port: int, deadline: float) -> int:
    """Start one daemonized node and wait until it answers PING; its pid."""
    node_dir = _node_dir(directory, port)
    shutil.rmtree(node_dir, ignore_errors=True)
    node_dir.mkdir(parents=True)
    # with --daemonize the command returns once the server forked; the server writes its pid
    # file once it listens (a server that cannot listen exits without one)
    pid_file_by = time.monotonic() + PID_FILE_TIMEOUT_S
    started = subprocess.run(
        _node_args(binary, node_dir, port),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=max(1.0, deadline - time.monotonic()),
        check=False,
    )
    if started.returncode != 0:
        raise ClusterError(f"redis-server on port {port} failed: {started.stderr.strip()}")
    while True:
        pid = _read_pid(node_dir)
        if pid is not None and _answers(port):
            return pid
        if pid is not None and not _alive(pid):
            raise ClusterError(f"redis-server on port {port} exited:\n{_log_tail(node_dir)}")
        if pid is None and time.monotonic() > pid_file_by:
            raise ClusterError(f"redis-server on port {port} did not start:\n{_log_tail(node_dir)}")
        if time.monotonic() > deadline:
            raise ClusterError(
                f"redis-server on port {port} did not answer:\n{_log_tail(node_dir)}"
            )
        time.sleep(0.05)


def _create(ports: Sequence[int]) -> None:
    command = [
        _binary("redis-cli"),
        "--cluster", "create",
        *(f"{HOST}:{port}" for port in ports),
        "--cluster-replicas", "0",
        "--cluster-yes",
    ]  # fmt: skip
    try:
        created = subprocess.run(
            command,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=CREATE_TIMEOUT_S,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        raise ClusterError(f"redis-cli --cluster create took over {CREATE_TIMEOUT_S:g} s") from exc
    if created.returncode != 0:
        raise ClusterError(f"redis-cli --cluster create failed:\n{created.stdout}{created.stderr}")


def _wait_ok(ports: Sequence[int], deadline: float) -> None:
    """Until every node sees all slots served by all masters."""
    wanted = {
        "cluster_state": "ok",
        "cluster_slots_assigned": "16384",
        "cluster_known_nodes": str(len(ports)),
    }
    while True:
        infos = {port: _cluster_info(port) for port in ports}
        if all(all(info.get(k) == v for k, v in wanted.items()) for info in infos.values()):
            return
        if time.monotonic() > deadline:
            seen = {port: {k: info.get(k) for k in wanted} for port, info in infos.items()}
            raise ClusterError(f"the cluster is not ok within {START_TIMEOUT_S:g} s: {seen}")
        time.sleep(0.1)


def start(directory: Path, *, masters: int = MASTERS) -> LocalCluster:
    """Start a cluster of `masters` masters (no replicas) in `directory`; see the module."""
    binary = _binary("redis-server")
    directory.mkdir(parents=True, exist_ok=True)
    directory = directory.resolve()
    stop(directory)  # what an earlier start in this directory left running
    for attempt in range(1, ATTEMPTS + 1):
        ports = free_ports(masters)
        _write_state(directory, ports)  # first, so that `stop` finds whatever did start
        deadline = time.monotonic() + START_TIMEOUT_S
        try:
            pids = [_start_node(binary, directory, port, deadline) for port in ports]
        except ClusterError:
            stop(directory)
            if attempt == ATTEMPTS:
                raise
            continue
        try:
            _create(ports)
            _wait_ok(ports, time.monotonic() + START_TIMEOUT_S)
        except BaseException:
            stop(directory)
            raise
        return LocalCluster(directory, tuple(ports), tuple(pids))
    raise AssertionError("unreachable")  # pragma: no cover - the loop returns or raises


def _write_state(directory: Path, ports: Sequence[int]) -> None:
    (directory / STATE_FILE).write_text(json.dumps({"ports": list(ports)}))


def _alive(pid: int) -> bool:
    """Whether `pid` runs (a zombie waiting for its parent counts as gone)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    except OSError:  # no /proc: ask the kernel
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        return True
    return state != "Z"


def _ours(pid: int, node_dir: Path) -> bool:
    """Whether `pid` is the redis-server of `node_dir` (a pid may have been reused since):
    redis-server changes into its --dir."""
    try:
        comm = Path(f"/proc/{pid}/comm").read_text()
        cwd = Path(os.readlink(f"/proc/{pid}/cwd"))
    except FileNotFoundError:
        return False
    except OSError:  # no /proc to ask: trust the pid file
        return _alive(pid)
    return comm.startswith("redis-server") and cwd == node_dir.resolve()


def _signal_all(pids: Sequence[int], signum: signal.Signals) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signum)


def _wait_gone(pids: Sequence[int], timeout_s: float) -> list[int]:
    deadline = time.monotonic() + timeout_s
    while (left := [pid for pid in pids if _alive(pid)]) and time.monotonic() < deadline:
        time.sleep(0.05)
    return left


def stop(directory: Path) -> None:
    """Stop every node `start` started in `directory` by its pid: SIGTERM, then SIGKILL."""
    directory = directory.resolve()
    try:
        ports = json.loads((directory / STATE_FILE).read_text())["ports"]
    except (OSError, ValueError, KeyError):
        return
    pids = []
    for port in ports:
        node_dir = _node_dir(directory, port)
        pid = _read_pid(node_dir)
        if pid is not None and _alive(pid) and _ours(pid, node_dir):
            pids.append(pid)
    _signal_all(pids, signal.SIGTERM)
    left = _wait_gone(pids, STOP_TIMEOUT_S)
    _signal_all(left, signal.SIGKILL)
    if left := _wait_gone(left, STOP_TIMEOUT_S):
        raise ClusterError(f"redis-server processes {left} outlived SIGKILL")


@contextlib.contextmanager
def running(directory: Path) -> Iterator[LocalCluster]:
    """A cluster in `directory` for the duration of the block."""
    cluster = start(directory)
    try:
        yield cluster
    finally:
        stop(directory)


def main(argv: Sequence[str]) -> int:
    if len(argv) != 2 or argv[0] not in ("start", "stop"):
        sys.stderr.write("usage: redis-cluster start|stop DIR\n")
        return 2
    command, directory = argv[0], Path(argv[1])
    try:
        if command == "start":
            sys.stdout.write(start(directory).url + "\n")
        else:
            stop(directory)
    except ClusterError as exc:
        sys.stderr.write(f"redis-cluster {command}: {exc}\n")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
