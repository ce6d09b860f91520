"""Configuration from the environment (profile §14): defaults, and a clear message per bad value."""

from __future__ import annotations

from typing import Any

import pytest

from realtime.environment import MIN_HS256_SECRET_BYTES
from realtime.settings import PROVIDER_CAPABILITIES, Settings, SettingsError

SECRET = "a-development-secret-of-more-than-32-bytes"
LIVEKIT_SECRET = "livekit-api-secret-do-not-print-me"


def problems_for(environ: dict[str, str]) -> list[str]:
    with pytest.raises(SettingsError) as caught:
        Settings.from_env(environ)
    assert caught.value.problems
    for problem in caught.value.problems:
        assert problem in str(caught.value)
    return caught.value.problems


def only_problem(environ: dict[str, str]) -> str:
    problems = problems_for(environ)
    assert len(problems) == 1, problems
    return problems[0]


# --- defaults -------------------------------------------------------------------------------


def test_an_empty_environment_gives_the_documented_defaults() -> None:
    settings = Settings.from_env({})

    assert settings.redis_url is None
    assert settings.redis_cluster is False
    assert settings.require_redis is False
    assert settings.data_dir == ".aim-data"
    assert str(settings.data_path) == ".aim-data"
    assert settings.public_base_url == "http://127.0.0.1:8080"
    assert settings.auth_jwks_url is None
    assert settings.auth_issuer is None
    assert settings.auth_audience is None
    assert settings.auth_tenant_claim is None
    assert settings.auth_leeway_s == 30
    assert settings.livekit_url is None
    assert settings.livekit_public_url is None
    assert settings.livekit_api_key is None
    assert settings.livekit_api_secret is None
    assert settings.livekit_webhook_keys == ()
    assert settings.agent_name == "aim-realtime-agent"
    assert settings.provider_capabilities == frozenset(PROVIDER_CAPABILITIES)
    assert settings.provider_capabilities == {
        "audio_input",
        "audio_output",
        "vision_input",
        "transcript_history",
    }
    assert (
        settings.join_token_ttl_s,
        settings.idle_timeout_s,
        settings.reconnect_grace_s,
        settings.max_session_s,
        settings.requirement_ttl_s,
    ) == (300, 300, 60, 3600, 120)
    assert (settings.max_sessions_per_principal, settings.max_endpoints_per_session) == (5, 8)
    assert settings.rate_limit_rps == 100.0


def test_an_empty_environment_generates_a_strong_secret_and_says_so() -> None:
    settings = Settings.from_env({})

    assert settings.auth_hs256_secret is not None
    assert len(settings.auth_hs256_secret.encode()) >= MIN_HS256_SECRET_BYTES
    assert settings.auth_hs256_secret_generated is True


def test_each_process_generates_a_different_secret() -> None:
    assert Settings.from_env({}).auth_hs256_secret != Settings.from_env({}).auth_hs256_secret


def test_blank_values_count_as_unset() -> None:
    settings = Settings.from_env(
        {"AIM_IDLE_TIMEOUT_S": "  ", "AIM_REDIS_URL": "", "AIM_AUTH_HS256_SECRET": " "}
    )

    assert settings.idle_timeout_s == 300
    assert settings.redis_url is None
    assert settings.auth_hs256_secret_generated is True


def test_a_configured_secret_is_used_and_not_flagged_generated() -> None:
    settings = Settings.from_env({"AIM_AUTH_HS256_SECRET": SECRET})

    assert settings.auth_hs256_secret == SECRET
    assert settings.auth_hs256_secret_generated is False


def test_a_jwks_configuration_generates_no_development_secret() -> None:
    settings = Settings.from_env(
        {
            "AIM_AUTH_JWKS_URL": "https://issuer.example/.well-known/jwks.json",
            "AIM_AUTH_ISSUER": "https://issuer.example",
            "AIM_AUTH_AUDIENCE": "aim-realtime",
        }
    )

    assert settings.auth_hs256_secret is None
    assert settings.auth_hs256_secret_generated is False
    assert settings.auth_jwks_url == "https://issuer.example/.well-known/jwks.json"
    assert settings.auth_issuer == "https://issuer.example"
    assert settings.auth_audience == "aim-realtime"


def test_valid_values_are_read() -> None:
    settings = Settings.from_env(
        {
            "AIM_REDIS_URL": "rediss://redis.example:6380/2",
            "AIM_REDIS_CLUSTER": "yes",
            "AIM_REQUIRE_REDIS": "TRUE",
            "AIM_AUTH_HS256_SECRET": SECRET,  # production refuses to start without a key
            "AIM_AUTH_AUDIENCE": "aim-realtime",  # and without the audience tokens must carry
            "AIM_DATA_DIR": "/var/lib/aim",
            "AIM_PUBLIC_BASE_URL": "https://aim.example/",
            "AIM_AUTH_TENANT_CLAIM": "tid",
            "AIM_AUTH_LEEWAY_S": "0",
            "AIM_AGENT_NAME": "my-agent",
            "AIM_PROVIDER_CAPABILITIES": " audio_input , transcript_history ",
            "AIM_JOIN_TOKEN_TTL_S": "10",
            "AIM_IDLE_TIMEOUT_S": "86400",
            "AIM_RECONNECT_GRACE_S": "5",
            "AIM_MAX_SESSION_S": "7200",
            "AIM_REQUIREMENT_TTL_S": "30",
            "AIM_MAX_SESSIONS_PER_PRINCIPAL": "10000",
            "AIM_MAX_ENDPOINTS_PER_SESSION": "64",
            "AIM_RATE_LIMIT_RPS": "0",
            "AIM_SSE_HEARTBEAT_S": "0.5",
            "AIM_SSE_BUFFER_EVENTS": "32",
        }
    )

    assert settings.redis_url == "rediss://redis.example:6380/2"
    assert settings.redis_cluster is True
    assert settings.require_redis is True
    assert settings.data_dir == "/var/lib/aim"
    assert settings.public_base_url == "https://aim.example"  # trailing slash dropped
    assert settings.auth_tenant_claim == "tid"
    assert settings.auth_leeway_s == 0
    assert settings.agent_name == "my-agent"
    assert settings.provider_capabilities == {"audio_input", "transcript_history"}
    assert settings.join_token_ttl_s == 10
    assert settings.idle_timeout_s == 86400
    assert settings.reconnect_grace_s == 5
    assert settings.max_session_s == 7200
    assert settings.requirement_ttl_s == 30
    assert settings.max_sessions_per_principal == 10000
    assert settings.max_endpoints_per_session == 64
    assert settings.rate_limit_rps == 0.0
    assert (settings.sse_heartbeat_s, settings.sse_buffer_events) == (0.5, 32)


def read(names: tuple[str, ...], environ: dict[str, str] | None = None) -> tuple[Any, ...]:
    """The settings `names` as read from `environ` (none: the defaults)."""
    settings = Settings.from_env(environ or {})
    return tuple(getattr(settings, name) for name in names)


HTTP_CONNECTIONS = ("http_idle_timeout_s", "http_request_timeout_s", "http_max_connections")
STREAM_BOUNDS = (
    "sse_max_streams_per_principal",
    "sse_max_streams_per_task",
    "sse_max_lifetime_s",
    "http_write_timeout_s",
)


def test_http_connection_settings_default_to_the_profile_and_are_read() -> None:
    assert read(HTTP_CONNECTIONS) == (75, 30, 2048)
    environ = {
        "AIM_HTTP_IDLE_TIMEOUT_S": "5",
        "AIM_HTTP_REQUEST_TIMEOUT_S": "2",
        "AIM_HTTP_MAX_CONNECTIONS": "10",
    }
    assert read(HTTP_CONNECTIONS, environ) == (5, 2, 10)


def test_sse_settings_default_and_refuse_out_of_range_values() -> None:
    settings = Settings.from_env({})
    assert (settings.sse_heartbeat_s, settings.sse_buffer_events) == (15.0, 256)
    assert "AIM_SSE_HEARTBEAT_S" in only_problem({"AIM_SSE_HEARTBEAT_S": "0"})
    assert "AIM_SSE_BUFFER_EVENTS" in only_problem({"AIM_SSE_BUFFER_EVENTS": "0"})


def test_stream_bounds_default_are_read_and_refuse_out_of_range_values() -> None:
    assert read(STREAM_BOUNDS) == (16, 8, 3600.0, 30.0)
    environ = {
        "AIM_SSE_MAX_STREAMS_PER_PRINCIPAL": "4",
        "AIM_SSE_MAX_STREAMS_PER_TASK": "2",
        "AIM_SSE_MAX_LIFETIME_S": "600",
        "AIM_HTTP_WRITE_TIMEOUT_S": "5.5",
    }
    assert read(STREAM_BOUNDS, environ) == (4, 2, 600.0, 5.5)
    for name, value in (
        ("AIM_SSE_MAX_STREAMS_PER_PRINCIPAL", "0"),
        ("AIM_SSE_MAX_STREAMS_PER_TASK", "0"),
        ("AIM_SSE_MAX_LIFETIME_S", "0.5"),
        ("AIM_SSE_MAX_LIFETIME_S", "86401"),
        ("AIM_HTTP_WRITE_TIMEOUT_S", "0"),
    ):
        assert name in only_problem({name: value})


def test_reconciler_settings_default_and_refuse_out_of_range_values() -> None:
    settings = Settings.from_env({})
    assert (settings.reconcile_interval_s, settings.reconcile_grace_s) == (60, 120)
    off = Settings.from_env({"AIM_RECONCILE_INTERVAL_S": "0", "AIM_RECONCILE_GRACE_S": "10"})
    assert (off.reconcile_interval_s, off.reconcile_grace_s) == (0, 10)
    assert "AIM_RECONCILE_INTERVAL_S" in only_problem({"AIM_RECONCILE_INTERVAL_S": "-1"})
    assert "AIM_RECONCILE_INTERVAL_S" in only_problem({"AIM_RECONCILE_INTERVAL_S": "1m"})
    assert "AIM_RECONCILE_GRACE_S" in only_problem({"AIM_RECONCILE_GRACE_S": "9"})
    assert "AIM_RECONCILE_GRACE_S" in only_problem({"AIM_RECONCILE_GRACE_S": "86401"})


@pytest.mark.parametrize("url", ["redis://localhost:6379/0", "unix:///tmp/redis.sock"])
def test_redis_urls_of_every_documented_scheme_are_accepted(url: str) -> None:
    assert Settings.from_env({"AIM_REDIS_URL": url}).redis_url == url


@pytest.mark.parametrize(
    ("value", "expected"),
    [("1", True), ("on", True), ("Yes", True), ("0", False), ("off", False), ("no", False)],
)
def test_flags_take_the_documented_spellings(value: str, expected: bool) -> None:
    assert Settings.from_env({"AIM_REDIS_CLUSTER": value}).redis_cluster is expected


# --- LiveKit defaults -------------------------------------------------------------------------


def test_webhook_keys_default_to_the_api_key_and_secret() -> None:
    settings = Settings.from_env(
        {"AIM_LIVEKIT_API_KEY": "APIkey", "AIM_LIVEKIT_API_SECRET": LIVEKIT_SECRET}
    )

    assert settings.livekit_api_key == "APIkey"
    assert settings.livekit_api_secret == LIVEKIT_SECRET
    assert settings.livekit_webhook_keys == (("APIkey", LIVEKIT_SECRET),)


def test_configured_webhook_keys_replace_the_api_key_default() -> None:
    settings = Settings.from_env(
        {
            "AIM_LIVEKIT_API_KEY": "APIkey",
            "AIM_LIVEKIT_API_SECRET": LIVEKIT_SECRET,
            "AIM_LIVEKIT_WEBHOOK_KEYS": "one:s1, two:s:with:colons",
        }
    )

    assert settings.livekit_webhook_keys == (("one", "s1"), ("two", "s:with:colons"))


LIVEKIT_KEYS = {
    "AIM_LIVEKIT_API_KEY": "APIkey",
    "AIM_LIVEKIT_API_SECRET": "a-livekit-secret-of-at-least-32-bytes!",
}


def test_without_livekit_credentials_no_webhook_signer_is_accepted() -> None:
    assert Settings.from_env({}).livekit_webhook_keys == ()


def livekit_urls(**environ: str) -> tuple[str | None, str | None]:
    """The API URL and the public URL read from `environ` with LiveKit's keys."""
    settings = Settings.from_env({**environ, **LIVEKIT_KEYS})
    return settings.livekit_url, settings.livekit_public_url


def test_livekit_public_url_defaults_to_the_api_url() -> None:
    urls = livekit_urls(AIM_LIVEKIT_URL="wss://livekit.example")

    assert urls == ("wss://livekit.example", "wss://livekit.example")


def test_an_explicit_livekit_public_url_wins() -> None:
    urls = livekit_urls(
        AIM_LIVEKIT_URL="http://livekit.internal:7880", AIM_LIVEKIT_PUBLIC_URL="wss://rtc.example"
    )

    assert urls == ("http://livekit.internal:7880", "wss://rtc.example")


# --- validation: one message naming each bad variable ------------------------------------------

INTEGER_VARIABLES = [
    ("AIM_AUTH_LEEWAY_S", 0, 30),
    ("AIM_JOIN_TOKEN_TTL_S", 10, 86400),
    ("AIM_PROVISIONING_TIMEOUT_S", 1, 3600),
    ("AIM_IDLE_TIMEOUT_S", 1, 86400),
    ("AIM_RECONNECT_GRACE_S", 1, 3600),
    ("AIM_MAX_SESSION_S", 1, 7 * 86400),
    ("AIM_REQUIREMENT_TTL_S", 1, 86400),
    ("AIM_MAX_SESSIONS_PER_PRINCIPAL", 1, 10000),
    ("AIM_MAX_ENDPOINTS_PER_SESSION", 1, 64),
    ("AIM_TASK_TTL_S", 60, 365 * 86400),
    ("AIM_HTTP_IDLE_TIMEOUT_S", 1, 3600),
    ("AIM_HTTP_REQUEST_TIMEOUT_S", 1, 3600),
    ("AIM_HTTP_MAX_CONNECTIONS", 1, 1_000_000),
    ("AIM_MAX_HANDOFFS_PER_MINUTE", 0, 10_000),
]


@pytest.mark.parametrize(("name", "low", "high"), INTEGER_VARIABLES)
@pytest.mark.parametrize("raw", ["abc", "1.5", "12s", "0x10"])
def test_a_non_integer_is_reported_by_name(name: str, low: int, high: int, raw: str) -> None:
    problem = only_problem({name: raw})

    assert name in problem
    assert "whole number" in problem


@pytest.mark.parametrize(("name", "low", "high"), INTEGER_VARIABLES)
def test_an_integer_below_its_range_is_reported_by_name(name: str, low: int, high: int) -> None:
    problem = only_problem({name: str(low - 1)})

    assert name in problem
    assert f"between {low} and {high}" in problem


@pytest.mark.parametrize(("name", "low", "high"), INTEGER_VARIABLES)
def test_an_integer_above_its_range_is_reported_by_name(name: str, low: int, high: int) -> None:
    problem = only_problem({name: str(high + 1)})

    assert name in problem
    assert f"between {low} and {high}" in problem


@pytest.mark.parametrize(("name", "low", "high"), INTEGER_VARIABLES)
def test_the_range_bounds_themselves_are_accepted(name: str, low: int, high: int) -> None:
    Settings.from_env({name: str(low)})
    Settings.from_env({name: str(high)})


@pytest.mark.parametrize("raw", ["fast", "-1", "1e7", "nan", "inf"])
def test_a_bad_rate_limit_is_reported_by_name(raw: str) -> None:
    problem = only_problem({"AIM_RATE_LIMIT_RPS": raw})

    assert "AIM_RATE_LIMIT_RPS" in problem


def test_a_fractional_rate_limit_is_accepted() -> None:
    assert Settings.from_env({"AIM_RATE_LIMIT_RPS": "2.5"}).rate_limit_rps == 2.5


@pytest.mark.parametrize(
    ("name", "raw"),
    [
        ("AIM_REDIS_URL", "http://redis.example:6379"),
        ("AIM_REDIS_URL", "localhost:6379"),
        ("AIM_REDIS_URL", "redis://"),
        ("AIM_PUBLIC_BASE_URL", "ftp://aim.example"),
        ("AIM_PUBLIC_BASE_URL", "wss://aim.example"),
        ("AIM_LIVEKIT_URL", "redis://livekit.example"),
        ("AIM_LIVEKIT_URL", "livekit.example"),
        ("AIM_LIVEKIT_PUBLIC_URL", "tcp://rtc.example"),
    ],
)
def test_a_url_with_the_wrong_scheme_is_reported_by_name(name: str, raw: str) -> None:
    problem = only_problem({name: raw})

    assert problem.startswith(name)
    assert "URL" in problem


def test_a_jwks_url_with_the_wrong_scheme_is_reported_by_name() -> None:
    problems = problems_for(
        {
            "AIM_AUTH_JWKS_URL": "file:///etc/jwks.json",
            "AIM_AUTH_ISSUER": "https://issuer.example",
            "AIM_AUTH_AUDIENCE": "aim-realtime",
        }
    )

    assert any(p.startswith("AIM_AUTH_JWKS_URL") and "https URL" in p for p in problems)


@pytest.mark.parametrize("length", [8, 20, MIN_HS256_SECRET_BYTES - 1])
def test_a_short_secret_is_reported_without_echoing_it(length: int) -> None:
    secret = ("qX7-" * 8)[:length]
    problem = only_problem({"AIM_AUTH_HS256_SECRET": secret})

    assert "AIM_AUTH_HS256_SECRET" in problem
    assert str(MIN_HS256_SECRET_BYTES) in problem
    assert secret not in problem


def test_a_secret_is_measured_in_bytes_not_characters() -> None:
    secret = "é" * 16  # 16 characters, 32 bytes in UTF-8

    assert Settings.from_env({"AIM_AUTH_HS256_SECRET": secret}).auth_hs256_secret == secret
    problem = only_problem({"AIM_AUTH_HS256_SECRET": "é" * 15 + "x"})  # 31 bytes
    assert "AIM_AUTH_HS256_SECRET" in problem


@pytest.mark.parametrize(
    "missing",
    [("AIM_AUTH_ISSUER",), ("AIM_AUTH_AUDIENCE",), ("AIM_AUTH_ISSUER", "AIM_AUTH_AUDIENCE")],
)
def test_a_jwks_url_without_issuer_or_audience_is_reported(missing: tuple[str, ...]) -> None:
    environ = {
        "AIM_AUTH_JWKS_URL": "https://issuer.example/jwks.json",
        "AIM_AUTH_ISSUER": "https://issuer.example",
        "AIM_AUTH_AUDIENCE": "aim-realtime",
    }
    for name in missing:
        del environ[name]

    problem = only_problem(environ)

    assert "AIM_AUTH_JWKS_URL" in problem
    assert "AIM_AUTH_ISSUER" in problem
    assert "AIM_AUTH_AUDIENCE" in problem


@pytest.mark.parametrize(
    "environ",
    [
        {"AIM_LIVEKIT_API_KEY": "APIkey"},
        {"AIM_LIVEKIT_API_SECRET": LIVEKIT_SECRET},
    ],
)
def test_a_livekit_key_without_its_secret_is_reported_without_echoing_it(
    environ: dict[str, str],
) -> None:
    problem = only_problem(environ)

    assert "AIM_LIVEKIT_API_KEY" in problem
    assert "AIM_LIVEKIT_API_SECRET" in problem
    assert LIVEKIT_SECRET not in problem


@pytest.mark.parametrize(
    "raw",
    [
        "keyonly",
        "key:",
        ":webhook-secret-value",
        "good:webhook-secret-value,bad",
        "good:webhook-secret-value,",
        "good:webhook-secret-value,,other:webhook-secret-value",
    ],
)
def test_malformed_webhook_keys_are_reported_without_echoing_them(raw: str) -> None:
    problem = only_problem({"AIM_LIVEKIT_WEBHOOK_KEYS": raw})

    assert "AIM_LIVEKIT_WEBHOOK_KEYS" in problem
    assert "webhook-secret-value" not in problem
    assert "keyonly" not in problem


def test_malformed_webhook_keys_do_not_fall_back_to_the_api_secret_silently() -> None:
    problems = problems_for(
        {
            "AIM_LIVEKIT_API_KEY": "APIkey",
            "AIM_LIVEKIT_API_SECRET": LIVEKIT_SECRET,
            "AIM_LIVEKIT_WEBHOOK_KEYS": "broken",
        }
    )

    assert [p for p in problems if "AIM_LIVEKIT_WEBHOOK_KEYS" in p]
    assert all(LIVEKIT_SECRET not in p for p in problems)


def test_unknown_capabilities_are_named_with_the_known_ones() -> None:
    problem = only_problem({"AIM_PROVIDER_CAPABILITIES": "audio_input,telepathy,smell"})

    assert "AIM_PROVIDER_CAPABILITIES" in problem
    assert "smell" in problem
    assert "telepathy" in problem
    for known in PROVIDER_CAPABILITIES:
        assert known in problem


@pytest.mark.parametrize("name", ["AIM_REDIS_CLUSTER", "AIM_REQUIRE_REDIS"])
@pytest.mark.parametrize("raw", ["maybe", "2", "enabled"])
def test_a_bad_flag_is_reported_by_name(name: str, raw: str) -> None:
    problem = only_problem({name: raw})

    assert name in problem
    assert "true/false" in problem


def test_several_problems_are_reported_together() -> None:
    with pytest.raises(SettingsError) as caught:
        Settings.from_env(
            {
                "AIM_IDLE_TIMEOUT_S": "abc",
                "AIM_MAX_ENDPOINTS_PER_SESSION": "65",
                "AIM_REDIS_URL": "http://redis",
                "AIM_AUTH_HS256_SECRET": "short",
                "AIM_LIVEKIT_API_KEY": "APIkey",
                "AIM_PROVIDER_CAPABILITIES": "telepathy",
                "AIM_REDIS_CLUSTER": "maybe",
            }
        )

    problems = caught.value.problems
    named = [
        "AIM_IDLE_TIMEOUT_S",
        "AIM_MAX_ENDPOINTS_PER_SESSION",
        "AIM_REDIS_URL",
        "AIM_AUTH_HS256_SECRET",
        "AIM_LIVEKIT_API_KEY",
        "AIM_PROVIDER_CAPABILITIES",
        "AIM_REDIS_CLUSTER",
    ]
    assert len(problems) == len(named)
    for name in named:
        assert any(name in problem for problem in problems), name
    message = str(caught.value)
    assert message.startswith("invalid configuration:")
    assert "short" not in message
    assert isinstance(caught.value, ValueError)


# --- URLs: malformed ones are reported by name, never echoed --------------------------------------


def test_a_malformed_url_is_reported_by_name_not_raised_raw() -> None:
    problem = only_problem({"AIM_PUBLIC_BASE_URL": "http://[::1"})

    assert "AIM_PUBLIC_BASE_URL" in problem


def test_a_rejected_url_does_not_echo_its_password() -> None:
    problem = only_problem({"AIM_REDIS_URL": "http://:hunter2-password@redis.example"})

    assert "AIM_REDIS_URL" in problem
    assert "hunter2-password" not in problem


@pytest.mark.parametrize(
    ("name", "raw"), [("AIM_PUBLIC_BASE_URL", "http:foo"), ("AIM_LIVEKIT_URL", "https:///x")]
)
def test_a_network_url_without_a_host_is_reported_by_name(name: str, raw: str) -> None:
    problem = only_problem({name: raw})

    assert name in problem


def test_an_empty_capability_list_is_reported() -> None:
    problem = only_problem({"AIM_PROVIDER_CAPABILITIES": ","})

    assert "AIM_PROVIDER_CAPABILITIES" in problem


def test_the_provisioning_timeout_is_read_and_defaults_to_15_s() -> None:
    assert Settings.from_env({}).provisioning_timeout_s == 15
    assert Settings().provisioning_timeout_s == 15
    assert Settings.from_env({"AIM_PROVISIONING_TIMEOUT_S": "2"}).provisioning_timeout_s == 2


def test_the_provider_url_is_the_public_one_unless_set_apart() -> None:
    public = Settings.from_env({"AIM_PUBLIC_BASE_URL": "https://aim.example.com/"})
    assert public.provider_url == "https://aim.example.com/provider"
    internal = Settings.from_env(
        {
            "AIM_PUBLIC_BASE_URL": "https://aim.example.com",
            "AIM_PROVIDER_BASE_URL": "http://aim-realtime.aim.svc.cluster.local/",
        }
    )
    assert internal.provider_url == "http://aim-realtime.aim.svc.cluster.local/provider"


def test_a_provider_url_that_is_not_http_is_refused() -> None:
    with pytest.raises(SettingsError) as raised:
        Settings.from_env({"AIM_PROVIDER_BASE_URL": "ftp://x"})
    assert any("AIM_PROVIDER_BASE_URL" in problem for problem in raised.value.problems)


# --- LiveKit settings that cannot work, and secrets LiveKit chose ------------------------------


def test_a_livekit_url_without_keys_is_refused_naming_what_is_missing() -> None:
    with pytest.raises(SettingsError) as raised:
        Settings.from_env({"AIM_LIVEKIT_URL": "ws://127.0.0.1:7880"})
    (problem,) = raised.value.problems
    assert problem.startswith(
        "AIM_LIVEKIT_URL needs AIM_LIVEKIT_API_KEY and AIM_LIVEKIT_API_SECRET"
    )


def test_livekits_dev_secret_is_a_warning_naming_the_variable_never_the_value() -> None:
    settings = Settings.from_env(
        {
            "AIM_LIVEKIT_URL": "ws://127.0.0.1:7880",
            "AIM_LIVEKIT_API_KEY": "devkey",
            "AIM_LIVEKIT_API_SECRET": "secret",
        }
    )
    (warning,) = settings.warnings
    assert warning.startswith("AIM_LIVEKIT_API_SECRET holds a secret shorter than 32 bytes")
    assert "'secret'" not in warning
    assert settings.livekit_webhook_keys == (("devkey", "secret"),)  # accepted, not refused


def test_a_short_webhook_secret_is_one_warning() -> None:
    settings = Settings.from_env({**LIVEKIT_KEYS, "AIM_LIVEKIT_WEBHOOK_KEYS": "a:short1,b:short2"})
    assert [w.split()[0] for w in settings.warnings] == ["AIM_LIVEKIT_WEBHOOK_KEYS"]
    assert "short1" not in settings.warnings[0]


def test_long_livekit_secrets_warn_of_nothing() -> None:
    assert Settings.from_env(LIVEKIT_KEYS).warnings == ()


@pytest.mark.parametrize(
    "url",
    [
        "redis://127.0.0.1:notaport",
        "redis://127.0.0.1:99999",
        "redis://127.0.0.1:0",
        "redis://user:hunter2@127.0.0.1:-1",
    ],
)
def test_a_url_with_a_bad_port_is_refused_without_echoing_it(url: str) -> None:
    with pytest.raises(SettingsError) as raised:
        Settings.from_env({"AIM_REDIS_URL": url})
    (problem,) = raised.value.problems
    assert problem == (
        "AIM_REDIS_URL must be a redis/rediss/unix URL with a host and, if it names a port, "
        "a port from 1 to 65535"
    )
    assert "hunter2" not in str(raised.value)


# --- AIM_CORS_ORIGINS ------------------------------------------------------------------------


def test_cors_origins_are_read_as_origins() -> None:
    settings = Settings.from_env(
        {"AIM_CORS_ORIGINS": "https://App.Example.com, http://localhost:5173/"}
    )
    assert settings.cors_origins == ("https://app.example.com", "http://localhost:5173")
    assert Settings.from_env({"AIM_CORS_ORIGINS": "*"}).cors_origins == ("*",)
    assert Settings.from_env({}).cors_origins == ()


@pytest.mark.parametrize(
    "raw",
    ["app.example.com", "https://app.example.com/path", "ftp://app.example.com",
     "https://user:pw@app.example.com", "https://app.example.com:99999", "https://"],
)  # fmt: skip
def test_a_cors_origin_that_is_not_one_is_refused(raw: str) -> None:
    with pytest.raises(SettingsError) as raised:
        Settings.from_env({"AIM_CORS_ORIGINS": raw})
    (problem,) = raised.value.problems
    assert problem.startswith("AIM_CORS_ORIGINS must be a comma list of origins")
    assert "pw" not in problem


# --- start-up refusals (profile §19) ------------------------------------------------------------

JWKS = {
    "AIM_AUTH_JWKS_URL": "https://issuer.example/.well-known/jwks.json",
    "AIM_AUTH_ISSUER": "https://issuer.example",
    "AIM_AUTH_AUDIENCE": "aim-realtime",
}


def test_production_without_a_configured_key_is_refused() -> None:
    with pytest.raises(SettingsError) as caught:
        Settings.from_env({"AIM_REQUIRE_REDIS": "1"})

    assert caught.value.problems == [
        "AIM_REQUIRE_REDIS is set (production) but neither AIM_AUTH_HS256_SECRET nor "
        "AIM_AUTH_JWKS_URL is: configure the key that verifies client tokens, and "
        "AIM_AUTH_AUDIENCE, the audience (aud) they must carry"
    ]


def test_production_with_a_secret_but_no_audience_is_refused() -> None:
    with pytest.raises(SettingsError) as caught:
        Settings.from_env({"AIM_REQUIRE_REDIS": "1", "AIM_AUTH_HS256_SECRET": SECRET})

    assert caught.value.problems == [
        "AIM_REQUIRE_REDIS is set (production) but AIM_AUTH_AUDIENCE is not: set the audience "
        "(aud) client tokens must carry, so that a token minted for another service is refused"
    ]
    assert SECRET not in str(caught.value)


def test_development_needs_no_audience() -> None:
    assert Settings.from_env({"AIM_AUTH_HS256_SECRET": SECRET}).auth_audience is None


@pytest.mark.parametrize(
    "key", [{"AIM_AUTH_HS256_SECRET": SECRET, "AIM_AUTH_AUDIENCE": "aim-realtime"}, JWKS]
)
def test_production_with_a_configured_key_starts(key: dict[str, str]) -> None:
    settings = Settings.from_env({"AIM_REQUIRE_REDIS": "1", **key})

    assert settings.require_redis is True
    assert settings.auth_hs256_secret_generated is False


def test_a_secret_and_a_jwks_url_together_are_refused() -> None:
    with pytest.raises(SettingsError) as caught:
        Settings.from_env({"AIM_AUTH_HS256_SECRET": SECRET, **JWKS})

    assert caught.value.problems == [
        "AIM_AUTH_HS256_SECRET and AIM_AUTH_JWKS_URL are both set: configure one key source "
        "for client tokens, not both"
    ]
    assert SECRET not in str(caught.value)
