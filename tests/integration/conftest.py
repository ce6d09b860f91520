"""Fixtures shared by the integration tests beyond tests/conftest.py."""

from tests.redis_processes import data_dir, redis_servers_ended  # noqa: F401 - fixtures
from tests.worker_processes import runner_log, workers  # noqa: F401 - worker process fixtures
