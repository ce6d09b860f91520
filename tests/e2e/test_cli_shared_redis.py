"""`serve`, `worker` and `check` without `AIM_REDIS_URL` share the one private redis-server of
their data directory (profile §16), run as an operator runs them."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.cli_processes import SECRET, clean_environ, run_cli, serving
from tests.redis_processes import (
    redis_servers_over,
    wait_for_no_server,
)

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

WAIT_S = 20.0


@pytest.fixture
def redis_dir(data_dir: Path) -> Path:
    return data_dir / "redis"


class Worker:
    """A running `aim-realtime worker` over the same data directory as `serving`."""

    def __init__(self, tmp_path: Path) -> None:
        self.log = tmp_path / "worker.log"
        with self.log.open("wb") as sink:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "realtime.cli", "worker"],
                cwd=tmp_path,
                env=clean_environ(AIM_DATA_DIR=str(tmp_path / "data")),
                stdout=sink,
                stderr=subprocess.STDOUT,
            )

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def wait_until_running(self) -> None:
        deadline = time.monotonic() + WAIT_S
        while "worker running" not in self.output():
            if self.process.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"the worker did not start:\n{self.output()}")
            time.sleep(0.05)

    def stop(self) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        return self.process.wait(timeout=WAIT_S)

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait(timeout=WAIT_S)


def test_serve_worker_and_check_share_one_server_which_the_last_one_stops(
    tmp_path: Path, redis_dir: Path
) -> None:
    workers: list[Worker] = []
    try:
        with serving(tmp_path, AIM_AUTH_HS256_SECRET=SECRET) as svc:
            svc.wait_until_ready()
            servers = redis_servers_over(redis_dir)
            assert len(servers) == 1, svc.output()
            assert f"(pid {servers[0]}," in svc.output()
            assert "started by this process" in svc.output()

            worker = Worker(tmp_path)
            workers.append(worker)
            worker.wait_until_running()
            assert f"(pid {servers[0]}," in worker.output()
            assert "already running" in worker.output()

            checked = run_cli("check", cwd=tmp_path, AIM_DATA_DIR=str(tmp_path / "data"))
            assert checked.returncode == 0, checked.stdout + checked.stderr
            assert f"redis: the private redis-server of {redis_dir} (unix socket " in checked.stdout
            assert checked.stdout.splitlines()[1].endswith("): reachable")
            assert "embedded" not in checked.stdout
            assert f"(pid {servers[0]}," in checked.stderr
            assert redis_servers_over(redis_dir) == servers  # check left it to the others

            svc.terminate()
        assert redis_servers_over(redis_dir) == servers  # the worker still uses it
        assert worker.stop() == 0, worker.output()
        assert wait_for_no_server(redis_dir) == []
        assert "Traceback" not in worker.output()
    finally:
        for started in workers:
            started.kill()


def test_check_alone_starts_the_server_and_stops_it_again(tmp_path: Path, redis_dir: Path) -> None:
    checked = run_cli("check", cwd=tmp_path, AIM_DATA_DIR=str(tmp_path / "data"))

    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "started by this process" in checked.stderr
    assert wait_for_no_server(redis_dir) == []
