"""What admission answers (profile §24), as values: a session admitted or refused by one of its
tenant's limits, what a tenant used, and the UTC days and months they are counted in. The
tenant store (`store/tenants.py`) answers them; the methods say them to the caller."""

from __future__ import annotations

import datetime as dt
from typing import Final, Literal, NamedTuple

DAY_MS: Final = 86_400_000
NONE: Final = -1  # a limit that does not apply, as the scripts take it

RefusedBy = Literal["day", "month", "live", "rate"]


class Admitted(NamedTuple):
    """The session holds a place among its tenant's live sessions (`now_ms`: Redis time)."""

    now_ms: int


class Refused(NamedTuple):
    """A limit refused the session: `reached` (sessions, starts, or ms used) against `limit`;
    `at_ms` the Redis time, `wait_ms` for a start rate how long until a start leaves the
    minute (0 otherwise)."""

    by: RefusedBy
    reached: int
    limit: int
    at_ms: int
    wait_ms: int = 0


class Used(NamedTuple):
    """A tenant's session time now (Redis time `now_ms`): ended sessions' today and this month,
    the live sessions' so far, and how many are live."""

    now_ms: int
    day_ms: int
    month_ms: int
    running_ms: int
    live: int

    @property
    def today_ms(self) -> int:
        return self.day_ms + self.running_ms

    @property
    def this_month_ms(self) -> int:
        return self.month_ms + self.running_ms


def day_of(ms: int) -> dt.date:
    return dt.datetime.fromtimestamp(ms / 1000, dt.UTC).date()


def next_day_ms(ms: int) -> int:
    """When the UTC day of `ms` ends."""
    return (ms // DAY_MS + 1) * DAY_MS


def next_month_ms(ms: int) -> int:
    """When the UTC month of `ms` ends."""
    day = day_of(ms)
    first = dt.date(day.year + day.month // 12, day.month % 12 + 1, 1)
    return int(dt.datetime(first.year, first.month, 1, tzinfo=dt.UTC).timestamp() * 1000)


def ms_of(moment: str) -> int:
    """Milliseconds since the epoch of an RFC 3339 timestamp the service wrote."""
    return int(dt.datetime.fromisoformat(moment.replace("Z", "+00:00")).timestamp() * 1000)
