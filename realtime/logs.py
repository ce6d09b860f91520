"""The process's log lines: one JSON object each, naming the trace and span of the current
span (`telemetry.current_span_ids`), so a line and its request's trace find each other.

The access log (`ACCESS_LOG`) writes the same JSON without the logging machinery: a line per
call is encoded at once and the lines are written to stderr in batches, at most `FLUSH_S` after
the call or once `FLUSH_BYTES` wait (and at shutdown).
"""

from __future__ import annotations

import asyncio
import atexit
import logging
import sys
import time
from collections.abc import Mapping
from typing import Any, Final, TextIO

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


ACCESS_LOGGER: Final = "realtime.access"  # the `logger` of its lines
FLUSH_S: Final = 0.1
FLUSH_BYTES: Final = 64 * 1024
PIPE_BUF: Final = 4096  # POSIX: a write to a pipe of at most this many bytes is not interleaved


class AccessLog:
    """One JSON line per call, as `JsonLogFormatter` writes a record of the logger
    `realtime.access` (same members, same time format), batched."""

    def __init__(self) -> None:
        self.stream: TextIO | None = None  # None: sys.stderr as it is when written
        self._lines: list[bytes] = []
        self._size = 0
        self._flush_due: asyncio.TimerHandle | None = None
        self._second = -1
        self._prefix = ""

    def write(self, message: str, fields: Mapping[str, Any]) -> None:
        """One line, written within FLUSH_S; the current span's ids name its trace."""
        entry: dict[str, Any] = {
            "time": self._time(),
            "level": "INFO",
            "logger": ACCESS_LOGGER,
            "message": message,
            **fields,
        }
        ids = current_span_ids()
        if ids is not None:
            entry["trace_id"], entry["span_id"] = ids
        line = _LOG_ENCODER.encode(entry) + b"\n"
        self._lines.append(line)
        self._size += len(line)
        if self._size >= FLUSH_BYTES:
            self.flush()
        elif self._flush_due is None:
            try:
                loop = asyncio.get_running_loop()
            except RuntimeError:  # outside an event loop: nothing would flush it later
                self.flush()
                return
            self._flush_due = loop.call_later(FLUSH_S, self.flush)

    def flush(self) -> None:
        """Write what waits, whole lines in writes of at most PIPE_BUF bytes: the processes of
        `serve --workers N` share one stderr, and a pipe keeps such a write whole. A stream
        that cannot be written loses the lines, never fails a call."""
        if self._flush_due is not None:
            self._flush_due.cancel()
            self._flush_due = None
        if not self._lines:
            return
        lines, self._lines, self._size = self._lines, [], 0
        stream = self.stream or sys.stderr
        binary = getattr(stream, "buffer", None)
        try:
            stream.flush()  # anything written to it before goes first
            for chunk in _chunks(lines):
                if binary is not None:
                    binary.write(chunk)
                    binary.flush()
                else:
                    stream.write(chunk.decode())
                    stream.flush()
        except (OSError, ValueError):  # closed or broken: as logging's handlers drop lines
            pass

    def _time(self) -> str:
        """`logging.Formatter.formatTime`'s default: local time, `YYYY-MM-DD HH:MM:SS,mmm`."""
        now = time.time()
        second = int(now)
        if second != self._second:
            self._second = second
            self._prefix = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(second))
        return f"{self._prefix},{int((now - second) * 1000):03d}"


def _chunks(lines: list[bytes]) -> list[bytes]:
    """`lines` joined into chunks of at most PIPE_BUF bytes (a longer line is a chunk alone)."""
    chunks: list[bytes] = []
    current: list[bytes] = []
    size = 0
    for line in lines:
        if current and size + len(line) > PIPE_BUF:
            chunks.append(b"".join(current))
            current, size = [], 0
        current.append(line)
        size += len(line)
    if current:
        chunks.append(b"".join(current))
    return chunks


ACCESS_LOG: Final = AccessLog()  # the process's (stderr is the process's too)
atexit.register(ACCESS_LOG.flush)
