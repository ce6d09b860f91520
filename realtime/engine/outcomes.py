"""What the engine answers (`engine/core.py`): every result of applying an event is one of
these values, and the methods and workers above turn them into results and errors."""

from __future__ import annotations

from dataclasses import dataclass

from realtime.engine.entries import Command
from realtime.store.records import CommandOutcome, Loaded, TaskRecord
from state_machines import Accepted, Rejected, Session


@dataclass(frozen=True, slots=True)
class Applied:
    """The event applied. `changed`: this call committed a transition (False for an accepted
    no-op, or an event fenced by `only_at_version` that no longer applies)."""

    session: Session
    version: int
    task: TaskRecord  # the task as it stands after this call
    changed: bool
    outcome: CommandOutcome | None = None  # a command's outcome as stored
    # the commit stored effects: the caller starts carrying them out (`Runner.follow`)
    pending: bool = False


@dataclass(frozen=True, slots=True)
class Replayed:
    """The commandId was applied before with the same method and params: its stored outcome."""

    outcome: CommandOutcome


@dataclass(frozen=True, slots=True)
class Reused:
    """The commandId was applied before for a different request (another method or params)."""

    outcome: CommandOutcome
    command: Command


@dataclass(frozen=True, slots=True)
class Denied:
    """The core refused the event; nothing was written."""

    rejection: Rejected
    session: Session


@dataclass(frozen=True, slots=True)
class Missing:
    """No such session (or, for a client, not one of the caller's)."""

    session_id: str


@dataclass(frozen=True, slots=True)
class Contended:
    """Other writers committed first MAX_ATTEMPTS times in a row; nothing was written."""

    session_id: str


Outcome = Applied | Replayed | Reused | Denied | Missing | Contended


@dataclass(frozen=True, slots=True)
class Decided:
    """An accepted decision before its commit: the session, version and task as `commit` will
    write them. A `noop` changes no state (it only stores a command's outcome)."""

    session_id: str
    loaded: Loaded
    decision: Accepted[Session]
    session: Session
    version: int
    task: TaskRecord
    now_ms: int
    command: Command | None
    noop: bool
