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
    # provisioning | grace | idle | max | requirement | compact | agent | rotate | deadline | leave
    kind: str
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
    timers.update(_rotation_timers(settings, old, new, version, now_ms))
    if old is None:
        timer = Timer(sid, "max", version, new.epoch, "")
        timers[timer.member] = now_ms + (new.max_s or settings.max_session_s) * 1000
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


def _rotation_timers(
    settings: Settings, old: Session | None, new: Session, version: int, now_ms: int
) -> dict[str, int]:
    """The timers of agent rotation (profile §23): the successor's dispatch ahead of the serving
    agent's deadline (reported, or planned by AIM_AGENT_ROTATE_AFTER_S when an agent joins),
    the deadline itself, the successor's start timer, and the end of a predecessor's grace."""
    timers: dict[str, int] = {}
    if new.state not in LIVE_STATES or new.state == "provisioning":
        return timers
    sid, room_epoch, generation = new.session_id, new.room_epoch, new.agent_generation
    deadline = new.agent_deadline
    if deadline is not None and (old is None or old.agent_deadline != deadline):
        due = ms_of(deadline.at)
        member = f"{generation}#{due}"
        timers[Timer(sid, "deadline", version, room_epoch, member).member] = due
        if new.rotation is None:
            rotate = f"{member}#{deadline.reason}"
            margin_ms = settings.agent_rotate_margin_s * 1000
            if deadline.reason == "planned":  # the configured interval: half of it at most
                margin_ms = min(margin_ms, new.rotate_after_s * 500)
            at = max(now_ms, due - margin_ms)
            timers[Timer(sid, "rotate", version, room_epoch, rotate).member] = at
    rotation = new.rotation
    if (
        rotation is not None
        and rotation.attempt
        and (old is None or old.rotation is None or old.rotation.attempt != rotation.attempt)
    ):
        # not doubled: the serving agent is still there, and the deadline bounds the tries
        timer = Timer(sid, "agent", version, room_epoch, str(rotation.attempt))
        timers[timer.member] = now_ms + settings.agent_start_timeout_s * 1000
    leaving = new.agent_leaving
    if leaving is not None and "|" not in leaving and (old is None or old.agent_leaving != leaving):
        timer = Timer(sid, "leave", version, room_epoch, leaving)
        timers[timer.member] = now_ms + settings.agent_leave_grace_s * 1000
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
