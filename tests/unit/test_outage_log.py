"""An unreachable Redis is named once, then at a bounded rate, then once when it is back."""

from __future__ import annotations

import logging
import time

import pytest

from realtime.store.redis_client import OutageLog


def lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "realtime.store.redis_client"]


def test_a_burst_of_failures_is_one_line_naming_the_target(caplog) -> None:
    caplog.set_level(logging.INFO)
    outages = OutageLog(every_s=30)
    outages.target = "redis://10.0.0.5:6379 (AIM_REDIS_URL)"
    for _ in range(50):
        outages.failed(
            ConnectionError("Error 111 connecting to 10.0.0.5:6379. Connection refused.")
        )
    assert lines(caplog) == [
        "redis unavailable: redis://10.0.0.5:6379 (AIM_REDIS_URL): ConnectionError: Error 111 "
        "connecting to 10.0.0.5:6379. Connection refused."
    ]


def test_a_long_outage_says_so_at_most_once_per_period_then_says_when_it_is_over(caplog):
    caplog.set_level(logging.INFO)
    outages = OutageLog(every_s=0.05)
    outages.target = "the embedded in-process store"
    outages.failed(TimeoutError())
    time.sleep(0.06)
    outages.failed(TimeoutError())
    outages.failed(TimeoutError())  # within the period: nothing more
    outages.answered()
    outages.answered()  # already said
    said = lines(caplog)
    assert said[0] == "redis unavailable: the embedded in-process store: TimeoutError"
    assert said[1].startswith("redis still unavailable: the embedded in-process store: 1 failed")
    assert said[2:] == ["redis reachable again: the embedded in-process store"]
