"""Which durable timers a commit arms (profile §5 defaults, §14 settings).

A timer is a member `<sessionId>|<kind>|<version>|<epoch>|<endpointId>` of one sorted set scored
by its due time. Timers are never cancelled: one that fires after the session moved on is refused
by the state machine (or, for idle, by the version it was armed at) and does nothing.
"""

from __future__ import annotations

from datetime import datetime
from typing import NamedTuple

from realtime.settings import Settings
from state_machines import Session


class Timer(NamedTuple):
    session_id: str
    kind: str  # provisioning | grace | idle | max | requirement
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
    if old is None:
        timer = Timer(sid, "max", version, new.epoch, "")
        timers[timer.member] = now_ms + settings.max_session_s * 1000
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


def ms_of(moment: str) -> int:
    """Milliseconds since the epoch of an RFC 3339 timestamp the service wrote."""
    return int(datetime.fromisoformat(moment.replace("Z", "+00:00")).timestamp() * 1000)
