"""The service's date-time text: ProtoJSON timestamps (RFC 3339, UTC, milliseconds, `Z`), the
format of every time the wire, the event stream and the core's `now` carry; and HTTP-dates
(RFC 9110 §5.6.7), the format of `Last-Modified` and `If-Modified-Since`."""

from __future__ import annotations

import functools
import re
from datetime import UTC, datetime
from email.utils import formatdate, parsedate_to_datetime
from typing import Final


def timestamp(ms: int) -> str:
    """ProtoJSON timestamp: RFC 3339 UTC with milliseconds and `Z`."""
    return f"{_second(ms // 1000)}.{ms % 1000:03d}Z"


@functools.lru_cache(maxsize=8)  # a request formats the same second several times
def _second(seconds: int) -> str:
    return datetime.fromtimestamp(seconds, tz=UTC).strftime("%Y-%m-%dT%H:%M:%S")


_DAY: Final = r"(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun)"
_MONTH: Final = r"(?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec)"
_TIME: Final = r"\d\d:\d\d:\d\d"
# the three forms a recipient must accept: IMF-fixdate, then the obsolete rfc850 and asctime
_HTTP_DATE: Final = re.compile(
    rf"{_DAY}, \d\d {_MONTH} \d{{4}} {_TIME} GMT"
    rf"|(?:Mon|Tues|Wednes|Thurs|Fri|Satur|Sun)day, \d\d-{_MONTH}-\d\d {_TIME} GMT"
    rf"|{_DAY} {_MONTH} [ \d]\d {_TIME} \d{{4}}",
    re.ASCII,
)


def http_date(seconds: int) -> str:
    """IMF-fixdate, e.g. `Sun, 06 Nov 1994 08:49:37 GMT`."""
    return formatdate(seconds, usegmt=True)


def parse_http_date(value: str) -> int | None:
    """Unix seconds of an HTTP-date in any of its three forms, or None for anything else (a list
    of dates, another zone, a date that does not exist)."""
    value = value.strip()
    if _HTTP_DATE.fullmatch(value) is None:
        return None
    try:
        parsed = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return int(parsed.replace(tzinfo=UTC).timestamp())  # every HTTP-date is GMT
