"""The part of the shared yardsticks' driver (`anchors.py`) that `bench/compare.py` needs when
the yardsticks are not at hand: pinning, one wrk run with the server's CPU from /proc, a median,
the ratio of two targets' figures and the data-file writer. Same names, arguments, method and
data-file format as there, so that compare.py has one code path either way. Standard library
only.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

SERVER_CPU, LOAD_CPU = 0, 1
CONNS, WRK_THREADS = 16, 1
MAX_ERROR_RATE = 0.01
HOST = "127.0.0.1"
CLK_TCK = os.sysconf("SC_CLK_TCK")
LUA = Path(__file__).resolve().parent / "load.lua"

_run_ids = iter(range(int(time.time()) % 100_000 * 1000, 1 << 62))


class BenchError(RuntimeError):
    """Something could not be started or measured."""


def median(xs: Iterable[float | None]) -> float | None:
    values = [x for x in xs if x is not None]
    return statistics.median(values) if values else None


def _stat_fields(pid: int) -> list[str]:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()


def tree_pids(root: int) -> list[int]:
    """root and all its descendants."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                children.setdefault(int(_stat_fields(int(entry.name))[1]), []).append(
                    int(entry.name)
                )
            except (OSError, IndexError, ValueError):
                continue
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo.extend(children.get(pid, []))
    return out


def tree_cpu_s(root: int) -> float:
    """utime + stime of root and its descendants, in seconds."""
    total = 0
    for pid in tree_pids(root):
        try:
            fields = _stat_fields(pid)
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])
    return total / CLK_TCK


def cpu_steal() -> tuple[int, int]:
    """(steal ticks, total ticks) of all CPUs, from /proc/stat."""
    values = [int(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    return values[7], sum(values[:8])


def can_pin() -> bool:
    return shutil.which("taskset") is not None and {SERVER_CPU, LOAD_CPU} <= os.sched_getaffinity(0)


def pin_tree(pid: int, cpu: int) -> list[int]:
    """`taskset -a -cp CPU` for pid and every descendant (all threads of each)."""
    pids = tree_pids(pid)
    for p in pids:
        subprocess.run(
            ["taskset", "-a", "-cp", str(cpu), str(p)], capture_output=True, check=False, timeout=10
        )
    return pids


def pin_self(cpu: int) -> None:
    os.sched_setaffinity(0, {cpu})


def write_datafile(
    path: Path, url_path: str, headers: dict[str, str], rows: list[list[Any]]
) -> Path:
    """The data file load.lua reads: the path, header lines, rows (tab-separated)."""
    lines = [f"path\t{url_path}"]
    lines += [f"header\t{k}\t{v}" for k, v in headers.items()]
    lines += ["row\t" + "\t".join(str(x) for x in row) for row in rows]
    Path(path).write_text("\n".join(lines) + "\n")
    return Path(path)


def wrk(
    port: int,
    mode: str,
    datafile: Path,
    seconds: int,
    cpu: int | None = LOAD_CPU,
    *,
    server_pid: int | None = None,
    conns: int = CONNS,
    threads: int = WRK_THREADS,
    lua: Path = LUA,
) -> dict[str, Any]:
    """One wrk run: the WRKJSON dict plus `sample`, `errors`, `steal_pct` and `cpu_us` (the server
    tree's CPU µs per request, when given its PID), as anchors.wrk returns them."""
    cmd = ["wrk", f"-t{threads}", f"-c{conns}", f"-d{seconds}s", "--timeout", "5s", "-s", str(lua)]
    cmd += [f"http://{HOST}:{port}", "--", mode, str(next(_run_ids)), str(datafile)]
    if cpu is not None:
        cmd = ["taskset", "-c", str(cpu), *cmd]
    c0 = tree_cpu_s(server_pid) if server_pid else None
    s0 = cpu_steal()
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=seconds + 30, check=False)
    c1 = tree_cpu_s(server_pid) if server_pid else None
    s1 = cpu_steal()
    lines = done.stdout.splitlines()
    line = next((x for x in lines if x.startswith("WRKJSON ")), None)
    if line is None:
        tail = (done.stderr or done.stdout)[-600:]
        raise BenchError(f"wrk printed no WRKJSON line (exit {done.returncode}): {tail}")
    out: dict[str, Any] = json.loads(line[len("WRKJSON ") :])
    out["sample"] = next((x[10:] for x in lines if x.startswith("WRKSAMPLE ")), "")
    out["errors"] = sum(
        out[k]
        for k in (
            "err_connect",
            "err_read",
            "err_write",
            "err_timeout",
            "rpc_errors",
            "bad_answers",
        )
    )
    if c0 is not None and c1 is not None:
        out["cpu_us"] = 1e6 * (c1 - c0) / max(1, out["requests"])
    out["steal_pct"] = 100 * (s1[0] - s0[0]) / max(1, s1[1] - s0[1])
    return out


def ratio(a: Any, b: Any, k: str = "rps") -> float | None:
    """The median of `a`'s figure `k` over `b`'s, when both targets measured validly."""
    if not (a.valid and b.valid):
        return None
    top, bottom = a.med(k), b.med(k)
    return top / bottom if top and bottom else None


def pair_ratios(a: Any, b: Any, k: str = "rps") -> str:
    """The ratio of each round's figures (a target and the one it is compared with ran back to
    back in each round)."""
    return " ".join(f"{x[k] / y[k]:.2f}" for x, y in zip(a.runs, b.runs, strict=False) if y.get(k))
