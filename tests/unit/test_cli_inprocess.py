"""The CLI entry point in-process (the subprocess tests in tests/e2e cover real start-up)."""

from __future__ import annotations

import pytest

from realtime.auth import Authenticator
from realtime.cli import main
from realtime.settings import Settings

SECRET = "cli-secret-0123456789-abcdefghijklmnopqrstuvwxyz"


@pytest.fixture(autouse=True)
def clean_env(monkeypatch, tmp_path):
    for name in list(__import__("os").environ):
        if name.startswith(("AIM_", "OTEL_")):
            monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)


async def test_token_prints_a_token_the_service_accepts(monkeypatch, capsys):
    monkeypatch.setenv("AIM_AUTH_HS256_SECRET", SECRET)
    assert main(["token", "--sub", "carol", "--scope", "a2a.invoke", "--ttl", "60"]) == 0
    printed = capsys.readouterr().out.strip()
    principal = await Authenticator(Settings(auth_hs256_secret=SECRET)).authenticate(
        f"Bearer {printed}"
    )
    assert principal.subject == "carol"
    assert principal.scopes == frozenset({"a2a.invoke"})


def test_token_without_a_configured_secret_exits_2(capsys):
    assert main(["token", "--sub", "carol"]) == 2
    assert "AIM_AUTH_HS256_SECRET" in capsys.readouterr().err


def test_invalid_configuration_exits_2_naming_the_variable(monkeypatch, capsys):
    monkeypatch.setenv("AIM_IDLE_TIMEOUT_S", "soon")
    with pytest.raises(SystemExit) as exited:
        main(["check"])
    assert exited.value.code == 2
    assert "AIM_IDLE_TIMEOUT_S" in capsys.readouterr().err


def test_dotenv_fills_in_unset_variables(monkeypatch, tmp_path, capsys):
    (tmp_path / ".env").write_text(f"# dev\nAIM_AUTH_HS256_SECRET={SECRET}\n")
    assert main(["token", "--sub", "dave"]) == 0
    assert capsys.readouterr().out.count(".") == 2


def test_check_reaches_the_configured_redis(monkeypatch, redis_url, capsys):
    if redis_url is None:
        pytest.skip("no real Redis on this machine")
    monkeypatch.setenv("AIM_REDIS_URL", redis_url)
    assert main(["check"]) == 0
    out = capsys.readouterr().out
    assert "configuration: valid" in out
    assert "(AIM_REDIS_URL): reachable" in out
    assert "livekit: not configured" in out
    assert "events: not configured (AIM_EVENTS_URL unset); none are written" in out


def test_check_names_where_session_events_go_without_the_secret(monkeypatch, redis_url, capsys):
    if redis_url is None:
        pytest.skip("no real Redis on this machine")
    secret = "whsec_" + "c2Vzc2lvbi1ldmVudHMtY2hlY2stc2VjcmV0"
    monkeypatch.setenv("AIM_REDIS_URL", redis_url)
    monkeypatch.setenv("AIM_EVENTS_URL", "https://user:pw@backend.example/aim?key=k")
    monkeypatch.setenv("AIM_EVENTS_SECRET", secret)
    assert main(["check"]) == 0
    out = capsys.readouterr().out
    assert "events: sent to https://backend.example/aim (AIM_EVENTS_URL)" in out
    assert secret not in out
    assert "pw" not in out
    assert "key=k" not in out


async def test_check_reaches_livekit_when_configured(monkeypatch, redis_url, livekit, capsys):

    from realtime.cli import _check_async
    from tests.conftest import livekit_settings

    if redis_url is None:
        pytest.skip("no real Redis on this machine")
    settings = livekit_settings(livekit, redis_url=redis_url)
    assert await _check_async(settings) == 0
    target = f"livekit: {livekit.ws_url} (AIM_LIVEKIT_URL)"
    assert f"{target}: reachable, credentials accepted" in capsys.readouterr().out
    await livekit.set_down(True)
    assert await _check_async(settings) == 1
    assert f"{target}: NOT READY (LiveKit unreachable: " in capsys.readouterr().out


def test_logs_are_json_lines_with_trace_and_session_ids():
    import json
    import logging

    from opentelemetry.sdk.trace import TracerProvider

    from realtime.logs import JsonLogFormatter

    formatter = JsonLogFormatter()
    record = logging.LogRecord(
        "aim", logging.WARNING, __file__, 1, "effect %s failed", ("X",), None
    )
    record.session_id = "s-1"
    tracer = TracerProvider().get_tracer("test")
    with tracer.start_as_current_span("call") as span:
        line = json.loads(formatter.format(record))
    assert line["message"] == "effect X failed"
    assert line["level"] == "WARNING"
    assert line["session_id"] == "s-1"
    assert line["trace_id"] == format(span.get_span_context().trace_id, "032x")
