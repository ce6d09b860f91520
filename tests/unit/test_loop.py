"""The one background loop: its ticks and waits, its backoff on failure, its stop; with an
injected sleep, so nothing here waits for real."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from typing import Any

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from realtime.errors import Unavailable
from realtime.loop import AT_ONCE, LOOP_BACKOFF, Backoff, Loop, Tick
from realtime.metrics import Metrics

NAME = "sweeps"


class Sleeps:
    """The injected sleep: records each wait and stops the loop after `limit` of them."""

    def __init__(self, limit: int) -> None:
        self.waits: list[float] = []
        self.limit = limit

    async def __call__(self, stop: asyncio.Event, seconds: float) -> None:
        self.waits.append(seconds)
        if len(self.waits) >= self.limit:
            stop.set()


class Ticks:
    """The injected counter."""

    def __init__(self) -> None:
        self.added: list[tuple[int, dict[str, str]]] = []

    def add(self, amount: int, attributes: Mapping[str, str]) -> None:
        self.added.append((amount, dict(attributes)))

    def outcomes(self) -> list[str]:
        return [attributes["outcome"] for _, attributes in self.added]


def ticking(*results: float | Exception | None) -> Tick:
    """A tick that answers (or raises) each of `results` in turn, then None."""
    pending = list(results)

    async def tick() -> float | None:
        result = pending.pop(0) if pending else None
        if isinstance(result, Exception):
            raise result
        return result

    return tick


def loop(
    tick: Tick, sleeps: Sleeps, *, interval_s: float = 0.5, fraction: float = 0.5, **more: Any
) -> Loop:
    return Loop(NAME, tick, interval_s=interval_s, sleep=sleeps, fraction=lambda: fraction, **more)


def test_backoff_grows_and_is_jittered_within_bounds() -> None:
    backoff = Backoff(first_s=1.0, max_s=10.0)
    steps = [backoff.step_s(n) for n in range(1, 8)]
    assert steps == [1.0, 2.0, 4.0, 8.0, 10.0, 10.0, 10.0]  # doubling, then capped
    for failures, step in enumerate(steps, start=1):
        lowest, highest = backoff.delay_s(failures, 0.0), backoff.delay_s(failures, 0.999999)
        assert lowest == step / 2  # half of each step is fixed: never a retry at once
        assert step / 2 < highest < step  # the other half is random
        assert backoff.delay_s(failures, 0.5) == step * 0.75
    assert backoff.delay_ms(3, 0.5) == 3000


async def test_a_failing_tick_logs_counts_and_backs_off_more_each_time(caplog) -> None:
    caplog.set_level(logging.DEBUG, logger="realtime.loop")
    sleeps, ticks = Sleeps(limit=6), Ticks()
    failing = ticking(*(RuntimeError("a bug") for _ in range(6)))
    await loop(failing, sleeps, fraction=0.5, ticks=ticks).run()
    expected = [max(0.5, LOOP_BACKOFF.delay_s(n, 0.5)) for n in range(1, 7)]
    assert sleeps.waits == expected
    assert expected == [0.75, 1.5, 3.0, 6.0, 7.5, 7.5]  # grows, bounded
    assert ticks.added == [(1, {"loop": NAME, "outcome": "failed"})] * 6
    errors = [r for r in caplog.records if r.name == "realtime.loop"]
    assert [r.levelno for r in errors] == [logging.ERROR] * 6  # one line per failed tick
    assert errors[0].getMessage() == f"{NAME} loop failed; next tick in 0.75 s"
    assert errors[0].exc_info is not None  # with its traceback


async def test_the_backoff_stays_within_its_bounds_whatever_the_jitter() -> None:
    for fraction in (0.0, 0.3, 0.999999):
        sleeps = Sleeps(limit=8)
        await loop(ticking(*(RuntimeError() for _ in range(8))), sleeps, fraction=fraction).run()
        for failures, wait in enumerate(sleeps.waits, start=1):
            step = LOOP_BACKOFF.step_s(failures)
            assert max(0.5, step / 2) <= wait <= max(0.5, step)


async def test_the_backoff_starts_over_after_a_tick_that_succeeds() -> None:
    sleeps, ticks = Sleeps(limit=5), Ticks()
    tick = ticking(RuntimeError(), RuntimeError(), None, RuntimeError(), None)
    await loop(tick, sleeps, fraction=0.0, ticks=ticks).run()
    assert sleeps.waits == [0.5, 1.0, 0.5, 0.5, 0.5]  # the interval again once it succeeded
    assert ticks.outcomes() == ["failed", "failed", "ok", "failed", "ok"]
    sleeps = Sleeps(limit=4)
    tick = ticking(RuntimeError(), RuntimeError(), RuntimeError(), None)
    await loop(tick, sleeps, fraction=0.0).run()
    assert sleeps.waits == [0.5, 1.0, 2.0, 0.5]


async def test_an_unreachable_redis_is_logged_at_debug_level_only(caplog) -> None:
    """The store's outage log names an unreachable Redis once; the loops do not repeat it."""
    caplog.set_level(logging.DEBUG, logger="realtime.loop")
    sleeps, ticks = Sleeps(limit=2), Ticks()
    down = Unavailable("The state store (Redis) is unreachable.", service="redis")
    await loop(ticking(down, down), sleeps, fraction=0.0, ticks=ticks).run()
    said = [(r.levelno, r.getMessage()) for r in caplog.records if r.name == "realtime.loop"]
    assert said == [
        (
            logging.DEBUG,
            f"{NAME} loop: The state store (Redis) is unreachable.; next tick in 0.50 s",
        ),
        (
            logging.DEBUG,
            f"{NAME} loop: The state store (Redis) is unreachable.; next tick in 1.00 s",
        ),
    ]
    assert ticks.outcomes() == ["failed", "failed"]  # counted all the same
    assert sleeps.waits == [0.5, 1.0]


async def test_a_tick_says_how_long_to_wait() -> None:
    sleeps, ticks = Sleeps(limit=2), Ticks()
    await loop(ticking(2.5, AT_ONCE, AT_ONCE, None), sleeps, ticks=ticks).run()
    # AT_ONCE: the next tick without the injected sleep (more work is waiting)
    assert sleeps.waits == [2.5, 0.5]
    assert ticks.outcomes() == ["ok", "ok", "ok", "ok"]


async def test_more_work_at_once_still_lets_the_other_tasks_run() -> None:
    others = 0

    async def other() -> None:
        nonlocal others
        while True:
            others += 1
            await asyncio.sleep(0)

    running = asyncio.create_task(other())
    sleeps = Sleeps(limit=1)
    await loop(ticking(*([AT_ONCE] * 20)), sleeps).run()  # ticks that never await anything
    running.cancel()
    assert others >= 20


async def test_the_first_tick_waits_when_asked() -> None:
    sleeps, ticks = Sleeps(limit=2), Ticks()
    await loop(ticking(), sleeps, interval_s=60, first_after_s=60, ticks=ticks).run()
    assert sleeps.waits == [60, 60]
    assert ticks.outcomes() == ["ok"]  # the first tick came after the first wait


async def test_stop_is_prompt_while_waiting_and_idempotent() -> None:
    ticked = asyncio.Event()

    async def tick() -> None:
        ticked.set()

    background = Loop(NAME, tick, interval_s=3600)  # the real sleep: an hour between ticks
    running = asyncio.create_task(background.run())
    await asyncio.wait_for(ticked.wait(), 5)
    background.stop()
    background.stop()
    await asyncio.wait_for(running, 1)  # not the hour
    assert background.stopped.is_set()


async def test_a_loop_stopped_before_it_runs_never_ticks() -> None:
    stop = asyncio.Event()
    stop.set()
    ticks = Ticks()
    await Loop(NAME, ticking(), interval_s=3600, stop=stop, ticks=ticks).run()
    assert ticks.added == []


async def test_the_tick_under_way_finishes_before_the_loop_stops() -> None:
    started, finish = asyncio.Event(), asyncio.Event()
    done: list[str] = []

    async def tick() -> None:
        started.set()
        await finish.wait()
        done.append("tick")

    background = Loop(NAME, tick, interval_s=3600)
    running = asyncio.create_task(background.run())
    await asyncio.wait_for(started.wait(), 5)
    background.stop()
    finish.set()
    await asyncio.wait_for(running, 1)
    assert done == ["tick"]


def test_a_loop_never_busy_waits() -> None:
    with pytest.raises(ValueError, match="must be positive"):
        Loop(NAME, ticking(), interval_s=0)


async def test_a_failing_loop_never_waits_less_than_its_interval() -> None:
    sleeps = Sleeps(limit=4)
    await loop(ticking(*(RuntimeError() for _ in range(4))), sleeps, interval_s=30).run()
    assert sleeps.waits == [30, 30, 30, 30]


async def test_the_ticks_are_counted_by_the_service_metrics() -> None:
    reader = InMemoryMetricReader()
    metrics = Metrics(MeterProvider(metric_readers=[reader]))
    tick = ticking(RuntimeError(), None)
    await loop(tick, Sleeps(limit=2), ticks=metrics.loop_ticks).run()
    data = reader.get_metrics_data()
    assert data is not None
    [counted] = [
        metric
        for resource in data.resource_metrics
        for scope in resource.scope_metrics
        for metric in scope.metrics
        if metric.name == "aim.loop.ticks"
    ]
    points = {
        tuple(sorted((point.attributes or {}).items())): getattr(point, "value", 0)
        for point in counted.data.data_points
    }
    assert points == {
        (("loop", NAME), ("outcome", "failed")): 1,
        (("loop", NAME), ("outcome", "ok")): 1,
    }
