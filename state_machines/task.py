"""The A2A task lifecycle (a2a.proto TaskState; a2a-1.0-notes §6).

Invariants:
- terminal states (COMPLETED, FAILED, CANCELED, REJECTED) absorb: no event leaves them;
- every accepted event bumps `version` by exactly one, so a client can compare versions;
- only the transitions in TRANSITIONS exist; anything else is rejected with the allowed events.
"""

from __future__ import annotations

from typing import Final, Literal

import msgspec

from state_machines._base import Accepted, Rejected, RejectReason

TaskState = Literal[
    "TASK_STATE_SUBMITTED",
    "TASK_STATE_WORKING",
    "TASK_STATE_INPUT_REQUIRED",
    "TASK_STATE_AUTH_REQUIRED",
    "TASK_STATE_COMPLETED",
    "TASK_STATE_FAILED",
    "TASK_STATE_CANCELED",
    "TASK_STATE_REJECTED",
]
TaskEvent = Literal[
    "start", "require_input", "require_auth", "resume", "complete", "fail", "cancel", "reject"
]

SUBMITTED: Final = "TASK_STATE_SUBMITTED"
WORKING: Final = "TASK_STATE_WORKING"
INPUT_REQUIRED: Final = "TASK_STATE_INPUT_REQUIRED"
AUTH_REQUIRED: Final = "TASK_STATE_AUTH_REQUIRED"
COMPLETED: Final = "TASK_STATE_COMPLETED"
FAILED: Final = "TASK_STATE_FAILED"
CANCELED: Final = "TASK_STATE_CANCELED"
REJECTED: Final = "TASK_STATE_REJECTED"

TERMINAL: Final[frozenset[TaskState]] = frozenset({COMPLETED, FAILED, CANCELED, REJECTED})

_LIVE: Final[tuple[TaskState, ...]] = (SUBMITTED, WORKING, INPUT_REQUIRED, AUTH_REQUIRED)

TRANSITIONS: Final[dict[tuple[TaskState, TaskEvent], TaskState]] = {
    (SUBMITTED, "start"): WORKING,
    (SUBMITTED, "reject"): REJECTED,
    (WORKING, "require_input"): INPUT_REQUIRED,
    (WORKING, "require_auth"): AUTH_REQUIRED,
    (INPUT_REQUIRED, "resume"): WORKING,
    (AUTH_REQUIRED, "resume"): WORKING,
    **{(state, "complete"): COMPLETED for state in _LIVE},
    **{(state, "fail"): FAILED for state in _LIVE},
    **{(state, "cancel"): CANCELED for state in _LIVE},
}


class TaskCore(msgspec.Struct, frozen=True):
    """What the lifecycle needs to know about a task."""

    state: TaskState
    version: int = 0


def allowed_events(state: TaskState) -> tuple[TaskEvent, ...]:
    """The events `state` accepts, in table order."""
    return tuple(event for (source, event) in TRANSITIONS if source == state)


def is_terminal(state: TaskState) -> bool:
    return state in TERMINAL


def decide(task: TaskCore, event: TaskEvent) -> Accepted[TaskCore] | Rejected:
    """Apply `event` to `task`: the next state with the version bumped, or a rejection."""
    target = TRANSITIONS.get((task.state, event))
    if target is None:
        return Rejected(
            reason=RejectReason.INVALID_STATE,
            state=task.state,
            allowed=allowed_events(task.state),
            detail=f"a task in {task.state} does not accept `{event}`",
        )
    return Accepted(TaskCore(state=target, version=task.version + 1))


def created(event: TaskEvent) -> Accepted[TaskCore] | Rejected:
    """A new task: SUBMITTED with version 0, then `event` (e.g. `start` or `reject`)."""
    return decide(TaskCore(state=SUBMITTED), event)
