"""The media types this agent accepts in message parts: the Agent Card's `defaultInputModes`, and
the one check every inbound message goes through (A2A -32005, ContentTypeNotSupported).

A realtime-only agent reads two kinds of content: JSON data parts (session.create, ContinueTask's
`{"decision"}`) and plain text (a text-only message is answered with a REJECTED task that explains
how to start a session; ContinueTask may carry a text part beside its decision). Any other media
type (an image, audio, a PDF) it could do nothing with.

A part's media type is its `mediaType` when it names one, compared by its essence (type/subtype,
case-insensitive, parameters such as `charset` ignored: RFC 9110 §8.3.1); otherwise what A2A's
Part means without one: text is `text/plain`, data is `application/json`. A `raw` or `url` part
must name one (the params decoder says so), and an empty `mediaType` is ProtoJSON's unset, so such
a part is `application/octet-stream`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

from msgspec import UNSET

from realtime.a2a.params import Part
from realtime.errors import ContentTypeNotSupported, params_path

INPUT_MODES: Final = ("application/json", "text/plain")
UNTYPED_FILE: Final = "application/octet-stream"


def file_part(
    uri: str | None, raw: str | None, media_type: str | None, filename: str | None
) -> dict[str, Any]:
    """The 1.0 part of an earlier generation's file (A2A 0.3 and 0.1 `file`): its `url`, else its
    `raw` bytes, its media type (`UNTYPED_FILE` when it names none) and its filename."""
    out: dict[str, Any] = {"url": uri} if uri is not None else {"raw": raw}
    out["mediaType"] = media_type or UNTYPED_FILE
    if filename is not None:
        out["filename"] = filename
    return out


def essence(media_type: str) -> str:
    """`Text/Plain; charset=utf-8` → `text/plain`."""
    return media_type.split(";", 1)[0].strip().lower()


def media_type_of(part: Part) -> str:
    declared = part.media_type
    if declared is not UNSET and declared.strip():
        return essence(declared)
    if part.text is not UNSET:
        return "text/plain"
    if part.data is not UNSET:
        return "application/json"
    return UNTYPED_FILE


def require_input_modes(parts: Sequence[Part]) -> None:
    """-32005 naming the first part whose media type is not one of `INPUT_MODES`."""
    for index, part in enumerate(parts):
        found = media_type_of(part)
        if found not in INPUT_MODES:
            where = params_path(f"params.message.parts[{index}]")
            raise ContentTypeNotSupported(
                (
                    where,
                    f" is {found}, a media type this agent does not accept: it accepts "
                    f"{' and '.join(INPUT_MODES)} (the Agent Card's defaultInputModes). Leave "
                    "the part out: audio and video go over a realtime session, not into "
                    "messages.",
                ),
                details={"part": where, "mediaType": found, "inputModes": INPUT_MODES},
            )
