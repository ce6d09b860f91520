"""The service's date-time text: ProtoJSON timestamps (RFC 3339, UTC, milliseconds, `Z`), the
format of every time the wire, the event stream and the core's `now` carry."""

from __future__ import annotations

import functools
from datetime import UTC, datetime


def timestamp(ms: int) -> str:
    """ProtoJSON timestamp: RFC 3339 UTC with milliseconds and `Z`."""
    return f"{_second(ms // 1000)}.{ms % 1000:03d}Z"


@functools.lru_cache(maxsize=8)  # a request formats the same second several times
def _second(seconds: int) -> str:
    return datetime.fromtimestamp(seconds, tz=UTC).strftime("%Y-%m-%dT%H:%M:%S")
