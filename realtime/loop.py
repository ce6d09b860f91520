"""The one background loop (decision 184): tick, wait, again, until stopped.

Every background loop of the service (the outbox runner's sweep, the timers, the session
events' sweep, the reconciler, the Redis gauges' refresh) is a `Loop` around its own work, a
`tick`: the loop calls it, waits what the tick's value says (its interval unless the tick asks
for another wait), and calls it again. A tick that raises is one line in the log with the
loop's name (an unreachable Redis at debug level: the store's outage log says that once) and
one failed tick in `aim.loop.ticks`; the loop then waits the `LOOP_BACKOFF` step for the
failures in a row, never less than its interval, and a tick that succeeds resets it.
`stop()` (or setting the event it was given) ends the loop at once when it is waiting, and
after the tick under way otherwise.

`Backoff` is the one backoff rule: exponential, capped, half of each step random ("equal
jitter", decision 154), used by the loops and by the per-item retries (an effect of the
outbox, a session event).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Final, Protocol

from realtime.errors import Unavailable

log = logging.getLogger(__name__)

AT_ONCE: Final = 0.0  # what a tick returns when more work is waiting: the next tick at once

Tick = Callable[[], Awaitable[float | None]]
"""A loop's work, done once: the seconds until the next tick, or None for the loop's
interval."""


@dataclass(frozen=True, slots=True)
class Backoff:
    """Waits after failures in a row: the n-th step is `first_s` doubled n - 1 times, at most
    `max_s`; the wait is the upper half of its step, chosen by `fraction` (in [0, 1)), so
    retries of many failures spread out but none comes at once."""

    first_s: float
    max_s: float

    def step_s(self, failures: int) -> float:
        return min(self.max_s, self.first_s * 2.0 ** max(0, failures - 1))

    def delay_s(self, failures: int, fraction: float) -> float:
        step = self.step_s(failures)
        return step / 2 + step / 2 * fraction

    def delay_ms(self, failures: int, fraction: float) -> int:
        return int(self.delay_s(failures, fraction) * 1000)


# a loop whose ticks fail waits 0.5-1 s, then 1-2 s … up to 5-10 s (never less than its
# interval): an unreachable Redis is not asked several times a second, and the loops resume
# within 10 s of its return
LOOP_BACKOFF: Final = Backoff(first_s=1.0, max_s=10.0)


def jitter() -> float:
    """A fraction for `Backoff.delay_s`, in [0, 1)."""
    return random.random()  # noqa: S311 - a spread of retries, not a secret


class Counter(Protocol):
    """Where a loop counts its ticks (`Metrics.loop_ticks`, an OpenTelemetry counter)."""

    def add(self, amount: int, attributes: Mapping[str, str]) -> None: ...


async def pause(stop: asyncio.Event, seconds: float) -> None:
    """Wait `seconds`, or less when `stop` is set meanwhile."""
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stop.wait(), seconds)


class Loop:
    """Runs `tick` every `interval_s` (the first one after `first_after_s`) until stopped."""

    def __init__(
        self,
        name: str,
        tick: Tick,
        *,
        interval_s: float,
        first_after_s: float = 0.0,
        stop: asyncio.Event | None = None,
        ticks: Counter | None = None,
        sleep: Callable[[asyncio.Event, float], Awaitable[None]] = pause,
        fraction: Callable[[], float] = jitter,
    ) -> None:
        if interval_s <= 0:  # a loop that never waits would hold the event loop
            raise ValueError(f"the interval of loop {name} must be positive")
        self.name = name
        self.tick = tick
        self.interval_s = interval_s
        self.first_after_s = first_after_s
        self.stopped = stop if stop is not None else asyncio.Event()
        self.ticks = ticks
        self.sleep = sleep  # tests pass one that does not wait
        self.fraction = fraction
        self.failures = 0  # ticks that failed in a row

    def stop(self) -> None:
        """End the loop: at once while it waits, else after the tick under way."""
        self.stopped.set()

    async def run(self) -> None:
        if self.first_after_s > 0:
            await self.sleep(self.stopped, self.first_after_s)
        while not self.stopped.is_set():
            wait_s = await self.once()
            if wait_s > 0:
                await self.sleep(self.stopped, wait_s)
            else:
                await asyncio.sleep(0)  # more work at once, but the other tasks go first

    async def once(self) -> float:
        """One tick; the seconds to wait before the next."""
        try:
            wanted = await self.tick()
        except Exception as exc:  # a failure must not end the loop: the next tick tries again
            self.failures += 1
            wait_s = max(self.interval_s, LOOP_BACKOFF.delay_s(self.failures, self.fraction()))
            self._count("failed")
            if isinstance(exc, Unavailable):  # said by the store's outage log, not per tick
                log.debug("%s loop: %s; next tick in %.2f s", self.name, exc.message, wait_s)
            else:
                log.exception("%s loop failed; next tick in %.2f s", self.name, wait_s)
            return wait_s
        self.failures = 0
        self._count("ok")
        return self.interval_s if wanted is None else wanted

    def _count(self, outcome: str) -> None:
        if self.ticks is not None:
            self.ticks.add(1, {"loop": self.name, "outcome": outcome})
