"""Fixtures shared by the Cluster pass's tests beyond tests/conftest.py."""

from tests.worker_processes import runner_log, workers  # noqa: F401 - worker process fixtures
