"""What became of the agent's presence in one commit (profile §22): the changes the metric
`aim.agent.presence` counts, the session events report and the operations timeline shows."""

from __future__ import annotations

from typing import Literal

from state_machines import Session
from state_machines.session_model import agent_started

Change = Literal["started", "joined", "lost", "not_started", "unavailable", "rotating", "rotated"]


def changes(old: Session | None, new: Session) -> tuple[Change, ...]:
    """The agent's presence changes from `old` to `new`, in the order they happened: its job
    started (LiveKit said so, or it joined), it joined the room, it was replaced (`lost`: it
    had started; `not_started`: its dispatch started no job in time), no agent could be had;
    a rotation began (`rotating`: a successor dispatched ahead of the deadline) or handed the
    session to the successor (`rotated`: profile §23)."""
    if old is None:
        return ()
    found: list[Change] = []
    if old.rotation is None and new.rotation is not None:
        found.append("rotating")
    if old.room == new.room and new.rotations > old.rotations:
        found.append("rotated")
        if new.agent_identity is not None and new.agent_identity != old.agent_identity:
            found.append("joined")
        return tuple(found)
    same_dispatch = (old.room, old.agent_attempt) == (new.room, new.agent_attempt)
    if same_dispatch and agent_started(new) and not agent_started(old):
        found.append("started")
    if new.agent_identity is not None and new.agent_identity != old.agent_identity:
        found.append("joined")
    if old.room == new.room and new.agent_attempt > old.agent_attempt:
        found.append("lost" if new.agent_misses == 0 else "not_started")
    if new.end_reason == "agent_unavailable" and old.end_reason is None:
        found.append("unavailable")
    return tuple(found)
