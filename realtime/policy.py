"""Tenant policy (profile §24): each tenant's limits, read from the TOML file
`AIM_TENANT_POLICY_FILE` names, with a `[default]` table for tenants it does not list.

    [default]
    live_sessions = 20                 # sessions live at once
    starts_per_minute = 60             # sessions created in any 60 s
    session_minutes_per_day = 6000     # created → ended, summed per UTC day
    session_minutes_per_month = 100000 # … and per UTC calendar month
    max_session_minutes = 60           # one session's length (AIM_MAX_SESSION_S caps it)
    live_sessions_per_principal = 5    # AIM_MAX_SESSIONS_PER_PRINCIPAL when not set

    [tenants.acme]
    live_sessions = 200                # what a tenant leaves out, it takes from [default]

A limit left out everywhere does not apply (the two that fall back to settings excepted).
`load_policy` reads and checks the whole file and raises `PolicyError` with one line per
problem, each naming its field; `PolicySource` reloads the file when it changes, keeping the
policy it had while a changed file is refused. Without a tenant claim
(`AIM_AUTH_TENANT_CLAIM` unset) every session belongs to no tenant, and `[default]` applies to
them all together.
"""

from __future__ import annotations

import logging
import os
import stat
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Final

from realtime.auth import unprintable

log = logging.getLogger(__name__)

MAX_FILE_BYTES: Final = 1 << 20  # a policy of thousands of tenants is far smaller
MAX_TENANT_CHARS: Final = 256
MAX_LIMIT: Final = 1_000_000_000  # any count or minutes; keeps every product exact in Lua
RELOAD_CHECK_S: Final = 2.0  # how often a process looks whether the file changed


@dataclass(frozen=True, slots=True)
class TenantLimits:
    """One table of the file: a limit left out is None (inherited, or none)."""

    live_sessions: int | None = None
    starts_per_minute: int | None = None
    session_minutes_per_day: int | None = None
    session_minutes_per_month: int | None = None
    max_session_minutes: int | None = None
    live_sessions_per_principal: int | None = None

    def over(self, default: TenantLimits) -> TenantLimits:
        """These limits, each one left out taken from `default`."""
        return TenantLimits(
            **{
                f.name: getattr(default, f.name)
                if getattr(self, f.name) is None
                else getattr(self, f.name)
                for f in fields(self)
            }
        )


LIMIT_NAMES: Final = tuple(f.name for f in fields(TenantLimits))
# the least each limit may be: a session lasts a minute at least; 0 elsewhere shuts the door
_LEAST: Final[Mapping[str, int]] = dict.fromkeys(LIMIT_NAMES, 0) | {"max_session_minutes": 1}


@dataclass(frozen=True, slots=True)
class Limits:
    """What admission applies to one tenant: None where a limit does not apply."""

    live_sessions: int | None
    starts_per_minute: int | None
    day_ms: int | None  # session time allowed per UTC day, and per UTC month
    month_ms: int | None
    max_session_s: int  # AIM_MAX_SESSION_S, or the tenant's maximum when shorter
    per_principal: int  # live sessions per principal

    @property
    def counted(self) -> bool:
        """Whether anything is counted for the tenant at all (else admission is one claim)."""
        return any(
            value is not None
            for value in (self.live_sessions, self.starts_per_minute, self.day_ms, self.month_ms)
        )


@dataclass(frozen=True, slots=True)
class Policy:
    """The limits of the file: `default`, and the tenants it lists."""

    default: TenantLimits = TenantLimits()
    tenants: Mapping[str, TenantLimits] = field(default_factory=dict)

    def table(self, tenant: str | None) -> TenantLimits:
        """The tenant's limits as the file says them, `[default]` filling in."""
        listed = self.tenants.get(tenant) if tenant is not None else None
        return listed.over(self.default) if listed is not None else self.default

    def limits(self, tenant: str | None, *, max_session_s: int, per_principal: int) -> Limits:
        """What applies to `tenant` (None: no tenant), given the global maximum length and
        per-principal cap of the settings."""
        table = self.table(tenant)
        minutes = table.max_session_minutes
        return Limits(
            live_sessions=table.live_sessions,
            starts_per_minute=table.starts_per_minute,
            day_ms=_ms(table.session_minutes_per_day),
            month_ms=_ms(table.session_minutes_per_month),
            max_session_s=min(max_session_s, minutes * 60) if minutes else max_session_s,
            per_principal=(
                table.live_sessions_per_principal
                if table.live_sessions_per_principal is not None
                else per_principal
            ),
        )


def _ms(minutes: int | None) -> int | None:
    return None if minutes is None else minutes * 60_000


class PolicyError(ValueError):
    """The file cannot be used: `problems` holds one line per problem."""

    def __init__(self, path: Path, problems: list[str]) -> None:
        super().__init__(f"tenant policy {path} refused:\n  " + "\n  ".join(problems))
        self.problems = problems


def load_policy(path: Path) -> Policy:
    """The policy in `path`, or PolicyError naming every problem: an unsafe or unreadable
    file, TOML that does not parse, an unknown table or limit, a value that is not a whole
    number in its range, a tenant name a token could not carry, or a day allowance larger than
    the month's (after `[default]` fills in)."""
    raw = _read(path)
    try:
        document = tomllib.loads(raw)
    except tomllib.TOMLDecodeError as exc:
        raise PolicyError(path, [f"not TOML: {exc}"]) from None
    return parse_policy(path, document)


def parse_policy(path: Path, document: Mapping[str, Any]) -> Policy:
    """The policy of a parsed file (`load_policy`'s checks but the file's own)."""
    problems = [
        f"{name}: unknown table (a policy has [default] and [tenants.<name>])"
        for name in document
        if name not in ("default", "tenants")
    ]
    default = _table("default", document.get("default", {}), problems)
    tenants: dict[str, TenantLimits] = {}
    listed = document.get("tenants", {})
    if not isinstance(listed, dict):
        problems.append("tenants: must be tables, one per tenant ([tenants.<name>])")
        listed = {}
    for tenant, table in listed.items():
        where = f"tenants.{_quoted(tenant)}"
        if not tenant or len(tenant) > MAX_TENANT_CHARS or unprintable(tenant):
            problems.append(
                f"{where}: a tenant's name is 1 to {MAX_TENANT_CHARS} characters, none of them "
                "a control or format character (as the token's tenant claim)"
            )
            continue
        tenants[tenant] = _table(where, table, problems)
    for where, limits in (
        ("default", default),
        *((f"tenants.{_quoted(t)}", table.over(default)) for t, table in tenants.items()),
    ):
        day, month = limits.session_minutes_per_day, limits.session_minutes_per_month
        if day is not None and month is not None and day > month:
            problems.append(
                f"{where}.session_minutes_per_day: {day} is more than the month's {month}"
                + ("" if where == "default" else " (with [default] filling in)")
            )
    if problems:
        raise PolicyError(path, problems)
    return Policy(default, tenants)


def _quoted(tenant: str) -> str:
    """A tenant's name as TOML writes it in a table header (bare when it can be)."""
    bare = tenant and all(c.isascii() and (c.isalnum() or c in "-_") for c in tenant)
    return tenant if bare else repr(tenant).replace("'", '"')


def _table(where: str, table: Any, problems: list[str]) -> TenantLimits:
    if not isinstance(table, dict):
        problems.append(f"{where}: must be a table of limits")
        return TenantLimits()
    values: dict[str, int] = {}
    for name, value in table.items():
        if name not in LIMIT_NAMES:
            problems.append(f"{where}.{name}: unknown limit (known: {', '.join(LIMIT_NAMES)})")
        elif isinstance(value, bool) or not isinstance(value, int):
            problems.append(f"{where}.{name}: must be a whole number, not {value!r}")
        elif not _LEAST[name] <= value <= MAX_LIMIT:
            problems.append(f"{where}.{name}: must be {_LEAST[name]} to {MAX_LIMIT}, not {value}")
        else:
            values[name] = value
    return TenantLimits(**values)


def _read(path: Path) -> str:
    """The file's text, once it is known that only its owner (this user or root) could have
    written it, or the directory it is in."""
    try:
        real = path.resolve(strict=True)
        # non-blocking: a FIFO put in its place must not hang the start-up
        fd = os.open(real, os.O_RDONLY | os.O_NONBLOCK)
        with os.fdopen(fd, "rb") as handle:
            status = os.fstat(fd)
            _trusted(real, status, "file")
            _trusted(real.parent, os.stat(real.parent), "directory")
            if not stat.S_ISREG(status.st_mode):
                raise PolicyError(path, ["not a regular file"])
            data = handle.read(MAX_FILE_BYTES + 1)
    except OSError as exc:
        raise PolicyError(path, [f"cannot be read ({exc.strerror})"]) from None
    if len(data) > MAX_FILE_BYTES:
        raise PolicyError(path, [f"larger than {MAX_FILE_BYTES} bytes"])
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise PolicyError(path, ["not UTF-8 text"]) from None


def _trusted(path: Path, status: os.stat_result, kind: str) -> None:
    owners = {0, os.getuid()}
    if status.st_uid not in owners:
        raise PolicyError(
            path, [f"the {kind} {path} belongs to another user (uid {status.st_uid})"]
        )
    if status.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise PolicyError(path, [f"the {kind} {path} is writable by group or others"])


class PolicySource:
    """The policy in force: loaded at start (PolicyError refuses the start), looked at again at
    most every RELOAD_CHECK_S (by `clock`) and reloaded when the file's identity, size or time
    changed. A changed file that is refused is logged, line by line, once, and the policy in
    force stays; so does it when the file is gone."""

    def __init__(self, path: Path | None, clock: Callable[[], float]) -> None:
        self.path = path
        self._clock = clock
        self._policy = load_policy(path) if path is not None else None
        self._seen = self._signature()
        self._checked = clock()

    @property
    def enabled(self) -> bool:
        return self.path is not None

    def current(self) -> Policy:
        if self.path is None or self._policy is None:
            return _NONE
        now = self._clock()
        if now - self._checked >= RELOAD_CHECK_S:
            self._checked = now
            self._reload()
        return self._policy

    def _signature(self) -> tuple[int, int, int, int] | None:
        if self.path is None:
            return None
        try:
            found = os.stat(self.path)
        except OSError:
            return None
        return (found.st_dev, found.st_ino, found.st_size, found.st_mtime_ns)

    def _reload(self) -> None:
        assert self.path is not None  # noqa: S101 - current() checked
        signature = self._signature()
        if signature == self._seen:
            return
        self._seen = signature
        if signature is None:
            log.error(
                "tenant policy %s is gone; the policy loaded before stays in force", self.path
            )
            return
        try:
            self._policy = load_policy(self.path)
        except PolicyError as exc:
            for problem in exc.problems:
                log.error("tenant policy %s not reloaded: %s", self.path, problem)
            return
        log.info("tenant policy %s reloaded", self.path)


_NONE: Final = Policy()
