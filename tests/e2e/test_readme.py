"""The README's commands work when pasted into a new shell: `scripts/serve`, then the try-it
block (a token from `scripts/token`, a `curl` to the service) run as written, only the port
changed so the test can run beside anything on 8080."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.cli_processes import free_port, wait_for_answer

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
STARTUP_TIMEOUT_S = 60.0


def shell_blocks() -> list[str]:
    return re.findall(r"```sh\n(.*?)```", README.read_text(), flags=re.S)


def try_it_block() -> str:
    (block,) = [b for b in shell_blocks() if "scripts/token" in b and "curl" in b]
    return block


def fresh_shell_environ(data_dir: Path) -> dict[str, str]:
    """A new shell's environment: none of the service's variables set."""
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("AIM_", "OTEL_"))}
    environ["AIM_DATA_DIR"] = str(data_dir)  # the scripts' default is .aim-data in the checkout
    return environ


@contextlib.contextmanager
def scripts_serve(port: int, environ: dict[str, str], log: Path) -> Iterator[str]:
    with log.open("wb") as sink:
        process = subprocess.Popen(
            ["scripts/serve", "--port", str(port)],
            cwd=ROOT,
            env=environ,
            stdout=sink,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    base = f"http://127.0.0.1:{port}"
    try:
        wait_for_answer(process, f"{base}/healthz", log, STARTUP_TIMEOUT_S)
        yield base
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


def test_the_readme_has_the_two_set_up_commands() -> None:
    (setup,) = [b for b in shell_blocks() if "scripts/serve" in b and "scripts/test" in b]
    commands = [line.split("#")[0].strip() for line in setup.splitlines() if line.strip()]
    assert commands == ["scripts/serve", "scripts/test"]


def test_the_try_it_block_works_pasted_into_a_new_shell(tmp_path: Path) -> None:
    if shutil.which("curl") is None:
        if os.environ.get("CI"):
            pytest.fail("the try-it block uses curl (.ci/run installs it)")
        pytest.skip("the try-it block uses curl")
    port = free_port()
    environ = fresh_shell_environ(tmp_path / "data")
    with scripts_serve(port, environ, tmp_path / "serve.log"):
        block = try_it_block().replace("localhost:8080", f"localhost:{port}")
        pasted = subprocess.run(
            ["bash", "-c", block],
            cwd=ROOT,
            env=environ,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
    assert pasted.returncode == 0, pasted.stderr
    answer = json.loads(pasted.stdout)
    assert answer["jsonrpc"] == "2.0"
    assert answer["id"] == 1
    assert answer["result"]["tasks"] == []
    # the development secret lives where the README says, readable by its owner only
    secret = tmp_path / "data" / "dev-secret"
    assert secret.stat().st_mode & 0o077 == 0
    assert secret.read_text().strip() not in (tmp_path / "serve.log").read_text()
