"""The outbox runner: carries out each committed effect at least once, in commit order.

Right after a commit the request that made it runs the session's outbox inline; whatever is left
(LiveKit down, a crash) is found through the due index by the worker loop and retried with
backoff. A per-session lease keeps two runners from racing (agent dispatch must happen once per
room, and LiveKit does not de-duplicate dispatches). Effects that complete may feed an event back
through the engine (room and dispatch done → Provisioned; a replacement dispatch made →
AgentDispatched; room deleted → RoomDeleted).
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from typing import Any, Final, TypeVar, assert_never

from realtime.engine.core import Engine
from realtime.engine.entries import Note
from realtime.engine.outcomes import Applied, Contended
from realtime.engine.schedule import ms_of
from realtime.errors import Unavailable
from realtime.livekit_adapter.api import (
    ATTEMPT_KEY,
    LiveKitGateway,
    LiveKitRejected,
    LiveKitUnavailable,
)
from realtime.loop import Backoff, Loop, jitter
from realtime.metrics import Metrics
from realtime.provider_tokens import mint_provider_token
from realtime.store.records import Cause, PendingEffect
from realtime.store.timeline import effect_entry
from realtime.telemetry import ATTR_SESSION_ID
from realtime.timestamps import timestamp
from state_machines import (
    AgentDispatched,
    CreateRoom,
    DeleteDispatch,
    DeleteRoom,
    DispatchAgent,
    OutboxEffect,
    Provisioned,
    RemoveParticipant,
    RoomDeleted,
    SendData,
    Session,
    SessionEvent,
    UpdatePermissions,
)
from state_machines.rotation import is_successor
from state_machines.session import LIVE_STATES

log = logging.getLogger(__name__)

OutcomeT = TypeVar("OutcomeT")

# the wait before an effect's next try: 0.25-0.5 s, then 0.5-1 s … up to 30-60 s
BACKOFF: Final = Backoff(first_s=0.5, max_s=60.0)
POLL_INTERVAL_S: Final = 0.5
PROVIDER_TOKEN_MARGIN_S: Final = 600  # a provider token outlives the longest session by this
# a run that finds work a racing commit added runs again at most this often (then the worker)
RACED_RUNS: Final = 3
ERROR_TEXT_MAX: Final = 200  # of a failure's description kept with the effect (the outbox view)
# the LiveKit server API call that carries out each effect (what the operations timeline names)
LIVEKIT_CALLS: Final[dict[type, str]] = {
    CreateRoom: "CreateRoom",
    DispatchAgent: "CreateDispatch",
    RemoveParticipant: "RemoveParticipant",
    DeleteRoom: "DeleteRoom",
    UpdatePermissions: "UpdateParticipant",
    SendData: "SendData",
    DeleteDispatch: "DeleteDispatch",
}


def livekit_call(effect: OutboxEffect) -> str:
    """The LiveKit API name of the call that carries out `effect`."""
    return LIVEKIT_CALLS[type(effect)]


def _still_wanted(effect: OutboxEffect, session: Session | None) -> bool:
    """Provisioning of a room the session no longer uses (failed, ended, rebound) is dropped,
    and so is a dispatch replaced since (its attempt is not the current one) or the deletion
    of stale dispatches in a room that is going anyway; clean-up effects (remove, delete the
    room) always run."""
    if isinstance(effect, CreateRoom | DispatchAgent):
        return (
            session is not None
            and session.state not in ("failed", "ended")
            and effect.room == session.room
            and (
                isinstance(effect, CreateRoom)
                or effect.attempt == session.agent_attempt
                or is_successor(session, effect.attempt)
            )
        )
    if isinstance(effect, DeleteDispatch):
        return session is not None and effect.room == session.room and session.state in LIVE_STATES
    if isinstance(effect, SendData | UpdatePermissions):
        # meant for a room the session left (rebind) or a session that is over
        return session is not None and effect.room == session.room and session.state != "ended"
    return True


def _elapsed_ms(started: float) -> int:
    return round((time.perf_counter() - started) * 1000)


class Runner:
    """Carries out outboxes; `run(session_id)` after a commit, `loop()` as the worker."""

    def __init__(
        self,
        engine: Engine,
        gateway: LiveKitGateway,
        *,
        lease_ms: int | None = None,
        metrics: Metrics | None = None,
    ) -> None:
        self.engine = engine
        self.metrics = metrics or Metrics(None)
        # AIM_WORKER_LEASE_S unless a test asks for another
        self.lease_ms = lease_ms or engine.settings.worker_lease_s * 1000
        self.sessions = engine.sessions
        self.gateway = gateway
        self._started: set[asyncio.Task[bool]] = set()

    def follow(self, outcome: OutcomeT) -> OutcomeT:
        """Start carrying out the effects `outcome`'s commit stored (they run after the
        response; the worker retries what does not finish), and pass the outcome on."""
        if isinstance(outcome, Applied) and outcome.pending:
            self.start(outcome.session.session_id)
        return outcome

    def start(self, session_id: str) -> asyncio.Task[bool]:
        """Run the session's outbox in the background; the task is kept until it finishes (a
        caller may wait for it: it ends once the outbox is carried out, or left to a retry)."""
        task = asyncio.get_running_loop().create_task(self.run(session_id))
        self._started.add(task)
        task.add_done_callback(self._finished)
        return task

    def _finished(self, task: asyncio.Task[bool]) -> None:
        self._started.discard(task)
        if not task.cancelled() and task.exception() is not None:
            # the outbox keeps the work: the worker retries it; say why it failed here
            log.warning("background work failed: %r", task.exception())

    async def drain(self) -> None:
        """Let the outboxes started in the background finish (shutdown)."""
        if self._started:
            await asyncio.gather(*self._started, return_exceptions=True)

    async def run(self, session_id: str) -> bool:
        """Empty the session's outbox; False when an effect failed (it stays for a retry)."""
        for _ in range(RACED_RUNS):
            token = uuid.uuid4().hex
            if not await self.sessions.lease(session_id, token, self.lease_ms):
                return True  # another runner holds it and will finish the work
            emptied = False
            try:
                emptied, ok = await self._run_leased(session_id, token)
            finally:
                await self.sessions.release(session_id, token)
            if not (emptied and await self.sessions.pending(session_id)):
                return ok
            # a commit added work after we looked, and its own run was turned away by our
            # lease: the worker will see it (our ZREM may have removed its due entry), and this
            # run takes it on at once rather than leaving it to the worker's next look
            await self.sessions.schedule(session_id, self.engine.now_ms())
        return True

    async def _run_leased(self, session_id: str, token: str) -> tuple[bool, bool]:
        """(outbox emptied, no failure)."""
        while True:
            pending = await self.sessions.pending(session_id)
            if not pending:
                await self.sessions.schedule(session_id, None)
                return True, True
            if not await self.sessions.renew(session_id, token, self.lease_ms):
                return False, True  # the lease ran out: another runner carries on
            effect_id, entry = pending[0]
            loaded = await self.sessions.load(session_id)
            session = loaded.record.session if loaded.record else None
            if not _still_wanted(entry.effect, session):
                log.info(
                    "dropping %s of session %s: the session moved on",
                    type(entry.effect).__name__,
                    session_id,
                )
                await self.sessions.done(session_id, effect_id)
                continue
            attributes: dict[str, str | int] = {
                ATTR_SESSION_ID: session_id,
                "aim.effect": type(entry.effect).__name__,
                "aim.effect.attempt": entry.attempts + 1,
            }
            name = f"effect {type(entry.effect).__name__}"
            with self.engine.telemetry.background_span(name, entry.cause, attributes):
                if not await self._carry_out(session_id, effect_id, entry, session):
                    return False, False

    async def _carry_out(
        self, session_id: str, effect_id: str, entry: PendingEffect, session: Session | None
    ) -> bool:
        """Carry out one effect, commit what it feeds back, forget it; False when it failed
        (it stays for a retry)."""
        call = livekit_call(entry.effect)
        started_ms, started = self.engine.now_ms(), time.perf_counter()
        try:
            follow_up = await self._perform(
                session_id, entry.effect, session, retry=entry.attempts > 0
            )
        except (LiveKitUnavailable, LiveKitRejected) as exc:
            await self._failed(session_id, effect_id, entry, exc, started_ms, started)
            return False
        noted = effect_entry(
            started_ms,
            call,
            attempt=entry.attempts + 1,
            result="ok",
            duration_ms=_elapsed_ms(started),
            cause=entry.cause,
        )
        if follow_up is not None:
            # commit the follow-up before forgetting the effect: if the commit fails, the
            # effect (idempotent) is carried out again and its follow-up retried
            await self._feed(session_id, follow_up, call)
        await self.sessions.done(session_id, effect_id, noted, self.engine.settings.live_window_s)
        return True

    async def _failed(
        self,
        session_id: str,
        effect_id: str,
        entry: PendingEffect,
        exc: Exception,
        started_ms: int,
        started: float,
    ) -> None:
        entry.attempts += 1
        self.metrics.effect_failed(type(entry.effect).__name__)
        rejected = isinstance(exc, LiveKitRejected)
        level = logging.ERROR if rejected else logging.WARNING
        log.log(
            level,
            "effect %s of session %s failed (attempt %d): %s",
            type(entry.effect).__name__,
            session_id,
            entry.attempts,
            exc,
            extra={"session_id": session_id},
        )
        entry.last_error = str(exc)[:ERROR_TEXT_MAX] or type(exc).__name__
        entry.last_attempt_at = timestamp(started_ms)
        # retry: LiveKit could not be reached or failed; failed: it refused the call (both are
        # tried again with backoff, a refusal is logged as an error)
        noted = effect_entry(
            started_ms,
            livekit_call(entry.effect),
            attempt=entry.attempts,
            result="failed" if rejected else "retry",
            duration_ms=_elapsed_ms(started),
            error=entry.last_error,
            cause=entry.cause,
        )
        await self.sessions.retry_later(
            session_id, effect_id, entry, noted, self.engine.settings.live_window_s
        )
        retry_ms = self.engine.now_ms() + BACKOFF.delay_ms(entry.attempts, jitter())
        await self.sessions.schedule(session_id, retry_ms)

    async def _feed(self, session_id: str, event: SessionEvent, call: str) -> None:
        outcome = await self.engine.execute(session_id, event, note=Note(Cause.EFFECT, effect=call))
        if isinstance(outcome, Contended):
            raise Unavailable(
                "The session is changing too fast to apply a follow-up.", service="redis"
            )
        if not isinstance(outcome, Applied):
            # the session moved on (e.g. ended while its room was being created): nothing to do
            log.info(
                "follow-up %s of session %s not applied: %s",
                type(event).__name__,
                session_id,
                type(outcome).__name__.lower(),
            )

    def dispatch_metadata(
        self,
        session_id: str,
        epoch: int,
        session: Session | None,
        *,
        attempt: int = 1,
        generation: int = 1,
        successor_of: int = 0,
    ) -> dict[str, Any]:
        """What the agent learns when it accepts the job (profile §9, §10, §23), its provider
        token included; the token lives as long as a session may. `dispatchAttempt` says which
        dispatch into the room it is (a replacement's is 2 or more); LiveKit copies it into
        the job, so the job's webhooks say which dispatch they are about. `agentGeneration`
        is the agent's place among the session's agents (its token carries it), and
        `successorOf` the generation it takes over from in a rotation."""
        settings = self.engine.settings
        requested = session.requested if session else None
        return {
            "sessionId": session_id,
            "sessionEpoch": epoch,
            "taskId": session.task_id if session else None,
            "retention": {"transcript": session.transcript if session else "off", "summary": "off"},
            "requested": {
                "userVideoSources": list(requested.user_video_sources) if requested else [],
                "agentVideoSources": list(requested.agent_video_sources) if requested else [],
                "interactions": list(requested.interactions) if requested else [],
            },
            "providerUrl": settings.provider_url,
            "providerToken": mint_provider_token(
                settings.provider_secret,
                session_id=session_id,
                epoch=epoch,
                ttl_s=settings.max_session_s + PROVIDER_TOKEN_MARGIN_S,
                now=self.engine.now_ms() // 1000,
                generation=generation,
            ),
            "agentGeneration": generation,
            **({"successorOf": successor_of} if successor_of else {}),
            ATTEMPT_KEY: attempt,
        }

    async def _perform(
        self, session_id: str, effect: OutboxEffect, session: Session | None, *, retry: bool
    ) -> SessionEvent | None:
        """Carry out `effect` (`retry`: an earlier attempt failed, and may have been applied)
        and return the event it feeds back, if any."""
        if isinstance(effect, CreateRoom):
            await self.gateway.create_room(
                effect.room,
                metadata={"sessionId": session_id, "sessionEpoch": effect.epoch},
                agent=(
                    self.dispatch_metadata(
                        session_id, effect.epoch, session, generation=effect.generation
                    )
                    if effect.with_agent
                    else None
                ),
                retry=retry,
            )
            return Provisioned(effect.epoch) if effect.with_agent else None
        if isinstance(effect, DispatchAgent):
            metadata = self.dispatch_metadata(
                session_id,
                effect.epoch,
                session,
                attempt=effect.attempt,
                generation=effect.generation,
                successor_of=effect.successor_of,
            )
            if effect.attempt == 1:  # stored before rooms were created with their agent
                await self.gateway.ensure_dispatch(effect.room, metadata=metadata)
                return Provisioned(effect.epoch)
            dispatch_id = await self.gateway.dispatch_attempt(
                effect.room, effect.attempt, metadata=metadata
            )
            return AgentDispatched(effect.epoch, effect.attempt, dispatch_id)
        if isinstance(effect, DeleteDispatch):
            if effect.only:
                await self.gateway.delete_dispatches(effect.room, only_attempt=effect.attempt)
            else:
                await self.gateway.delete_dispatches(effect.room, before_attempt=effect.attempt)
            return None
        if isinstance(effect, RemoveParticipant):
            revoke = effect.revoke_before
            await self.gateway.remove_participant(
                effect.room,
                effect.identity,
                revoke_before_s=None if revoke is None else ms_of(revoke) // 1000,
            )
            return None
        if isinstance(effect, DeleteRoom):
            await self.gateway.delete_room(effect.room)
            return RoomDeleted(effect.epoch)
        if isinstance(effect, UpdatePermissions):
            await self.gateway.update_permissions(
                effect.room,
                effect.identity,
                can_subscribe=effect.can_subscribe,
                publish_sources=effect.publish_sources,
            )
            return None
        if isinstance(effect, SendData):
            await self.gateway.send_data(effect.room, effect.destination, effect.body)
            return None
        assert_never(effect)

    async def loop(self, stop: asyncio.Event) -> None:
        """Worker: retry outboxes that are due, every POLL_INTERVAL_S until `stop` is set."""
        ticks = self.metrics.loop_ticks
        await Loop("outbox", self.sweep, interval_s=POLL_INTERVAL_S, stop=stop, ticks=ticks).run()

    async def sweep(self) -> None:
        """Run the outboxes that are due now."""
        due = await self.sessions.due(self.engine.now_ms())
        # concurrently: a session whose LiveKit calls hang must not hold up the others
        await asyncio.gather(*(self.run(session_id) for session_id in due))
