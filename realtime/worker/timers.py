"""Durable timers: claimed from Redis with a lease, fired through the commit path.

Several workers may run this loop. A timer is claimed atomically (its score moves past a lease),
fired as a server event through `Engine.execute` (a `compact` timer through the store's
`Compactor` instead: it changes no state), then removed. A worker that dies holding a
claim loses it when the lease runs out and another worker fires the timer; the state machine
(and the version an idle timer was armed at) makes a second firing a no-op, so each timer's
transition happens exactly once.

`fires` says, without firing it, whether a timer would still do something: the operator API
marks the others stale (profile §17).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Final, get_args

from realtime.engine.core import Engine
from realtime.engine.entries import Note
from realtime.engine.outcomes import Applied, Contended, Missing
from realtime.engine.schedule import Timer
from realtime.errors import Unavailable
from realtime.loop import AT_ONCE, Loop
from realtime.metrics import Metrics
from realtime.store.compaction import Compactor
from realtime.store.records import Cause
from realtime.store.timeline import Recorder
from realtime.store.timers import TimerStore
from realtime.telemetry import ATTR_SESSION_ID
from realtime.timestamps import timestamp
from realtime.worker.runner import Runner
from state_machines import (
    Accepted,
    AgentStartTimeout,
    GraceExpired,
    IdleTimeout,
    MaxDuration,
    ProvisioningTimeout,
    Session,
    SessionEvent,
    decide,
)
from state_machines.interactions import Resolve
from state_machines.session import TERMINAL_STATES, AgentDeadline, LeaveGrace, RotationDue
from state_machines.session_model import DeadlineReason

log = logging.getLogger(__name__)

POLL_INTERVAL_S: Final = 0.25
DEADLINE_REASONS: Final[frozenset[DeadlineReason]] = frozenset(get_args(DeadlineReason))
BATCH: Final = 50


def event_of(timer: Timer) -> SessionEvent | Resolve:
    """The event a due timer fires (ValueError: a member this release cannot read)."""
    if timer.kind == "provisioning":
        return ProvisioningTimeout(timer.epoch)
    if timer.kind == "grace":
        endpoint_id, _, disconnect = timer.endpoint_id.partition("#")
        return GraceExpired(timer.epoch, endpoint_id, int(disconnect) if disconnect else -1)
    if timer.kind == "idle":
        return IdleTimeout(int(timer.endpoint_id) if timer.endpoint_id else -1)
    if timer.kind == "max":
        return MaxDuration()
    if timer.kind == "agent":
        return AgentStartTimeout(timer.epoch, int(timer.endpoint_id))
    if timer.kind == "rotate":
        generation, due, reason = timer.endpoint_id.split("#")
        if reason not in DEADLINE_REASONS:
            raise ValueError(f"unknown deadline reason {reason!r}")
        return RotationDue(timer.epoch, int(generation), timestamp(int(due)), reason)
    if timer.kind == "deadline":
        generation, due = timer.endpoint_id.split("#")
        return AgentDeadline(timer.epoch, int(generation), timestamp(int(due)))
    if timer.kind == "leave":
        return LeaveGrace(timer.epoch, timer.endpoint_id)
    if timer.kind == "requirement":
        operation_id, _, requirement_id = timer.endpoint_id.partition("#")
        return Resolve(
            command_id=f"expire:{requirement_id}",
            decision="expire",
            via="timer",
            operation_id=operation_id,
            requirement_id=requirement_id,
        )
    raise ValueError(f"unknown timer kind {timer.kind!r}")


def armed_version(timer: Timer) -> int | None:
    """The only version of the session `timer` may fire at, if any: idle timers of earlier
    releases do not name their idle period, so they are checked by version."""
    return timer.version if timer.kind == "idle" and not timer.endpoint_id else None


def fires(timer: Timer, session: Session, version: int, at_ms: int) -> bool:
    """Whether `timer`, firing at `at_ms` on `session` as it is now (stored at `version`), would
    change it: the core's own decision, taken without committing. False for a timer the session
    has moved past (armed at an older epoch, of a kind its state no longer accepts, for an
    endpoint or an idle period or a requirement that is gone): when it comes due the worker
    fires it, the core refuses it, and the timeline says `refused`. A `compact` timer changes no
    state; it matters once the session is over."""
    if timer.kind == "compact":
        return session.state in TERMINAL_STATES
    try:
        event = event_of(timer)
    except ValueError:
        return False  # malformed: dropped when it comes due
    fenced = armed_version(timer)
    if fenced is not None and fenced != version:
        return False
    decision = decide(session, event, now=timestamp(at_ms))
    return isinstance(decision, Accepted) and (decision.state != session or decision.has_effects)


class Timers:
    """Fires due timers; `loop()` runs in `serve` (unless --no-worker) and in `worker`."""

    def __init__(
        self,
        engine: Engine,
        runner: Runner,
        compactor: Compactor,
        timers: TimerStore,
        *,
        lease_ms: int | None = None,
        metrics: Metrics | None = None,
        recorder: Recorder | None = None,
    ) -> None:
        self.engine = engine
        self.runner = runner  # starts the effects a fired timer stored
        self.compactor = compactor  # ended sessions, once AIM_COMPACT_AFTER_S has passed
        self.metrics = metrics or Metrics(None)
        self.recorder = recorder  # timers that found the session moved on (the timeline)
        # AIM_WORKER_LEASE_S unless a test asks for another
        self.lease_ms = lease_ms or engine.settings.worker_lease_s * 1000
        self.timers = timers

    async def fire_due(self) -> int:
        """Claim and fire every timer that is due now; the number fired."""
        members = await self.timers.claim(self.engine.now_ms(), self.lease_ms, BATCH)
        for member in members:
            await self.fire(member)
        return len(members)

    async def fire(self, member: str) -> None:
        try:
            timer = Timer.parse(member)
            if timer.kind == "compact":
                await self.compact(member, timer.session_id)
                return
            event = event_of(timer)
        except ValueError:
            log.error("dropping malformed timer %r", member)
            await self.timers.done(member)
            return
        telemetry = self.engine.telemetry
        try:
            # the span links to the one that armed the timer (read only when tracing)
            cause = await self.timers.cause(member) if telemetry.provider else None
            attributes = {ATTR_SESSION_ID: timer.session_id, "aim.timer": timer.kind}
            with telemetry.background_span(f"timer {timer.kind}", cause, attributes):
                outcome = await self.engine.execute(
                    timer.session_id,
                    event,
                    only_at_version=armed_version(timer),
                    note=Note(Cause.TIMER, timer=timer.kind),
                )
        except Unavailable:
            return  # keep the claim; the timer comes back when the lease runs out
        self.runner.follow(outcome)
        match outcome:
            case Applied(changed=True):
                self.metrics.timer_fired(timer.kind)
                log.info("timer %s fired for session %s", timer.kind, timer.session_id)
            case Contended():
                return  # keep the claim, as when Redis is down
            case Missing():
                pass  # the session is gone, and its timeline with it
            case _:  # refused, or a no-op: the session moved on since the timer was armed
                if self.recorder is not None:
                    self.recorder.timer(timer.session_id, timer=timer.kind, result="refused")
                log.debug(
                    "timer %s of session %s: %s",
                    timer.kind,
                    timer.session_id,
                    type(outcome).__name__.lower(),
                )
        await self.timers.done(member)

    async def compact(self, member: str, session_id: str) -> None:
        try:
            with self.engine.telemetry.background_span(
                "timer compact", None, {ATTR_SESSION_ID: session_id, "aim.timer": "compact"}
            ):
                compacted = await self.compactor.compact(session_id)
        except Unavailable:
            return  # keep the claim; the timer comes back when the lease runs out
        if compacted in ("busy", "moved"):
            # LiveKit work still to carry out, or commits that kept landing: after the lease
            log.debug("compaction of session %s: %s, later", session_id, compacted)
            return
        if compacted == "done":
            self.metrics.timer_fired("compact")
            log.info("session %s compacted", session_id)
        await self.timers.done(member)

    async def loop(self, stop: asyncio.Event) -> None:
        """Fire due timers every POLL_INTERVAL_S until `stop` is set."""
        ticks = self.metrics.loop_ticks
        await Loop("timers", self.sweep, interval_s=POLL_INTERVAL_S, stop=stop, ticks=ticks).run()

    async def sweep(self) -> float | None:
        """Fire one batch of due timers; a full batch leaves more due: the next sweep at once."""
        return AT_ONCE if await self.fire_due() == BATCH else None
