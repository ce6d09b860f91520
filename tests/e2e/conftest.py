"""Fixtures of the end-to-end tests."""

from __future__ import annotations

import io
import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from realtime.logs import ACCESS_LOG
from tests.redis_processes import data_dir, redis_servers_ended  # noqa: F401 - fixtures


@pytest.fixture
def access_lines() -> Iterator[Callable[[], list[dict[str, Any]]]]:
    """The access log as the service writes it (`logs.ACCESS_LOG`, to a stream of the test's)."""
    stream = io.StringIO()
    ACCESS_LOG.flush()
    previous, ACCESS_LOG.stream = ACCESS_LOG.stream, stream

    def lines() -> list[dict[str, Any]]:
        ACCESS_LOG.flush()
        return [json.loads(line) for line in stream.getvalue().splitlines()]

    try:
        yield lines
    finally:
        ACCESS_LOG.flush()
        ACCESS_LOG.stream = previous
