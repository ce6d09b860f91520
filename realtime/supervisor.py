"""`aim-realtime serve --workers N`: N HTTP processes on one machine, sharing one listening
socket, and one worker process for the whole machine (effect retries, timers, the reconciler).

The supervisor binds the socket itself, so a port in use is reported before anything starts,
and hands it to every HTTP process (`serve --socket-fd`); the kernel spreads connections over
them. The processes share their state through Redis, and whatever one process would make up
for itself (a development token secret, a provider token secret) is made up here once and
handed to all. A process that could not start (exit 2: configuration, 3: start-up) stops the
whole service, as every copy would fail alike; one that dies otherwise is started again, up to
RESTARTS_PER_MINUTE times a minute.
"""

from __future__ import annotations

import logging
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from types import FrameType
from typing import Final

log = logging.getLogger(__name__)

STARTUP_FAILURE: Final = 3  # what uvicorn exits with when the server could not start
USAGE: Final = 2  # what the command line exits with for a bad configuration
RESTARTS_PER_MINUTE: Final = 5  # more, and the processes are failing for a reason: stop
RESTART_DELAY_S: Final = 1.0
STOP_WAIT_S: Final = 20.0  # each process's graceful shutdown (10 s) with room to spare
POLL_S: Final = 0.2
BACKLOG: Final = 2048


def cpu_count() -> int:
    """The CPUs this process may run on (`--workers 0`)."""
    return len(os.sched_getaffinity(0))


@dataclass
class Child:
    role: str  # "http" or "worker"
    argv: list[str]
    process: subprocess.Popen[bytes]


class Supervisor:
    """Starts the processes, restarts one that dies, stops them all on SIGTERM or SIGINT."""

    def __init__(self, sock: socket.socket, env: dict[str, str]) -> None:
        self.sock = sock
        self.env = env
        self.children: list[Child] = []
        self.restarts: list[float] = []  # when processes were started again
        self.stopping = False

    def spawn(self, role: str, argv: list[str]) -> Child:
        # argv is this interpreter running realtime.cli: nothing from outside goes into it
        process = subprocess.Popen(argv, env=self.env, pass_fds=(self.sock.fileno(),))  # noqa: S603
        log.info("started %s process %d", role, process.pid)
        return Child(role, argv, process)

    def run(self, http_processes: int, *, with_worker: bool, host: str, port: int) -> int:
        base = [sys.executable, "-m", "realtime.cli"]
        http = [*base, "serve", "--no-worker", "--socket-fd", str(self.sock.fileno())]
        self.children = [self.spawn("http", http) for _ in range(http_processes)]
        if with_worker:
            self.children.append(self.spawn("worker", [*base, "worker"]))
        log.info(
            "serving on http://%s:%d with %d HTTP processes%s",
            host,
            port,
            http_processes,
            " and one worker process" if with_worker else "",
        )
        previous = {sig: signal.signal(sig, self._stop) for sig in (signal.SIGTERM, signal.SIGINT)}
        try:
            return self._watch()
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            self._stop_all()
            self.sock.close()

    def _stop(self, signum: int, _frame: FrameType | None) -> None:
        self.stopping = True

    def _watch(self) -> int:
        while not self.stopping:
            for index, child in enumerate(self.children):
                code = child.process.poll()
                if code is None or self.stopping:
                    continue
                now = time.monotonic()
                self.restarts = [at for at in self.restarts if now - at < 60]
                if code in (USAGE, STARTUP_FAILURE) or len(self.restarts) >= RESTARTS_PER_MINUTE:
                    log.error(
                        "%s process %d exited with %d%s; stopping the service",
                        child.role,
                        child.process.pid,
                        code,
                        "" if code in (USAGE, STARTUP_FAILURE) else " (too many restarts)",
                    )
                    return code if code > 0 else STARTUP_FAILURE
                self.restarts.append(now)
                log.warning(
                    "%s process %d exited with %d; starting another",
                    child.role,
                    child.process.pid,
                    code,
                )
                time.sleep(RESTART_DELAY_S)
                self.children[index] = self.spawn(child.role, child.argv)
            time.sleep(POLL_S)
        return 0

    def _stop_all(self) -> None:
        running = [child for child in self.children if child.process.poll() is None]
        for child in running:
            child.process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + STOP_WAIT_S
        for child in running:
            try:
                child.process.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                log.error("%s process %d did not stop; killing it", child.role, child.process.pid)
                child.process.kill()
                child.process.wait()


def listening_socket(host: str, port: int) -> socket.socket:
    """A bound, listening TCP socket every HTTP process inherits (OSError when it cannot be)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # IPPROTO_TCP makes asyncio set TCP_NODELAY on accepted connections (no Nagle stalls)
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(BACKLOG)
    except OSError:
        sock.close()
        raise
    sock.set_inheritable(True)
    return sock


def shared_secrets(environ: dict[str, str], *, livekit_secret_set: bool) -> dict[str, str]:
    """The secrets one process would make up for itself, made up once for all of them."""
    env = dict(environ)
    if (
        not env.get("AIM_AUTH_HS256_SECRET", "").strip()
        and not env.get("AIM_AUTH_JWKS_URL", "").strip()
    ):
        env["AIM_AUTH_HS256_SECRET"] = secrets.token_urlsafe(48)
    if not env.get("AIM_PROVIDER_TOKEN_SECRET", "").strip() and not livekit_secret_set:
        env["AIM_PROVIDER_TOKEN_SECRET"] = secrets.token_urlsafe(48)
    return env
