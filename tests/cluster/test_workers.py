"""`aim-realtime worker` processes on Redis Cluster: the tests of `tests/integration/test_workers`
whose workers share nothing with this process but Redis (timers fired once across two workers
and a kill -9; provisioning retried by a worker once LiveKit is back), with the workers started
as an operator starts them on a Cluster: AIM_REDIS_URL and AIM_REDIS_CLUSTER=1."""

from __future__ import annotations

import pytest

from tests.cluster import only_on_cluster
from tests.integration.test_workers import (  # the tests and their fixtures, run on the Cluster
    runner_log,  # noqa: F401 - a fixture of the imported test
    test_a_worker_process_retries_provisioning_once_livekit_is_back,  # noqa: F401
    test_two_workers_and_a_kill_9_fire_every_timer_once,  # noqa: F401
    workers,  # noqa: F401 - starts workers with AIM_REDIS_CLUSTER=1 on the Cluster pass
)

pytestmark = [pytest.mark.redis, pytest.mark.e2e, pytest.mark.slow, only_on_cluster]
