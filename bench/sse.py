"""1,000 open SSE subscriptions on one service process while sessions change state.

Starts redis-server (unix socket), the LiveKit stand-in (realtime/livekit_dev/standin.py, in this
process) and `aim-realtime serve` (one uvicorn worker, a child process), creates sessions, opens
SubscribeToTask streams spread evenly over them, then changes the sessions' state with signed
LiveKit webhooks (the agent joining and leaving: one commit, one event each) at a fixed rate.

Prints, for the service process: RSS before and with the subscriptions open, CPU while the
events flow, its Redis connections; and the delay from commit to delivery, p50/p99, measured
per delivered event as (time the client read it) - (the ms timestamp in its SSE id, which is
the Redis stream entry id that the commit's XADD created: same machine, same clock).

    uv run python bench/sse.py [--subscribers 1000] [--sessions 100] [--rate 100] [--seconds 10]
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
import uuid
from pathlib import Path

import aiohttp
import redis
from livekit import api

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from realtime.auth import mint_dev_token
from realtime.livekit_dev.standin import running_standin, sign_webhook, webhook_headers
from realtime.store.server import PrivateRedis

SECRET = "bench-secret-0123456789-abcdefghijklmnopqrstuvwxyz"
LK_KEY = "bench-key"
LK_SECRET = "bench-livekit-secret-0123456789-abcdefghijklmnop"
EXT = "urn:aim:a2a:realtime:v1"
PAGE = os.sysconf("SC_PAGE_SIZE")
TICKS = os.sysconf("SC_CLK_TCK")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/statm") as statm:
        return int(statm.read().split()[1]) * PAGE / 2**20


def cpu_s(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS  # utime + stime


class Subscriber:
    def __init__(self) -> None:
        self.delays_ms: list[float] = []
        self.first = asyncio.Event()

    async def run(
        self, http: aiohttp.ClientSession, url: str, headers: dict[str, str], task_id: str
    ) -> None:
        body = {"jsonrpc": "2.0", "id": 1, "method": "SubscribeToTask", "params": {"id": task_id}}
        async with http.post(url, json=body, headers=headers) as response:
            if not response.headers["content-type"].startswith("text/event-stream"):
                raise RuntimeError(f"not a stream: {response.status} {await response.text()}")
            event_id = None
            async for raw in response.content:
                line = raw.decode().rstrip("\r\n")
                if line.startswith("id: "):
                    event_id = line[4:]
                elif line.startswith("data: "):
                    if not self.first.is_set():
                        self.first.set()  # the Task snapshot
                    elif event_id is not None:
                        self.delays_ms.append(time.time() * 1000 - int(event_id.split("-")[0]))
                    event_id = None


async def main_async(args: argparse.Namespace) -> dict[str, float]:
    workdir = Path(tempfile.mkdtemp(prefix="aim-bench-"))
    redis_server = PrivateRedis(workdir / "redis", appendonly=False)
    port = free_port()
    async with running_standin(LK_KEY, LK_SECRET) as livekit:
        env = {
            **os.environ,
            "AIM_REDIS_URL": f"unix://{redis_server.socket}",
            "AIM_AUTH_HS256_SECRET": SECRET,
            "AIM_RATE_LIMIT_RPS": "0",
            "AIM_LIVEKIT_URL": livekit.url,
            "AIM_LIVEKIT_API_KEY": LK_KEY,
            "AIM_LIVEKIT_API_SECRET": LK_SECRET,
            "AIM_MAX_SESSIONS_PER_PRINCIPAL": "10000",
            # every subscriber comes from 127.0.0.1: no per-address bound, room for them all
            "AIM_HTTP_MAX_CONNECTIONS_PER_PEER": "0",
            "AIM_HTTP_MAX_CONNECTIONS": str(max(2048, args.subscribers + 256)),
            # one principal holds every stream, several on each task
            "AIM_SSE_MAX_STREAMS_PER_PRINCIPAL": str(max(16, args.subscribers)),
            "AIM_SSE_MAX_STREAMS_PER_TASK": str(max(8, args.subscribers)),
        }
        service = subprocess.Popen(
            [sys.executable, "-m", "realtime.cli", "serve", "--port", str(port)],
            env=env,
            cwd=workdir,
            stdout=subprocess.DEVNULL,
            stderr=(workdir / "service.log").open("w"),
        )
        try:
            for _ in range(200):
                try:
                    with socket.create_connection(("127.0.0.1", port), timeout=0.1):
                        break
                except OSError:
                    await asyncio.sleep(0.05)
            return await measure(args, service.pid, port, redis_server.socket)
        except BaseException:
            print((workdir / "service.log").read_text()[-3000:], file=sys.stderr)
            raise
        finally:
            service.terminate()
            service.wait(10)
            redis_server.stop()
            shutil.rmtree(workdir, ignore_errors=True)


async def measure(
    args: argparse.Namespace, pid: int, port: int, redis_socket: Path
) -> dict[str, float]:
    token = mint_dev_token(
        SECRET,
        subject="bench",
        scopes=["a2a.invoke", "a2a.tasks.read"],
        ttl_s=3600,
        now=time.time(),
    )
    url = f"http://127.0.0.1:{port}/a2a"
    headers = {"Authorization": f"Bearer {token}", "A2A-Version": "1.0", "A2A-Extensions": EXT}
    connector = aiohttp.TCPConnector(limit=0)
    timeout = aiohttp.ClientTimeout(total=None, sock_read=None)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as http:

        async def create() -> tuple[str, str]:
            data = {
                "operation": "session.create",
                "clientSessionId": str(uuid.uuid4()),
                "requested": {
                    "mediaBinding": "livekit-webrtc-v1",
                    "audio": "bidirectional",
                    "userVideoSources": [],
                    "agentVideoSources": [],
                    "interactions": ["text"],
                },
                "requiredCapabilities": ["audio_input", "audio_output"],
                "recording": "off",
                "retention": {"transcript": "off", "summary": "off"},
            }
            message = {
                "messageId": str(uuid.uuid4()),
                "role": "ROLE_USER",
                "parts": [{"data": data, "mediaType": "application/json"}],
            }
            body = {
                "jsonrpc": "2.0",
                "id": 1,
                "method": "SendMessage",
                "params": {"message": message},
            }
            async with http.post(url, json=body, headers=headers) as response:
                task = (await response.json())["result"]["task"]
            return task["id"], task["metadata"][EXT]["sessionId"]

        sessions: list[tuple[str, str]] = []
        for _ in range(0, args.sessions, 20):
            sessions += await asyncio.gather(*(create() for _ in range(20)))
        sessions = sessions[: args.sessions]
        await asyncio.sleep(0.5)
        rss_idle = rss_mib(pid)

        subscribers = [Subscriber() for _ in range(args.subscribers)]
        runs = [
            asyncio.create_task(sub.run(http, url, headers, sessions[i % len(sessions)][0]))
            for i, sub in enumerate(subscribers)
        ]
        opened = time.perf_counter()
        await asyncio.wait_for(asyncio.gather(*(sub.first.wait() for sub in subscribers)), 120)
        open_s = time.perf_counter() - opened
        await asyncio.sleep(1.0)
        rss_open = rss_mib(pid)
        with redis.Redis(unix_socket_path=str(redis_socket)) as client:
            # the service's pooled connections (idle ones stay open) and those held by XREAD
            others = [c for c in client.client_list() if c["cmd"] != "client|list"]
            connections = len(others)
            reading = sum(1 for c in others if c["cmd"] == "xread")

        joined = [False] * len(sessions)
        sent = 0
        cpu_before, started = cpu_s(pid), time.perf_counter()
        interval = 1 / args.rate
        while (elapsed := time.perf_counter() - started) < args.seconds:
            index = sent % len(sessions)
            kind = "participant_left" if joined[index] else "participant_joined"
            joined[index] = not joined[index]
            event = api.WebhookEvent(
                event=kind,
                id=f"EV_{uuid.uuid4()}",
                created_at=int(time.time()),
                room=api.Room(name=f"aim-{sessions[index][1]}-e1"),
            )
            event.participant.CopyFrom(
                api.ParticipantInfo(
                    sid="PA_agent",
                    identity="agent-bench",
                    state=api.ParticipantInfo.ACTIVE,
                    kind=api.ParticipantInfo.Kind.AGENT,
                )
            )
            payload, authorization = sign_webhook(event, LK_KEY, LK_SECRET)
            async with http.post(
                f"http://127.0.0.1:{port}/livekit/webhook",
                data=payload,
                headers=webhook_headers(authorization),
            ) as response:
                assert response.status == 200, await response.text()
            sent += 1
            await asyncio.sleep(max(0.0, started + sent * interval - time.perf_counter()))
        cpu_used = cpu_s(pid) - cpu_before
        await asyncio.sleep(1.0)  # the last deliveries
        for run in runs:
            run.cancel()
        await asyncio.gather(*runs, return_exceptions=True)

    delays = [d for sub in subscribers for d in sub.delays_ms]
    expected = sent * args.subscribers // len(sessions)
    print(f"SSE: {args.subscribers} subscriptions on {len(sessions)} sessions, one service process")
    print(f"  opening all streams        {open_s:8.2f} s")
    print(f"  service RSS before         {rss_idle:8.1f} MiB")
    print(
        f"  service RSS, streams open  {rss_open:8.1f} MiB "
        f"({(rss_open - rss_idle) * 1024 / args.subscribers:.1f} KiB per subscription)"
    )
    print(f"  service Redis connections  {connections:8d} (pooled), {reading} in XREAD")
    print(f"  state changes              {sent:8d} in {elapsed:.1f} s ({sent / elapsed:.0f}/s)")
    print(f"  service CPU while flowing  {100 * cpu_used / elapsed:8.1f} % of one core")
    print(f"  events delivered           {len(delays):8d} of {expected}")
    print(f"  commit → delivery p50      {pct(delays, 0.50):8.1f} ms")
    print(f"  commit → delivery p99      {pct(delays, 0.99):8.1f} ms")
    print(f"  commit → delivery max      {max(delays):8.1f} ms")
    return {
        "subscribers": args.subscribers,
        "sessions": len(sessions),
        "open_s": open_s,
        "kib_per_stream": (rss_open - rss_idle) * 1024 / args.subscribers,
        "state_changes_per_s": sent / elapsed,
        "cpu_pct": 100 * cpu_used / elapsed,
        "delivered": len(delays),
        "expected": expected,
        "p50_ms": pct(delays, 0.50),
        "p99_ms": pct(delays, 0.99),
        "max_ms": max(delays),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument(
        "--subscribers", type=int, default=1000, help="SubscribeToTask streams to open (1000)"
    )
    parser.add_argument(
        "--sessions", type=int, default=100, help="sessions the streams follow (100)"
    )
    parser.add_argument("--rate", type=float, default=100.0, help="state changes per second (100)")
    parser.add_argument(
        "--seconds", type=float, default=10.0, help="how long state changes are sent (10)"
    )
    parser.add_argument("--json", metavar="FILE", help="also write the figures to FILE")
    args = parser.parse_args()
    figures = asyncio.run(main_async(args))
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
