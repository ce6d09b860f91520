"""Create → ready: how long a session takes from its SendMessage to `ready`, with LiveKit
answering at once and one RTT away (profile §22; goal: at most one LiveKit RTT + 20 ms median).

Runs the service in this process (its inline runner provisions each session) against the LiveKit
stand-in on a private redis-server. For each LiveKit delay (`--delays`, ms: every stand-in call
is answered that much later, as a LiveKit region one RTT away would), it creates `--sessions`
sessions one after another with a blocking SendMessage, which answers once the session is
`ready` (or failed), and takes its round-trip time; it checks that each answered `ready` and
counts the LiveKit calls per session. `--runs` repeats the whole measurement; it prints each
run's median and the median of the runs.

    uv run python bench/ready.py                      # delays 0 and 50 ms, 3 runs of 30
    uv run python bench/ready.py --delays 0 50 100 --sessions 50 --json ready.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.dont_write_bytecode = True
REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import httpx  # noqa: E402 - after the path is set

from realtime.app import create_app  # noqa: E402
from realtime.livekit_dev.standin import running_standin  # noqa: E402
from realtime.store.redis_client import RedisClient  # noqa: E402
from realtime.store.server import PrivateRedis  # noqa: E402
from tests.conftest import LIVEKIT_KEY, LIVEKIT_SECRET, livekit_settings, serving  # noqa: E402
from tests.e2e.realtime_helpers import create_session, session_of  # noqa: E402


async def one_run(store: RedisClient, delay_ms: int, sessions: int) -> dict[str, Any]:
    await store.client.flushdb()
    async with running_standin(LIVEKIT_KEY, LIVEKIT_SECRET) as livekit:
        if delay_ms:
            livekit.delay(delay_ms / 1000)  # every call, until the stand-in stops
        settings = livekit_settings(livekit, max_sessions_per_principal=sessions + 1)
        app = create_app(settings, store=store, run_worker=True)
        async with serving(app) as base_url, httpx.AsyncClient(base_url=base_url) as http:
            await create_session(http)  # warm-up: connections, scripts, caches
            calls_before = len(livekit.calls)
            times_ms: list[float] = []
            for _ in range(sessions):
                started = time.perf_counter()
                body = await create_session(http)
                times_ms.append((time.perf_counter() - started) * 1000)
                state = session_of(body["result"]["task"])["sessionState"]
                if state != "ready":
                    raise SystemExit(f"a session answered {state}, not ready: {body}")
            calls = (len(livekit.calls) - calls_before) / sessions
    return {"median_ms": statistics.median(times_ms), "p90_ms": _p90(times_ms), "calls": calls}


def _p90(values: list[float]) -> float:
    return sorted(values)[int(len(values) * 0.9) - 1]


async def run(args: argparse.Namespace) -> dict[str, Any]:
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="aim-bench-ready-") as data_dir:
        redis_server = PrivateRedis(Path(data_dir), appendonly=False)
        store = RedisClient.from_url(redis_server.url)
        try:
            for run_index in range(args.runs):
                for delay in args.delays:
                    measured = await one_run(store, delay, args.sessions)
                    results.setdefault(str(delay), []).append(measured)
                    print(
                        f"run {run_index + 1}  LiveKit +{delay:>3} ms: median "
                        f"{measured['median_ms']:6.1f} ms  p90 {measured['p90_ms']:6.1f} ms  "
                        f"{measured['calls']:.1f} LiveKit calls a session",
                        flush=True,
                    )
        finally:
            await store.aclose()
            redis_server.stop()
    return results


def report(results: dict[str, Any]) -> None:
    print("\ncreate → ready (blocking SendMessage round trip), median of the runs' medians")
    print("  LiveKit delay   median ms   goal ms (1 RTT + 20)   runs (medians)          calls")
    for delay, runs in results.items():
        medians = [r["median_ms"] for r in runs]
        goal = int(delay) + 20
        print(
            f"  {int(delay):>6} ms      {statistics.median(medians):8.1f}   {goal:>8}"
            f"               {' '.join(f'{m:.1f}' for m in medians):<22}"
            f"  {statistics.median(r['calls'] for r in runs):.1f}"
        )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--delays",
        type=int,
        nargs="+",
        default=[0, 50],
        help="LiveKit answer delays to measure, in ms (default: 0 50)",
    )
    parser.add_argument(
        "--sessions", type=int, default=30, help="sessions created per run and delay (30)"
    )
    parser.add_argument("--runs", type=int, default=3, help="how many times to measure (3)")
    parser.add_argument("--json", metavar="FILE", help="also write every run as JSON to FILE")
    args = parser.parse_args()
    results = asyncio.run(run(args))
    report(results)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
