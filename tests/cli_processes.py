"""`aim-realtime` run as an operator runs it: a subprocess with a controlled environment (no
AIM_/OTEL_ setting inherited), in an empty working directory so no stray `.env` is read; or, where
what the command decides is the point and not the process, called in this process the same way
(`call_cli`)."""

from __future__ import annotations

import contextlib
import io
import logging
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from unittest import mock

import httpx
import pytest

from realtime.cli import main
from realtime.logs import JsonLogFormatter
from tests.conftest import LIVEKIT_KEY, LIVEKIT_SECRET, TEST_SECRET

SECRET = "cli-test-secret-0123456789-abcdefghijklmnop"
# a serve process starts in about a second; a machine busy with a worker per core can take
# many times that, and a start is still not a hang until the test's own 60 s timeout
STARTUP_TIMEOUT_S = 40.0
SHUTDOWN_TIMEOUT_S = 15.0


def clean_environ(**variables: str) -> dict[str, str]:
    """The caller's environment without any AIM_/OTEL_ setting, plus `variables`."""
    environ = {
        name: value for name, value in os.environ.items() if not name.startswith(("AIM_", "OTEL_"))
    }
    environ.update(variables)
    return environ


def run_cli(
    *args: str, cwd: Path, timeout: float = 30.0, **variables: str
) -> subprocess.CompletedProcess[str]:
    """`aim-realtime ARGS` as an operator runs it, with only `variables` set of AIM_*."""
    return subprocess.run(
        [sys.executable, "-m", "realtime.cli", *args],
        cwd=cwd,
        env=clean_environ(**variables),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def call_cli(*args: str, cwd: Path, **variables: str) -> subprocess.CompletedProcess[str]:
    """`run_cli`'s result without a process: `main(ARGS)` called here with the same environment
    (only `variables` of AIM_*) and working directory, its output and its log lines (the JSON
    lines `main` would log to stderr) captured; an exit's code is the return code."""
    stdout, stderr = io.StringIO(), io.StringIO()
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    handler = logging.StreamHandler(stderr)
    handler.setFormatter(JsonLogFormatter())
    root.handlers = [handler]  # main's logging.basicConfig then leaves it as it is
    root.setLevel(logging.INFO)
    try:
        with (
            mock.patch.dict(os.environ, clean_environ(**variables), clear=True),
            contextlib.chdir(cwd),
            contextlib.redirect_stdout(stdout),
            contextlib.redirect_stderr(stderr),
        ):
            try:
                code = main(list(args))
            except SystemExit as exit_:  # as Python ends a process: a message is printed, exit 1
                if isinstance(exit_.code, str):
                    stderr.write(f"{exit_.code}\n")
                code = exit_.code if isinstance(exit_.code, int) else int(exit_.code is not None)
    finally:
        root.handlers = handlers
        root.setLevel(level)
    return subprocess.CompletedProcess(
        ["aim-realtime", *args], code, stdout.getvalue(), stderr.getvalue()
    )


def needs(redis_url: str | None) -> str:
    if redis_url is None:
        pytest.skip("no real Redis for this session")
    return redis_url


def serve_environ(redis_url: str | None, livekit: Any = None, **variables: str) -> dict[str, str]:
    """The AIM_ settings of a `serve` in the tests: the test session's Redis (the test skipped
    without one), the tests' HS256 secret, the LiveKit stand-in `livekit` when given, and
    `variables`."""
    environ = {"AIM_REDIS_URL": needs(redis_url), "AIM_AUTH_HS256_SECRET": TEST_SECRET}
    if livekit is not None:
        environ["AIM_LIVEKIT_URL"] = livekit.ws_url
        environ["AIM_LIVEKIT_API_KEY"] = LIVEKIT_KEY
        environ["AIM_LIVEKIT_API_SECRET"] = LIVEKIT_SECRET
    return environ | variables


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port


def wait_for_answer(
    process: subprocess.Popen[bytes], url: str, log: Path, timeout_s: float = STARTUP_TIMEOUT_S
) -> None:
    """Until `url` answers 200; the test fails, with the log, if `process` exits first or
    `timeout_s` passes."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            output = log.read_text(errors="replace")
            pytest.fail(f"{process.args} exited with {process.returncode}:\n{output}")
        with contextlib.suppress(httpx.TransportError):
            if httpx.get(url, timeout=1.0).status_code == 200:
                return
        time.sleep(0.1)
    pytest.fail(f"{url} did not answer within {timeout_s} s:\n{log.read_text(errors='replace')}")


class Service:
    """A running `aim-realtime serve` subprocess."""

    def __init__(self, process: subprocess.Popen[bytes], base_url: str, log: Path) -> None:
        self.process = process
        self.base_url = base_url
        self.log = log

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def wait_until_ready(self) -> None:
        wait_for_answer(self.process, f"{self.base_url}/readyz", self.log)

    def terminate(self) -> None:
        """SIGTERM, then wait for a graceful exit: lifespan shutdown ran to the end."""
        self.process.send_signal(signal.SIGTERM)
        code = self.process.wait(timeout=SHUTDOWN_TIMEOUT_S)
        # uvicorn re-raises the signal it handled once shutdown is done, so -SIGTERM is clean too
        assert code in (0, -signal.SIGTERM), self.output()
        assert "Application shutdown complete" in self.output()
        assert "Traceback" not in self.output()


@contextlib.contextmanager
def serving(tmp_path: Path, *, ready: bool = False, **variables: str) -> Iterator[Service]:
    """`aim-realtime serve` started in `tmp_path` with `variables` (AIM_DATA_DIR under
    `tmp_path` unless they name one); killed on the way out if it still runs. With `ready`, it
    is ready before the body runs and, when the body ends without an error, stopped as an
    operator stops it (SIGTERM, a graceful exit: `Service.terminate`)."""
    port = free_port()
    log = tmp_path / "serve.log"
    with log.open("wb") as sink:
        process = subprocess.Popen(
            [sys.executable, "-m", "realtime.cli", "serve", "--port", str(port)],
            cwd=tmp_path,
            env=clean_environ(**{"AIM_DATA_DIR": str(tmp_path / "data"), **variables}),
            stdout=sink,
            stderr=subprocess.STDOUT,
        )
    service = Service(process, f"http://127.0.0.1:{port}", log)
    try:
        if ready:
            service.wait_until_ready()
        yield service
        if ready and process.poll() is None:
            service.terminate()
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
