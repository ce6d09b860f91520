"""The process's log lines: one JSON object each, naming the trace and span of the current
span (`telemetry.current_span_ids`), so a line and its request's trace find each other."""

from __future__ import annotations

import logging
from typing import Final

import msgspec

from realtime.telemetry import current_span_ids

# anything else (an exception's arguments, a path) is logged as its str()
_LOG_ENCODER: Final = msgspec.json.Encoder(enc_hook=str)


class JsonLogFormatter(logging.Formatter):
    """One JSON object per line, with the trace and span ids of the current span, and the
    fields a caller passes as `extra={"json_fields": {...}}` (the access log's)."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, object] = {
            "time": self.formatTime(record),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        session_id = getattr(record, "session_id", None)
        if session_id:
            entry["session_id"] = session_id
        fields = getattr(record, "json_fields", None)
        if fields:
            entry.update(fields)
        ids = current_span_ids()
        if ids is not None:
            entry["trace_id"], entry["span_id"] = ids
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return _LOG_ENCODER.encode(entry).decode()
