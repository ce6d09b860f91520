"""GetTask throughput on one service process against a private local Redis.

Starts a redis-server (unix socket) and `aim-realtime serve` (one uvicorn worker) as child
processes, creates one task, then drives GetTask from a separate load process with N concurrent
keep-alive connections for a fixed time. Prints requests/s, latency percentiles and Redis
commands per request (from INFO commandstats).

    uv run python bench/get_task.py [--seconds 10] [--concurrency 32]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import aiohttp
import redis

from realtime.store.server import PrivateRedis

SECRET = "bench-secret-0123456789-abcdefghijklmnopqrstuvwxyz"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def commands_processed(client: redis.Redis) -> int:
    stats = client.info("commandstats")
    return sum(value["calls"] for key, value in stats.items() if key not in ("cmdstat_info",))


async def load(url: str, token: str, task_id: str, seconds: float, concurrency: int):
    body = json.dumps(
        {"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": task_id}}
    ).encode()
    headers = {
        "Authorization": f"Bearer {token}",
        "A2A-Version": "1.0",
        "Content-Type": "application/json",
    }
    latencies: list[float] = []
    errors = 0
    deadline = time.perf_counter() + seconds

    async def worker(session: aiohttp.ClientSession) -> None:
        nonlocal errors
        while time.perf_counter() < deadline:
            start = time.perf_counter()
            async with session.post(url, data=body, headers=headers) as response:
                payload = await response.read()
            latencies.append(time.perf_counter() - start)
            if response.status != 200 or b'"result"' not in payload:
                errors += 1

    connector = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(connector=connector) as session:
        started = time.perf_counter()
        await asyncio.gather(*(worker(session) for _ in range(concurrency)))
        elapsed = time.perf_counter() - started
    return latencies, errors, elapsed


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--concurrency", type=int, default=32)
    args = parser.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="aim-bench-"))
    redis_server = PrivateRedis(workdir / "redis", appendonly=False)
    sock = redis_server.socket
    port = free_port()
    env = {
        **os.environ,
        "AIM_REDIS_URL": f"unix://{sock}",
        "AIM_AUTH_HS256_SECRET": SECRET,
        "AIM_RATE_LIMIT_RPS": "0",
    }
    service = subprocess.Popen(
        [sys.executable, "-m", "realtime.cli", "serve", "--port", str(port)],
        env=env,
        cwd=workdir,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        for _ in range(200):
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=0.1):
                    break
            except OSError:
                time.sleep(0.05)
        from realtime.auth import mint_dev_token

        token = mint_dev_token(
            SECRET,
            subject="bench",
            scopes=["a2a.invoke", "a2a.tasks.read"],
            ttl_s=3600,
            now=time.time(),
        )
        url = f"http://127.0.0.1:{port}/a2a"

        async def create() -> str:
            async with aiohttp.ClientSession() as session:
                message = {"messageId": "bench", "role": "ROLE_USER", "parts": [{"text": "hi"}]}
                request = {
                    "jsonrpc": "2.0",
                    "id": 1,
                    "method": "SendMessage",
                    "params": {"message": message},
                }
                async with session.post(
                    url,
                    json=request,
                    headers={"Authorization": f"Bearer {token}", "A2A-Version": "1.0"},
                ) as response:
                    return str((await response.json())["result"]["task"]["id"])

        task_id = asyncio.run(create())
        client = redis.Redis(unix_socket_path=str(sock))
        asyncio.run(load(url, token, task_id, 1.0, args.concurrency))  # warm-up
        before = commands_processed(client)
        latencies, errors, elapsed = asyncio.run(
            load(url, token, task_id, args.seconds, args.concurrency)
        )
        after = commands_processed(client)
        count = len(latencies)
        print(f"GetTask, 1 uvicorn worker, {args.concurrency} connections, {elapsed:.1f} s")
        print(f"  requests/s       {count / elapsed:8.0f}   (errors: {errors})")
        print(f"  latency p50      {percentile(latencies, 0.50) * 1000:8.2f} ms")
        print(f"  latency p99      {percentile(latencies, 0.99) * 1000:8.2f} ms")
        print(f"  redis commands   {(after - before) / count:8.2f} per request")
        client.close()
    finally:
        service.terminate()
        service.wait(10)
        redis_server.stop()
        shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
