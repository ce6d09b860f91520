"""The A2A task a realtime session shows (profile §3, §8): its metadata, its status (with the
open requirement as the status message), and the history messages the session appends.

Pure functions of the session snapshot: the engine writes the projected task in the same commit
as the session, and readers (GetTask, streaming) see exactly what was committed.
"""

from __future__ import annotations

import uuid
from typing import Any, Final

import msgspec

from realtime.a2a import types as wire
from state_machines import Session
from state_machines.effects import AppendHistory
from state_machines.session_model import open_requirement

MAX_HISTORY: Final = 1000  # a task keeps its newest messages


def realtime_metadata(
    session_id: str,
    epoch: int,
    state: str,
    task_version: int,
    agent_state: str | None = None,
    *,
    generation: int = 0,
    successor: int = 0,
) -> dict[str, Any]:
    """The task's `metadata`: where its realtime session stands, and the agent's state as
    clients see it (when known: a status update names it when its commit moved the agent),
    with the serving agent's generation and, during a rotation, its successor's (0: unknown)."""
    found: dict[str, Any] = {
        "sessionId": session_id,
        "sessionEpoch": epoch,
        "sessionState": state,
        "taskVersion": task_version,
    }
    if agent_state is not None:
        found["agentState"] = agent_state
        if generation:
            found["agentGeneration"] = generation
        if successor:
            found["successorGeneration"] = successor
    return {wire.REALTIME_EXTENSION: found}


def shown_agent_state(state: str, *, rotating: bool) -> str:
    """The agent's state as clients see it: `rotating` while a successor is under way (the
    serving agent still answers: nothing for the app to do), else the agent's own."""
    return "rotating" if rotating else state


def task_metadata(session: Session) -> dict[str, Any]:
    rotation = session.rotation
    shown = shown_agent_state(session.agent_state, rotating=rotation is not None)
    return realtime_metadata(
        session.session_id,
        session.epoch,
        session.state,
        session.task_version,
        shown,
        generation=session.agent_generation,
        successor=rotation.generation if rotation is not None else 0,
    )


def requirement_message(session: Session) -> wire.Message | msgspec.UnsetType:
    """The status message of an INPUT_REQUIRED task: the action's title and the requirement
    a client answers with ContinueTask (profile §8)."""
    waiting = open_requirement(session)
    if waiting is None or waiting.requirement is None:
        return msgspec.UNSET
    action = msgspec.json.decode(waiting.action_json or "{}")
    title = action.get("title") if isinstance(action, dict) else None
    requirement = waiting.requirement
    return wire.Message(
        message_id=str(uuid.uuid5(uuid.NAMESPACE_URL, f"requirement:{requirement.requirement_id}")),
        role="ROLE_AGENT",
        parts=[
            wire.Part(text=str(title or "The agent asks for your confirmation.")),
            wire.Part(
                data={
                    "requirementId": requirement.requirement_id,
                    "operationId": waiting.operation_id,
                    "action": action,
                    "actionDigest": requirement.action_digest,
                    "expectedVersion": session.task_version,
                },
                media_type="application/json",
            ),
        ],
        context_id=session.context_id,
        task_id=session.task_id,
    )


# what a user reads when the session failed for a reason they can act on
FAILURE_TEXTS: Final = {
    "agent_unavailable": "No agent could join this session: the agent service did not take it "
    "in time, however often it was asked. Start a new session in a moment; if this keeps "
    "happening, the agent service is down or full and its operator should look at it.",
}


def failure_message(session: Session) -> wire.Message | msgspec.UnsetType:
    """The status message of a FAILED task whose reason a user can act on (see FAILURE_TEXTS):
    what happened in words, and the reason as data."""
    text = FAILURE_TEXTS.get(session.end_reason or "")
    if session.state != "failed" or text is None:
        return msgspec.UNSET
    return wire.Message(
        message_id=str(uuid.uuid5(uuid.NAMESPACE_URL, f"failed:{session.session_id}")),
        role="ROLE_AGENT",
        parts=[
            wire.Part(text=text),
            wire.Part(data={"reason": session.end_reason}, media_type="application/json"),
        ],
        context_id=session.context_id,
        task_id=session.task_id,
    )


def history_message(session: Session, entry: AppendHistory) -> wire.Message:
    parts = msgspec.json.decode(entry.parts_json, type=list[wire.Part])
    return wire.Message(
        message_id=entry.message_id,
        role="ROLE_USER" if entry.role == "user" else "ROLE_AGENT",
        parts=parts,
        context_id=session.context_id,
        task_id=session.task_id,
    )


def new_task(session: Session) -> wire.Task:
    """The task of a session that has none yet (created with it, or repaired)."""
    return wire.Task(
        id=session.task_id,
        context_id=session.context_id,
        status=wire.TaskStatus(state=session.task_state, timestamp=session.created_at),
    )


def _project(
    session: Session,
    previous: wire.Task,
    *,
    changed: bool,
    now_ms: int,
    history: list[AppendHistory] | None = None,
) -> wire.Task:
    """`previous` as it follows `session`: a new status (stamped `now_ms`) when the task
    `changed`, the session's metadata, and `history` appended (the newest MAX_HISTORY kept)."""
    status = (
        wire.TaskStatus(
            state=session.task_state,
            timestamp=wire.timestamp(now_ms),
            message=(
                failure_message(session)
                if session.state == "failed"
                else requirement_message(session)
            ),
        )
        if changed
        else previous.status
    )
    task = msgspec.structs.replace(previous, status=status, metadata=task_metadata(session))
    if history:
        kept = list(task.history) if task.history is not msgspec.UNSET else []
        kept += [history_message(session, entry) for entry in history]
        task = msgspec.structs.replace(task, history=kept[-MAX_HISTORY:])
    return task


def follow(
    session: Session,
    previous: wire.Task | None,
    *,
    changed: bool,
    now_ms: int,
    history: tuple[AppendHistory, ...] = (),
) -> wire.Task:
    """The task `session` shows after a commit: `previous` (a new task when there is none yet)
    as it follows the session. What the engine writes in every commit."""
    return _project(
        session,
        previous if previous is not None else new_task(session),
        changed=changed,
        now_ms=now_ms,
        history=list(history),
    )
