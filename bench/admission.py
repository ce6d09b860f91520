"""What tenant admission costs the create path (profile §24): two services side by side, one
without a tenant policy and one with (`AIM_TENANT_POLICY_FILE`, limits high enough never to
refuse, so every create runs the admission script and every figure is of an admitted create),
loaded in turn with SendMessage creating a session (`returnImmediately`: the create, its claim,
its admission, its commit and the provisioning LiveKit call the service starts inline).

Method, as bench/compare.py's: both services one process each, pinned to CPU 0; Redis, the
LiveKit stand-in and this driver on CPU 1; a warm-up of each, then rounds in which each service
is loaded once, in turn (off, on); the server CPU per request from /proc (utime + stime around
each run ÷ creates answered), medians and each round's ratio. The goal: on at most 1.05 times off.

    uv run python bench/admission.py                    # ≈ 1 minute
    uv run python bench/admission.py --runs 1 --seconds 2 --warmup 1   # a smoke run
    uv run python bench/admission.py --race 60          # two replicas at one tenant's limit

`--race SECONDS` measures something else: two services with the same policy (the tenant may
have `--limit` live sessions) on one Redis, hammered together for that long by creates that
each end their session again after up to 200 ms; it samples the tenant's live sessions in Redis
every few milliseconds and prints the peak, which must not pass the limit.

Every process it starts is stopped by its PID at exit, also on Ctrl-C or SIGTERM.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import signal
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
from redis import asyncio as redis_async

sys.dont_write_bytecode = True
HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent), str(HERE)]

import compare as c  # noqa: E402 - after the path is set
import wrkrun  # noqa: E402

from realtime.auth import mint_dev_token  # noqa: E402
from realtime.store import keys  # noqa: E402

TENANT = "bench"
PRINCIPALS = 64
POLICY = """[default]
live_sessions = 1000000000
starts_per_minute = 1000000000
session_minutes_per_day = 1000000000
session_minutes_per_month = 1000000000
"""


def principals() -> list[str]:
    """A token for each of the tenant's PRINCIPALS users."""
    return [
        mint_dev_token(
            c.SECRET,
            subject=f"user-{n}",
            scopes=c.SCOPES,
            ttl_s=3600,
            now=time.time(),
            tenant_claim="tenant",
            tenant=TENANT,
        )
        for n in range(PRINCIPALS)
    ]


def pin(pid: int, cpu: int) -> None:
    """`pid`'s whole process tree, every thread, on `cpu` (when there is more than one)."""
    if len(os.sched_getaffinity(0)) > 1:
        wrkrun.pin_tree(pid, cpu)


async def load(port: int, tokens: list[str], seconds: float, conns: int) -> tuple[int, int]:
    """Creates for `seconds` on `conns` connections: (answered with a task, refused or failed)."""
    ok = failed = 0
    deadline = time.monotonic() + seconds
    limits = httpx.Limits(max_connections=conns, max_keepalive_connections=conns)
    async with httpx.AsyncClient(base_url=f"http://{c.HOST}:{port}", limits=limits) as http:

        async def worker(n: int) -> None:
            nonlocal ok, failed
            i = 0
            while time.monotonic() < deadline:
                token = tokens[(n * 7919 + i) % len(tokens)]
                i += 1
                body = {
                    "jsonrpc": "2.0",
                    "id": 1,
                    "method": "SendMessage",
                    "params": c.session_create(str(uuid.uuid4())),
                }
                reply = await http.post(
                    "/a2a",
                    content=json.dumps(body),
                    headers={**c.HEADERS, "Authorization": f"Bearer {token}"},
                    timeout=15,
                )
                if reply.status_code == 200 and "result" in reply.json():
                    ok += 1
                else:
                    failed += 1

        await asyncio.gather(*(worker(n) for n in range(conns)))
    return ok, failed


async def hammer(
    ports: list[int], tokens: list[str], seconds: float, conns: int, store: Any, tenant_key: str
) -> dict[str, int]:
    """Creates through every port at once for `seconds`, each admitted one ended again after up
    to 200 ms; the tenant's live sessions in Redis sampled meanwhile: the counts and the peak."""
    counts = {"admitted": 0, "refused": 0, "failed": 0, "ended": 0, "peak": 0, "samples": 0}
    deadline = time.monotonic() + seconds
    clients = [httpx.AsyncClient(base_url=f"http://{c.HOST}:{port}", timeout=15) for port in ports]

    async def worker(n: int) -> None:
        http = clients[n % len(clients)]
        i = 0
        while time.monotonic() < deadline:
            token = tokens[(n * 7919 + i) % len(tokens)]
            i += 1
            headers = {**c.HEADERS, "Authorization": f"Bearer {token}"}
            body = {"jsonrpc": "2.0", "id": 1, "method": "SendMessage",
                    "params": c.session_create(str(uuid.uuid4()))}  # fmt: skip
            reply = await http.post("/a2a", content=json.dumps(body), headers=headers)
            if reply.status_code == 429:
                counts["refused"] += 1
                await asyncio.sleep(0.005)
                continue
            answer = reply.json()
            if "result" not in answer:
                counts["failed"] += 1
                continue
            counts["admitted"] += 1
            task = answer["result"]["task"]
            sid = task["metadata"][c.EXT]["sessionId"]
            await asyncio.sleep(random.uniform(0, 0.2))
            end = {"jsonrpc": "2.0", "id": 2, "method": "aim.realtime.EndSession",
                   "params": {"sessionId": sid, "commandId": str(uuid.uuid4()),
                              "reason": "done"}}  # fmt: skip
            ended = await http.post("/a2a", content=json.dumps(end), headers=headers)
            counts["ended" if ended.status_code == 200 else "failed"] += 1

    async def sample() -> None:
        while time.monotonic() < deadline:
            counts["peak"] = max(counts["peak"], await store.zcard(tenant_key))
            counts["samples"] += 1
            await asyncio.sleep(0.002)

    try:
        await asyncio.gather(sample(), *(worker(n) for n in range(conns)))
    finally:
        for http in clients:
            await http.aclose()
    return counts


def race(args: argparse.Namespace) -> int:
    """Two services at one tenant's limit (`--race`): the peak of its live sessions."""
    workdir = Path(tempfile.mkdtemp(prefix="aim-bench-race-"))
    standin = c.Standin()
    try:
        _, redis_port = c.start_redis(workdir)
        livekit_url = standin.start()
        policy = workdir / "policy.toml"
        policy.write_text(f"[tenants.{TENANT}]\nlive_sessions = {args.limit}\n", encoding="utf-8")
        policy.chmod(0o644)
        ports = []
        for name in ("one", "two"):
            env = c.service_env(
                redis_port,
                livekit_url,
                ["AIM_AUTH_TENANT_CLAIM=tenant", f"AIM_TENANT_POLICY_FILE={policy}"],
            )
            home = workdir / name
            home.mkdir()
            ports.append(c.start_service(args, home, env)[1])
        tokens = principals()
        store = redis_async.Redis(host=c.HOST, port=redis_port)
        key = keys.tenant_live_key(TENANT)
        counts = asyncio.run(hammer(ports, tokens, args.race, args.conns, store, key))
        c.say(
            f"{args.race:.0f} s, two services, {args.conns} connections, limit {args.limit}: "
            f"{counts['admitted']} admitted, {counts['refused']} refused (429), "
            f"{counts['ended']} ended, {counts['failed']} failed; "
            f"peak of live sessions in Redis {counts['peak']} over {counts['samples']} samples"
        )
        if counts["peak"] > args.limit:
            c.say(f"the limit was passed: {counts['peak']} > {args.limit}")
            return 1
        return 0 if counts["failed"] == 0 else 1
    except c.BenchError as exc:
        c.say(f"bench failed: {exc}")
        return 1
    finally:
        standin.stop()
        c.stop_started()


def run(args: argparse.Namespace) -> int:
    workdir = Path(tempfile.mkdtemp(prefix="aim-bench-admission-"))
    standin = c.Standin()
    try:
        redis_proc, redis_port = c.start_redis(workdir)
        pin(redis_proc.pid, 1)
        livekit_url = standin.start()
        policy = workdir / "policy.toml"
        policy.write_text(POLICY, encoding="utf-8")
        policy.chmod(0o644)
        services: dict[str, tuple[c.Proc, int]] = {}
        for name, extra in (
            ("off", []),
            ("on", [f"AIM_TENANT_POLICY_FILE={policy}"]),
        ):
            env = c.service_env(redis_port, livekit_url, ["AIM_AUTH_TENANT_CLAIM=tenant", *extra])
            home = workdir / name
            home.mkdir()
            services[name] = c.start_service(args, home, env)
            pin(services[name][0].pid, 0)
        if len(os.sched_getaffinity(0)) > 1:
            wrkrun.pin_self(1)
        tokens = principals()
        for name, (_, port) in services.items():
            ok, failed = asyncio.run(load(port, tokens, args.warmup, args.conns))
            c.say(f"warm-up {name}: {ok} creates, {failed} failed")
        figures: dict[str, list[float]] = {"off": [], "on": []}
        rates: dict[str, list[float]] = {"off": [], "on": []}
        for round_ in range(args.runs):
            for name, (proc, port) in services.items():
                pin(proc.pid, 0)  # threads started since are pinned too
                before = wrkrun.tree_cpu_s(proc.pid)
                ok, failed = asyncio.run(load(port, tokens, args.seconds, args.conns))
                used = wrkrun.tree_cpu_s(proc.pid) - before
                if failed > ok // 100:
                    raise c.BenchError(f"{name}: {failed} of {ok + failed} creates failed")
                figures[name].append(used / ok * 1e6)
                rates[name].append(ok / args.seconds)
                c.say(
                    f"round {round_ + 1} {name:>3}: {ok / args.seconds:7.1f} creates/s, "
                    f"{used / ok * 1e6:8.0f} µs CPU per create"
                )
        report(figures, rates, args)
        return 0
    except c.BenchError as exc:
        c.say(f"bench failed: {exc}")
        return 1
    finally:
        standin.stop()
        c.stop_started()


def report(figures: dict[str, list[float]], rates: dict[str, list[float]], args: Any) -> None:
    off, on = statistics.median(figures["off"]), statistics.median(figures["on"])
    each = [b / a for a, b in zip(figures["off"], figures["on"], strict=True)]
    c.say()
    c.say("| service | creates/s | CPU µs per create |")
    c.say("|---|---|---|")
    for name in ("off", "on"):
        c.say(
            f"| admission {name} | {statistics.median(rates[name]):.1f} | "
            f"{statistics.median(figures[name]):.0f} |"
        )
    c.say()
    c.say(
        f"CPU per create, on ÷ off: {on / off:.3f} (goal ≤ 1.05); each round: "
        + ", ".join(f"{r:.3f}" for r in each)
    )
    if args.json:
        Path(args.json).write_text(
            json.dumps({"cpu_us": figures, "creates_per_s": rates, "ratio": on / off}, indent=2)
        )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5, help="rounds, each service once (5)")
    parser.add_argument("--seconds", type=float, default=5, help="seconds per run (5)")
    parser.add_argument("--warmup", type=float, default=3, help="warm-up seconds each (3)")
    parser.add_argument("--conns", type=int, default=16, help="concurrent creates (16)")
    parser.add_argument(
        "--serve-args", default="--no-worker", help="arguments of `serve` (--no-worker)"
    )
    parser.add_argument("--json", metavar="FILE", help="write every run and the ratio to FILE")
    parser.add_argument(
        "--race",
        type=float,
        metavar="SECONDS",
        help="instead: two services at one tenant's limit for SECONDS, the peak of its sessions",
    )
    parser.add_argument(
        "--limit", type=int, default=8, help="with --race: the tenant's live sessions (8)"
    )
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    return race(args) if args.race else run(args)


if __name__ == "__main__":
    sys.exit(main())
