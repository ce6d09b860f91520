"""The service side by side with the shared yardsticks, in one run, by one method.

Starts, all on 127.0.0.1: a private redis-server, the LiveKit stand-in
(realtime/livekit_dev/standin.py, in this process) and the service as one process (`python -m
realtime.cli serve --no-worker`); prepares sessions that are ready, each with one endpoint
registered and joined; then loads, with wrk, the service's JoinSession (applied: a re-join by
the active endpoint with a fresh commandId), JoinSession replayed (a commandId already applied),
GetSession, GetTask and SendMessage, and beside them the yardsticks of ../shared/bench
(README.md there): the ceiling's session.apply and the a2a-sdk peer's GetTask and SendMessage.
Method: each server one process pinned to CPU 0; Redis, the stand-in, wrk and this driver on CPU
1; a warm-up per target, then rounds in which every target runs once in turn; medians, the
spread of the runs, the server's CPU per request from /proc, and the service's Redis round trips
per request (read events at Redis's socket).

    uv run python bench/compare.py                       # ≈ 3 minutes
    uv run python bench/compare.py --warmup 1 --runs 1 --seconds 1      # a smoke run
    uv run python bench/compare.py --anchors ''          # the service's figures only
    uv run python bench/compare.py --events              # and SendMessage with session events on

Every process it starts is stopped by its PID at exit, also on Ctrl-C or SIGTERM.
"""

from __future__ import annotations

import argparse
import asyncio
import atexit
import contextlib
import ctypes
import http.client
import importlib
import json
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis

sys.dont_write_bytecode = True  # nothing beside anchors.py (read-only) nor in bench/
REPO = Path(__file__).resolve().parent.parent
HERE = REPO / "bench"
sys.path[:0] = [str(REPO), str(HERE)]

from realtime.auth import mint_dev_token  # noqa: E402 - after the path is set
from realtime.livekit_dev.standin import running_standin  # noqa: E402

HOST = "127.0.0.1"
SECRET = "bench-secret-0123456789-abcdefghijklmnopqrstuvwxyz"
LK_KEY = "bench-key"
LK_SECRET = "bench-livekit-secret-0123456789-abcdefghijklmnop"
EXT = "urn:aim:a2a:realtime:v1"
HEADERS = {"Content-Type": "application/json", "A2A-Version": "1.0", "A2A-Extensions": EXT}
SCOPES = ["a2a.invoke", "a2a.tasks.read"]
IDLE_S = 3.0  # the idle interval over which the background rate of Redis reads is measured
# The service's targets always run with bench/load.lua, with or without the yardsticks: its
# join, send, get and session bodies are the shared load.lua's, byte for byte (checked below when
# that file is at hand), and it adds the `replay` mode. So the service's figures come from one
# script either way, and the yardsticks' from their own.
LOAD_LUA = HERE / "load.lua"

A: Any = None  # anchors.py when the yardsticks are at hand, else bench/wrkrun.py (same names)


class BenchError(RuntimeError):
    """Something could not be started, prepared or measured."""


def say(msg: str = "") -> None:
    print(msg, flush=True)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind((HOST, 0))
        return int(sock.getsockname()[1])


# -- processes this file starts: each in its own session, stopped by its PID ----------------------


def _die_with_parent() -> None:
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


@dataclass
class Proc:
    label: str
    popen: subprocess.Popen[bytes]
    log: Path
    stop_signal: int

    @property
    def pid(self) -> int:
        return self.popen.pid

    def tail(self, n: int = 2000) -> str:
        return self.log.read_text(errors="replace")[-n:] if self.log.exists() else ""

    def stop(self) -> None:
        """stop_signal to its PID, then SIGTERM, then SIGKILL to its own process group."""
        p = self.popen
        if p.poll() is None:
            for sig, wait_s in ((self.stop_signal, 15), (signal.SIGTERM, 5)):
                with contextlib.suppress(ProcessLookupError):
                    p.send_signal(sig)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    p.wait(timeout=wait_s)
                    break
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(p.pid, signal.SIGKILL)  # what is left of its group (its workers)
        with contextlib.suppress(subprocess.TimeoutExpired):
            p.wait(timeout=5)


_started: list[Proc] = []


def stop_started() -> None:
    while _started:
        _started.pop().stop()


atexit.register(stop_started)


def spawn(label: str, cmd: list[str], env: dict[str, str], cwd: Path, stop_signal: int) -> Proc:
    log = cwd / f"{label}.log"
    with open(log, "wb") as out:
        popen = subprocess.Popen(
            cmd,
            cwd=cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=_die_with_parent,
        )
    proc = Proc(label, popen, log, stop_signal)
    _started.append(proc)
    return proc


def wait_until(proc: Proc, ready: Any, timeout: float) -> None:
    """Until ready() is true; BenchError with the log's tail if the process exits or time is up."""
    deadline = time.monotonic() + timeout
    last = ""
    while True:
        if proc.popen.poll() is not None:
            raise BenchError(f"{proc.label} exited with {proc.popen.returncode}:\n{proc.tail()}")
        try:
            if ready():
                return
        except (OSError, http.client.HTTPException, redis.RedisError) as exc:
            last = f"{type(exc).__name__}: {exc}"
        if time.monotonic() > deadline:
            raise BenchError(
                f"{proc.label} not ready within {timeout:.0f} s ({last}):\n{proc.tail()}"
            )
        time.sleep(0.1)


def start_redis(workdir: Path) -> tuple[Proc, int]:
    exe = shutil.which("redis-server")
    if exe is None:
        raise BenchError("redis-server not found (apt-get install redis-server)")
    port = free_port()
    cwd = workdir / "redis"
    cwd.mkdir()
    cmd = [exe, "--port", str(port), "--bind", HOST, "--save", "", "--appendonly", "no"]
    cmd += ["--dir", str(cwd), "--daemonize", "no", "--protected-mode", "yes", "--logfile", ""]
    proc = spawn("redis", cmd, dict(os.environ), cwd, signal.SIGTERM)
    client = redis.Redis(host=HOST, port=port, socket_timeout=1)
    try:
        wait_until(proc, client.ping, 15)
    finally:
        client.close()
    return proc, port


def service_env(redis_port: int, livekit_url: str, extra: list[str]) -> dict[str, str]:
    """This environment without OTEL_*, AIM_* and LIVEKIT_*, then the bench's settings, then
    --service-env."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "AIM_", "LIVEKIT_"))}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    env.update(
        {
            "AIM_REDIS_URL": f"redis://{HOST}:{redis_port}",
            "AIM_AUTH_HS256_SECRET": SECRET,
            "AIM_RATE_LIMIT_RPS": "0",
            "AIM_LIVEKIT_URL": livekit_url,
            "AIM_LIVEKIT_API_KEY": LK_KEY,
            "AIM_LIVEKIT_API_SECRET": LK_SECRET,
            "AIM_MAX_SESSIONS_PER_PRINCIPAL": "10000",
        }
    )
    for item in extra:
        name, sep, value = item.partition("=")
        if not sep or not name.startswith("AIM_"):
            raise BenchError(f"--service-env {item!r}: expected AIM_NAME=VALUE")
        env[name] = value
    return env


def start_service(args: argparse.Namespace, workdir: Path, env: dict[str, str]) -> tuple[Proc, int]:
    port = free_port()
    python = REPO / ".venv" / "bin" / "python"
    cmd = [str(python if python.exists() else sys.executable), "-m", "realtime.cli", "serve"]
    cmd += ["--host", HOST, "--port", str(port), *shlex.split(args.serve_args)]
    cwd = workdir / "service"  # no .env is read there; its data dir goes there too
    cwd.mkdir()
    proc = spawn("service", cmd, env, cwd, signal.SIGINT)

    def healthy() -> bool:
        conn = http.client.HTTPConnection(HOST, port, timeout=2)
        try:
            conn.request("GET", "/healthz")
            return conn.getresponse().status == 200
        finally:
            conn.close()

    wait_until(proc, healthy, 60)
    say(f"service: {shlex.join(cmd)}  (pid {proc.pid})")
    return proc, port


class Standin:
    """The LiveKit stand-in on its own event loop in a thread of this process."""

    def __init__(self) -> None:
        self.url = ""
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._thread = threading.Thread(target=self._run, name="livekit-standin", daemon=True)

    def start(self, timeout: float = 15) -> str:
        self._thread.start()
        if not self._ready.wait(timeout) or self._error is not None:
            raise BenchError(f"the LiveKit stand-in did not start: {self._error or 'timeout'}")
        return self.url

    def _run(self) -> None:
        with contextlib.suppress(Exception):  # the error is kept and reported by start()
            asyncio.run(self._main())

    async def _main(self) -> None:
        self._loop, self._stop = asyncio.get_running_loop(), asyncio.Event()
        try:
            async with running_standin(LK_KEY, LK_SECRET) as livekit:
                self.url = livekit.url
                self._ready.set()
                await self._stop.wait()
        except Exception as exc:
            self._error = exc
            raise
        finally:
            self._ready.set()

    def stop(self, timeout: float = 10) -> None:
        if self._loop is not None and self._stop is not None and self._thread.is_alive():
            with contextlib.suppress(RuntimeError):  # its loop is already closed
                self._loop.call_soon_threadsafe(self._stop.set)
            self._thread.join(timeout)


# -- the state the load needs ---------------------------------------------------------------------


class Client:
    """JSON-RPC calls to the service on one keep-alive connection."""

    def __init__(self, port: int) -> None:
        self.conn = http.client.HTTPConnection(HOST, port, timeout=15)

    def call(self, token: str, method: str, params: dict[str, Any]) -> Any:
        body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": method, "params": params})
        self.conn.request("POST", "/a2a", body, {**HEADERS, "Authorization": f"Bearer {token}"})
        answer = self.conn.getresponse()
        raw = answer.read()
        reply = json.loads(raw) if raw else {}
        if answer.status != 200 or "result" not in reply:
            raise BenchError(f"{method} answered {answer.status}: {raw[:400]!r}")
        return reply["result"]


def session_create(message_id: str) -> dict[str, Any]:
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
        "requiredCapabilities": [],
        "recording": "off",
        "retention": {"transcript": "off", "summary": "off"},
    }
    part = {"mediaType": "application/json", "data": data}
    return {
        "message": {"messageId": message_id, "role": "ROLE_USER", "parts": [part]},
        "configuration": {"returnImmediately": True},
    }


CAPABILITIES = {
    "audioInput": True,
    "audioOutput": True,
    "camera": False,
    "screen": False,
    "interactions": ["text"],
}


def prepare(port: int, principals: int, per_principal: int, ttl_s: int) -> dict[str, list[Any]]:
    """Rows per mode: sessions that are ready, each with one endpoint registered and joined (so
    that `join` is a re-join by the active endpoint), one more applied join per session (what
    `replay` repeats), and one stored task per principal (a plain-text SendMessage makes it)."""
    client = Client(port)
    rows: dict[str, list[Any]] = {m: [] for m in ("join", "replay", "session", "get", "send")}
    sessions = []
    for i in range(principals):
        token = mint_dev_token(
            SECRET, subject=f"bench-{i:02d}", scopes=SCOPES, ttl_s=ttl_s, now=time.time()
        )
        text = {"messageId": str(uuid.uuid4()), "role": "ROLE_USER", "parts": [{"text": "bench"}]}
        task = client.call(token, "SendMessage", {"message": text})["task"]
        rows["get"].append([token, task["id"]])
        rows["send"].append([token])
        for _ in range(per_principal):
            created = client.call(token, "SendMessage", session_create(str(uuid.uuid4())))
            sessions.append((token, created["task"]["metadata"][EXT]["sessionId"]))
    deadline = time.monotonic() + 30
    for token, sid in sessions:
        while True:
            session = client.call(token, "aim.realtime.GetSession", {"sessionId": sid})["session"]
            if session["state"] == "ready":
                break
            if time.monotonic() > deadline:
                raise BenchError(f"session {sid} is {session['state']!r}, not ready, after 30 s")
            time.sleep(0.05)
        epoch = session["sessionEpoch"]
        endpoint = client.call(
            token,
            "aim.realtime.RegisterEndpoint",
            {
                "sessionId": sid,
                "sessionEpoch": epoch,
                "commandId": str(uuid.uuid4()),
                "clientEndpointKey": "bench",
                "capabilities": CAPABILITIES,
            },
        )["endpoint"]["endpointId"]
        first, again = str(uuid.uuid4()), str(uuid.uuid4())
        for command in (first, again, again):  # join, re-join, that re-join replayed
            joined = client.call(
                token,
                "aim.realtime.JoinSession",
                {
                    "sessionId": sid,
                    "sessionEpoch": epoch,
                    "endpointId": endpoint,
                    "commandId": command,
                },
            )
            epoch = joined["session"]["sessionEpoch"]
        rows["join"].append([token, sid, endpoint, epoch])
        rows["replay"].append([token, sid, endpoint, epoch, again])
        rows["session"].append([token, sid])
    client.conn.close()
    return rows


def check_load_lua(shared: Path) -> list[str]:
    """What differs between the shared load.lua and bench/load.lua in the parts that must be the
    same: the bodies of join/send/get/session, the id generator, the answer checks and the
    WRKJSON line. Empty when they agree."""
    theirs, mine = shared.read_text(), LOAD_LUA.read_text()

    def bodies(text: str) -> set[str]:
        found = re.findall(r"string\.format\(('\{\"jsonrpc\".*?'),\s*([^\n]*)", text, re.S)
        return {
            f"{fmt} {' '.join(args.split())}" for fmt, args in found if "session.apply" not in fmt
        }

    def chunk(text: str, start: str, end: str | None) -> str:
        at = text.find(start)
        return "" if at < 0 else text[at : text.find(end, at) if end else None]

    problems = [f"body {b[:90]}… is not in bench/load.lua" for b in bodies(theirs) - bodies(mine)]
    for start, end in (("local function uuid4", "\nend\n"), ("local function note", None)):
        if chunk(theirs, start, end) != chunk(mine, start, end):
            problems.append(f"`{start}` … differs")
    return problems


# -- measuring ------------------------------------------------------------------------------------


class RedisMeter:
    """Read events (`total_reads_processed`) and CPU (`used_cpu_*`) of one Redis, per request.
    One INFO per reading, itself one read event; `idle_per_s` is the background rate."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.client = redis.Redis(host=HOST, port=port, socket_timeout=5)
        self.idle_per_s = 0.0

    def read(self) -> tuple[int, float]:
        info = self.client.info("stats", "cpu")
        return int(info["total_reads_processed"]), info["used_cpu_sys"] + info["used_cpu_user"]

    def per_request(
        self, before: tuple[int, float], after: tuple[int, float], seconds: float, requests: int
    ) -> dict[str, float]:
        reads = after[0] - before[0] - 1 - self.idle_per_s * seconds  # 1: the INFO after
        n = max(1, requests)
        return {"redis_rt": reads / n, "redis_cpu_us": 1e6 * (after[1] - before[1]) / n}


def measure_idle(meters: list[RedisMeter], seconds: float) -> None:
    before = [m.read() for m in meters]
    t0 = time.monotonic()
    time.sleep(seconds)
    elapsed = time.monotonic() - t0
    for m, b in zip(meters, before, strict=True):
        m.idle_per_s = max(0.0, (m.read()[0] - b[0] - 1) / elapsed)


@dataclass
class Target:
    key: str  # service.join, ceiling.apply, …
    label: str
    port: int
    pid: int  # the server's; its whole tree is pinned and counted
    mode: str
    datafile: Path
    lua: Path
    meter: RedisMeter | None = None
    yardstick: str | None = None  # the key of the target it is compared with
    runs: list[dict[str, Any]] = field(default_factory=list)
    warm: dict[str, Any] | None = None
    skipped: str = ""

    def med(self, k: str) -> float | None:
        return A.median(r.get(k) for r in self.runs) if self.runs else None

    @property
    def requests(self) -> int:
        return sum(r["requests"] for r in self.runs)

    @property
    def errors(self) -> int:
        return sum(r["errors"] for r in self.runs)

    @property
    def valid(self) -> bool:
        return (
            bool(self.runs)
            and not self.skipped
            and self.requests > 0
            and self.errors <= A.MAX_ERROR_RATE * self.requests
        )

    def why_invalid(self) -> str:
        if self.skipped:
            return self.skipped
        if not self.requests:
            return "no request completed"
        sample = next((r["sample"] for r in self.runs if r.get("sample")), "")
        return f"{self.errors} errors in {self.requests} answers; e.g. {sample[:300]}"

    def spread(self, k: str = "rps") -> tuple[float, float] | None:
        values = [r[k] for r in self.runs if r.get(k) is not None]
        return (min(values), max(values)) if values else None


def run_one(t: Target, seconds: int, pinned: bool, conns: int) -> dict[str, Any]:
    if pinned:
        A.pin_tree(t.pid, A.SERVER_CPU)  # processes or threads the server made since the last run
    before = t.meter.read() if t.meter else None
    start = time.monotonic()
    cpu = A.LOAD_CPU if pinned else None
    w: dict[str, Any] = A.wrk(
        t.port, t.mode, t.datafile, seconds, cpu, server_pid=t.pid, conns=conns, lua=t.lua
    )
    if t.meter is not None and before is not None:
        w.update(
            t.meter.per_request(before, t.meter.read(), time.monotonic() - start, w["requests"])
        )
    return w


def measure(targets: list[Target], args: argparse.Namespace, pinned: bool) -> None:
    """The shared method: a warm-up of each target (not counted; a target whose warm-up got no
    answer or more than half errors is not measured), then `runs` rounds, each running every
    target once in turn, so that drift hits them alike."""
    say(f"warm-up: {args.warmup} s per target")
    for t in targets:
        try:
            t.warm = w = run_one(t, args.warmup, pinned, args.conns)
        except (A.BenchError, subprocess.TimeoutExpired) as exc:
            t.skipped = f"warm-up: {exc}"
        else:
            if w["requests"] == 0 or w["errors"] > 0.5 * w["requests"]:
                t.skipped = f"warm-up: {w['errors']} errors in {w['requests']}; {w['sample'][:300]}"
        if t.skipped:
            say(f"  {t.label}: not measured: {t.skipped}")
    for i in range(args.runs):
        for t in targets:
            if t.skipped:
                continue
            try:
                w = run_one(t, args.seconds, pinned, args.conns)
            except (A.BenchError, subprocess.TimeoutExpired) as exc:
                t.skipped = f"run {i + 1}: {exc}"
                say(f"  {t.label}: {t.skipped}")
                continue
            t.runs.append(w)
            rt = f"  Redis {w['redis_rt']:.2f} rt/req" if "redis_rt" in w else ""
            say(
                f"  {t.label:30s} run {i + 1}/{args.runs} {w['rps']:8,.0f} req/s"
                f"  p50 {w['p50_us'] / 1e3:6.1f} ms  p99 {w['p99_us'] / 1e3:6.1f} ms"
                f"  CPU {w.get('cpu_us', 0):6.0f} µs/req{rt}"
                + (f"  errors {w['errors']}" if w["errors"] else "")
                + (f"  steal {w['steal_pct']:.1f}%" if w["steal_pct"] >= 0.5 else "")
            )


def _num(value: float | None, fmt: str, width: int) -> str:
    return f"{value:{width}{fmt}}" if value is not None else f"{'—':>{width}s}"


def _ratio(a: Target, b: Target | None, k: str) -> str:
    if b is None:
        return ""
    r = A.ratio(a, b, k)
    return f"{'n/a' if r is None else f'{r:.2f}x'} ({A.pair_ratios(a, b, k) or '—'})"


def table(targets: list[Target]) -> None:
    by_key = {t.key: t for t in targets}
    pairs = any(t.yardstick for t in targets)
    header = (
        f"  {'target':30s} {'req/s':>7s} {'p50 ms':>6s} {'p99 ms':>6s} {'CPU µs/req':>10s}"
        f" {'Redis rt/req':>12s} {'errors':>6s}  {'runs req/s (spread)':28s} {'vs':22s}"
        f" {'req/s ratio (runs)':24s} CPU ratio (runs)"
    )
    say(header if pairs else header[: header.index(" vs ")].rstrip())
    for t in targets:
        if not t.runs:
            say(f"  {t.label:30s} {'—':>7s}  {t.why_invalid()[:150]}")
            continue
        lo, hi = t.spread() or (0.0, 0.0)
        rps = t.med("rps") or 1.0
        runs = " ".join(f"{r['rps']:,.0f}" for r in t.runs)
        runs += f" ({100 * (hi - lo) / rps:.1f} %)" if len(t.runs) > 1 else ""
        other = by_key.get(t.yardstick or "")
        line = (
            f"  {t.label:30s} {rps:7,.0f} {(t.med('p50_us') or 0) / 1e3:6.1f}"
            f" {(t.med('p99_us') or 0) / 1e3:6.1f} {_num(t.med('cpu_us'), ',.0f', 10)}"
            f" {_num(t.med('redis_rt'), '.2f', 12)} {t.errors:6d}  {runs:28s}"
            f" {other.label if other else '':22s} {_ratio(t, other, 'rps'):24s}"
            f" {_ratio(t, other, 'cpu_us')}"
            + ("" if t.valid else f"  INVALID: {t.why_invalid()[:120]}")
        )
        say(line.rstrip())
    say(
        "  spread: (max - min) ÷ median of the runs"
        + (
            "; ratios: the service's median ÷ the yardstick's, run by run in brackets"
            " (each pair ran back to back)"
            if pairs
            else ""
        )
    )


def summary(t: Target) -> dict[str, Any]:
    keys = ("rps", "p50_us", "p90_us", "p99_us", "cpu_us", "redis_rt", "redis_cpu_us")
    out: dict[str, Any] = {"label": t.label, "mode": t.mode, "valid": t.valid}
    out["why_invalid"] = "" if t.valid else t.why_invalid()
    out |= {k: t.med(k) for k in keys}
    out["spread"] = {k: t.spread(k) for k in ("rps", "cpu_us", "p99_us")}
    out["errors"], out["requests"], out["yardstick"] = t.errors, t.requests, t.yardstick
    out["warmup"] = {k: (t.warm or {}).get(k) for k in ("requests", "errors", "rps")}
    run_keys = (*keys, "requests", "errors", "steal_pct", "err_codes")
    out["runs"] = [{k: r.get(k) for k in run_keys} for r in t.runs]
    return out


def machine() -> dict[str, Any]:
    model = ""
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    return {"cpus": os.cpu_count(), "model": model, "load_1m": round(os.getloadavg()[0], 2)}


# -- the whole run --------------------------------------------------------------------------------


def load_anchors(directory: str) -> tuple[Any, Path | None]:
    """anchors.py and the python of its venv (`setup` builds the venv when needed), or
    (None, None) when the directory is empty or holds no anchors.py."""
    if not directory:
        return None, None
    where = Path(directory).resolve()
    if not (where / "anchors.py").is_file():
        say(f"no yardsticks at {where}: the service's figures only")
        return None, None
    setup = subprocess.run(
        ["bash", str(where / "setup")], capture_output=True, text=True, timeout=900, check=False
    )
    if setup.returncode != 0 or not setup.stdout.strip():
        raise BenchError(f"{where / 'setup'} failed ({setup.returncode}): {setup.stderr[-800:]}")
    python = Path(setup.stdout.strip().splitlines()[-1])
    sys.path.insert(0, str(where))
    return importlib.import_module("anchors"), python


def run(args: argparse.Namespace) -> int:
    global A
    t_start = time.monotonic()
    anchors, anchors_python = load_anchors(args.anchors)
    A = anchors or importlib.import_module("wrkrun")
    if anchors is not None:
        drift = check_load_lua(Path(anchors.LUA))
        for problem in drift:
            say(f"WARNING: bench/load.lua and {anchors.LUA} differ: {problem}")
    pinned = A.can_pin() and not args.no_pin
    box = machine()
    say(f"machine: {box['cpus']} CPUs, {box['model']}, load average {box['load_1m']} (1 min)")
    workdir = Path(tempfile.mkdtemp(prefix="aim-bench-compare-"))
    standin = Standin()
    results: dict[str, Any] = {
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": box,
        "pinned": pinned,
        "yardsticks": anchors is not None,
        "method": {
            "warmup_s": args.warmup,
            "runs": args.runs,
            "seconds": args.seconds,
            "conns": args.conns,
            "wrk_threads": A.WRK_THREADS,
            "principals": args.principals,
            "sessions_per_principal": args.sessions_per_principal,
            "serve_args": args.serve_args,
            "service_env": args.service_env,
        },
    }
    try:
        if pinned:
            A.pin_self(A.LOAD_CPU)  # this driver, the stand-in's thread and what it starts
            say(
                f"pinned: servers on CPU {A.SERVER_CPU};"
                f" Redis, stand-in, wrk and this driver on CPU {A.LOAD_CPU}"
            )
        else:
            say("NOT pinned (fewer than 2 CPUs, no taskset, or --no-pin): the figures share cores")
        livekit_url = standin.start()
        redis_proc, redis_port = start_redis(workdir)
        env = service_env(redis_port, livekit_url, args.service_env)
        service, port = start_service(args, workdir, env)
        if pinned:
            A.pin_tree(redis_proc.pid, A.LOAD_CPU)
            A.pin_tree(service.pid, A.SERVER_CPU)
        t0 = time.monotonic()
        ttl = 3600 + 2 * len(MODES) * (args.warmup + args.runs * (args.seconds + 5))
        rows = prepare(port, args.principals, args.sessions_per_principal, ttl)
        say(
            f"prepared in {time.monotonic() - t0:.1f} s: {len(rows['join'])} sessions of"
            f" {args.principals} principals (ready, endpoint registered and joined),"
            f" {len(rows['get'])} tasks"
        )
        meter = RedisMeter(redis_port)
        meters = [meter]
        targets: list[Target] = []
        yard: dict[str, Target] = {}
        if anchors is not None:
            yard, meters = start_yardsticks(anchors, anchors_python, workdir, pinned, meters)
        for mode, label, other in MODES:
            datafile = A.write_datafile(workdir / f"{mode}.tsv", "/a2a", HEADERS, rows[mode])
            targets.append(
                Target(f"service.{mode}", label, port, service.pid, mode, datafile, LOAD_LUA, meter)
            )
            if other in yard:
                targets[-1].yardstick = other
                targets.append(yard[other])
        if args.events:
            targets += start_with_events(args, workdir, env, rows, pinned, meter)
        measure_idle(meters, IDLE_S)
        for m in meters:
            say(f"Redis :{m.port} idle: {m.idle_per_s:.1f} read events/s (subtracted)")
        how = f"c={args.conns}, {args.runs} × {args.seconds} s interleaved"
        say(f"{len(targets)} targets, {how}")
        measure(targets, args, pinned)
        say("")
        say(
            f"results (medians of {args.runs} runs of {args.seconds} s, c={args.conns};"
            f" CPU = server process tree; Redis rt = read events at Redis per request;"
            f" {'pinned' if pinned else 'NOT pinned'})"
        )
        table(targets)
        secs = time.monotonic() - t_start
        say(f"total {secs:.1f} s")
        results["targets"] = {t.key: summary(t) for t in targets}
        results["idle_reads_per_s"] = {str(m.port): m.idle_per_s for m in meters}
        results["load_1m_end"] = round(os.getloadavg()[0], 2)
        results["seconds"] = round(secs, 1)
        if args.json:
            Path(args.json).write_text(json.dumps(results, indent=1))
            say(f"written: {args.json}")
        bad = [t for t in targets if not t.valid]
        for t in bad:
            say(f"INVALID {t.label}: {t.why_invalid()[:300]}")
        return 1 if bad else 0
    finally:
        stop_started()
        standin.stop()
        if anchors is not None:
            anchors.stop_all()
        shutil.rmtree(workdir, ignore_errors=True)


# the service's targets, in the order of a round, and the yardstick each runs beside
MODES = (
    ("join", "service JoinSession applied", "ceiling.apply"),
    ("replay", "service JoinSession replayed", None),
    ("session", "service GetSession", None),
    ("get", "service GetTask", "peer.get"),
    ("send", "service SendMessage", "peer.send"),
)


EVENTS_SECRET = "whsec_YmVuY2gtc2Vzc2lvbi1ldmVudHMtc2VjcmV0LTMyYnk="


def start_with_events(
    args: argparse.Namespace,
    workdir: Path,
    env: dict[str, str],
    rows: dict[str, list[Any]],
    pinned: bool,
    meter: RedisMeter,
) -> list[Target]:
    """A second service, the same but with session events on (profile §21), for what an
    event costs the commit path: its SendMessage writes `session.created` and `session.ready`
    in the commits it makes anyway. It runs without a worker (as the first does), so the events
    are stored, not sent: the figure is the commit path's alone."""
    events_env = {
        **env,
        "AIM_EVENTS_URL": f"http://{HOST}:{free_port()}/events",
        "AIM_EVENTS_SECRET": EVENTS_SECRET,
    }
    (workdir / "events").mkdir()
    proc, port = start_service(args, workdir / "events", events_env)
    if pinned:
        A.pin_tree(proc.pid, A.SERVER_CPU)
    datafile = A.write_datafile(workdir / "events-send.tsv", "/a2a", HEADERS, rows["send"])
    label = "service+events SendMessage"
    return [
        Target(
            "events.send", label, port, proc.pid, "send", datafile, LOAD_LUA, meter, "service.send"
        )
    ]


def start_yardsticks(
    anchors: Any, python: Path | None, workdir: Path, pinned: bool, meters: list[RedisMeter]
) -> tuple[dict[str, Target], list[RedisMeter]]:
    """The ceiling (on a Redis of its own) and the peer, started and pinned by anchors.py, with
    their own load.lua and data files."""
    venv_bin = python.parent if python else None
    server_cpu = anchors.SERVER_CPU if pinned else None
    ceiling_redis = anchors.start_redis(cpu=anchors.LOAD_CPU if pinned else None, logdir=workdir)
    ceiling = anchors.start_ceiling(
        ceiling_redis.port, cpu=server_cpu, venv_bin=venv_bin, logdir=workdir
    )
    anchors.ceiling_apply_once(ceiling.port)
    peer = anchors.start_peer(cpu=server_cpu, venv_bin=venv_bin, logdir=workdir)
    task = anchors.seed_peer_task(peer.port)
    say(f"yardsticks: ceiling pid {ceiling.pid} :{ceiling.port}, peer pid {peer.pid} :{peer.port}")
    ceiling_meter = RedisMeter(ceiling_redis.port)
    lua = Path(anchors.LUA)
    yard = {
        "ceiling.apply": Target(
            "ceiling.apply",
            "ceiling session.apply",
            ceiling.port,
            ceiling.pid,
            "apply",
            anchors.ceiling_datafile(workdir / "apply.tsv"),
            lua,
            ceiling_meter,
        ),
        "peer.get": Target(
            "peer.get",
            "peer GetTask",
            peer.port,
            peer.pid,
            "get",
            anchors.peer_get_datafile(workdir / "peer-get.tsv", task),
            lua,
        ),
        "peer.send": Target(
            "peer.send",
            "peer SendMessage",
            peer.port,
            peer.pid,
            "send",
            anchors.peer_send_datafile(workdir / "peer-send.tsv"),
            lua,
        ),
    }
    return yard, [*meters, ceiling_meter]


def _on_signal(signum: int, _frame: Any) -> None:
    print(f"compare.py: signal {signum}: stopping what it started", file=sys.stderr, flush=True)
    raise SystemExit(128 + signum)  # so that `finally` and atexit stop what was started


def main() -> int:
    default_anchors = REPO.parent / "shared" / "bench"
    ap = argparse.ArgumentParser(
        prog="bench/compare.py",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument(
        "--anchors",
        default=str(default_anchors),
        metavar="DIR",
        help="the shared yardsticks (anchors.py, load.lua, setup); '' or a folder without"
        " anchors.py: the service's figures only (default: %(default)s)",
    )
    ap.add_argument(
        "--warmup", type=int, default=2, help="warm-up seconds per target (%(default)s)"
    )
    ap.add_argument(
        "--runs", type=int, default=3, help="measured rounds, each runs every target (%(default)s)"
    )
    ap.add_argument("--seconds", type=int, default=5, help="seconds per run (%(default)s)")
    ap.add_argument(
        "--conns", type=int, default=16, help="wrk connections, one wrk thread (%(default)s)"
    )
    ap.add_argument(
        "--principals", type=int, default=12, help="principals the rows spread over (%(default)s)"
    )
    ap.add_argument(
        "--sessions-per-principal",
        type=int,
        default=4,
        help="ready sessions per principal (%(default)s)",
    )
    ap.add_argument("--no-pin", action="store_true", help="do not pin (figures then share cores)")
    ap.add_argument("--json", metavar="FILE", help="also write every figure and run as JSON")
    ap.add_argument(
        "--events",
        action="store_true",
        help="also run SendMessage on a second service with session events on, beside the"
        " first's (what an event costs the commit path)",
    )
    ap.add_argument(
        "--service-env",
        action="append",
        default=[],
        metavar="AIM_NAME=VALUE",
        help="one more setting for the service (after the bench's own); repeatable",
    )
    ap.add_argument(
        "--serve-args",
        default="--no-worker",
        metavar="ARGS",
        help="what follows `python -m realtime.cli serve --host 127.0.0.1 --port P`"
        " (shell words; default: %(default)s); give it with '=',"
        " e.g. --serve-args='--no-worker --workers 2'",
    )
    args = ap.parse_args()
    if min(args.warmup, args.runs, args.seconds, args.conns, args.principals) < 1:
        ap.error("--warmup, --runs, --seconds, --conns and --principals must be at least 1")
    if args.sessions_per_principal < 1:
        ap.error("--sessions-per-principal must be at least 1")
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, _on_signal)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        return run(args)
    except RuntimeError as exc:  # BenchError here, in anchors.py or in wrkrun.py
        print(f"compare.py: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("compare.py: interrupted: stopping what it started", file=sys.stderr, flush=True)
        return 130


if __name__ == "__main__":
    sys.exit(main())
