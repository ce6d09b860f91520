"""Redis memory per session at each stage of its life (profile §20), on a private redis-server.

Runs the service in this process (with its worker: timers fire, the outbox is carried out)
against the LiveKit stand-in, creates `--sessions` sessions and takes each to `active` (created,
ready, one device registered and joined, LiveKit's participant_joined webhook), then ends them
and follows them through the retention stages:

    active      created, ready, one device joined
    ended       ended, its LiveKit work done
    compacted   AIM_COMPACT_AFTER_S after the end: the final summary and the task, compressed;
                the command outcomes, event stream and timeline are still kept
    expired     after the replay window (AIM_COMMAND_TTL_S): those are gone too; what is kept
                for the rest of the task TTL

The two settings are `--compact-after` and `--window` seconds (5 and 10) so the stages pass in
seconds; the defaults (1 h, 24 h) change when the stages come, not what they hold. Per stage
it prints the bytes per session two ways: the sum of MEMORY USAGE over every key but the shared
indexes (the session's own and its principal's: one principal for all) ÷ sessions, and the
growth of Redis's `used_memory` (shared indexes included) ÷ sessions; and by kind of key.

    uv run python bench/memory.py                  # 200 sessions, ≈ 30 s
    uv run python bench/memory.py --sessions 1000 --json memory.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
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
from realtime.store import keys  # noqa: E402
from realtime.store.redis_client import RedisClient  # noqa: E402
from realtime.store.server import PrivateRedis  # noqa: E402
from tests.conftest import LIVEKIT_KEY, LIVEKIT_SECRET, livekit_settings, serving  # noqa: E402
from tests.e2e.realtime_helpers import call, new_id  # noqa: E402
from tests.e2e.webhook_helpers import active_session  # noqa: E402

SHARED = ("aim:timers:due", "aim:outbox:due", "aim:{ops}:", "aim:{card}:", "aim:{reconciler}:")
STAGES = ("active", "ended", "compacted", "expired")


def own(key: str) -> bool:
    return not key.startswith(SHARED)


async def per_key(client: Any) -> dict[str, tuple[str, int]]:
    """Every key but the shared indexes → (type, MEMORY USAGE bytes)."""
    found: dict[str, tuple[str, int]] = {}
    async for raw in client.scan_iter(count=1000):
        key = raw.decode()
        if own(key):
            kind = (await client.type(raw)).decode()
            found[key] = (kind, int(await client.memory_usage(raw, samples=0) or 0))
    return found


async def used_memory(client: Any) -> int:
    info = await client.info("memory")
    return int(info["used_memory"])


async def session_state(http: httpx.AsyncClient, session_id: str) -> dict[str, Any]:
    got = await call(http, "GetSession", sessionId=session_id)
    session: dict[str, Any] = got["result"]["session"]
    return session


async def until(check: Any, within: float) -> None:
    deadline = time.monotonic() + within
    while not await check():
        if time.monotonic() > deadline:
            raise SystemExit("a stage was not reached in time")
        await asyncio.sleep(0.1)


def kind_of(key: str) -> str:
    """`aim:{<sid>}:events` → `events`; an owner's `aim:{o:…}:msg:<digest>` → `o:msg`."""
    parts = key.split(":")
    if key.startswith("aim:{o:"):
        return "o:" + parts[3]
    return parts[-1]


async def run(args: argparse.Namespace) -> dict[str, Any]:
    stages: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="aim-bench-memory-") as data_dir:
        redis_server = PrivateRedis(Path(data_dir), appendonly=False)
        store = RedisClient.from_url(redis_server.url)
        try:
            async with running_standin(LIVEKIT_KEY, LIVEKIT_SECRET) as livekit:
                settings = livekit_settings(
                    livekit,
                    command_ttl_s=args.window,
                    compact_after_s=args.compact_after,
                    max_sessions_per_principal=args.sessions,
                )
                app = create_app(settings, store=store, run_worker=True)
                async with (
                    serving(app) as base_url,
                    httpx.AsyncClient(base_url=base_url, timeout=30) as http,
                ):
                    client = store.client
                    baseline = await used_memory(client)
                    ids = [(await active_session(http))[0] for _ in range(args.sessions)]
                    await asyncio.sleep(0.5)  # the timeline's batched entries are written

                    async def measure(stage: str) -> None:
                        keys = await per_key(client)
                        kinds: dict[str, int] = {}
                        for key, (_, size) in keys.items():
                            kinds[kind_of(key)] = kinds.get(kind_of(key), 0) + size
                        one = {k: v for k, v in keys.items() if ids[0] in k}
                        stages[stage] = {
                            "keys_per_session": len(keys) / len(ids),
                            "bytes_per_session": sum(s for _, s in keys.values()) / len(ids),
                            "used_memory_per_session": (await used_memory(client) - baseline)
                            / len(ids),
                            "by_kind": {k: v / len(ids) for k, v in sorted(kinds.items())},
                            "one_session": {k: list(v) for k, v in one.items()},
                        }

                    await measure("active")
                    for session_id in ids:
                        ended = await call(
                            http,
                            "EndSession",
                            sessionId=session_id,
                            commandId=new_id(),
                            reason="done",
                        )
                        assert "result" in ended, ended
                    started = time.monotonic()

                    async def all_ended() -> bool:
                        for session_id in ids:
                            got = await session_state(http, session_id)
                            if got["state"] != "ended" or got["effects"]["pending"]:
                                return False
                        return True

                    await until(all_ended, 60)
                    if time.monotonic() - started >= args.compact_after:
                        raise SystemExit(
                            "sessions were compacted before all had ended: "
                            "use a longer --compact-after"
                        )
                    await measure("ended")

                    async def compacted() -> bool:
                        for session_id in ids:
                            raw = await client.hget(keys.session_key(session_id), "s")
                            if raw is None or raw[:1] == b"{":
                                return False
                        return True

                    await until(compacted, args.window + 60)
                    if time.monotonic() - started >= args.window:
                        raise SystemExit(
                            "the window ended before all were compacted: use a longer --window"
                        )
                    await measure("compacted")

                    async def expired() -> bool:  # what the replay window keeps is gone
                        kept = [keys.commands_key(sid) for sid in ids]
                        kept += [keys.archive_key(sid) for sid in ids]
                        return not await client.exists(*kept)

                    await until(expired, args.window + 60)
                    await asyncio.sleep(0.5)
                    await measure("expired")
        finally:
            await store.aclose()
            redis_server.stop()
    return stages


def report(stages: dict[str, Any], sessions: int) -> None:
    print(f"Redis memory per session ({sessions} sessions of one principal)")
    print(f"{'stage':<10} {'keys':>5} {'MEMORY USAGE B':>15} {'used_memory B':>14}  by key")
    for stage in STAGES:
        figures = stages[stage]
        kinds = " ".join(f"{k}={v:,.0f}" for k, v in figures["by_kind"].items())
        print(
            f"{stage:<10} {figures['keys_per_session']:>5.1f} "
            f"{figures['bytes_per_session']:>15,.0f} {figures['used_memory_per_session']:>14,.0f}"
            f"  {kinds}"
        )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=200, help="sessions to create (200)")
    parser.add_argument(
        "--compact-after", type=int, default=5, help="AIM_COMPACT_AFTER_S for the run (5)"
    )
    parser.add_argument(
        "--window", type=int, default=10, help="AIM_COMMAND_TTL_S for the run, seconds (10)"
    )
    parser.add_argument("--json", metavar="FILE", help="also write every figure to FILE")
    args = parser.parse_args()
    if args.sessions < 1 or not 1 <= args.compact_after < args.window:
        parser.error("--sessions ≥ 1, and 1 ≤ --compact-after < --window")
    stages = asyncio.run(run(args))
    report(stages, args.sessions)
    if args.json:
        Path(args.json).write_text(json.dumps(stages, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
