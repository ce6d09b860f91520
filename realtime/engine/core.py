"""Apply one event to a session: load (1 round trip), decide (pure), commit (1 script).

Every answer is a value (`Outcome`): what was applied, a replay of a command's stored outcome,
a refusal of the core, a session that is not there. Nothing here raises a service error or
renders a reply; the methods above turn outcomes into results and errors.

Commands carry a commandId: the lookup of its stored outcome rides in the load, so a replay is one
round trip and an applied command two. A command's result is stored in the commit of its
transition, so a method renders it between the two steps: `decide` returns a `Decided` (the
session, version, task and join media as they will be committed), the method renders its result
from it, and `commit` stores both at once. `commit` answers None when another writer committed
in between; the caller decides again (`execute` does so for events whose result is fixed). Effects
are stored in the commit (outbox) and carried out right after it by the runner.

A new session is claimed (`claim_create`: its messageId and clientSessionId, within the owner's
limits) and created (`create`) here too: every change of a session's state, and of its owner's
live index, is the engine's (`engine/ledger.py` writes what concerns no session).
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Final, TypeVar

import msgspec

from realtime.engine.admission import Admission
from realtime.engine.entries import (
    CALLS,
    LINKED,
    Command,
    Note,
    TaskProjection,
    cause_of,
    event_entry,
    outbox_entries,
    outcome_of,
    task_record_for,
    without_known_history,
)
from realtime.engine.outcomes import (
    Applied,
    Contended,
    Decided,
    Denied,
    Missing,
    Outcome,
    Replayed,
    Reused,
)
from realtime.engine.presence import changes as presence_changes
from realtime.engine.presence import rotation_outcomes, rotation_seam_s
from realtime.engine.schedule import armed_by, window_s
from realtime.engine.session_events import notices
from realtime.metrics import Metrics
from realtime.policy import PolicySource
from realtime.settings import Settings
from realtime.store.records import CommandOutcome, Loaded, SessionRecord, TaskRecord
from realtime.store.sessions import Claimed, Commit, SessionStore
from realtime.store.tenants import TenantStore
from realtime.telemetry import Telemetry, current_cause, link_to_cause, note_transition
from realtime.timestamps import timestamp
from state_machines import Accepted, Rejected, Session
from state_machines import AnyEvent as AnyEvent  # what `execute` applies, named for methods/
from state_machines import decide as decide_event
from state_machines import session as machine
from state_machines.usage import usage_of

log = logging.getLogger(__name__)

T = TypeVar("T")

MAX_ATTEMPTS: Final = 8  # commits tried before a session counts as contended


async def until_committed(
    session_id: str, attempt: Callable[[], Awaitable[T | None]]
) -> T | Contended:
    """The one conflict-retry loop: `attempt` loads, decides (and renders) and commits, and
    answers None when another writer committed since its load; then it runs again, at most
    MAX_ATTEMPTS times."""
    for _ in range(MAX_ATTEMPTS):
        done = await attempt()
        if done is not None:
            return done
    return Contended(session_id)


def replay_of(outcome: CommandOutcome, command: Command) -> Replayed | Reused:
    if outcome.method != command.method or outcome.digest != command.digest:
        return Reused(outcome, command)
    return Replayed(outcome)


def _link(linked: bool, loaded: Loaded) -> None:
    """The current span links to the session's last call (`LINKED` causes)."""
    if linked and loaded.record is not None:
        link_to_cause(loaded.record.caller)


@dataclass(frozen=True, slots=True)
class CreateClaim:
    """What a session's create claims before its commit (`Engine.claim_create`): its messageId
    and clientSessionId, the task and session it will be, the digest of its session.create
    data, and when (the score of the owner's indexes)."""

    message_id: str
    client_session_id: str
    task_id: str
    session_id: str
    digest: str
    now_ms: int
    live_limit: int  # live sessions the owner may have (its tenant's, or the setting)


RETRY_GRACE_MS: Final = 5_000  # the worker looks at an outbox the inline runner did not empty


class Engine:
    """Runs events through the session machine and commits them."""

    def __init__(
        self,
        settings: Settings,
        sessions: SessionStore,
        *,
        project: TaskProjection,
        admission: Admission | None = None,
        clock: Callable[[], float] = time.time,
        telemetry: Telemetry | None = None,
        metrics: Metrics | None = None,
    ) -> None:
        self.settings = settings
        self.sessions = sessions
        # no policy unless the composition root gives one: ends are still released (usage)
        self.admission = admission or Admission(
            settings, PolicySource(None, clock), TenantStore(sessions.redis), sessions, clock=clock
        )
        self.project = project
        self.clock = clock
        self.telemetry = telemetry or Telemetry(None)
        self.metrics = metrics or Metrics(None)

    def now_ms(self) -> int:
        return int(self.clock() * 1000)

    async def decide(
        self,
        session_id: str,
        event: AnyEvent,
        *,
        owner: str | None = None,
        command: Command | None = None,
        only_at_version: int | None = None,
        linked: bool = False,
    ) -> Decided | Outcome:
        """Decide `event` against the session. `owner` None means a server event (webhook,
        timer, effect follow-up, the reconciler): no ownership check. `linked`: the current
        span links to the session's last call (`LINKED`).

        The session as this process last saw it is decided on first (no round trip): a
        decision to commit is safe on it, since the commit checks the version and the
        commandId. Any other answer (refused, missing, nothing to write) is decided again on
        the session read from Redis, and so is a command this process committed before (a
        retry: the read finds its outcome)."""
        recent = self.sessions.recent(session_id, command.command_id if command else None)
        if recent is not None:
            found = self._decide(recent, session_id, event, owner, command, only_at_version)
            if isinstance(found, Decided):
                _link(linked, recent)
                return found
        loaded = await self.sessions.load(session_id, command.command_id if command else None)
        _link(linked, loaded)
        return self._decide(loaded, session_id, event, owner, command, only_at_version)

    def _decide(
        self,
        loaded: Loaded,
        session_id: str,
        event: AnyEvent,
        owner: str | None,
        command: Command | None,
        only_at_version: int | None,
    ) -> Decided | Outcome:
        record = loaded.record
        if record is None or (owner is not None and record.owner != owner):
            return Missing(session_id)
        if loaded.outcome is not None and command is not None:
            return replay_of(loaded.outcome, command)
        now_ms = self.now_ms()
        if only_at_version is not None and loaded.version != only_at_version:
            # armed for a state the session has left (e.g. an idle timer): nothing to do
            return Applied(record.session, loaded.version, self._task(loaded, now_ms), False)
        decision = decide_event(record.session, event, now=timestamp(now_ms))
        if isinstance(decision, Rejected):
            return Denied(decision, record.session)
        decision = without_known_history(decision, loaded.task)
        noop = decision.state == record.session and not decision.has_effects
        if noop and command is None:
            # an idempotent no-op (e.g. ending an ended session): nothing to write
            return Applied(record.session, loaded.version, self._task(loaded, now_ms), False)
        return Decided(
            session_id=session_id,
            loaded=loaded,
            decision=decision,
            session=decision.state,
            version=loaded.version + (0 if noop else 1),
            task=self._task(loaded, now_ms, decision) if not noop else self._task(loaded, now_ms),
            now_ms=now_ms,
            command=command,
            noop=noop,
        )

    async def commit(
        self,
        decided: Decided,
        *,
        result: bytes = b"",
        token_claims: dict[str, Any] | None = None,
        note: Note | None = None,
        context: bytes | None = None,
    ) -> Applied | Replayed | Reused | None:
        """Commit a decision with its command's rendered `result` and the claims of the join
        token it issued, kept to be signed into every reply (a no-op command stores its outcome
        alone, so a retry replays these bytes: profile §6); None when another writer committed
        since the load (decide again). `context`: the agent's saved context, stored beside the
        snapshot in the same commit when the decision changes the session."""
        command = decided.command
        outcome = (
            outcome_of(
                command,
                decided.session,
                decided.now_ms,
                result,
                token_claims,
            )
            if command is not None
            else None
        )
        commit, applied = self._commit_of(decided, outcome, note)
        if context is not None and commit.changes:
            commit = dataclasses.replace(commit, context=context)
        committed = await self.sessions.commit(commit)
        if committed.status == "conflict":
            return None
        if committed.status == "replay":
            assert committed.outcome is not None  # noqa: S101
            assert command is not None  # noqa: S101 - only a command replays
            return replay_of(committed.outcome, command)
        if applied.changed:
            await self._committed(decided, committed.ended_ms)
        return applied

    async def execute(
        self,
        session_id: str,
        event: AnyEvent,
        *,
        owner: str | None = None,
        command: Command | None = None,
        result: bytes = b"",
        only_at_version: int | None = None,
        note: Note | None = None,
        context: bytes | None = None,
    ) -> Outcome:
        """Decide and commit `event`, again after a conflict; a command's `result` is fixed;
        `context` is written with the commit (aim.provider.SaveContext)."""
        linked = note is not None and note.cause in LINKED

        async def attempt() -> Outcome | None:
            decided = await self.decide(
                session_id,
                event,
                owner=owner,
                command=command,
                only_at_version=only_at_version,
                linked=linked,
            )
            if not isinstance(decided, Decided):
                return decided
            return await self.commit(decided, result=result, note=note, context=context)

        return await until_committed(session_id, attempt)

    async def create(
        self,
        record: SessionRecord,
        decision: Accepted[Session],
        task: TaskRecord,
        note: Note | None = None,
    ) -> bool:
        """Commit a new session (version 0 → 1); False when it already exists."""
        session = decision.state
        now_ms = self.now_ms()
        traceparent = current_cause()
        pending = outbox_entries(1, session.epoch, decision.outbox, traceparent)
        event = event_entry(None, session, 1, now_ms, None, task.task, note, traceparent)
        window = window_s(self.settings, session)
        record = msgspec.structs.replace(record, caller=traceparent)
        record, told = notices(self.settings, None, session, record, now_ms=now_ms, window_s=window)
        committed = await self.sessions.commit(
            Commit(
                session.session_id,
                expected_version=0,
                record=record,
                task=task,
                events=[event],
                ttl_s=self.settings.task_ttl_s,
                window_s=window,
                now_ms=now_ms,
                deliveries=told,
                effects=pending,
                due_ms=now_ms + RETRY_GRACE_MS,
                timers=armed_by(self.settings, None, session, 1, now_ms),
                traceparent=traceparent,
            )
        )
        if committed.status != "ok":
            return False
        note_transition(session.session_id, session.epoch, None, None, session.state)
        return True  # the caller carries out provisioning (it may wait)

    async def claim_create(self, owner: str, claim: CreateClaim) -> Claimed:
        """Claim a session's create for `owner` (once per messageId and clientSessionId, within
        the live-session and task limits). At the live-session limit, the owner's live index is
        pruned of sessions that ended (a crash may have left them) and the claim tried once
        more."""
        claimed = await self._claim(owner, claim)
        if claimed.status == "limit" and await self._prune_live(owner):
            claimed = await self._claim(owner, claim)
        return claimed

    async def _claim(self, owner: str, claim: CreateClaim) -> Claimed:
        settings = self.settings
        return await self.sessions.claim_create(
            owner,
            message_id=claim.message_id,
            client_session_id=claim.client_session_id,
            task_id=claim.task_id,
            session_id=claim.session_id,
            digest=claim.digest,
            score_ms=claim.now_ms,
            ttl_s=settings.task_ttl_s,
            limit=claim.live_limit,
            task_limit=settings.max_tasks_per_principal,
        )

    async def unclaim_create(self, owner: str, claim: CreateClaim) -> None:
        """Take back a claim this call made, for a session its tenant refused: nothing of the
        refused create stays."""
        await self.sessions.unclaim_create(
            owner,
            message_id=claim.message_id,
            client_session_id=claim.client_session_id,
            task_id=claim.task_id,
            session_id=claim.session_id,
        )

    async def _prune_live(self, owner: str) -> bool:
        """Drop sessions that ended from the owner's live index; True if any."""
        stale = []
        for session_id in await self.sessions.live_sessions(owner):
            loaded = await self.sessions.load(session_id)
            if loaded.record is None or loaded.record.session.state not in machine.LIVE_STATES:
                stale.append(session_id)
        await self._forget_live(owner, stale)
        return bool(stale)

    async def _forget_live(self, owner: str, session_ids: list[str]) -> None:
        """The one place a session leaves its owner's live index (it ended, or it is gone)."""
        await self.sessions.forget_live(owner, session_ids)

    async def record(self, session_id: str, note: Note) -> Applied | Missing | Contended:
        """An event entry for something done to the session that changes none of its state (a
        room deleted or a participant removed by the reconciler): one commit of the unchanged
        snapshot at the next version."""

        async def attempt() -> Applied | Missing | None:
            loaded = await self.sessions.load(session_id)
            if loaded.record is None:
                return Missing(session_id)
            if note.cause in LINKED:
                link_to_cause(loaded.record.caller)
            session, now_ms = loaded.record.session, self.now_ms()
            task = self._task(loaded, now_ms)
            version = loaded.version + 1
            event = event_entry(
                session, session, version, now_ms, None, task.task, note, current_cause()
            )
            committed = await self.sessions.commit(
                Commit(
                    session_id,
                    expected_version=loaded.version,
                    record=loaded.record,
                    task=task,
                    events=[event],
                    ttl_s=self.settings.task_ttl_s,
                    window_s=window_s(self.settings, session),
                    now_ms=now_ms,
                )
            )
            return Applied(session, version, task, True) if committed.status == "ok" else None

        return await until_committed(session_id, attempt)

    def _commit_of(
        self, decided: Decided, outcome: CommandOutcome | None, note: Note | None
    ) -> tuple[Commit, Applied]:
        """What the commit of `decided` writes, and what it answers once written."""
        loaded, new, version = decided.loaded, decided.session, decided.version
        assert loaded.record is not None  # noqa: S101 - checked by decide
        stored = _ENCODER.encode(outcome) if outcome is not None else b""
        command_id = decided.command.command_id if decided.command else None
        if decided.noop:  # decide makes a noop only for a command: its outcome alone
            remembered = Commit(
                decided.session_id,
                expected_version=loaded.version,
                record=loaded.record,
                task=decided.task,
                events=(),
                ttl_s=self.settings.task_ttl_s,
                window_s=window_s(self.settings, new),
                now_ms=decided.now_ms,
                command_id=command_id,
                outcome=stored,
                changes=False,
            )
            return remembered, Applied(new, version, decided.task, False, outcome)
        old = loaded.record.session
        traceparent = current_cause()
        pending = outbox_entries(version, new.epoch, decided.decision.outbox, traceparent)
        event = event_entry(
            old, new, version, decided.now_ms, decided.command, decided.task.task, note, traceparent
        )
        caller = traceparent if cause_of(decided.command, note) in CALLS else loaded.record.caller
        window = window_s(self.settings, new)
        record = msgspec.structs.replace(loaded.record, session=new, caller=caller)
        record, told = notices(
            self.settings, old, new, record, now_ms=decided.now_ms, window_s=window
        )
        commit = Commit(
            decided.session_id,
            expected_version=loaded.version,
            record=record,
            task=decided.task,
            events=[event],
            ttl_s=self.settings.task_ttl_s,
            window_s=window,
            now_ms=decided.now_ms,
            command_id=command_id,
            outcome=stored,
            deliveries=told,
            effects=pending,
            due_ms=decided.now_ms + RETRY_GRACE_MS,
            timers=armed_by(self.settings, old, new, version, decided.now_ms),
            traceparent=traceparent,
            ends=new.state in machine.TERMINAL_STATES and old.state not in machine.TERMINAL_STATES,
        )
        applied = Applied(new, version, decided.task, True, outcome, bool(pending))
        return commit, applied

    async def _committed(self, decided: Decided, ended_ms: int | None) -> None:
        """After a commit that changed the session: an ended one leaves its owner's live
        sessions and is released for its tenant (`ended_ms`: the Redis time the commit stored
        as its end), the agent's presence changes are counted, the span notes the
        transition."""
        record, new = decided.loaded.record, decided.session
        assert record is not None  # noqa: S101 - checked by decide
        old = record.session
        if new.state in machine.TERMINAL_STATES and old.state not in machine.TERMINAL_STATES:
            await self._forget_live(record.owner, [decided.session_id])
            ended = msgspec.structs.replace(record, session=new)
            await self.admission.release(ended, decided.session_id, ended_ms)
            used = usage_of(new)
            self.metrics.session_usage(
                record.tenant,
                used.session_ms / 1000,
                used.connected_ms / 1000,
                used.agent_ms / 1000,
            )
        for change in presence_changes(old, new):
            self.metrics.agent_presence(change)
        for outcome in rotation_outcomes(old, new):
            self.metrics.agent_rotation(outcome, rotation_seam_s(old, new))
        command_id = decided.command.command_id if decided.command else None
        note_transition(decided.session_id, new.epoch, command_id, old.state, new.state)

    def _task(
        self, loaded: Loaded, now_ms: int, decision: Accepted[Session] | None = None
    ) -> TaskRecord:
        """The session's task record after `decision` (as loaded when there is none)."""
        assert loaded.record is not None  # noqa: S101
        if decision is None and loaded.task is not None:
            return loaded.task
        session = decision.state if decision is not None else loaded.record.session
        history = decision.history if decision is not None else ()
        return task_record_for(
            self.project, session, loaded.record.owner, loaded.task, now_ms, history
        )


_ENCODER: Final = msgspec.json.Encoder()
