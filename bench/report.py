"""Every figure of the cost goals side by side, in one command: the request rows beside their
yardsticks (`compare.py --events`, `--repeat` times, with what a session event costs the commit
path), the Redis memory per session at each stage (`memory.py`) and the server memory per open
SSE stream (`sse.py`), then one table, each row with its goal.

    uv run python bench/report.py                 # ≈ 4 minutes
    uv run python bench/report.py --repeat 3      # three runs of compare.py, ≈ 9 minutes

Each part runs as its own process, one after the other, so none loads the machine while another
measures. `--json FILE` writes every figure.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent

# (target, yardstick) pairs of compare.py and the goals of their ratios
PAIRS = (
    ("service.join", "ceiling.apply", "JoinSession applied vs ceiling", 1.0),
    ("service.get", "peer.get", "GetTask vs peer", 1.2),
    ("service.send", "peer.send", "SendMessage vs peer", 6.0),
)


def run(script: str, *args: str) -> None:
    """One bench script, its output passed through."""
    subprocess.run([sys.executable, str(HERE / script), *args], check=True)


def ratios(runs: list[dict[str, Any]], target: str, yardstick: str, key: str) -> list[float]:
    found = []
    for figures in runs:
        mine, theirs = figures["targets"].get(target), figures["targets"].get(yardstick)
        if mine and theirs and mine.get(key) and theirs.get(key):
            found.append(mine[key] / theirs[key])
    return found


def cell(values: list[float], fmt: str = "{:.2f}") -> str:
    if not values:
        return "—"
    median = statistics.median(values)
    each = " ".join(fmt.format(v) for v in values)
    return f"{fmt.format(median)} ({each})" if len(values) > 1 else fmt.format(median)


def table(compare: list[dict[str, Any]], memory: dict[str, Any], sse: dict[str, Any]) -> None:
    rows: list[tuple[str, str, str, str]] = []
    for target, yardstick, label, goal in PAIRS:
        found = ratios(compare, target, yardstick, "rps")
        met = "yes" if found and statistics.median(found) >= goal else "no"
        rows.append((f"{label}, req/s ratio", cell(found) + "×", f"≥ {goal:g}×", met))
    joins = [r["targets"]["service.join"]["p99_us"] / 1000 for r in compare]
    rows.append(("JoinSession applied p99", cell(joins, "{:.1f}") + " ms", "≤ 15 ms",
                 "yes" if statistics.median(joins) <= 15 else "no"))  # fmt: skip
    p99 = ratios(compare, "service.send", "peer.send", "p99_us")
    rows.append(("SendMessage p99 ratio", cell(p99) + "×", "≤ 0.15×",
                 "yes" if p99 and statistics.median(p99) <= 0.15 else "no"))  # fmt: skip
    for target, label in (("service.join", "applied"), ("service.replay", "replayed")):
        trips = [r["targets"][target]["redis_rt"] for r in compare]
        rows.append((f"Redis round trips, {label} command", cell(trips), "1",
                     "yes" if statistics.median(trips) < 1.1 else "no"))  # fmt: skip
    events = ratios(compare, "events.send", "service.send", "rps")
    event_trips = [
        r["targets"]["events.send"]["redis_rt"] - r["targets"]["service.send"]["redis_rt"]
        for r in compare
    ]
    rows.append(("SendMessage with session events on ÷ off", cell(events) + "×", "—", "—"))
    rows.append(("Redis round trips an event adds", cell(event_trips), "0",
                 "yes" if abs(statistics.median(event_trips)) < 0.1 else "no"))  # fmt: skip
    active = memory["active"]["bytes_per_session"]
    kept = memory["expired"]["bytes_per_session"]
    rows.append(("Redis memory per active session", f"{active:,.0f} B", "≤ 10 KiB",
                 "yes" if active <= 10 * 1024 else "no"))  # fmt: skip
    rows.append(("Redis memory per ended session, compacted", f"{kept:,.0f} B "
                 f"({memory['expired']['used_memory_per_session']:,.0f} by used_memory)",
                 "≤ 2 KiB", "yes" if kept <= 2 * 1024 else "no"))  # fmt: skip
    rows.append(("server memory per open SSE stream", f"{sse['kib_per_stream']:.1f} KiB, "
                 f"delivery p99 {sse['p99_ms']:.1f} ms, {sse['delivered']} of "
                 f"{sse['expected']} delivered", "≤ 24 KiB, p99 unchanged",
                 "yes" if sse["kib_per_stream"] <= 24 else "no"))  # fmt: skip
    width = max(len(row[0]) for row in rows)
    print("\nthe goals (compare.py medians; each run in brackets)")
    for what, figure, goal, met in rows:
        print(f"  {what:<{width}}  {figure:<44} goal {goal:<24} {met}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--repeat", type=int, default=1, help="runs of compare.py, each of 3 × 5 s (1)"
    )
    parser.add_argument("--json", metavar="FILE", help="also write every figure to FILE")
    args = parser.parse_args()
    if args.repeat < 1:
        parser.error("--repeat must be at least 1")
    with tempfile.TemporaryDirectory(prefix="aim-bench-report-") as scratch:
        out = Path(scratch)
        compare = []
        for index in range(args.repeat):
            run("compare.py", "--events", "--json", str(out / f"compare-{index}.json"))
            compare.append(json.loads((out / f"compare-{index}.json").read_text("utf-8")))
        run("memory.py", "--sessions", "1000", "--compact-after", "30", "--window", "60",
            "--json", str(out / "memory.json"))  # fmt: skip
        run("sse.py", "--json", str(out / "sse.json"))
        memory = json.loads((out / "memory.json").read_text("utf-8"))
        sse = json.loads((out / "sse.json").read_text("utf-8"))
    table(compare, memory, sse)
    if args.json:
        figures = {"compare": compare, "memory": memory, "sse": sse}
        Path(args.json).write_text(json.dumps(figures, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
