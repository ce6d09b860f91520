"""The scalar formats of the request contract, as msgspec types: hyphenated UUIDs, digests,
epochs, RFC 3339 date-times (profile §15), and the decoding hook that reads the latter."""

from __future__ import annotations

import base64
import binascii
import re
from datetime import datetime
from typing import Annotated, Any, Final

import msgspec
from msgspec import Meta

# `\Z`, not `$`: a trailing newline is not part of a uuid or a digest (JSON Schema patterns are
# ECMA-262, where `$` does not match before a final newline)
UUID_PATTERN: Final = (
    r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}\Z"
)
DIGEST_PATTERN: Final = r"^sha256:[0-9a-f]{64}\Z"

Uuid = Annotated[str, Meta(pattern=UUID_PATTERN)]
Digest = Annotated[str, Meta(pattern=DIGEST_PATTERN)]
NonNegative = Annotated[int, Meta(ge=0)]
Epoch = Annotated[int, Meta(ge=1)]
# RFC 3339 §5.6 `date-time`, which the schema's `format: date-time` means. msgspec's own parser
# also takes a space for `T` and `+hhmm` offsets (schema-invalid); it does check the ranges and the
# calendar, so it parses what this lets through. `\Z`: no trailing newline (see UUID_PATTERN).
_RFC3339: Final = re.compile(
    r"\d{4}-\d{2}-\d{2}[Tt]\d{2}:\d{2}:\d{2}(?P<fraction>\.\d+)?(?:[Zz]|[+-]\d{2}:\d{2})\Z",
    re.ASCII,
)


class Timestamp(datetime):
    """An offset-aware datetime decoded from an RFC 3339 `date-time` string (see `_RFC3339`)."""


def is_padded_base64(value: str) -> bool:
    if len(value) % 4:
        return False
    try:
        base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        return False
    return True


def _timestamp(value: object) -> Timestamp:
    if not isinstance(value, str):
        raise TypeError("Expected an RFC 3339 date-time string")
    match = _RFC3339.match(value)
    if match is None:
        raise ValueError(
            "Invalid RFC 3339 date-time: write it like 2024-05-01T12:00:00Z or "
            "2024-05-01T14:00:00.5+02:00"
        )
    fraction = match["fraction"]
    if fraction and len(fraction) > 7:
        # keep microseconds and drop the rest rather than round: msgspec rounds, which turns a
        # valid 9999-12-31T23:59:59.9999999Z into year 10000 and refuses it
        value = value[: match.start("fraction") + 7] + value[match.end("fraction") :]
    try:
        parsed = msgspec.convert(value, datetime)
    except msgspec.ValidationError:
        raise ValueError("Invalid RFC 3339 date-time: there is no such date or time") from None
    return Timestamp(
        parsed.year,
        parsed.month,
        parsed.day,
        parsed.hour,
        parsed.minute,
        parsed.second,
        parsed.microsecond,
        tzinfo=parsed.tzinfo,
    )


def check_file_content(uri: str | None, data: str | None) -> None:
    """The rule A2A 0.3 and 0.1 share for a file part's content: a `uri` or padded base64
    `bytes`, never both (a ValueError says which, in the field's own name)."""
    if (uri is None) == (data is None):
        raise ValueError("a file carries exactly one of `uri` or `bytes`")
    if data is not None and not is_padded_base64(data):
        raise ValueError("`bytes` must be standard padded base64 (RFC 4648)")


def dec_hook(cls: type, value: Any) -> Any:
    if cls is Timestamp:
        return _timestamp(value)
    raise NotImplementedError(f"no decoder for {cls!r}")
