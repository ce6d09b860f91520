"""A clock a test moves on: what the service or the worker reads as the time."""

from __future__ import annotations

import time


class Clock:
    """Real time plus what the test moved it on by."""

    def __init__(self) -> None:
        self.offset = 0.0

    def __call__(self) -> float:
        return time.time() + self.offset

    def advance(self, seconds: float) -> None:
        self.offset += seconds
