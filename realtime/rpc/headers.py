"""Request header fields as every HTTP route reads them (profile §16)."""

from __future__ import annotations

from collections.abc import Iterable


def combined(raw: Iterable[tuple[bytes, bytes]]) -> dict[str, str]:
    """Header fields (an ASGI scope's `headers`) by lower-case name, repeated lines joined with
    ", " as RFC 9110 §5.3 combines them: a repeated Authorization or A2A-Version then reads as
    one malformed value instead of letting the first line win."""
    fields: dict[str, str] = {}
    for raw_name, raw_value in raw:
        name, value = raw_name.decode("latin-1").lower(), raw_value.decode("latin-1")
        fields[name] = f"{fields[name]}, {value}" if name in fields else value
    return fields
