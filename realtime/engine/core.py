"""Execute one event against a session: load (1 round trip), decide (pure), commit (1 script).

Commands carry a commandId: the lookup of its stored outcome rides in the load, so a replay is one
round trip and an applied command two. A version conflict (another writer committed between our
load and commit) reloads and decides again, a bounded number of times. Effects are stored in the
commit (outbox) and carried out right after it by the runner.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

import msgspec

from realtime.a2a import projection
from realtime.a2a import types as wire
from realtime.a2a.sessions import MEDIA_BINDING
from realtime.engine.entries import (
    Command,
    Note,
    event_entry,
    outbox_entries,
    outcome_of,
    task_record_for,
)
from realtime.engine.rejections import reject
from realtime.engine.schedule import armed_by
from realtime.errors import CommandConflict, SessionNotFound, Unavailable
from realtime.livekit_adapter.api import join_token_claims, sign_join_token
from realtime.settings import Settings
from realtime.store.records import CommandOutcome, SessionRecord, TaskRecord
from realtime.store.sessions import Loaded, SessionStore
from realtime.telemetry import Telemetry, note_transition
from state_machines import Accepted, Rejected, Session, decide
from state_machines import AnyEvent as AnyEvent  # what `execute` applies, named for methods/
from state_machines import session as machine
from state_machines.effects import AppendHistory

log = logging.getLogger(__name__)

MAX_ATTEMPTS: Final = 8
RETRY_GRACE_MS: Final = 5_000  # the worker looks at an outbox the inline runner did not empty
_ENCODER: Final = msgspec.json.Encoder()


# builds a command's stored result from the committed session, its version, the (token-free)
# join media and the task as committed
Render = Callable[[Session, int, dict[str, Any] | None, wire.Task], dict[str, Any]]


@dataclass(frozen=True, slots=True)
class Applied:
    session: Session
    version: int
    response: bytes | None  # the command's result JSON (identical for every replay)
    task: TaskRecord | None  # the task as committed (None for a replay or a no-op)


def _without_known_history(
    decision: Accepted[Session], task: TaskRecord | None
) -> Accepted[Session]:
    """Appending a message the history already holds is a no-op (transcript items and
    messages are idempotent by id)."""
    if not decision.history or task is None or task.task.history is msgspec.UNSET:
        return decision
    known = {message.message_id for message in task.task.history}
    kept = tuple(entry for entry in decision.history if entry.message_id not in known)
    return msgspec.structs.replace(decision, history=kept)


class Engine:
    """Runs events through the session machine and commits them."""

    def __init__(
        self,
        settings: Settings,
        sessions: SessionStore,
        *,
        clock: Callable[[], float] = time.time,
        on_effects: Callable[[str], None] | None = None,
        telemetry: Telemetry | None = None,
    ) -> None:
        self.settings = settings
        self.sessions = sessions
        self.clock = clock
        self.telemetry = telemetry or Telemetry(None)
        # called after a commit that stored effects, so they are carried out right away
        self.on_effects = on_effects

    def now_ms(self) -> int:
        return int(self.clock() * 1000)

    async def load_own(
        self,
        session_id: str,
        owner: str,
        command_id: str | None = None,
        *,
        with_outbox: bool = False,
    ) -> Loaded:
        loaded = await self.sessions.load(session_id, command_id, with_outbox=with_outbox)
        if loaded.record is None or loaded.record.owner != owner:
            raise SessionNotFound(session_id)
        return loaded

    def render_outcome(self, outcome: CommandOutcome) -> bytes:
        """The stored result, with the join token re-signed from its claims (byte-identical)."""
        if outcome.token_claims is None:
            return bytes(outcome.result)
        result = msgspec.json.decode(outcome.result)
        result["media"]["token"] = sign_join_token(self.settings, outcome.token_claims)
        return _ENCODER.encode(result)

    def replay(self, outcome: CommandOutcome, command: Command) -> bytes:
        if outcome.method != command.method or outcome.digest != command.digest:
            raise CommandConflict(
                f"commandId {command.command_id} was already used for a different "
                f"{outcome.method} request; use a new commandId for a new command.",
                details={"commandId": command.command_id, "method": outcome.method},
            )
        return self.render_outcome(outcome)

    async def execute(
        self,
        session_id: str,
        event_for: Callable[[Session], AnyEvent],
        *,
        owner: str | None,
        command: Command | None = None,
        render: Render | None = None,
        only_at_version: int | None = None,
        note: Note | None = None,
    ) -> Applied:
        """Apply the event built by `event_for` (from the current snapshot) and commit it.

        `owner` None means a server event (webhook, timer, effect follow-up, the reconciler): no
        ownership check. `note` goes into the event entry of the transition.
        """
        command_id = command.command_id if command else None
        for _ in range(MAX_ATTEMPTS):
            loaded = await self.sessions.load(session_id, command_id)
            record = loaded.record
            if record is None or (owner is not None and record.owner != owner):
                raise SessionNotFound(session_id)
            if only_at_version is not None and loaded.version != only_at_version:
                # armed for a state the session has left (e.g. an idle timer): nothing to do
                return Applied(record.session, loaded.version, None, None)
            if loaded.outcome is not None and command is not None:
                return Applied(
                    record.session, loaded.version, self.replay(loaded.outcome, command), None
                )
            now_ms = self.now_ms()
            event = event_for(record.session)
            decision = decide(record.session, event, now=wire.timestamp(now_ms))
            if isinstance(decision, Rejected):
                raise reject(decision, record.session)
            decision = _without_known_history(decision, loaded.task)
            if decision.state == record.session and not decision.has_effects:
                # an idempotent no-op (e.g. ending an ended session): no transition, but a
                # command's outcome is stored, so a retry replays these bytes (profile §6)
                if command is None or render is None:
                    return Applied(record.session, loaded.version, None, loaded.task)
                kept = await self._remember(session_id, loaded, command, render, now_ms)
                if kept is not None:
                    return kept
                continue
            applied = await self._commit(
                session_id,
                loaded,
                decision,
                now_ms=now_ms,
                command=command,
                render=render,
                note=note,
            )
            if applied is not None:
                return applied
        raise Unavailable(
            "The session is changing too fast to apply this command; retry it.", service="redis"
        )

    async def create(
        self, record: SessionRecord, decision: Accepted[Session], task: TaskRecord
    ) -> bool:
        """Commit a new session (version 0 → 1); False when it already exists."""
        session = decision.state
        now_ms = self.now_ms()
        pending = outbox_entries(1, session.epoch, decision.outbox)
        event = event_entry(None, session, 1, now_ms, None, task.task.status)
        with self.telemetry.redis_span("commit", session.session_id):
            committed = await self.sessions.commit(
                session.session_id,
                expected_version=0,
                record=record,
                task=task,
                command_id=None,
                outcome=b"",
                events=[event],
                effects=pending,
                ttl_s=self.settings.task_ttl_s,
                due_ms=now_ms + RETRY_GRACE_MS,
                timers=armed_by(self.settings, None, session, 1, now_ms),
            )
        return committed.status == "ok"  # the caller carries out provisioning (it may wait)

    async def _commit(
        self,
        session_id: str,
        loaded: Loaded,
        decision: Accepted[Session],
        *,
        now_ms: int,
        command: Command | None,
        render: Render | None,
        note: Note | None = None,
    ) -> Applied | None:
        assert loaded.record is not None  # noqa: S101 - checked by the caller
        old = loaded.record.session
        new = decision.state
        version = loaded.version + 1
        claims: dict[str, Any] | None = None
        media: dict[str, Any] | None = None
        token = decision.token
        if token is not None:
            claims = join_token_claims(
                self.settings,
                room=token.room,
                identity=token.identity,
                name=loaded.record.principal_name,
                epoch=token.epoch,
                session_id=session_id,
                can_subscribe=token.can_subscribe,
                publish_sources=token.publish_sources,
                now=now_ms // 1000,
            )
            media = {
                "binding": MEDIA_BINDING,
                "url": self.settings.livekit_public_url or "",
                "room": token.room,
                "identity": token.identity,
                "token": "",
                "expiresAt": wire.timestamp(int(claims["exp"]) * 1000),
            }
        task = self._task_for(loaded, new, now_ms, list(decision.history))
        outcome_bytes = b""
        outcome: CommandOutcome | None = None
        if command is not None and render is not None:
            result = render(new, version, media, task.task)
            outcome = outcome_of(command, new, now_ms, result, claims)
            outcome_bytes = _ENCODER.encode(outcome)
        event = event_entry(
            old.state,
            new,
            version,
            now_ms,
            command.command_id if command else None,
            task.task.status,
            note,
        )
        pending = outbox_entries(version, new.epoch, decision.outbox)
        with self.telemetry.redis_span("commit", session_id):
            committed = await self.sessions.commit(
                session_id,
                expected_version=loaded.version,
                record=SessionRecord(
                    owner=loaded.record.owner,
                    principal_name=loaded.record.principal_name,
                    session=new,
                ),
                task=task,
                command_id=command.command_id if command else None,
                outcome=outcome_bytes,
                events=[event],
                effects=pending,
                ttl_s=self.settings.task_ttl_s,
                due_ms=now_ms + RETRY_GRACE_MS,
                timers=armed_by(self.settings, old, new, version, now_ms),
            )
        if committed.status == "conflict":
            return None
        if committed.status == "replay":
            assert committed.outcome is not None  # noqa: S101
            assert command is not None  # noqa: S101
            return Applied(old, loaded.version, self.replay(committed.outcome, command), None)
        note_transition(
            session_id, new.epoch, command.command_id if command else None, old.state, new.state
        )
        if new.state in machine.TERMINAL_STATES and old.state not in machine.TERMINAL_STATES:
            await self.sessions.forget_live(loaded.record.owner, [session_id])
        if pending and self.on_effects is not None:
            self.on_effects(session_id)
        response = self.render_outcome(outcome) if outcome is not None else None
        return Applied(new, version, response, task)

    async def record(self, session_id: str, note: Note) -> bool:
        """An event entry for something done to the session that changes none of its state (a
        room deleted or a participant removed by the reconciler): one commit of the unchanged
        snapshot at the next version. False when there is no such session."""
        for _ in range(MAX_ATTEMPTS):
            loaded = await self.sessions.load(session_id)
            if loaded.record is None:
                return False
            session, now_ms = loaded.record.session, self.now_ms()
            task = self._task_for(loaded, session, now_ms)
            event = event_entry(
                session.state, session, loaded.version + 1, now_ms, None, task.task.status, note
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
                )
            if committed.status == "ok":
                return True
        raise Unavailable(
            "The session is changing too fast to record this; retry it.", service="redis"
        )

    async def _remember(
        self, session_id: str, loaded: Loaded, command: Command, render: Render, now_ms: int
    ) -> Applied | None:
        """Store the outcome of a command that applied as a no-op; None on a version conflict."""
        assert loaded.record is not None  # noqa: S101 - checked by the caller
        session = loaded.record.session
        task = self._task_for(loaded, session, now_ms)
        result = render(session, loaded.version, None, task.task)
        outcome = outcome_of(command, session, now_ms, result, None)
        with self.telemetry.redis_span("remember", session_id):
            kept = await self.sessions.remember(
                session_id,
                expected_version=loaded.version,
                command_id=command.command_id,
                outcome=_ENCODER.encode(outcome),
                ttl_s=self.settings.task_ttl_s,
            )
        if kept.status == "conflict":
            return None
        if kept.status == "replay":
            assert kept.outcome is not None  # noqa: S101
            return Applied(session, loaded.version, self.replay(kept.outcome, command), None)
        return Applied(session, loaded.version, self.render_outcome(outcome), loaded.task)

    def _task_for(
        self,
        loaded: Loaded,
        session: Session,
        now_ms: int,
        history: list[AppendHistory] | None = None,
    ) -> TaskRecord:
        assert loaded.record is not None  # noqa: S101
        previous = loaded.task
        if previous is None:  # a task record always exists beside its session; repair if not
            previous = TaskRecord(
                owner=loaded.record.owner,
                version=0,
                created_at=session.created_at,
                status_ms=now_ms,
                task=projection.new_task(session),
            )
        return task_record_for(session, loaded.record.owner, previous, now_ms, history)
