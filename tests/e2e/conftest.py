"""Fixtures of the end-to-end tests."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from realtime.logs import JsonLogFormatter


@pytest.fixture
def access_lines() -> Iterator[Callable[[], list[dict[str, Any]]]]:
    """The access log as the CLI writes it: formatted when emitted (inside the call's span)."""
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonLogFormatter())
    logger = logging.getLogger("realtime.access")
    level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        yield lambda: [json.loads(line) for line in stream.getvalue().splitlines()]
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
