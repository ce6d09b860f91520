"""The session events an app's backend receives (profile §21), computed from one commit's move.

Each commit that changes something a backend cares about yields its events, numbered on from
the session's last `seq` (one per session, from 1, no gaps), and the commit stores them beside
its snapshot, so an event exists exactly when its change does. An event names ids, states,
times and reasons, never message text or tokens (an operation's action is the agent's words,
so only its id and kind are sent).
"""

from __future__ import annotations

from collections.abc import Iterator, Set
from datetime import datetime
from typing import Any, Final

import msgspec

from realtime.engine.presence import changes as presence_changes
from realtime.settings import Settings
from realtime.store.records import SessionRecord
from realtime.store.sessions import Deliveries
from realtime.timestamps import timestamp
from state_machines import Session
from state_machines.usage import usage_of

_ENCODER: Final = msgspec.json.Encoder()
NO_DELIVERIES: Final = Deliveries()
# kept whatever the backlog (decision 162): how a session starts and how it ends (its task's end
# comes with session.ended or session.failed); the others may be dropped when it is full
LASTING: Final = frozenset({"session.created", "session.ready", "session.ended", "session.failed"})
# the event of an operation leaving its question: confirmed (it runs, or a media request
# allowed at once is over), canceled (denied, or canceled), expired (unanswered)
_ANSWERED: Final = {
    "running": "operation.confirmed",
    "succeeded": "operation.confirmed",
    "canceled": "operation.canceled",
    "expired": "operation.expired",
}


class SessionEvent(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """One event as sent: the body of the POST to AIM_EVENTS_URL."""

    type: str
    session_id: str
    task_id: str
    principal: dict[str, str | None]
    seq: int
    session_epoch: int
    occurred_at: str
    data: dict[str, Any]


def notices(
    settings: Settings,
    old: Session | None,
    new: Session,
    record: SessionRecord,
    *,
    now_ms: int,
    window_s: int,
) -> tuple[SessionRecord, Deliveries]:
    """The record with its last seq moved on, and the session events of a commit (none when
    they are not configured). They are kept for the replay window, and at least as long as
    they may be retried."""
    if not settings.events_enabled:
        return record, NO_DELIVERIES
    last = record.events_seq if isinstance(record.events_seq, int) else 0
    found = _numbered(old, new, record, seq=last, now_ms=now_ms, types=settings.events_types)
    if not found:
        return record, NO_DELIVERIES
    kept = Deliveries(
        [(seq, body) for seq, _, body in found],
        settings.events_max_per_session,
        max(window_s, settings.events_retry_s),
        frozenset(seq for seq, kind, _ in found if kind in LASTING),
    )
    return msgspec.structs.replace(record, events_seq=found[-1][0]), kept


def webhook_id(session_id: str, seq: int) -> str:
    """The `webhook-id` of an event: the same on every attempt and every redelivery."""
    return f"{session_id}:{seq}"


def session_events(
    old: Session | None,
    new: Session,
    record: SessionRecord,
    *,
    seq: int,
    now_ms: int,
    types: Set[str],
) -> list[tuple[int, bytes]]:
    """The encoded events of the move `old` → `new` (None: created) that `types` asks for,
    numbered from `seq` + 1."""
    found = _numbered(old, new, record, seq=seq, now_ms=now_ms, types=types)
    return [(number, body) for number, _, body in found]


def _numbered(
    old: Session | None,
    new: Session,
    record: SessionRecord,
    *,
    seq: int,
    now_ms: int,
    types: Set[str],
) -> list[tuple[int, str, bytes]]:
    """(seq, type, body) of each event `session_events` gives."""
    found = [(kind, data) for kind, data in _moves(old, new) if kind in types]
    principal = {"tenant": record.tenant, "sub": record.principal_name}
    at = timestamp(now_ms)
    return [
        (
            seq + index,
            kind,
            _ENCODER.encode(
                SessionEvent(
                    type=kind,
                    session_id=new.session_id,
                    task_id=new.task_id,
                    principal=principal,
                    seq=seq + index,
                    session_epoch=new.epoch,
                    occurred_at=at,
                    data=data,
                )
            ),
        )
        for index, (kind, data) in enumerate(found, start=1)
    ]


def _moves(old: Session | None, new: Session) -> Iterator[tuple[str, dict[str, Any]]]:
    """What the commit did, in the order a reader expects: the agent replaced, the session,
    the agent joined, then the operations."""
    presence = presence_changes(old, new)
    for change in presence:
        if change in ("lost", "not_started"):
            # the next dispatch into the same room: why the one before it is gone
            yield "agent.replaced", {"dispatchAttempt": new.agent_attempt, "reason": change}
    if old is None:
        yield "session.created", {"state": new.state, "requested": _requested(new)}
    before = old.state if old is not None else None
    if new.state != before:
        if new.state == "ready" and before in (None, "provisioning"):
            yield "session.ready", {"room": new.room}
        elif new.state == "active":
            yield "session.active", {"endpointId": new.active_endpoint_id}
        elif new.state == "ended":
            yield "session.ended", _ended(new)
        elif new.state == "failed":
            yield "session.failed", {"reason": new.end_reason, "usage": usage_data(new)}
    if old is not None and new.epoch != old.epoch:
        if new.rebinds != old.rebinds:
            yield "session.rebound", {"fromEpoch": old.epoch, "room": new.room}
        else:
            superseded = [
                e.endpoint_id
                for e in new.endpoints
                if e.state == "superseded"
                and next((o.state for o in old.endpoints if o.endpoint_id == e.endpoint_id), None)
                != "superseded"
            ]
            yield (
                "session.handoff",
                {
                    "fromEpoch": old.epoch,
                    "endpointId": new.active_endpoint_id,
                    "supersededEndpointIds": superseded,
                },
            )
    if "rotated" in presence and old is not None:
        rotated = {
            "fromGeneration": old.agent_generation,
            "toGeneration": new.agent_generation,
            "reason": old.rotation.reason if old.rotation is not None else None,
            # joined: the successor came in beside its predecessor, which was told to leave;
            # replaced: the predecessor was gone first (lost, or its deadline passed)
            "handover": (
                "joined"
                if new.agent_leaving is not None and new.agent_leaving != old.agent_leaving
                else "replaced"
            ),
        }
        yield "agent.rotated", rotated
    if "joined" in presence:
        joined = {"identity": new.agent_identity, "dispatchAttempt": new.agent_attempt}
        yield "agent.joined", joined
    yield from _operations(old, new)


def _operations(old: Session | None, new: Session) -> Iterator[tuple[str, dict[str, Any]]]:
    before = {op.operation_id: op.state for op in old.operations} if old is not None else {}
    for op in new.operations:
        was = before.get(op.operation_id)
        if was == op.state:
            continue
        base = {"operationId": op.operation_id, "kind": op.kind, "createdBy": op.created_by}
        if was is None:
            expires = op.requirement.expires_at if op.requirement is not None else None
            yield (
                "operation.requested",
                {**base, "state": op.state, "confirmation": expires is not None}
                | ({"expiresAt": expires} if expires is not None else {}),
            )
        if was in (None, "pending", "awaiting_confirmation") and op.state in _ANSWERED:
            if was is None and op.state == "running" and op.requirement is None:
                continue  # started without a question: nothing was confirmed
            yield _ANSWERED[op.state], {**base, "state": op.state}


def _requested(session: Session) -> dict[str, Any]:
    requested = session.requested
    return {
        "interactions": list(requested.interactions),
        "userVideoSources": list(requested.user_video_sources),
        "agentVideoSources": list(requested.agent_video_sources),
    }


def usage_data(session: Session) -> dict[str, Any]:
    """What the session used (profile §24), in seconds (to the millisecond) and counts."""
    used = usage_of(session)
    return {
        "sessionSeconds": used.session_ms / 1000,
        "connectedSeconds": used.connected_ms / 1000,
        "agentSeconds": used.agent_ms / 1000,
        "handoffs": used.handoffs,
        "rotations": used.rotations,
    }


def _ended(session: Session) -> dict[str, Any]:
    """How the session ended: why, when it started and ended, how long a device was in it
    (from the first JoinSession to the end) and which devices joined."""
    joined = [e for e in session.endpoints if e.joined_at is not None]
    first = min((e.joined_at for e in joined if e.joined_at is not None), default=None)
    seconds = 0.0
    if first is not None and session.ended_at is not None:
        elapsed = datetime.fromisoformat(session.ended_at) - datetime.fromisoformat(first)
        seconds = max(0.0, round(elapsed.total_seconds(), 3))
    return {
        "usage": usage_data(session),
        "reason": session.end_reason,
        "canceled": session.canceled,
        "startedAt": session.created_at,
        "endedAt": session.ended_at,
        "secondsActive": seconds,
        "endpoints": [
            {"endpointId": e.endpoint_id, "clientEndpointKey": e.client_endpoint_key}
            for e in joined
        ],
    }
