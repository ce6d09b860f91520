"""Which durable timers a commit arms (profile §5 defaults, §14 settings), and how long it keeps
what it writes (§20).

A timer is a member `<sessionId>|<kind>|<version>|<epoch>|<endpointId>` of one sorted set scored
by its due time. Timers are never cancelled: one that fires after the session moved on is refused
by the state machine (or, for idle, by the version it was armed at) and does nothing.
"""

from __future__ import annotations

from datetime import datetime
from typing import NamedTuple

from realtime.settings import Settings
from state_machines import Session
from state_machines.session import LIVE_STATES, TERMINAL_STATES
from state_machines.session_model import AWAITING_AGENT


class Timer(NamedTuple):
    session_id: str
    kind: str  # provisioning | grace | idle | max | requirement | compact | agent
    version: int
    epoch: int
    endpoint_id: str

    @property
    def member(self) -> str:
        return "|".join(
            (self.session_id, self.kind, str(self.version), str(self.epoch), self.endpoint_id)
        )

    @classmethod
    def parse(cls, member: str) -> Timer:
        session_id, kind, version, epoch, endpoint_id = member.split("|")
        return cls(session_id, kind, int(version), int(epoch), endpoint_id)


def armed_by(
    settings: Settings, old: Session | None, new: Session, version: int, now_ms: int
) -> dict[str, int]:
    """The timers the move from `old` to `new` (committed as `version`) arms, with due times."""
    timers: dict[str, int] = {}
    sid = new.session_id
    if new.state == "provisioning" and (
        old is None or old.state != "provisioning" or old.epoch != new.epoch
    ):
        timer = Timer(sid, "provisioning", version, new.epoch, "")
        timers[timer.member] = now_ms + settings.provisioning_timeout_s * 1000
    if new.state == "reconnecting" and (old is None or old.state != "reconnecting"):
        timer = Timer(
            sid, "grace", version, new.epoch, f"{new.active_endpoint_id}#{new.disconnects}"
        )
        timers[timer.member] = now_ms + settings.reconnect_grace_s * 1000
    if new.idles != (old.idles if old is not None else 0):
        # armed when the session becomes idle; it fires only if the session stayed idle since
        timer = Timer(sid, "idle", version, new.epoch, str(new.idles))
        timers[timer.member] = now_ms + settings.idle_timeout_s * 1000
    if _awaits_new_agent(old, new):
        # the start timer of the dispatch made now (the room's with the session ready, or a
        # replacement): its job must start in time, longer for each dispatch in a row that
        # started nothing
        timer = Timer(sid, "agent", version, new.room_epoch, str(new.agent_attempt))
        timers[timer.member] = now_ms + settings.agent_start_timeout_s * 1000 * 2**new.agent_misses
    if old is None:
        timer = Timer(sid, "max", version, new.epoch, "")
        timers[timer.member] = now_ms + settings.max_session_s * 1000
    if new.state in TERMINAL_STATES and (old is None or old.state not in TERMINAL_STATES):
        # compacts the ended session (not a session event: the worker rewrites what is stored)
        timer = Timer(sid, "compact", version, new.epoch, "")
        timers[timer.member] = now_ms + settings.compact_after_s * 1000
    waiting_before = {op.operation_id for op in old.operations} if old is not None else set()
    for op in new.operations:
        if op.requirement is not None and op.operation_id not in waiting_before:
            requirement = op.requirement
            timer = Timer(
                sid,
                "requirement",
                version,
                new.epoch,
                f"{op.operation_id}#{requirement.requirement_id}",
            )
            timers[timer.member] = ms_of(requirement.expires_at)
    return timers


def _awaits_new_agent(old: Session | None, new: Session) -> bool:
    """A dispatch whose job has not started became current with this move: the session left
    provisioning with its room's first, or a replacement was dispatched."""
    if new.state not in LIVE_STATES or new.state == "provisioning":
        return False
    if new.agent_state not in AWAITING_AGENT:
        return False
    if old is None or old.state == "provisioning":
        return True
    return (old.room_epoch, old.agent_attempt) != (new.room_epoch, new.agent_attempt)


def window_s(settings: Settings, session: Session) -> int:
    """How long a commit of `session` keeps the command outcomes, the event stream and the
    timeline: the replay window from the commit that ended it; while it is live, the longest it
    may still live as well, so that every outcome outlives the session by the window."""
    if session.state in TERMINAL_STATES:
        return settings.command_ttl_s
    return settings.live_window_s


def ms_of(moment: str) -> int:
    """Milliseconds since the epoch of an RFC 3339 timestamp the service wrote."""
    return int(datetime.fromisoformat(moment.replace("Z", "+00:00")).timestamp() * 1000)
