"""The cluster pass: the Redis-backed suites once more, on a Redis Cluster of three masters.

`scripts/test-cluster` starts a local cluster (`scripts/redis-cluster`), runs the integration and
e2e tests of the store, the engine, the event hub and the worker with AIM_TEST_REDIS_CLUSTER=1
(the `store` fixture is then a cluster client, flushed on every master), and stops it. The tests
in this package run only in that pass; `SKIPPED_ON_CLUSTER` names those of the other suites that
cannot run on a Cluster, and why.
"""

from __future__ import annotations

import os
import re
from typing import Any, Final

import pytest

ON_CLUSTER: Final = os.environ.get("AIM_TEST_REDIS_CLUSTER") == "1"

only_on_cluster = pytest.mark.skipif(
    not ON_CLUSTER, reason="runs in the Redis Cluster pass (scripts/test-cluster)"
)

_PROXY = (
    "cuts the link to Redis with a TCP proxy in front of one server; a cluster client is "
    "redirected to the nodes' own addresses, around the proxy"
)
_ROUND_TRIPS = (
    "counts one server's read events; on Cluster a commit is several round trips (redis-py's "
    "cluster pipeline refuses scripts) spread over the masters"
)
_SUBPROCESS_WORKERS = (
    "its worker processes are given AIM_REDIS_URL without AIM_REDIS_CLUSTER; "
    "tests/cluster/test_workers.py runs it with workers on the Cluster"
)
_SUBPROCESS_SERVE = (
    "its `serve` processes are given AIM_REDIS_URL without AIM_REDIS_CLUSTER; "
    "tests/cluster/test_serve.py runs `check` and `serve` on the Cluster"
)

# node id patterns (`*` matches anything) → why the test cannot run on a Redis Cluster
SKIPPED_ON_CLUSTER: Final[dict[str, str]] = {
    "tests/integration/test_round_trips.py::test_an_applied_command_is_one_round_trip*": (
        _ROUND_TRIPS
    ),
    "tests/integration/test_round_trips.py::test_without_the_session_cache_a_command_is*": (
        _ROUND_TRIPS
    ),
    "tests/integration/test_round_trips.py::test_a_command_that_writes_a_session_event*": (
        _ROUND_TRIPS
    ),
    "tests/integration/test_round_trips.py::test_reads_are_one_round_trip*": (
        "counts one server's read events (INFO answers for one master)"
    ),
    "tests/e2e/test_task_bounds.py::test_a_thousand_large_messages_cost_little*": (
        "counts one server's GET commands and memory (INFO answers for one master)"
    ),
    "tests/e2e/test_task_bounds.py::test_a_task_indexed_before_the_index_carried*": (
        "finds the owner's index by a KEYS pattern, which a cluster client asks one node"
    ),
    "tests/integration/test_faults.py::test_redis_dropped_during_the_commit*": _PROXY,
    "tests/integration/test_faults.py::test_redis_dropped_while_creating*": _PROXY,
    "tests/integration/test_faults.py::test_cuts_at_the_script_load_do_not_exhaust_the_pool": (
        _PROXY
    ),
    "tests/integration/test_faults.py::test_connections_closed_by_redis_are_not_reused": _PROXY,
    "tests/integration/test_reconciler.py::test_a_redis_outage_during_a_sweep_changes_nothing": (
        _PROXY
    ),
    "tests/integration/test_reconciler.py::test_the_room_of_an_older_epoch_is_deleted_and_the*": (
        "runs no worker loop, so the rebind's effects wait for good when the webhook's inline "
        "runner finds the lease still held by the run before it (about 1 run in 10 on a single "
        "Redis, more often on a Cluster, whose commits take more round trips)"
    ),
    "tests/integration/test_workers.py::test_a_worker_takes_over_timers_a_killed_worker_claimed": (
        _PROXY
    ),
    "tests/integration/test_workers.py::test_two_workers_and_a_kill_9_fire_every_timer_once": (
        _SUBPROCESS_WORKERS
    ),
    "tests/integration/test_workers.py::test_a_worker_process_retries_provisioning_once*": (
        _SUBPROCESS_WORKERS
    ),
    "tests/integration/test_store_selection.py::test_a_configured_url_is_the_store_that_is*": (
        "opens the URL as a single Redis; tests/cluster/test_store.py opens it as a Cluster"
    ),
    "tests/e2e/test_webhooks.py::test_a_503_records_nothing_so_livekits_retry_applies": _PROXY,
    "tests/e2e/test_admission.py::test_redis_lost_during_admission_is_unavailable*": _PROXY,
    "tests/e2e/test_webhooks.py::test_redis_lost_during_the_commit_answers_503*": _PROXY,
    "tests/e2e/test_agent_card.py::test_without_redis_the_card_is_served_without_last*": _PROXY,
    # outside the pass (a whole suite run on a Cluster): these fail there, and a failed one
    # leaves its worker processes running against the Cluster
    "tests/e2e/test_cli_workers.py::test_workers_share_one_socket_one_secret_and_one_worker*": (
        _SUBPROCESS_SERVE
    ),
    "tests/e2e/test_connections.py::test_an_sse_stream_outlives_the_idle_timeout": (
        _SUBPROCESS_SERVE
    ),
    "tests/e2e/test_stream_limits.py::test_a_reader_that_stops_reading_is_cut_and_its_slot*": (
        _SUBPROCESS_SERVE
    ),
}

_COMPILED: Final = [
    (re.compile(".*".join(re.escape(part) for part in pattern.split("*")) + r"\Z"), reason)
    for pattern, reason in SKIPPED_ON_CLUSTER.items()
]


def skip_reason(nodeid: str) -> str | None:
    """Why the test `nodeid` is skipped on a Redis Cluster; None when it runs there."""
    for pattern, reason in _COMPILED:
        if pattern.match(nodeid):
            return reason
    return None


async def flush_cluster(store: Any) -> None:
    """FLUSHALL on every master of the cluster `store` talks to."""
    client = store.client
    await client.flushall(target_nodes=client.PRIMARIES)
