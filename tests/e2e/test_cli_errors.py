"""A user's mistake on the command line or in the configuration is one line that names what is
wrong, and the documented exit code (0 ready, 1 not ready, 2 bad configuration or arguments);
never a traceback, never a secret's value."""

from __future__ import annotations

import argparse
import subprocess
import time
from pathlib import Path

import pytest

from realtime.cli import build_parser
from tests.cli_processes import SECRET, call_cli, clean_environ, run_cli, serving

pytestmark = pytest.mark.e2e

NO_REDIS_BINARY = "/nonexistent"  # a PATH with no redis-server on it (the CLI runs by path)


def assert_clean(result_text: str) -> None:
    assert "Traceback" not in result_text
    assert "ExceptionGroup" not in result_text
    assert SECRET not in result_text


# --- token -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["--ttl", "0"], "argument --ttl: must be from 1 to 2592000 seconds (30 days), not 0"),
        (["--ttl", "-5"], "argument --ttl: must be from 1 to 2592000 seconds (30 days), not -5"),
        (["--ttl", "soon"], "argument --ttl: not a whole number of seconds: 'soon'"),
        (
            ["--scope", "bogus.scope"],
            "argument --scope: unknown scope 'bogus.scope'; known: "
            "a2a.invoke, a2a.tasks.read, a2a.tasks.cancel, aim.operator",
        ),
        (["--scope", ""], "argument --scope: name at least one of: a2a.invoke"),
        (
            ["--scope", "aim.provider"],
            "argument --scope: aim.provider tokens are minted by the service",
        ),
    ],
)
def test_token_refuses_a_bad_option_in_one_line(
    tmp_path: Path, arguments: list[str], message: str
) -> None:
    result = call_cli(
        "token", "--sub", "alice", *arguments, cwd=tmp_path, AIM_AUTH_HS256_SECRET=SECRET
    )

    assert result.returncode == 2
    assert result.stdout == ""  # no token
    assert f"aim-realtime token: error: {message}" in result.stderr
    assert_clean(result.stderr)


@pytest.mark.parametrize("subject", ["", "   "])
def test_token_refuses_a_blank_subject(tmp_path: Path, subject: str) -> None:
    result = call_cli("token", "--sub", subject, cwd=tmp_path, AIM_AUTH_HS256_SECRET=SECRET)

    assert result.returncode == 2
    assert result.stdout == ""
    assert "argument --sub: must not be empty: the service refuses a blank 'sub'" in result.stderr


def test_token_help_describes_every_option_with_its_default(tmp_path: Path) -> None:
    result = call_cli("token", "--help", cwd=tmp_path)

    assert result.returncode == 0
    text = " ".join(result.stdout.split())  # argparse wraps lines
    assert "--sub SUB the subject (principal) of the token" in text
    assert (
        "--ttl TTL lifetime in seconds, at most AIM_AUTH_MAX_TOKEN_LIFETIME_S (24 h unless set) "
        "(default: 3600)"
    ) in text
    assert "(default: a2a.invoke a2a.tasks.read a2a.tasks.cancel)" in text
    assert "aim.operator" in text
    assert "--tenant TENANT the tenant, when AIM_AUTH_TENANT_CLAIM names a claim" in text


def test_every_command_and_option_has_help() -> None:
    parser = build_parser()
    (commands,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    assert sorted(commands.choices) == [
        "check", "dev-secret", "livekit-dev", "serve", "token", "worker"
    ]  # fmt: skip
    for name, command in commands.choices.items():
        assert command.description, f"{name}: no description"
        for action in command._actions:
            assert action.help, f"{name} {action.dest}: no help"
            assert action.help != argparse.SUPPRESS


def test_token_names_the_tenant_the_settings_require(tmp_path: Path) -> None:
    result = call_cli(
        "token", "--sub", "alice", cwd=tmp_path,
        AIM_AUTH_HS256_SECRET=SECRET, AIM_AUTH_TENANT_CLAIM="org",
    )  # fmt: skip

    assert result.returncode == 2
    assert "AIM_AUTH_TENANT_CLAIM is 'org': give the token's tenant with --tenant" in result.stderr


# --- configuration ---------------------------------------------------------------------------


@pytest.mark.parametrize("command", ["check", "serve", "worker"])
def test_require_redis_without_any_redis_is_bad_configuration(tmp_path: Path, command: str) -> None:
    result = call_cli(
        command, cwd=tmp_path, AIM_AUTH_HS256_SECRET=SECRET, AIM_AUTH_AUDIENCE="aim-realtime",
        AIM_REQUIRE_REDIS="1", PATH=NO_REDIS_BINARY,
    )  # fmt: skip

    assert result.returncode == 2
    assert (
        "AIM_REQUIRE_REDIS is set but neither AIM_REDIS_URL nor a redis-server binary exists"
    ) in result.stderr
    assert "configuration: valid" not in result.stdout
    assert_clean(result.stdout + result.stderr)


@pytest.mark.parametrize("url", ["redis://127.0.0.1:notaport", "redis://127.0.0.1:99999"])
@pytest.mark.parametrize("command", ["check", "serve"])
def test_a_redis_url_with_a_bad_port_is_bad_configuration(
    tmp_path: Path, command: str, url: str
) -> None:
    result = call_cli(command, cwd=tmp_path, AIM_AUTH_HS256_SECRET=SECRET, AIM_REDIS_URL=url)

    assert result.returncode == 2
    assert (
        "AIM_REDIS_URL must be a redis/rediss/unix URL with a host and, if it names a port, a "
        "port from 1 to 65535"
    ) in result.stderr
    assert url.split(":")[-1] not in result.stderr  # the value is never echoed
    assert_clean(result.stdout + result.stderr)


def test_a_livekit_url_without_keys_is_bad_configuration(tmp_path: Path) -> None:
    result = call_cli(
        "check", cwd=tmp_path, AIM_AUTH_HS256_SECRET=SECRET, AIM_LIVEKIT_URL="ws://127.0.0.1:7880"
    )

    assert result.returncode == 2
    assert "AIM_LIVEKIT_URL needs AIM_LIVEKIT_API_KEY and AIM_LIVEKIT_API_SECRET" in result.stderr


def test_livekits_dev_secret_is_one_warning_and_not_pyjwts(tmp_path: Path) -> None:
    # `livekit-server --dev` is devkey/secret; nothing listens on port 1, so check reaches
    # LiveKit with a signed token (PyJWT would warn about the key here) and answers not ready;
    # a process of its own, whose warning filters are the service's and not pytest's
    result = run_cli(
        "check", cwd=tmp_path, AIM_AUTH_HS256_SECRET=SECRET,
        AIM_LIVEKIT_URL="ws://127.0.0.1:1", AIM_LIVEKIT_API_KEY="devkey",
        AIM_LIVEKIT_API_SECRET="secret",
    )  # fmt: skip

    assert result.returncode == 1
    warnings = [line for line in result.stderr.splitlines() if "shorter than 32 bytes" in line]
    assert len(warnings) == 1
    assert "AIM_LIVEKIT_API_SECRET holds a secret shorter than 32 bytes" in warnings[0]
    assert '"secret"' not in warnings[0]
    assert "InsecureKeyLengthWarning" not in result.stderr
    assert "livekit: ws://127.0.0.1:1 (AIM_LIVEKIT_URL): NOT READY (LiveKit unreachable" in (
        result.stdout
    )


# --- an unreachable Redis --------------------------------------------------------------------


@pytest.mark.slow
def test_serve_names_an_unreachable_redis_once_instead_of_flooding(tmp_path: Path) -> None:
    with serving(
        tmp_path, AIM_AUTH_HS256_SECRET=SECRET, AIM_REDIS_URL="redis://app:hunter2@127.0.0.1:1"
    ) as service:
        deadline = time.monotonic() + 20
        while "redis unavailable" not in service.output() and time.monotonic() < deadline:
            time.sleep(0.1)
        time.sleep(3)  # the worker loops keep failing several times a second meanwhile
        service.terminate()
    output = service.output()
    said = [line for line in output.splitlines() if "redis unavailable" in line]
    assert len(said) == 1, output
    assert "redis unavailable: redis://127.0.0.1:1 (AIM_REDIS_URL): ConnectionError" in said[0]
    assert "still unavailable" not in output  # the next line comes after 30 s at the earliest
    assert "hunter2" not in output
    assert "sweep failed" not in output


# --- keys at start-up (profile §19) ------------------------------------------------------------

JWKS_SETTINGS = {
    "AIM_AUTH_JWKS_URL": "http://127.0.0.1:9/jwks.json",
    "AIM_AUTH_ISSUER": "https://issuer.example",
    "AIM_AUTH_AUDIENCE": "aim-realtime",
}
JWT_PREFIX = "eyJ"  # how every JWT's header starts


@pytest.mark.parametrize("command", ["serve", "worker"])
def test_production_refuses_to_start_without_a_key_and_prints_no_token(
    tmp_path: Path, command: str, redis_url: str | None
) -> None:
    url = redis_url or "redis://127.0.0.1:9"
    result = call_cli(command, cwd=tmp_path, AIM_REQUIRE_REDIS="1", AIM_REDIS_URL=url)

    assert result.returncode == 2
    lines = [line for line in result.stderr.splitlines() if "AIM_AUTH" in line]
    assert len(lines) == 1, result.stderr
    assert "AIM_AUTH_HS256_SECRET" in lines[0]
    assert "AIM_AUTH_JWKS_URL" in lines[0]
    assert JWT_PREFIX not in result.stdout + result.stderr
    assert_clean(result.stdout + result.stderr)


@pytest.mark.parametrize("command", ["serve", "worker", "token"])
def test_a_secret_and_a_jwks_url_together_are_refused_at_start(
    tmp_path: Path, command: str
) -> None:
    arguments = ["--sub", "alice"] if command == "token" else []
    result = call_cli(
        command, *arguments, cwd=tmp_path, AIM_AUTH_HS256_SECRET=SECRET, **JWKS_SETTINGS
    )

    assert result.returncode == 2
    assert (
        "AIM_AUTH_HS256_SECRET and AIM_AUTH_JWKS_URL are both set: configure one key source"
    ) in result.stderr
    assert result.stdout == ""
    assert_clean(result.stdout + result.stderr)


def test_scripts_token_does_not_mint_for_a_jwks_deployment(tmp_path: Path) -> None:
    checkout = Path(__file__).resolve().parents[2]
    environ = clean_environ(AIM_DATA_DIR=str(tmp_path / "data"), **JWKS_SETTINGS)
    result = subprocess.run(
        [str(checkout / "scripts" / "token"), "--sub", "mallory", "--scope", "aim.operator"],
        cwd=tmp_path, env=environ, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip

    assert result.returncode == 2, result.stdout + result.stderr
    assert JWT_PREFIX not in result.stdout
    assert not (tmp_path / "data" / "dev-secret").exists()


def test_development_mode_prints_a_token_marked_for_development(tmp_path: Path) -> None:
    with serving(tmp_path, PATH=NO_REDIS_BINARY + ":/usr/bin:/bin") as svc:
        svc.wait_until_ready()
        svc.terminate()
    output = svc.output()
    assert "DEVELOPMENT MODE" in output
    assert "for development only" in output
    assert f"\n  {JWT_PREFIX}" in output


def test_a_shared_redis_without_a_key_prints_no_token(
    tmp_path: Path, redis_url: str | None
) -> None:
    if redis_url is None:
        pytest.skip("no real Redis for this session")
    with serving(tmp_path, AIM_REDIS_URL=redis_url) as svc:
        svc.wait_until_ready()
        svc.terminate()
    output = svc.output()
    assert JWT_PREFIX not in output
    assert "set AIM_AUTH_HS256_SECRET or AIM_AUTH_JWKS_URL" in output


@pytest.mark.parametrize("command", ["check", "serve", "worker", "token"])
def test_production_with_a_secret_but_no_audience_is_refused_at_start(
    tmp_path: Path, command: str, redis_url: str | None
) -> None:
    arguments = ["--sub", "alice"] if command == "token" else []
    url = redis_url or "redis://127.0.0.1:9"
    result = call_cli(
        command, *arguments, cwd=tmp_path, AIM_REQUIRE_REDIS="1", AIM_REDIS_URL=url,
        AIM_AUTH_HS256_SECRET=SECRET,
    )  # fmt: skip

    assert result.returncode == 2
    lines = [line for line in result.stderr.splitlines() if "AIM_AUTH" in line]
    assert lines == [
        "  AIM_REQUIRE_REDIS is set (production) but AIM_AUTH_AUDIENCE is not: set the audience "
        "(aud) client tokens must carry, so that a token minted for another service is refused"
    ], result.stderr
    assert result.stdout == ""
    assert_clean(result.stdout + result.stderr)


def test_a_token_longer_lived_than_the_service_accepts_is_not_minted(tmp_path: Path) -> None:
    result = call_cli(
        "token", "--sub", "alice", "--ttl", "90000", cwd=tmp_path, AIM_AUTH_HS256_SECRET=SECRET
    )
    shorter = call_cli(
        "token", "--sub", "alice", "--ttl", "90000", cwd=tmp_path, AIM_AUTH_HS256_SECRET=SECRET,
        AIM_AUTH_MAX_TOKEN_LIFETIME_S="90000",
    )  # fmt: skip

    assert result.returncode == 2
    assert result.stderr.strip() == (
        "--ttl 90000 is longer than the service accepts: at most 86400 s "
        "(AIM_AUTH_MAX_TOKEN_LIFETIME_S)"
    )
    assert result.stdout == ""
    assert shorter.returncode == 0, shorter.stderr


@pytest.mark.parametrize("command", ["check", "serve", "worker"])
def test_a_bad_tenant_policy_refuses_the_start_with_a_line_per_problem(
    tmp_path: Path, command: str
) -> None:
    policy = tmp_path / "policy.toml"
    policy.write_text(
        "[default]\nlive_sessions = -1\n[tenants.acme]\nsession_minute_per_day = 3\n",
        encoding="utf-8",
    )
    policy.chmod(0o644)
    result = call_cli(
        command, cwd=tmp_path, AIM_AUTH_HS256_SECRET=SECRET,
        AIM_TENANT_POLICY_FILE=str(policy),
    )  # fmt: skip

    assert result.returncode == 2
    lines = result.stderr.splitlines()
    assert lines[0] == f"tenant policy {policy} refused:"
    assert lines[1].strip().startswith("default.live_sessions: must be 0 to")
    assert lines[2].strip().startswith("tenants.acme.session_minute_per_day: unknown limit")
    assert "configuration: valid" not in result.stdout
