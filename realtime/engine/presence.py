"""What became of the agent's presence in one commit (profile §22): the changes the metric
`aim.agent.presence` counts, the session events report and the operations timeline shows."""

from __future__ import annotations

from datetime import datetime
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


RotationOutcome = Literal["begun", "retried", "handed_over", "replaced", "lost"]


def rotation_outcomes(old: Session | None, new: Session) -> tuple[RotationOutcome, ...]:
    """What became of a rotation in one commit (profile §23): it began; a successor failed and
    another was dispatched (`retried`); the successor took over beside its predecessor
    (`handed_over`) or after it was gone (`replaced`); it ended with no successor taking over
    (`lost`: the deadline passed with none, or the room or the session went)."""
    if old is None:
        return ()
    before, after = old.rotation, new.rotation
    if new.rotations > old.rotations:
        joined = new.agent_leaving is not None and new.agent_leaving != old.agent_leaving
        return ("handed_over" if joined else "replaced",)
    if before is None:
        return ("begun",) if after is not None else ()
    if after is None:
        return ("lost",)
    if after.attempt not in (0, before.attempt):
        return ("retried",)
    return ()


def rotation_seam_s(old: Session | None, new: Session) -> float | None:
    """Seconds from the serving agent's last word during the rotation (else the rotation's
    start) to the commit that handed the session over; None for any other commit."""
    if old is None or old.rotation is None or new.rotations <= old.rotations:
        return None
    since = old.rotation.last_word_at or old.rotation.began_at
    return max(0.0, (_moment(new.updated_at) - _moment(since)).total_seconds())


def _moment(stamp: str) -> datetime:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00"))
