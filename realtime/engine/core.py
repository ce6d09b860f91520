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
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Final

import msgspec

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
    Missing,
    Outcome,
    Refused,
    Replayed,
    Reused,
    replay_of,
)
from realtime.engine.schedule import armed_by
from realtime.livekit_adapter.tokens import issue_join
from realtime.settings import Settings
from realtime.store.records import CommandOutcome, SessionRecord, TaskRecord
from realtime.store.sessions import Loaded, SessionStore
from realtime.telemetry import Telemetry, current_cause, link_to_cause, note_transition
from realtime.timestamps import timestamp
from state_machines import Accepted, Rejected, Session
from state_machines import AnyEvent as AnyEvent  # what `execute` applies, named for methods/
from state_machines import decide as decide_event
from state_machines import session as machine

log = logging.getLogger(__name__)

MAX_ATTEMPTS: Final = 8
RETRY_GRACE_MS: Final = 5_000  # the worker looks at an outbox the inline runner did not empty


class Engine:
    """Runs events through the session machine and commits them."""

    def __init__(
        self,
        settings: Settings,
        sessions: SessionStore,
        *,
        project: TaskProjection,
        clock: Callable[[], float] = time.time,
        on_effects: Callable[[str], None] | None = None,
        telemetry: Telemetry | None = None,
    ) -> None:
        self.settings = settings
        self.sessions = sessions
        self.project = project
        self.clock = clock
        self.telemetry = telemetry or Telemetry(None)
        # called after a commit that stored effects, so they are carried out right away
        self.on_effects = on_effects

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
        """Load the session and decide `event` against it. `owner` None means a server event
        (webhook, timer, effect follow-up, the reconciler): no ownership check. `linked`: the
        current span links to the session's last call (`LINKED`)."""
        loaded = await self.sessions.load(session_id, command.command_id if command else None)
        record = loaded.record
        if record is None or (owner is not None and record.owner != owner):
            return Missing(session_id)
        if linked:
            link_to_cause(record.caller)
        if loaded.outcome is not None and command is not None:
            return replay_of(loaded.outcome, command)
        now_ms = self.now_ms()
        if only_at_version is not None and loaded.version != only_at_version:
            # armed for a state the session has left (e.g. an idle timer): nothing to do
            return Applied(record.session, loaded.version, self._task(loaded, now_ms), False)
        decision = decide_event(record.session, event, now=timestamp(now_ms))
        if isinstance(decision, Rejected):
            return Refused(decision, record.session)
        decision = without_known_history(decision, loaded.task)
        noop = decision.state == record.session and not decision.has_effects
        if noop and command is None:
            # an idempotent no-op (e.g. ending an ended session): nothing to write
            return Applied(record.session, loaded.version, self._task(loaded, now_ms), False)
        mint = decision.token
        join = (
            issue_join(
                self.settings,
                mint,
                name=record.principal_name,
                session_id=session_id,
                now_ms=now_ms,
            )
            if mint is not None
            else None
        )
        return Decided(
            session_id=session_id,
            loaded=loaded,
            decision=decision,
            session=decision.state,
            version=loaded.version + (0 if noop else 1),
            task=self._task(loaded, now_ms, decision) if not noop else self._task(loaded, now_ms),
            join=join,
            now_ms=now_ms,
            command=command,
            noop=noop,
        )

    async def commit(
        self, decided: Decided, *, result: bytes = b"", note: Note | None = None
    ) -> Applied | Replayed | Reused | None:
        """Commit a decision with its command's rendered `result`; None when another writer
        committed since the load (decide again)."""
        command = decided.command
        outcome = (
            outcome_of(
                command,
                decided.session,
                decided.now_ms,
                result,
                decided.join.claims if decided.join else None,
            )
            if command is not None
            else None
        )
        if decided.noop:
            assert outcome is not None  # noqa: S101 - decide makes a noop only for a command
            # a command that applied as a no-op: its outcome is stored, so a retry replays
            # these bytes (profile §6)
            return await self._remember(decided, outcome)
        return await self._commit(decided, outcome, note)

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
    ) -> Outcome:
        """Decide and commit `event`, again after a conflict; a command's `result` is fixed."""
        fence, linked = only_at_version, note is not None and note.cause in LINKED
        for _ in range(MAX_ATTEMPTS):
            decided = await self.decide(
                session_id,
                event,
                owner=owner,
                command=command,
                only_at_version=fence,
                linked=linked,
            )
            if not isinstance(decided, Decided):
                return decided
            done = await self.commit(decided, result=result, note=note)
            if done is not None:
                return done
        return Contended(session_id)

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
        cause = current_cause()
        pending = outbox_entries(1, session.epoch, decision.outbox, cause)
        event = event_entry(None, session, 1, now_ms, None, task.task, note, cause)
        with self.telemetry.redis_span("commit", session.session_id):
            committed = await self.sessions.commit(
                session.session_id,
                expected_version=0,
                record=msgspec.structs.replace(record, caller=cause),
                task=task,
                command_id=None,
                outcome=b"",
                events=[event],
                effects=pending,
                ttl_s=self.settings.task_ttl_s,
                due_ms=now_ms + RETRY_GRACE_MS,
                timers=armed_by(self.settings, None, session, 1, now_ms),
                now_ms=now_ms,
                cause=cause,
            )
        if committed.status != "ok":
            return False
        note_transition(session.session_id, session.epoch, None, None, session.state)
        return True  # the caller carries out provisioning (it may wait)

    async def record(self, session_id: str, note: Note) -> Applied | Missing | Contended:
        """An event entry for something done to the session that changes none of its state (a
        room deleted or a participant removed by the reconciler): one commit of the unchanged
        snapshot at the next version."""
        for _ in range(MAX_ATTEMPTS):
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
            with self.telemetry.redis_span("commit", session_id):
                committed = await self.sessions.commit(
                    session_id,
                    expected_version=loaded.version,
                    record=loaded.record,
                    task=task,
                    command_id=None,
                    outcome=b"",
                    events=[event],
                    effects=[],
                    ttl_s=self.settings.task_ttl_s,
                    due_ms=now_ms,
                    now_ms=now_ms,
                )
            if committed.status == "ok":
                return Applied(session, version, task, True)
        return Contended(session_id)

    async def _commit(
        self, decided: Decided, outcome: CommandOutcome | None, note: Note | None
    ) -> Applied | Replayed | Reused | None:
        loaded, new, version = decided.loaded, decided.session, decided.version
        assert loaded.record is not None  # noqa: S101 - checked by decide
        old = loaded.record.session
        command_id = decided.command.command_id if decided.command else None
        cause = current_cause()
        pending = outbox_entries(version, new.epoch, decided.decision.outbox, cause)
        event = event_entry(
            old, new, version, decided.now_ms, decided.command, decided.task.task, note, cause
        )
        caller = cause if cause_of(decided.command, note) in CALLS else loaded.record.caller
        with self.telemetry.redis_span("commit", decided.session_id):
            committed = await self.sessions.commit(
                decided.session_id,
                expected_version=loaded.version,
                record=msgspec.structs.replace(loaded.record, session=new, caller=caller),
                task=decided.task,
                command_id=command_id,
                outcome=_ENCODER.encode(outcome) if outcome is not None else b"",
                events=[event],
                effects=pending,
                ttl_s=self.settings.task_ttl_s,
                due_ms=decided.now_ms + RETRY_GRACE_MS,
                timers=armed_by(self.settings, old, new, version, decided.now_ms),
                now_ms=decided.now_ms,
                cause=cause,
            )
        if committed.status == "conflict":
            return None
        if committed.status == "replay":
            assert committed.outcome is not None  # noqa: S101
            assert decided.command is not None  # noqa: S101 - only a command replays
            return replay_of(committed.outcome, decided.command)
        note_transition(decided.session_id, new.epoch, command_id, old.state, new.state)
        if new.state in machine.TERMINAL_STATES and old.state not in machine.TERMINAL_STATES:
            await self.sessions.forget_live(loaded.record.owner, [decided.session_id])
        if pending and self.on_effects is not None:
            self.on_effects(decided.session_id)
        return Applied(new, version, decided.task, True, decided.join, outcome)

    async def _remember(
        self, decided: Decided, outcome: CommandOutcome
    ) -> Applied | Replayed | Reused | None:
        """Store the outcome of a command that applied as a no-op; None on a version conflict."""
        with self.telemetry.redis_span("remember", decided.session_id):
            kept = await self.sessions.remember(
                decided.session_id,
                expected_version=decided.loaded.version,
                command_id=outcome.command_id,
                outcome=_ENCODER.encode(outcome),
                ttl_s=self.settings.task_ttl_s,
            )
        if kept.status == "conflict":
            return None
        if kept.status == "replay":
            assert kept.outcome is not None  # noqa: S101
            assert decided.command is not None  # noqa: S101
            return replay_of(kept.outcome, decided.command)
        return Applied(decided.session, decided.version, decided.task, False, None, outcome)

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
