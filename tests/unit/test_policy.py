"""The tenant policy file (profile §24, realtime/policy.py): what it sets, every problem it is
refused for (one line each, naming the field), and its reload while the service runs."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest

from realtime.policy import (
    MAX_FILE_BYTES,
    RELOAD_CHECK_S,
    PolicyError,
    PolicySource,
    load_policy,
)
from tests.clocks import Clock

GOOD = """
[default]
live_sessions = 20
starts_per_minute = 60
session_minutes_per_day = 600
session_minutes_per_month = 10000
max_session_minutes = 30

[tenants.acme]
live_sessions = 200
live_sessions_per_principal = 9

[tenants."Big Co"]
session_minutes_per_day = 0
"""


def write(tmp_path: Path, text: str, name: str = "policy.toml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    path.chmod(0o644)
    return path


def problems(tmp_path: Path, text: str) -> list[str]:
    with pytest.raises(PolicyError) as raised:
        load_policy(write(tmp_path, text))
    return raised.value.problems


def test_a_tenant_takes_what_it_leaves_out_from_the_default(tmp_path):
    policy = load_policy(write(tmp_path, GOOD))
    acme = policy.limits("acme", max_session_s=3600, per_principal=5)
    assert acme.live_sessions == 200
    assert acme.starts_per_minute == 60
    assert (acme.day_ms, acme.month_ms) == (600 * 60_000, 10_000 * 60_000)
    assert acme.max_session_s == 30 * 60
    assert acme.per_principal == 9
    other = policy.limits("someone-else", max_session_s=3600, per_principal=5)
    assert (other.live_sessions, other.per_principal) == (20, 5)
    assert policy.limits("Big Co", max_session_s=3600, per_principal=5).day_ms == 0
    # no tenant claim: the default applies to the sessions of no tenant
    assert policy.limits(None, max_session_s=3600, per_principal=5).live_sessions == 20


def test_the_global_maximum_caps_a_tenants_and_a_limit_left_out_everywhere_does_not_apply(
    tmp_path,
):
    policy = load_policy(write(tmp_path, "[tenants.acme]\nmax_session_minutes = 600\n"))
    acme = policy.limits("acme", max_session_s=3600, per_principal=5)
    assert acme.max_session_s == 3600
    assert (acme.live_sessions, acme.starts_per_minute, acme.day_ms, acme.month_ms) == (
        None,
        None,
        None,
        None,
    )
    assert not acme.counted
    assert load_policy(write(tmp_path, "")).limits("x", max_session_s=60, per_principal=2) == (
        policy.limits("x", max_session_s=60, per_principal=2)
    )


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("[default]\nlive_sessions = -1\n", "default.live_sessions: must be 0 to"),
        ("[default]\nlive_sessions = 1.5\n", "default.live_sessions: must be a whole number"),
        ("[default]\nlive_sessions = true\n", "default.live_sessions: must be a whole number"),
        ('[default]\nlive_sessions = "9"\n', "default.live_sessions: must be a whole number"),
        ("[default]\nmax_session_minutes = 0\n", "default.max_session_minutes: must be 1 to"),
        ("[default]\nlive_session = 3\n", "default.live_session: unknown limit"),
        ("[defaults]\nlive_sessions = 3\n", "defaults: unknown table"),
        ("default = 3\n", "default: must be a table of limits"),
        ("tenants = 3\n", "tenants: must be tables"),
        ("[tenants.acme]\nstarts_per_minute = 2000000000\n", "tenants.acme.starts_per_minute"),
        (
            "[default]\nsession_minutes_per_day = 100\nsession_minutes_per_month = 99\n",
            "default.session_minutes_per_day: 100 is more than the month's 99",
        ),
        (
            "[default]\nsession_minutes_per_month = 50\n[tenants.acme]\n"
            "session_minutes_per_day = 60\n",
            "tenants.acme.session_minutes_per_day: 60 is more than the month's 50 (with "
            "[default] filling in)",
        ),
        ('[tenants."a\\u0007b"]\nlive_sessions = 1\n', "a tenant's name is 1 to 256"),
        ('[tenants.""]\nlive_sessions = 1\n', "a tenant's name is 1 to 256"),
        (f'[tenants."{"x" * 257}"]\nlive_sessions = 1\n', "a tenant's name is 1 to 256"),
        ("[default\n", "not TOML"),
    ],
)
def test_a_bad_policy_is_refused_with_a_line_naming_the_field(tmp_path, text, expected):
    found = problems(tmp_path, text)
    assert len(found) == 1
    assert expected in found[0]


def test_every_problem_of_a_file_is_said_at_once(tmp_path):
    found = problems(
        tmp_path,
        "[default]\nlive_sessions = -1\nstarts = 3\n[tenants.acme]\nmax_session_minutes = 0\n",
    )
    assert len(found) == 3
    assert [line.split(":")[0] for line in found] == [
        "default.live_sessions",
        "default.starts",
        "tenants.acme.max_session_minutes",
    ]


def test_a_file_another_user_could_change_is_refused(tmp_path):
    path = write(tmp_path, GOOD)
    path.chmod(0o666)
    with pytest.raises(PolicyError, match="writable by group or others"):
        load_policy(path)
    path.chmod(0o644)
    if os.getuid() == 0:  # only root can give a file away
        os.chown(path, 54321, -1)
        with pytest.raises(PolicyError, match="belongs to another user"):
            load_policy(path)
        os.chown(path, 0, -1)
    tmp_path.chmod(0o777)
    try:
        with pytest.raises(PolicyError, match=r"directory .* is writable by group or others"):
            load_policy(path)
    finally:
        tmp_path.chmod(0o755)


def test_a_missing_huge_binary_or_non_regular_file_is_refused(tmp_path):
    with pytest.raises(PolicyError, match="cannot be read"):
        load_policy(tmp_path / "absent.toml")
    huge = write(tmp_path, "# " + "x" * MAX_FILE_BYTES, "huge.toml")
    with pytest.raises(PolicyError, match="larger than"):
        load_policy(huge)
    binary = tmp_path / "binary.toml"
    binary.write_bytes(b"\xff\xfe")
    binary.chmod(0o644)
    with pytest.raises(PolicyError, match="not UTF-8"):
        load_policy(binary)
    fifo = tmp_path / "fifo.toml"
    os.mkfifo(fifo, 0o644)
    with pytest.raises(PolicyError, match="not a regular file"):
        load_policy(fifo)


def test_a_changed_file_is_reloaded_and_a_refused_change_keeps_the_last_good_one(tmp_path, caplog):
    clock = Clock()
    path = write(tmp_path, "[default]\nlive_sessions = 3\n")
    source = PolicySource(path, clock)
    assert source.current().default.live_sessions == 3

    # the file changes; the source looks again only RELOAD_CHECK_S later
    replacement = write(tmp_path, "[default]\nlive_sessions = 4\n", "next.toml")
    os.replace(replacement, path)
    assert source.current().default.live_sessions == 3
    clock.advance(RELOAD_CHECK_S)
    assert source.current().default.live_sessions == 4

    caplog.set_level(logging.ERROR, logger="realtime.policy")
    os.replace(write(tmp_path, "[default]\nlive_sessions = -4\n", "bad.toml"), path)
    clock.advance(RELOAD_CHECK_S)
    assert source.current().default.live_sessions == 4
    said = [r.getMessage() for r in caplog.records]
    assert len(said) == 1
    assert "default.live_sessions" in said[0]
    clock.advance(RELOAD_CHECK_S)  # the same refused file is not said again
    source.current()
    assert len(caplog.records) == 1

    path.unlink()
    clock.advance(RELOAD_CHECK_S)
    assert source.current().default.live_sessions == 4
    assert "is gone" in caplog.records[-1].getMessage()


def test_no_file_means_no_limits(tmp_path):
    source = PolicySource(None, Clock())
    assert not source.enabled
    limits = source.current().limits("acme", max_session_s=60, per_principal=3)
    assert not limits.counted
    assert (limits.max_session_s, limits.per_principal) == (60, 3)


def test_a_policy_refused_at_start_up_names_the_file_and_its_problems(tmp_path):
    path = write(tmp_path, "[default]\nlive_sessions = -1\n")
    with pytest.raises(PolicyError) as raised:
        PolicySource(path, Clock())
    assert str(raised.value).splitlines()[0] == f"tenant policy {path} refused:"
