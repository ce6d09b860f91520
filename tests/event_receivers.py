"""Start the session event receiver (`tests/event_receiver.py`) as its own process, steer what
it answers and read what it received; a service's settings that send it the events."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import os
import signal
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

SECRET = "whsec_" + base64.b64encode(b"session-events-test-secret-32by").decode()
RECEIVER = Path(__file__).with_name("event_receiver.py")


class Receiver:
    """A running receiver: its URL, what it answers next, what it got."""

    def __init__(self, port: int, log: Path, control: Path) -> None:
        self.url = f"http://127.0.0.1:{port}/events"
        self.log, self.control = log, control

    def answer(self, status: int, delay_s: float = 0.0) -> None:
        staged = self.control.with_suffix(".next")
        staged.write_text(json.dumps({"status": status, "delay_s": delay_s}))
        staged.replace(self.control)  # read whole or not at all

    def requests(self) -> list[dict[str, Any]]:
        if not self.log.exists():
            return []
        return [json.loads(line) for line in self.log.read_text().splitlines() if line]

    def delivered(self, session_id: str | None = None) -> list[dict[str, Any]]:
        """The events answered 2xx, in the order they arrived (repeats included)."""
        return [
            r["event"]
            for r in self.requests()
            if r["verified"]
            and 200 <= r["answered"] < 300
            and (session_id is None or r["event"]["sessionId"] == session_id)
        ]

    async def wait_for(self, check: Any, within: float = 30.0) -> None:
        deadline = time.monotonic() + within
        while not check():
            if time.monotonic() > deadline:
                raise AssertionError(f"not received within {within} s: {self.requests()}")
            await asyncio.sleep(0.05)


@contextlib.asynccontextmanager
async def receiver(tmp_path: Path) -> AsyncIterator[Receiver]:
    log, control = tmp_path / "received.jsonl", tmp_path / "answer.json"
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        str(RECEIVER),
        "--secret",
        SECRET,
        "--log",
        str(log),
        "--control",
        str(control),
        stdout=asyncio.subprocess.PIPE,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        assert process.stdout is not None
        line = await asyncio.wait_for(process.stdout.readline(), 30)
        assert line.startswith(b"listening "), line
        yield Receiver(int(line.split()[1]), log, control)
    finally:
        with contextlib.suppress(ProcessLookupError):
            process.send_signal(signal.SIGTERM)
        await process.wait()


def events_settings(url: str, **overrides: Any) -> dict[str, Any]:
    """The Settings fields that send session events to `url`."""
    return {"events_url": url, "events_secret": SECRET, **overrides}
