"""`aim-realtime token | check | serve` (profile §14), run as an operator runs them: a subprocess
with a controlled environment, in an empty working directory so no stray `.env` is read."""

from __future__ import annotations

import contextlib
import time
from pathlib import Path

import httpx
import jwt
import pytest

from realtime.auth import Authenticator
from realtime.environment import without_credentials
from realtime.settings import Settings
from tests.cli_processes import SECRET, needs, run_cli, serving
from tests.redis_processes import redis_servers_over, wait_for_no_server

pytestmark = pytest.mark.e2e


def children_of(pid: int) -> list[int]:
    """Live child processes of `pid` (Linux /proc)."""
    found = []
    for status in Path("/proc").glob("[0-9]*/status"):
        with contextlib.suppress(OSError):
            fields = dict(
                line.split(":\t", 1) for line in status.read_text().splitlines() if ":\t" in line
            )
            if int(fields.get("PPid", "0")) == pid and not fields["State"].startswith("Z"):
                found.append(int(status.parent.name))
    return found


def process_name(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


# --- token -----------------------------------------------------------------------------------


async def test_token_command_prints_a_token_the_service_accepts(tmp_path: Path) -> None:
    result = run_cli(
        "token",
        "--sub",
        "bob",
        "--scope",
        "a2a.tasks.read",
        "--ttl",
        "60",
        cwd=tmp_path,
        AIM_AUTH_HS256_SECRET=SECRET,
    )

    assert result.returncode == 0, result.stderr
    token = result.stdout.strip()
    assert token.count(".") == 2
    assert "\n" not in token
    authenticator = Authenticator(Settings(auth_hs256_secret=SECRET))
    principal = await authenticator.authenticate("Bearer " + token)
    await authenticator.aclose()
    assert principal.subject == "bob"
    assert principal.scopes == frozenset({"a2a.tasks.read"})
    claims = jwt.decode(token, options={"verify_signature": False})
    assert claims["exp"] - claims["iat"] == 60
    assert abs(claims["iat"] - time.time()) < 30


async def test_token_command_grants_every_scope_by_default(tmp_path: Path) -> None:
    result = run_cli("token", "--sub", "carol", cwd=tmp_path, AIM_AUTH_HS256_SECRET=SECRET)

    assert result.returncode == 0, result.stderr
    authenticator = Authenticator(Settings(auth_hs256_secret=SECRET))
    principal = await authenticator.authenticate("Bearer " + result.stdout.strip())
    await authenticator.aclose()
    assert principal.scopes == {"a2a.invoke", "a2a.tasks.read", "a2a.tasks.cancel"}


def test_token_command_without_a_secret_exits_2_and_says_what_to_set(tmp_path: Path) -> None:
    result = run_cli("token", "--sub", "bob", cwd=tmp_path)

    assert result.returncode == 2
    assert "AIM_AUTH_HS256_SECRET" in result.stderr
    assert result.stdout == ""


def test_token_command_with_a_short_secret_exits_2_without_printing_it(tmp_path: Path) -> None:
    result = run_cli("token", "--sub", "bob", cwd=tmp_path, AIM_AUTH_HS256_SECRET="tooShort-xyz")

    assert result.returncode == 2
    assert "AIM_AUTH_HS256_SECRET" in result.stderr
    assert "tooShort-xyz" not in result.stderr + result.stdout


def test_token_command_reads_the_secret_from_a_dotenv_file(tmp_path: Path) -> None:
    (tmp_path / ".env").write_text(f'# development\nAIM_AUTH_HS256_SECRET="{SECRET}"\n')

    result = run_cli("token", "--sub", "bob", cwd=tmp_path)

    assert result.returncode == 0, result.stderr
    jwt.decode(result.stdout.strip(), SECRET, algorithms=["HS256"])


def test_the_environment_wins_over_the_dotenv_file(tmp_path: Path) -> None:
    (tmp_path / ".env").write_text(
        "AIM_AUTH_HS256_SECRET=a-dotenv-secret-that-is-long-enough-too\n"
    )

    result = run_cli("token", "--sub", "bob", cwd=tmp_path, AIM_AUTH_HS256_SECRET=SECRET)

    assert result.returncode == 0, result.stderr
    jwt.decode(result.stdout.strip(), SECRET, algorithms=["HS256"])


@pytest.mark.parametrize(
    "command", [["token", "--sub", "bob"], ["check"], ["serve"]], ids=["token", "check", "serve"]
)
def test_invalid_configuration_exits_2_naming_the_variable(
    tmp_path: Path, command: list[str]
) -> None:
    result = run_cli(*command, cwd=tmp_path, AIM_AUTH_HS256_SECRET=SECRET, AIM_IDLE_TIMEOUT_S="abc")

    assert result.returncode == 2
    assert "AIM_IDLE_TIMEOUT_S" in result.stderr
    assert "Traceback" not in result.stderr
    assert SECRET not in result.stderr + result.stdout


def test_a_missing_command_is_a_usage_error(tmp_path: Path) -> None:
    result = run_cli(cwd=tmp_path)

    assert result.returncode == 2
    assert "usage: aim-realtime" in result.stderr


# --- check -----------------------------------------------------------------------------------


def test_check_with_a_reachable_redis_exits_0_and_says_so(
    tmp_path: Path, redis_url: str | None
) -> None:
    result = run_cli("check", cwd=tmp_path, AIM_REDIS_URL=needs(redis_url))

    assert result.returncode == 0, result.stdout + result.stderr
    assert "configuration: valid" in result.stdout
    assert f"redis: {without_credentials(redis_url or '')} (AIM_REDIS_URL): reachable" in (
        result.stdout
    )
    assert "embedded" not in result.stdout


def test_check_with_an_unreachable_redis_exits_1_naming_it_and_why(tmp_path: Path) -> None:
    result = run_cli("check", cwd=tmp_path, AIM_REDIS_URL="redis://app:hunter2@127.0.0.1:1/0")

    assert result.returncode == 1
    assert (
        "redis: redis://127.0.0.1:1/0 (AIM_REDIS_URL): NOT READY (ConnectionError: Error 111 "
        "connecting to 127.0.0.1:1."
    ) in result.stdout
    assert "hunter2" not in result.stdout + result.stderr
    assert "Traceback" not in result.stderr


# --- serve -----------------------------------------------------------------------------------


@pytest.mark.slow
def test_serve_answers_health_and_readiness_then_stops_on_sigterm(
    tmp_path: Path, redis_url: str | None
) -> None:
    with serving(tmp_path, AIM_REDIS_URL=needs(redis_url), AIM_AUTH_HS256_SECRET=SECRET) as svc:
        svc.wait_until_ready()
        health = httpx.get(f"{svc.base_url}/healthz", timeout=5.0)
        ready = httpx.get(f"{svc.base_url}/readyz", timeout=5.0)

        assert health.status_code == 200
        assert health.json() == {"status": "ok"}
        assert ready.status_code == 200
        assert ready.json() == {"status": "ready"}
        assert not [p for p in children_of(svc.process.pid) if process_name(p).startswith("redis")]

        svc.terminate()
    assert SECRET not in svc.output()


@pytest.mark.slow
def test_serve_without_a_redis_url_runs_its_own_redis_and_stops_it(
    tmp_path: Path, data_dir: Path
) -> None:
    redis_dir = data_dir / "redis"
    with serving(tmp_path, AIM_AUTH_HS256_SECRET=SECRET) as svc:
        svc.wait_until_ready()
        servers = redis_servers_over(redis_dir)
        assert len(servers) == 1, svc.output()
        assert (redis_dir / "appendonlydir").is_dir()  # AOF in AIM_DATA_DIR
        assert f"private redis-server of {redis_dir}" in svc.output()
        assert httpx.get(f"{svc.base_url}/readyz", timeout=5.0).status_code == 200

        svc.terminate()
    # the last process over the data directory stops the server on its way out
    assert wait_for_no_server(redis_dir) == [], "the private redis-server outlived serve"
