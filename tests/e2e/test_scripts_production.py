"""With `AIM_REQUIRE_REDIS=1` (production) the development secret is neither made nor used:
`scripts/serve`, `scripts/token` and `scripts/dev-secret` refuse in one line saying what to set,
and print no token; with a configured key the scripts work as ever. Real processes, run as a
person runs the scripts (a fresh shell's environment, nothing of AIM_* but what the test sets)."""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

import jwt
import pytest

from tests.cli_processes import SECRET, clean_environ, free_port, run_cli

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
REFUSAL = (
    "AIM_REQUIRE_REDIS is set (production), so no development secret is made or used: "
    "set AIM_AUTH_HS256_SECRET (at least 32 bytes) or AIM_AUTH_JWKS_URL"
)
JWT_PREFIX = "eyJ"  # how every JWT's header starts
TIMEOUT_S = 60
SCRIPTS = {
    "serve": ["scripts/serve", "--port"],  # the port is added per test
    "token": ["scripts/token", "--sub", "alice"],
    "dev-secret": ["scripts/dev-secret"],
}


def script(name: str, data_dir: Path, **variables: str) -> subprocess.CompletedProcess[str]:
    """The script's exit code and output; a script still running after `TIMEOUT_S` (a service
    that started) is stopped with its whole process group and reported as exit code None."""
    command = list(SCRIPTS[name])
    if name == "serve":
        command.append(str(free_port()))
    process = subprocess.Popen(
        command,
        cwd=ROOT,
        env=clean_environ(AIM_DATA_DIR=str(data_dir), **variables),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        out, err = process.communicate(timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGTERM)
        out, err = process.communicate(timeout=30)
        return subprocess.CompletedProcess(command, None, out, err)
    return subprocess.CompletedProcess(command, process.returncode, out, err)


@pytest.mark.parametrize("name", list(SCRIPTS))
@pytest.mark.parametrize("production", ["1", "yes"])
def test_production_scripts_refuse_to_make_a_development_secret(
    tmp_path: Path, name: str, production: str
) -> None:
    data_dir = tmp_path / "data"

    result = script(name, data_dir, AIM_REQUIRE_REDIS=production)

    assert result.returncode == 2, result.stdout + result.stderr
    assert result.stderr.splitlines() == [REFUSAL]
    assert result.stdout == ""
    assert not (data_dir / "dev-secret").exists()


@pytest.mark.parametrize("name", ["serve", "token"])
def test_production_scripts_never_use_a_development_secret_made_before(
    tmp_path: Path, name: str
) -> None:
    data_dir = tmp_path / "data"
    made = script("dev-secret", data_dir)  # development, earlier, on the same machine
    assert made.returncode == 0, made.stderr
    secret = made.stdout.strip()

    result = script(name, data_dir, AIM_REQUIRE_REDIS="1")

    assert result.returncode == 2, result.stdout + result.stderr
    assert result.stderr.splitlines() == [REFUSAL]
    assert JWT_PREFIX not in result.stdout + result.stderr
    assert secret not in result.stdout + result.stderr
    assert (data_dir / "dev-secret").read_text().strip() == secret


def test_the_dev_secret_command_refuses_in_production_too(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    (tmp_path / ".env").write_text("AIM_REQUIRE_REDIS=1\n")  # production said in .env only

    result = run_cli("dev-secret", cwd=tmp_path, AIM_DATA_DIR=str(data_dir))

    assert result.returncode == 2
    assert result.stderr.splitlines() == [REFUSAL]
    assert result.stdout == ""
    assert not data_dir.exists()


def test_production_token_script_mints_with_the_configured_secret(tmp_path: Path) -> None:
    result = script(
        "token", tmp_path / "data",
        AIM_REQUIRE_REDIS="1", AIM_AUTH_HS256_SECRET=SECRET, AIM_AUTH_AUDIENCE="aim-realtime",
    )  # fmt: skip

    assert result.returncode == 0, result.stderr
    claims = jwt.decode(
        result.stdout.strip(), SECRET, algorithms=["HS256"], audience="aim-realtime"
    )
    assert claims["sub"] == "alice"
    assert not (tmp_path / "data" / "dev-secret").exists()
