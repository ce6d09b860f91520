"""What a session used (realtime-profile §24): its seconds, the seconds a device was connected,
the seconds the agent was in the room, its handoffs and rotations.

Invariants:
- a device counts as connected while the session is `active` (one active device at most), the
  agent as present while LiveKit says it is in the room (its identity known) and the session is
  live; a rotation's handover keeps the agent present without a gap;
- each clock (`active_since`, `agent_since`) runs from the commit that started it to the commit
  that stopped it, and the time is added once to its total; a session that is no longer live has
  no clock running;
- the usage of a session is fixed once it is over: `usage_of` gives it from the final session.
"""

from __future__ import annotations

from datetime import datetime
from typing import Final

import msgspec

from state_machines.session_model import ACTIVE, LIVE_STATES, EpochBump, Session, replace

SUPERSEDED: Final = "superseded"


class Usage(msgspec.Struct, frozen=True, rename="camel"):
    """A session's usage, whole seconds rounded down (milliseconds beside, for sums)."""

    session_ms: int
    connected_ms: int
    agent_ms: int
    handoffs: int
    rotations: int


def _ms(moment: str) -> int:
    return round(datetime.fromisoformat(moment).timestamp() * 1000)


def _connected(session: Session) -> bool:
    return session.state == ACTIVE


def _agent_present(session: Session) -> bool:
    return session.state in LIVE_STATES and session.agent_identity is not None


def account(before: Session, after: Session, now: str) -> Session:
    """`after` with its clocks started or stopped by the move from `before`."""
    if _connected(after) and not _connected(before):
        after = replace(after, active_since=now)
    elif _connected(before) and not _connected(after) and before.active_since is not None:
        spent = max(0, _ms(now) - _ms(before.active_since))
        after = replace(after, active_ms=before.active_ms + spent, active_since=None)
    if _agent_present(after) and not _agent_present(before):
        after = replace(after, agent_since=now)
    elif _agent_present(before) and not _agent_present(after) and before.agent_since is not None:
        spent = max(0, _ms(now) - _ms(before.agent_since))
        after = replace(after, agent_ms=before.agent_ms + spent, agent_since=None)
    return after


def handoffs(bumps: tuple[EpochBump, ...]) -> int:
    return sum(1 for bump in bumps if bump.reason == SUPERSEDED)


def usage_of(session: Session) -> Usage:
    """The usage of a session that is over (for one still live: so far, its clocks stopped)."""
    end = session.ended_at or session.updated_at
    return Usage(
        session_ms=max(0, _ms(end) - _ms(session.created_at)),
        connected_ms=session.active_ms,
        agent_ms=session.agent_ms,
        handoffs=handoffs(session.bumps),
        rotations=session.rotations,
    )
