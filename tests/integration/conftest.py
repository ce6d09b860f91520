"""Fixtures shared by the integration tests beyond tests/conftest.py."""

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.redis_processes import kill_servers_under, needs_redis_server
from tests.worker_processes import runner_log, workers  # noqa: F401 - worker process fixtures


@pytest.fixture
def data_dir(tmp_path: Path) -> Iterator[Path]:
    """A data directory in `tmp_path` for a private redis-server; servers over it are ended."""
    needs_redis_server()
    yield tmp_path / "data"
    kill_servers_under(tmp_path)
