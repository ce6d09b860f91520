"""GetSession and JoinSession on one service process against a private local Redis.

Starts redis-server, a minimal LiveKit stand-in (tests/livekit_standin.py) and `aim-realtime
serve` (one uvicorn worker, no in-process worker loop needed), creates sessions, then measures:

- GetSession: requests/s, p50/p99 latency, Redis commands (round trips) per request;
- JoinSession applied (a fresh commandId each time: the active device re-joins, a transition
  with a freshly minted token and no LiveKit call) and JoinSession replayed (a repeated
  commandId: the stored outcome, token re-signed).

Redis round trips are counted in the service process (which runs in this process; the load comes
from a child process): one per command sent alone, one per pipeline.

    uv run python bench/sessions.py [--seconds 5] [--concurrency 16]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from realtime.auth import mint_dev_token
from realtime.store.server import PrivateRedis
from tests.livekit_standin import running_standin

SECRET = "bench-secret-0123456789-abcdefghijklmnopqrstuvwxyz"
LK_KEY = "bench-key"
LK_SECRET = "bench-livekit-secret-0123456789-abcdefghijklmnop"
EXT = "urn:aim:a2a:realtime:v1"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000


class Bench:
    def __init__(self, url: str, token: str) -> None:
        self.url = url
        self.headers = {
            "Authorization": f"Bearer {token}",
            "A2A-Version": "1.0",
            "A2A-Extensions": EXT,
            "Content-Type": "application/json",
        }

    async def call(self, http: aiohttp.ClientSession, method: str, params: dict[str, Any]) -> Any:
        body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
        async with http.post(self.url, data=json.dumps(body), headers=self.headers) as response:
            return await response.json()


async def load(args: argparse.Namespace) -> None:
    """Load generator (child process): one phase, prints a JSON line of latencies/errors."""
    spec = json.loads(args.load)
    bench = Bench(spec["url"], spec["token"])
    sessions = spec["sessions"]
    latencies: list[float] = []
    errors = 0
    deadline = time.perf_counter() + spec["seconds"]
    connector = aiohttp.TCPConnector(limit=len(sessions))
    async with aiohttp.ClientSession(connector=connector) as http:

        async def worker(s: dict[str, Any]) -> None:
            nonlocal errors
            epoch, n, last = s["epoch"], 0, None
            if spec["phase"] != "get":
                got = await bench.call(http, "aim.realtime.GetSession", {"sessionId": s["id"]})
                epoch = got["result"]["session"]["sessionEpoch"]
            while time.perf_counter() < deadline:
                if spec["phase"] == "get":
                    method, params = "aim.realtime.GetSession", {"sessionId": s["id"]}
                elif spec["phase"] == "join" or last is None:
                    method = "aim.realtime.JoinSession"
                    params = {
                        "sessionId": s["id"],
                        "sessionEpoch": epoch,
                        "endpointId": s["endpoints"][0],
                        "commandId": str(uuid.uuid4()),
                    }
                else:
                    method, params = "aim.realtime.JoinSession", last
                n += 1
                start = time.perf_counter()
                reply = await bench.call(http, method, params)
                latencies.append(time.perf_counter() - start)
                if "error" in reply:
                    errors += 1
                elif method.endswith("JoinSession"):
                    epoch = reply["result"]["session"]["sessionEpoch"]
                    if spec["phase"] == "replay" and last is None:
                        last = params
                        latencies.clear()  # the one applied call that set up the replays

        started = time.perf_counter()
        await asyncio.gather(*(worker(s) for s in sessions))
        elapsed = time.perf_counter() - started
    print(json.dumps({"latencies": latencies, "errors": errors, "elapsed": elapsed}))


class RoundTrips:
    """Counts Redis round trips of this process: one per command sent alone, one per pipeline."""

    def __init__(self) -> None:
        import redis.asyncio.client as client_module

        self.count = 0
        counter = self
        original_command = client_module.Redis.execute_command
        original_pipeline = client_module.Pipeline.execute

        async def execute_command(self: Any, *args: Any, **options: Any) -> Any:
            counter.count += 1
            return await original_command(self, *args, **options)

        async def execute(self: Any, *args: Any, **options: Any) -> Any:
            counter.count += 1
            return await original_pipeline(self, *args, **options)

        client_module.Redis.execute_command = execute_command  # type: ignore[method-assign]
        client_module.Pipeline.execute = execute  # type: ignore[method-assign]


async def main_async(args: argparse.Namespace) -> None:
    import logging

    import httpx
    import uvicorn

    from realtime.app import create_app
    from realtime.settings import Settings

    logging.getLogger("httpx").setLevel(logging.WARNING)
    round_trips = RoundTrips()
    workdir = Path(tempfile.mkdtemp(prefix="aim-bench-"))
    redis_server = PrivateRedis(workdir / "redis", appendonly=False)
    sock = redis_server.socket
    port = free_port()
    async with running_standin(LK_KEY, LK_SECRET) as livekit:
        settings = Settings.from_env(
            {
                "AIM_REDIS_URL": f"unix://{sock}",
                "AIM_AUTH_HS256_SECRET": SECRET,
                "AIM_RATE_LIMIT_RPS": "0",
                "AIM_LIVEKIT_URL": livekit.url,
                "AIM_LIVEKIT_API_KEY": LK_KEY,
                "AIM_LIVEKIT_API_SECRET": LK_SECRET,
                "AIM_MAX_SESSIONS_PER_PRINCIPAL": "10000",
            }
        )
        app = create_app(settings, run_worker=False)
        server = uvicorn.Server(
            uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", access_log=False)
        )
        serving = asyncio.create_task(server.serve())
        while not server.started:
            await asyncio.sleep(0.01)
        try:
            token = mint_dev_token(
                SECRET,
                subject="bench",
                scopes=["a2a.invoke", "a2a.tasks.read"],
                ttl_s=3600,
                now=time.time(),
            )
            url = f"http://127.0.0.1:{port}/a2a"
            headers = {
                "Authorization": f"Bearer {token}",
                "A2A-Version": "1.0",
                "A2A-Extensions": EXT,
            }
            sessions = []
            async with httpx.AsyncClient(timeout=30) as http:

                async def call(method: str, params: dict[str, Any]) -> Any:
                    body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
                    return (await http.post(url, json=body, headers=headers)).json()

                for i in range(args.concurrency):
                    part = {
                        "mediaType": "application/json",
                        "data": {
                            "operation": "session.create",
                            "clientSessionId": str(uuid.uuid4()),
                            "requested": {
                                "mediaBinding": "livekit-webrtc-v1",
                                "audio": "bidirectional",
                                "userVideoSources": [],
                                "agentVideoSources": [],
                                "interactions": ["text"],
                            },
                            "requiredCapabilities": [],
                            "recording": "off",
                            "retention": {"transcript": "off", "summary": "off"},
                        },
                    }
                    created = await call(
                        "SendMessage",
                        {"message": {"messageId": f"m{i}", "role": "ROLE_USER", "parts": [part]}},
                    )
                    sid = created["result"]["task"]["metadata"][EXT]["sessionId"]
                    endpoints = []
                    for key in ("a", "b"):
                        reg = await call(
                            "aim.realtime.RegisterEndpoint",
                            {
                                "sessionId": sid,
                                "sessionEpoch": 1,
                                "commandId": str(uuid.uuid4()),
                                "clientEndpointKey": key,
                                "capabilities": {
                                    "audioInput": True,
                                    "audioOutput": True,
                                    "camera": False,
                                    "screen": False,
                                    "interactions": ["text"],
                                },
                            },
                        )
                        endpoints.append(reg["result"]["endpoint"]["endpointId"])
                    sessions.append({"id": sid, "endpoints": endpoints, "epoch": 1})
            for name, phase in (
                ("GetSession", "get"),
                ("JoinSession, applied", "join"),
                ("JoinSession, replayed", "replay"),
            ):
                spec = {
                    "url": url,
                    "token": token,
                    "sessions": sessions,
                    "phase": phase,
                    "seconds": args.seconds,
                }
                before = round_trips.count
                child = await asyncio.create_subprocess_exec(
                    sys.executable, __file__, "--load", json.dumps(spec), stdout=subprocess.PIPE
                )
                out, _ = await child.communicate()
                trips = round_trips.count - before
                result = json.loads(out)
                lat, count = result["latencies"], len(result["latencies"])
                # each worker first reads its session (1 round trip); in the replay phase it then
                # applies one join (2) whose latency is not counted
                setup = 0 if phase == "get" else len(sessions) * (3 if phase == "replay" else 1)
                print(
                    f"{name:24s} {count / result['elapsed']:7.0f} req/s   "
                    f"p50 {pct(lat, 0.5):6.2f} ms   p99 {pct(lat, 0.99):6.2f} ms   "
                    f"redis round trips/request {(trips - setup) / max(1, count):.2f}"
                    f"   errors {result['errors']}"
                )
        finally:
            server.should_exit = True
            await serving
            redis_server.stop()
            shutil.rmtree(workdir, ignore_errors=True)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--load", help=argparse.SUPPRESS)
    args = parser.parse_args()
    asyncio.run(load(args) if args.load else main_async(args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
