"""The access log's writer (`logs.AccessLog`): the lines of `JsonLogFormatter` without a log
record, written within FLUSH_S in writes of whole lines no longer than PIPE_BUF, and a stream
that fails loses lines without failing the call."""

from __future__ import annotations

import asyncio
import io
import json
import logging
import re

from realtime.logs import FLUSH_S, PIPE_BUF, AccessLog, JsonLogFormatter


class Writes(io.StringIO):
    """A text stream that remembers each write."""

    def __init__(self) -> None:
        super().__init__()
        self.writes: list[str] = []

    def write(self, text: str) -> int:
        self.writes.append(text)
        return super().write(text)


def test_a_line_has_the_members_and_time_format_of_every_other_log_line():
    access = AccessLog()
    access.stream = stream = io.StringIO()
    access.write("POST /a2a GetTask 200", {"path": "/a2a", "code": 0, "status": 200})
    access.flush()
    line = json.loads(stream.getvalue())

    record = logging.LogRecord("realtime.access", logging.INFO, "", 0, "m", (), None)
    formatted = json.loads(JsonLogFormatter().format(record))
    assert list(line)[:4] == list(formatted)[:4] == ["time", "level", "logger", "message"]
    assert (line["level"], line["logger"]) == ("INFO", "realtime.access")
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}", line["time"])
    assert line["time"][:16] == formatted["time"][:16]  # the same clock, to the minute
    assert line["message"] == "POST /a2a GetTask 200"
    assert (line["path"], line["code"], line["status"]) == ("/a2a", 0, 200)
    assert "trace_id" not in line  # no current span


async def test_lines_are_written_within_the_flush_interval_in_one_write():
    access = AccessLog()
    access.stream = stream = Writes()
    for n in range(5):
        access.write(f"line {n}", {"n": n})
    assert stream.writes == []  # batched
    await asyncio.sleep(FLUSH_S * 3)
    assert len(stream.writes) == 1
    assert [json.loads(line)["n"] for line in stream.getvalue().splitlines()] == list(range(5))


async def test_writes_are_whole_lines_of_at_most_pipe_buf_bytes():
    access = AccessLog()
    access.stream = stream = Writes()
    for n in range(200):
        access.write("x" * 90, {"n": n})
    access.write("long", {"text": "y" * (PIPE_BUF * 2)})
    assert stream.writes == []  # in an event loop: batched until flushed
    access.flush()
    assert 2 < len(stream.writes) < 20
    for write in stream.writes:
        assert write.endswith("\n")
        assert len(write.encode()) <= PIPE_BUF or write.count("\n") == 1
    numbers = [json.loads(line).get("n") for line in "".join(stream.writes).splitlines()]
    assert numbers == [*range(200), None]


def test_a_stream_that_fails_loses_the_lines_and_raises_nothing():
    class Broken(io.StringIO):
        def write(self, text: str) -> int:
            raise BrokenPipeError

    access = AccessLog()
    access.stream = Broken()
    access.write("lost", {})
    access.flush()  # no exception
    access.stream = stream = io.StringIO()
    access.write("kept", {})
    access.flush()
    assert [json.loads(line)["message"] for line in stream.getvalue().splitlines()] == ["kept"]
