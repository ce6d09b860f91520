"""The reconciler (profile §18): compares LiveKit's rooms and participants with the sessions and
corrects the drift that lost, late or out-of-order webhooks leave behind.

One worker of all replicas runs it at a time, holding `aim:{reconciler}:lease` (SET NX PX with
its token, renewed while it works). Each sweep:

- rooms of this service (`aim-<sessionId>-e<epoch>`) whose session is over (ended, failed), gone,
  or rebound to a newer room → DeleteRoom, once the room is older than the grace period (a room
  being created is never raced);
- a live session past provisioning whose current room LiveKit no longer has (its room_finished
  never came) → `RoomLost` through the commit path, like the webhook: rebind, epoch + 1. Its
  commandId is derived from the room, so two workers, or a sweep and a late webhook, apply it
  once. Sessions are found through the timers index: every live session has its max-duration
  timer armed there (decision 60);
- participants of a live session's room whose identity is a superseded or removed endpoint, or
  no endpoint at all (agents excepted) → RemoveParticipant;
- more than one agent participant in a live session's room (two dispatches, a replayed call, a
  replaced agent that stayed): the session's current agent stays (else the first to join of
  those not replaced), the others → RemoveParticipant (one agent per room);
- with a tenant policy (profile §24), for each tenant of a live session, before LiveKit is
  asked anything: the tenant's places held by sessions that ended (released now, with their
  usage) or were never created are reclaimed, and when the tenant has used up its allowance
  of the day or the month, each of its live sessions → `End(allowance_exhausted)`.

Every correction is counted (`aim.reconciler.corrections{kind}`) and, where a session exists,
written to its event stream with `cause: reconciler`. LiveKit is asked before Redis is changed,
and the first failure of either ends the sweep (one log line): the next sweep starts over.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Final

import msgspec

from realtime.engine.core import Engine
from realtime.engine.entries import Command, Note, params_digest
from realtime.engine.outcomes import Applied, Contended, Replayed
from realtime.engine.schedule import Timer
from realtime.errors import Unavailable
from realtime.livekit_adapter.api import (
    LiveKitGateway,
    LiveKitRejected,
    LiveKitUnavailable,
    LiveParticipant,
    LiveRoom,
)
from realtime.loop import Loop
from realtime.metrics import Metrics
from realtime.store.leases import DutyLease
from realtime.store.records import Cause, SessionRecord
from realtime.store.timers import TimerStore
from realtime.worker.runner import Runner
from state_machines import End, RoomLost, Session
from state_machines import endpoint as endpoints
from state_machines import session as machine
from state_machines.rotation import successor_identity
from state_machines.session import RoomName, SessionState, parse_room_name
from state_machines.session_model import ALLOWANCE_EXHAUSTED

log = logging.getLogger(__name__)

METHOD: Final = "reconciler"
_ENCODER: Final = msgspec.json.Encoder()
# at most this many sessions are considered for lost rooms per sweep (a bound on one sweep's
# memory and Redis round trips); the timers index holds a few entries per recent session
MAX_SESSIONS: Final = 10_000
LOAD_BATCH: Final = 50  # sessions loaded concurrently
# a session in these states has a room LiveKit must have; provisioning creates it, ending
# deletes it
HAS_ROOM: Final[tuple[SessionState, ...]] = tuple(
    state for state in machine.LIVE_STATES if state != "provisioning"
)


class Correction(StrEnum):
    """The kinds of drift the reconciler corrects (the metric's `kind`)."""

    ROOM_DELETED = "room_deleted"
    ROOM_MISSING = "room_missing"
    PARTICIPANT_REMOVED = "participant_removed"
    EXTRA_AGENT_REMOVED = "extra_agent_removed"
    PLACE_RECLAIMED = "place_reclaimed"  # a tenant's place held by a session that no longer lives
    ALLOWANCE_ENDED = "allowance_ended"  # a session ended: its tenant's allowance is used up


class Reason(StrEnum):
    """Why something in LiveKit does not match the sessions (an event's `correction.reason`)."""

    NO_SESSION = "no_session"  # the room names a session that does not exist (any more)
    SESSION_OVER = "session_over"  # ended or failed: its room should be gone
    REBOUND = "rebound"  # the session has a newer room since
    ROOM_GONE = "room_gone"  # LiveKit lost the session's room and room_finished never came
    SUPERSEDED = "superseded"  # a handoff moved the session to another device
    REMOVED = "removed"  # the endpoint's session is over
    UNKNOWN = "unknown"  # an identity the service never issued a token for
    EXTRA_AGENT = "extra_agent"  # a second agent in a room that has one already
    NOT_LIVE = "not_live"  # the session holding a tenant's place ended, or was never created
    ALLOWANCE_EXHAUSTED = "allowance_exhausted"  # the tenant's minutes of the day or month


class LeaseLost(Exception):  # noqa: N818 - reads as a condition
    """Another worker holds the reconciler's lease now: this sweep stops where it is."""


@dataclass
class Report:
    """What one sweep corrected, by kind."""

    corrections: dict[Correction, int] = field(default_factory=dict)

    def add(self, kind: Correction) -> None:
        self.corrections[kind] = self.corrections.get(kind, 0) + 1


def _contended(session_id: str) -> Unavailable:
    return Unavailable(
        f"Session {session_id} is changing too fast to record a correction; the next sweep "
        "tries again.",
        service="redis",
    )


def room_missing_command(room: str) -> Command:
    """The server command of a lost room: the same for every worker and every sweep."""
    digest = params_digest(METHOD, {"correction": Correction.ROOM_MISSING, "room": room})
    return Command(METHOD, f"reconciler:room-missing:{room}", digest)


def stale(session: Session, participant: LiveParticipant) -> Reason | None:
    """Why `participant` must leave the session's room, or None when it belongs there."""
    if participant.is_agent:
        return None  # LiveKit minted its token for our dispatch
    endpoint = next((e for e in session.endpoints if e.endpoint_id == participant.identity), None)
    if endpoint is None:
        return Reason.UNKNOWN
    if endpoint.state == endpoints.SUPERSEDED:
        return Reason.SUPERSEDED
    if endpoint.state == endpoints.REMOVED:
        return Reason.REMOVED
    return None


def extra_agents(
    session: Session, participants: Iterable[LiveParticipant]
) -> list[LiveParticipant]:
    """The agents of the room but one: the session's current agent when it is there, else the
    one that joined first (ties: by identity) of those not replaced. An agent the session
    replaced is never the one kept. During a rotation (profile §23) two agents belong: the
    successor is spared once its job named it, or, before that, the newest agent not replaced;
    and so is the predecessor within its grace after the handover."""
    agents = sorted(
        (p for p in participants if p.is_agent), key=lambda p: (p.joined_ms, p.identity)
    )
    current = [p for p in agents if p.identity == session.agent_identity]
    candidates = current or [p for p in agents if p.identity not in session.agents_replaced]
    kept = {candidates[0].identity} if candidates else set()
    if session.rotation is not None:
        named = successor_identity(session)
        newcomers = [p.identity for p in agents if p.identity not in session.agents_replaced]
        kept |= {named} if named is not None else set(newcomers[-1:])
    if session.agent_leaving is not None:
        kept.add(session.agent_leaving)
    return [p for p in agents if p.identity not in kept]


def outlived(session: Session | None, name: RoomName) -> Reason | None:
    """Why the room belongs to no session that still needs it (none, one that is over, one
    rebound to a newer room since), or None while it is the room of a session."""
    if session is None:
        return Reason.NO_SESSION
    if session.state in machine.TERMINAL_STATES:
        return Reason.SESSION_OVER
    if name.epoch < session.room_epoch:
        return Reason.REBOUND
    return None


def _live(session: Session) -> bool:
    """Live and not ending (an ending session's room is on its way out)."""
    return session.state in machine.LIVE_STATES


class Reconciler:
    """`loop(stop)` in the worker; `run_once()` is one lease-guarded sweep, `sweep()` the work."""

    def __init__(
        self,
        engine: Engine,
        gateway: LiveKitGateway,
        lease: DutyLease,
        runner: Runner,
        timers: TimerStore,
        *,
        metrics: Metrics | None = None,
        token: str | None = None,
    ) -> None:
        self.engine = engine
        self.runner = runner  # starts the effects a correction stored
        self.sessions = engine.sessions
        self.timers = timers  # the armed ones: which sessions are live
        self.gateway = gateway
        self.metrics = metrics or Metrics(None)
        settings = engine.settings
        self.interval_s = settings.reconcile_interval_s
        self.grace_ms = settings.reconcile_grace_s * 1000
        # held from one sweep to the next: a worker that dies hands over within this
        self.lease_ms = (settings.reconcile_interval_s + settings.worker_lease_s) * 1000
        self.lease = lease  # `aim:{reconciler}:lease`, built by the composition root
        self.token = token or uuid.uuid4().hex
        self.held = False
        self.stop = asyncio.Event()

    async def loop(self, stop: asyncio.Event) -> None:
        """Sweep every `AIM_RECONCILE_INTERVAL_S` (the first one an interval after start-up)
        while this worker holds the lease, until `stop` is set."""
        self.stop = stop
        interval_s = self.interval_s
        try:
            await Loop(
                "reconciler",
                self.tick,
                interval_s=interval_s,
                first_after_s=interval_s,
                stop=stop,
                ticks=self.metrics.loop_ticks,
            ).run()
        finally:
            if self.held:  # hand the duty over at once rather than when the lease runs out
                with contextlib.suppress(Unavailable):
                    await self.lease.release(self.token)

    async def tick(self) -> None:
        """The loop's work: one sweep, whose failures `run_once` logs itself."""
        await self.run_once()

    async def run_once(self) -> Report | None:
        """One sweep if this worker holds (or can take) the lease; None when another worker
        holds it or the sweep stopped early. Never raises: a failure is logged once."""
        try:
            self.held = await self.lease.hold(self.token, self.lease_ms)
            if not self.held:
                return None
            with self.engine.telemetry.background_span("reconcile", None, {}):
                return await self.sweep()
        except LeaseLost:
            log.info("reconciler sweep stopped: another worker holds the lease now")
        except LiveKitRejected as exc:
            log.error("reconciler sweep stopped, nothing more corrected: %s", exc)
        except LiveKitUnavailable as exc:
            log.warning("reconciler sweep stopped, nothing more corrected: %s", exc)
        except Unavailable as exc:
            log.warning("reconciler sweep stopped, nothing more corrected: %s", exc.message)
        except Exception:  # a bug must not stop the worker's other loops
            log.exception("reconciler sweep failed")
        return None

    async def sweep(self) -> Report:
        """Compare and correct once. Raises what stops it (LiveKit or Redis failing, the lease
        lost); what it corrected before stays corrected."""
        report = Report()
        # sessions before rooms: a session that had its room then and lacks it in the listing
        # lost it (a session provisioned meanwhile is still in `provisioning` here)
        records = await self._live_sessions()
        live = [record.session for record in records if record.session.state in HAS_ROOM]
        if self.engine.admission.enabled:
            for tenant in dict.fromkeys(record.tenant for record in records):
                if self.stop.is_set():
                    return report
                await self._tenant(tenant, report)
        rooms = await self.gateway.list_rooms()
        now_ms = self.engine.now_ms()
        ours = {room.name: (name, room) for room in rooms if (name := parse_room_name(room.name))}
        for name, room in ours.values():
            if self.stop.is_set():
                return report
            await self._check_room(name, room, now_ms, report)
        for session in live:
            if self.stop.is_set():
                return report
            if session.room not in ours:
                await self._room_missing(session, report)
        return report

    async def _live_sessions(self) -> list[SessionRecord]:
        """The live sessions, found through the timers index (every live session has its
        max-duration timer armed there)."""
        members = await self.timers.members(MAX_SESSIONS * 4)
        ids: dict[str, None] = {}
        for member in members:
            with contextlib.suppress(ValueError):  # a malformed timer is the timer loop's
                ids[Timer.parse(member).session_id] = None
        loaded = await self._records(list(ids)[:MAX_SESSIONS])
        return [r for r in loaded if r is not None and r.session.state in machine.LIVE_STATES]

    async def _load(self, session_ids: Iterable[str]) -> list[Session | None]:
        return [r.session if r else None for r in await self._records(session_ids)]

    async def _records(self, session_ids: Iterable[str]) -> list[SessionRecord | None]:
        ids = list(session_ids)
        loaded: list[SessionRecord | None] = []
        for start in range(0, len(ids), LOAD_BATCH):
            batch = ids[start : start + LOAD_BATCH]
            replies = await asyncio.gather(*(self.sessions.load(sid) for sid in batch))
            loaded += [reply.record for reply in replies]
        return loaded

    async def _tenant(self, tenant: str | None, report: Report) -> None:
        """Reclaim the tenant's places of sessions that no longer live; end its live sessions
        when its allowance is used up."""
        admission = self.engine.admission
        for session_id in await admission.reclaim(tenant):
            self._count(Correction.PLACE_RECLAIMED, session_id, "", report, Reason.NOT_LIVE)
        for session_id in await admission.exhausted(tenant):
            await self._keep_lease()
            outcome = await self.engine.execute(
                session_id,
                End(ALLOWANCE_EXHAUSTED),
                note=Note(
                    Cause.RECONCILER,
                    {"kind": Correction.ALLOWANCE_ENDED, "reason": Reason.ALLOWANCE_EXHAUSTED},
                ),
            )
            self.runner.follow(outcome)
            if isinstance(outcome, Contended):
                raise _contended(session_id)
            if isinstance(outcome, Applied) and outcome.changed:
                self._count(
                    Correction.ALLOWANCE_ENDED, session_id, "", report, Reason.ALLOWANCE_EXHAUSTED
                )

    async def _check_room(
        self, name: RoomName, room: LiveRoom, now_ms: int, report: Report
    ) -> None:
        [session] = await self._load([name.session_id])  # read after the listing: current
        why = outlived(session, name)
        if why is not None:
            if now_ms - room.created_ms >= self.grace_ms:  # else it may be being created
                await self._delete_room(name.session_id, room.name, session, why, report)
        elif session is not None and room.name == session.room and _live(session):
            await self._check_participants(name.session_id, room.name, report)

    async def _delete_room(
        self, session_id: str, room: str, session: Session | None, why: Reason, report: Report
    ) -> None:
        await self._keep_lease()
        if not await self.gateway.delete_room(room):
            return  # gone meanwhile: nothing was corrected
        await self._corrected(
            Correction.ROOM_DELETED, session_id, room, report, reason=why, stream=session
        )

    async def _check_participants(self, session_id: str, room: str, report: Report) -> None:
        participants = await self.gateway.list_participants(room)
        if not participants:
            return
        # read after the listing, so a device that joined meanwhile is known
        [session] = await self._load([session_id])
        if session is None or session.room != room or not _live(session):
            return
        extra = {p.identity for p in extra_agents(session, participants)}
        for participant in participants:
            why = (
                Reason.EXTRA_AGENT if participant.identity in extra else stale(session, participant)
            )
            if why is None:
                continue
            await self._keep_lease()
            if not await self.gateway.remove_participant(room, participant.identity):
                continue  # it left meanwhile
            await self._corrected(
                Correction.EXTRA_AGENT_REMOVED
                if why is Reason.EXTRA_AGENT
                else Correction.PARTICIPANT_REMOVED,
                session_id,
                room,
                report,
                reason=why,
                stream=session,
                identity=participant.identity,
            )

    async def _room_missing(self, session: Session, report: Report) -> None:
        room = session.room
        if await self.gateway.list_rooms([room]):
            return  # there after all (created after the listing)
        await self._keep_lease()
        correction = {"kind": Correction.ROOM_MISSING, "room": room, "reason": Reason.ROOM_GONE}
        outcome = await self.engine.execute(
            session.session_id,
            RoomLost(room),
            command=room_missing_command(room),
            result=_ENCODER.encode({"correction": Correction.ROOM_MISSING, "room": room}),
            note=Note(Cause.RECONCILER, correction),
        )
        self.runner.follow(outcome)
        match outcome:
            case Applied():
                pass
            case Contended():
                raise _contended(session.session_id)
            case Replayed():
                return  # another worker applied it first
            case _:  # the session moved on (ended, or a late room_finished rebound it)
                log.debug(
                    "room %s of session %s: %s",
                    room,
                    session.session_id,
                    type(outcome).__name__.lower(),
                )
                return
        self._count(Correction.ROOM_MISSING, session.session_id, room, report, Reason.ROOM_GONE)

    async def _corrected(
        self,
        kind: Correction,
        session_id: str,
        room: str,
        report: Report,
        *,
        reason: Reason,
        stream: Session | None,
        identity: str = "",
    ) -> None:
        """Count the correction and write it to the session's stream (when there is one)."""
        self._count(kind, session_id, room, report, reason, identity)
        if stream is not None:
            correction: dict[str, str] = {"kind": kind, "room": room, "reason": reason}
            if identity:
                correction["identity"] = identity
            recorded = await self.engine.record(session_id, Note(Cause.RECONCILER, correction))
            if isinstance(recorded, Contended):
                raise _contended(session_id)

    def _count(
        self,
        kind: Correction,
        session_id: str,
        room: str,
        report: Report,
        reason: Reason,
        identity: str = "",
    ) -> None:
        report.add(kind)
        self.metrics.correction(kind.value)
        log.info(
            "reconciler: %s%s%s (%s)",
            kind,
            f" in room {room}" if room else "",
            f", participant {identity}" if identity else "",
            reason,
            extra={"session_id": session_id},
        )

    async def _keep_lease(self) -> None:
        """Renew the lease before each correction; a worker that lost it stops correcting."""
        if not await self.lease.hold(self.token, self.lease_ms):
            self.held = False
            raise LeaseLost()
