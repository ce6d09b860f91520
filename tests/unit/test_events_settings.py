"""The session event settings (profile §21): both or neither of the URL and the secret, https
unless the receiver is this machine, a Standard Webhooks secret, known types; never echoed."""

from __future__ import annotations

import base64

import pytest

from realtime.settings import SESSION_EVENT_TYPES, Settings, SettingsError

SECRET = "whsec_" + base64.b64encode(b"k" * 32).decode()


def refused(environ: dict[str, str]) -> list[str]:
    with pytest.raises(SettingsError) as raised:
        Settings.from_env(environ)
    return raised.value.problems


def test_events_are_off_by_default_with_every_type_and_the_documented_bounds() -> None:
    settings = Settings.from_env({})
    assert not settings.events_enabled
    assert settings.events_types == frozenset(SESSION_EVENT_TYPES)
    assert (settings.events_retry_s, settings.events_timeout_s) == (86400, 10.0)
    assert settings.events_max_per_session == 1000


RECEIVER = {
    "AIM_EVENTS_URL": "https://backend.example/aim/events",
    "AIM_EVENTS_SECRET": SECRET,
    "AIM_EVENTS_TYPES": "session.ended, session.failed",
    "AIM_EVENTS_RETRY_S": "3600",
    "AIM_EVENTS_TIMEOUT_S": "2.5",
    "AIM_EVENTS_MAX_PER_SESSION": "50",
}


def test_a_configured_receiver_is_read() -> None:
    settings = Settings.from_env(RECEIVER)
    assert settings.events_enabled
    assert settings.events_types == {"session.ended", "session.failed"}
    assert (settings.events_retry_s, settings.events_timeout_s) == (3600, 2.5)
    assert settings.events_max_per_session == 50


@pytest.mark.parametrize("url", ["http://127.0.0.1:9000/x", "http://localhost/x", "http://[::1]/x"])
def test_plain_http_is_allowed_to_this_machine(url: str) -> None:
    assert Settings.from_env({"AIM_EVENTS_URL": url, "AIM_EVENTS_SECRET": SECRET}).events_enabled


def test_plain_http_elsewhere_needs_the_explicit_switch() -> None:
    environ = {"AIM_EVENTS_URL": "http://backend.internal/x", "AIM_EVENTS_SECRET": SECRET}
    (problem,) = refused(environ)
    assert problem.startswith("AIM_EVENTS_URL is an http:// URL")
    assert "AIM_EVENTS_ALLOW_HTTP" in problem
    assert Settings.from_env({**environ, "AIM_EVENTS_ALLOW_HTTP": "1"}).events_enabled


@pytest.mark.parametrize(
    "environ",
    [{"AIM_EVENTS_URL": "https://backend.example/x"}, {"AIM_EVENTS_SECRET": SECRET}],
)
def test_the_url_and_the_secret_go_together(environ: dict[str, str]) -> None:
    (problem,) = refused(environ)
    assert "AIM_EVENTS_URL and AIM_EVENTS_SECRET must be set together" in problem


@pytest.mark.parametrize(
    "secret",
    ["whsec_short", "k" * 40, "whsec_" + base64.b64encode(b"k" * 16).decode(), "whsec_!!!!"],
)
def test_a_secret_that_is_not_a_standard_webhooks_secret_is_refused(secret: str) -> None:
    problems = refused({"AIM_EVENTS_URL": "https://backend.example/x", "AIM_EVENTS_SECRET": secret})
    assert any(
        p.startswith("AIM_EVENTS_SECRET must be a Standard Webhooks secret") for p in problems
    )
    assert all(secret not in p for p in problems)  # never echoed


def test_an_unknown_event_type_is_named() -> None:
    (problem,) = refused({"AIM_EVENTS_TYPES": "session.ended,session.paused"})
    assert "unknown event types session.paused" in problem


def test_a_tenant_may_have_its_own_receiver() -> None:
    settings = Settings.from_env(
        {
            "AIM_EVENTS_URL": "https://backend.example/x",
            "AIM_EVENTS_SECRET": SECRET,
            "AIM_EVENTS_TENANT_URLS": '{"acme": "https://events.acme.example/aim"}',
            "AIM_AUTH_TENANT_CLAIM": "org",
        }
    )
    assert settings.events_url_for("acme") == "https://events.acme.example/aim"
    assert settings.events_url_for("other") == "https://backend.example/x"
    assert settings.events_url_for(None) == "https://backend.example/x"


@pytest.mark.parametrize(
    ("raw", "says"),
    [
        ('["https://a.example"]', "must be a JSON object of tenant → URL"),
        ('{"acme": 3}', "must be a JSON object of tenant → URL"),
        ('{"acme": "ftp://a.example"}', "must be an http or https URL"),
        ('{"acme": "http://a.example/x"}', "is an http:// URL to a host other than this machine"),
    ],
)
def test_tenant_urls_follow_the_same_rules(raw: str, says: str) -> None:
    environ = {
        "AIM_EVENTS_URL": "https://backend.example/x",
        "AIM_EVENTS_SECRET": SECRET,
        "AIM_EVENTS_TENANT_URLS": raw,
        "AIM_AUTH_TENANT_CLAIM": "org",
    }
    (problem,) = refused(environ)
    assert problem.startswith("AIM_EVENTS_TENANT_URLS")
    assert says in problem


def test_tenant_urls_need_the_default_receiver() -> None:
    (problem,) = refused(
        {
            "AIM_EVENTS_TENANT_URLS": '{"acme": "https://a.example/x"}',
            "AIM_AUTH_TENANT_CLAIM": "org",
        }
    )
    assert "AIM_EVENTS_TENANT_URLS needs AIM_EVENTS_URL" in problem


def test_a_destination_gets_a_share_of_the_slots_and_a_short_connect_timeout() -> None:
    defaults = Settings.from_env({})
    assert (defaults.events_max_per_destination, defaults.events_connect_timeout_s) == (8, 2.0)
    read = Settings.from_env(
        {"AIM_EVENTS_MAX_PER_DESTINATION": "4", "AIM_EVENTS_CONNECT_TIMEOUT_S": "0.5"}
    )
    assert (read.events_max_per_destination, read.events_connect_timeout_s) == (4, 0.5)
    problems = refused(
        {"AIM_EVENTS_MAX_PER_DESTINATION": "0", "AIM_EVENTS_CONNECT_TIMEOUT_S": "120"}
    )
    assert [p.split()[0] for p in problems] == [
        "AIM_EVENTS_MAX_PER_DESTINATION",
        "AIM_EVENTS_CONNECT_TIMEOUT_S",
    ]


def test_tenant_urls_need_a_tenant_claim() -> None:
    (problem,) = refused(
        {
            "AIM_EVENTS_URL": "https://backend.example/x",
            "AIM_EVENTS_SECRET": SECRET,
            "AIM_EVENTS_TENANT_URLS": '{"acme": "https://a.example/x"}',
        }
    )
    assert problem.startswith("AIM_EVENTS_TENANT_URLS needs AIM_AUTH_TENANT_CLAIM")


def test_every_route_is_listed_without_its_credentials() -> None:
    settings = Settings.from_env(
        {
            "AIM_EVENTS_URL": "https://u:pw@backend.example/x?key=k",
            "AIM_EVENTS_SECRET": SECRET,
            "AIM_EVENTS_TENANT_URLS": (
                '{"acme": "https://events.acme.example/aim?token=t", "globex": "http://127.0.0.1:9/g"}'
            ),
            "AIM_AUTH_TENANT_CLAIM": "org",
        }
    )
    assert settings.events_routes == (
        "tenant 'acme' (org claim): sent to https://events.acme.example/aim "
        "(AIM_EVENTS_TENANT_URLS)",
        "tenant 'globex' (org claim): sent to http://127.0.0.1:9/g (AIM_EVENTS_TENANT_URLS)",
        "every other tenant: sent to https://backend.example/x (AIM_EVENTS_URL)",
    )
    assert Settings.from_env({}).events_routes == (
        "not configured (AIM_EVENTS_URL unset); none are written",
    )
