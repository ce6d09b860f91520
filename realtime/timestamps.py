"""The service's date-time text: ProtoJSON timestamps (RFC 3339, UTC, milliseconds, `Z`), the
format of every time the wire, the event stream and the core's `now` carry."""

from __future__ import annotations

from datetime import UTC, datetime


def timestamp(ms: int) -> str:
    """ProtoJSON timestamp: RFC 3339 UTC with milliseconds and `Z`."""
    moment = datetime.fromtimestamp(ms / 1000, tz=UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{ms % 1000:03d}Z"
