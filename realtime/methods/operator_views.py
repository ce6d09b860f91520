"""The operator API (profile §17): read-only views of the sessions for operators.

- `list_sessions`: live and recent sessions, newest commit first, filtered by state and
  principal, paged with an opaque cursor (a position in `aim:{ops}:sessions`);
- `session_detail`: the Session object of §4 with its principal, outbox, armed timers (each
  marked `stale` when the session has moved past it: it will be refused when it comes due)
  and pending operations;
- `timeline`: what happened to a session, oldest first, merged from its event stream (one
  entry per commit, carrying the cause, the call or webhook behind it and the trace id) and its
  timeline stream (what no commit carries: replays, rejections, other webhooks, LiveKit calls,
  refused timers); paged with a cursor holding a position in each.

With a tenant claim configured an operator sees its tenant's sessions only; any other session is
answered like an unknown one. Nothing here shows message text: no task status or history, no
operation action, result or error, no data message body.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Mapping
from datetime import UTC, date, datetime, timedelta
from typing import Any, Final

import msgspec

from realtime.a2a import sessions as views
from realtime.a2a.projection import shown_agent_state
from realtime.auth import Principal
from realtime.engine.entries import CALLS
from realtime.engine.schedule import Timer
from realtime.errors import SessionNotFound, invalid_params
from realtime.methods.context import OperatorDeps
from realtime.policy import Limits
from realtime.settings import Settings
from realtime.store.events import Entry, is_entry_id
from realtime.store.operator_reads import EVERY, Position
from realtime.store.records import EVENT_DECODER, Cause, EventEntry, PendingEffect, SessionRecord
from realtime.store.timeline import TIMELINE_DECODER
from realtime.timestamps import timestamp
from realtime.worker.runner import livekit_call
from realtime.worker.timers import fires
from state_machines import Session
from state_machines import operation as operations
from state_machines.session_model import SESSION_STATES
from state_machines.usage import Usage

SESSIONS_LIMIT: Final = 50  # a listing page, unless `limit` says otherwise (1..200)
SESSIONS_LIMIT_MAX: Final = 200
TIMELINE_LIMIT: Final = 200  # timeline entries of a page, unless `limit` says otherwise
TIMELINE_LIMIT_MAX: Final = 1000
# index entries one listing page looks at, at most, while a filter finds too few: a filtered
# page may come back short (with a cursor) rather than take unbounded time
SCAN_MAX: Final = 2000
SCAN_BATCH: Final = 100
_UUID: Final = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
_START: Final = "0-0"


def visible(settings: Settings, operator: Principal, record: SessionRecord) -> bool:
    """Whether `operator` may see the session: any, unless a tenant claim is configured; then
    only its tenant's (a session's owner key is the hash of its principal's tenant and sub)."""
    if settings.auth_tenant_claim is None:
        return True
    try:
        same = Principal(subject=record.principal_name, tenant=operator.tenant, scopes=frozenset())
    except ValueError:  # a subject no principal can hold any more (stored before the rule)
        return False
    return record.owner == same.key


# --- GET /ops/api/sessions ------------------------------------------------------------------------


async def list_sessions(
    deps: OperatorDeps, operator: Principal, query: Mapping[str, str]
) -> dict[str, Any]:
    """`{sessions: [summary], nextCursor}`: newest commit first."""
    state = query.get("state") or None
    if state is not None and state not in SESSION_STATES:
        raise invalid_params("state", f"must be one of {', '.join(SESSION_STATES)}")
    principal = query.get("principal") or None
    limit = _limit(query, SESSIONS_LIMIT, SESSIONS_LIMIT_MAX)
    position = _session_cursor(query.get("cursor"))
    store = deps.reads
    prune_before = deps.now_ms() - deps.settings.task_ttl_s * 1000
    found: list[dict[str, Any]] = []
    examined, exhausted = 0, False
    # a tenant's operator reads its tenant's own index: its cost does not grow with the others'
    index = EVERY if deps.settings.auth_tenant_claim is None else (operator.tenant or "")
    # without a filter a page is one batch; with one, batches large enough that a page rarely
    # needs a second
    filtered = bool(state or principal)
    while len(found) < limit and examined < SCAN_MAX:
        batch = max(SCAN_BATCH, limit) if filtered else limit - len(found)
        entries = await store.recent(
            index, after=position, count=batch, prune_before_ms=prune_before
        )
        listed = await store.listed(entries)
        await store.forget(index, [item.session_id for item in listed if item.record is None])
        taken = 0
        for item in listed:
            examined += 1
            taken += 1
            position = (item.score, item.session_id)
            record = item.record
            if record is None or not visible(deps.settings, operator, record):
                continue
            if (state and record.session.state != state) or (
                principal and record.principal_name != principal
            ):
                continue
            found.append(summary(record))
            if len(found) == limit:
                break
        if len(entries) < batch and taken == len(entries):
            exhausted = True  # the index is read out (as it stands now)
            break
    cursor = None if exhausted or position is None else _encode(str(position[0]), position[1])
    return {"sessions": found, "nextCursor": cursor}


def summary(record: SessionRecord) -> dict[str, Any]:
    """What a listing shows of one session."""
    session = record.session
    item: dict[str, Any] = {
        "sessionId": session.session_id,
        "taskId": session.task_id,
        "principal": record.principal_name,
        "state": session.state,
        "sessionEpoch": session.epoch,
        "createdAt": session.created_at,
        "updatedAt": session.updated_at,
        "room": session.room,
        "agentState": shown_agent_state(session.agent_state, rotating=session.rotation is not None),
    }
    if session.end_reason is not None:
        item["endReason"] = session.end_reason
    if session.active_endpoint_id is not None:
        item["activeEndpointId"] = session.active_endpoint_id
    return item


# --- GET /ops/api/sessions/{sessionId} ------------------------------------------------------------


async def session_detail(
    deps: OperatorDeps, operator: Principal, session_id: str
) -> dict[str, Any]:
    """The Session object of §4 plus `principal`, `outbox`, `timers`, `pendingOperations`."""
    check_id(session_id)
    detail = await deps.reads.detail(session_id)
    record = detail.record
    if record is None or not visible(deps.settings, operator, record):
        raise SessionNotFound(session_id)
    session = record.session
    view: dict[str, Any] = msgspec.to_builtins(
        views.session_view(
            session, version=detail.version, media_url=deps.settings.livekit_public_url or ""
        )
    )
    view["principal"] = record.principal_name
    view["outbox"] = [outbox_item(effect_id, entry) for effect_id, entry in detail.outbox]
    view["timers"] = timers_of(detail.timers, session, detail.version, deps.now_ms())
    view["pendingOperations"] = [
        operation_item(op) for op in session.operations if not operations.is_terminal(op.state)
    ]
    return {"session": view}


def outbox_item(effect_id: str, entry: PendingEffect) -> dict[str, Any]:
    """A pending effect: the LiveKit call, its room and participant, attempts, last error —
    never a data message's body."""
    effect = entry.effect
    item: dict[str, Any] = {
        "effectId": effect_id,
        "effect": livekit_call(effect),
        "room": getattr(effect, "room", ""),
        "epoch": entry.epoch,
        "attempts": entry.attempts,
    }
    identity = getattr(effect, "identity", None)
    if identity:
        item["identity"] = identity
    if entry.last_error is not None:
        item["lastError"] = entry.last_error
    if entry.last_attempt_at is not None:
        item["lastAttemptAt"] = entry.last_attempt_at
    return item


def timers_of(
    armed: Mapping[str, int], session: Session, version: int, now_ms: int
) -> list[dict[str, Any]]:
    """Armed timers, soonest first: kind, due time, the epoch they were armed at, and `stale`:
    the session (as it is now, at `version`) has moved past it, so it will be refused when it
    comes due (an older epoch, a kind its state no longer accepts, …)."""
    found = []
    for member, due_ms in armed.items():
        try:
            timer = Timer.parse(member)
        except ValueError:
            continue
        found.append((due_ms, timer))
    found.sort()
    return [
        {
            "kind": timer.kind,
            "dueAt": timestamp(due_ms),
            "epoch": timer.epoch,
            "stale": not fires(timer, session, version, max(now_ms, due_ms)),
        }
        for due_ms, timer in found
    ]


def operation_item(op: operations.Operation) -> dict[str, Any]:
    """A pending operation by kind and state (its action is the agent's text: left out)."""
    item: dict[str, Any] = {
        "operationId": op.operation_id,
        "kind": op.kind,
        "state": op.state,
        "createdBy": op.created_by,
        "createdAt": op.created_at,
        "updatedAt": op.updated_at,
    }
    if op.requirement is not None:
        item["requirement"] = {
            "requirementId": op.requirement.requirement_id,
            "expiresAt": op.requirement.expires_at,
        }
    if op.media_side is not None and op.media_source is not None:
        item["media"] = {"side": op.media_side, "source": op.media_source}
    return item


# --- GET /ops/api/sessions/{sessionId}/timeline ---------------------------------------------------


async def timeline(
    deps: OperatorDeps, operator: Principal, session_id: str, query: Mapping[str, str]
) -> dict[str, Any]:
    """`{entries, nextCursor}`: oldest first; each source entry appears once across pages."""
    check_id(session_id)
    limit = _limit(query, TIMELINE_LIMIT, TIMELINE_LIMIT_MAX)
    events_after, noted_after = _timeline_cursor(query.get("cursor"))
    read = await deps.reads.timeline(
        session_id, events_after=events_after, noted_after=noted_after, count=limit
    )
    if read.record is None or not visible(deps.settings, operator, read.record):
        raise SessionNotFound(session_id)
    entries, events_at, noted_at, done = merge(read.events, read.noted, limit)
    return {
        "entries": entries,
        "nextCursor": None if done else _encode(events_at or events_after, noted_at or noted_after),
    }


def merge(
    events: list[Entry], noted: list[Entry], limit: int
) -> tuple[list[dict[str, Any]], str | None, str | None, bool]:
    """Up to `limit` entries of both streams by time (each stream consumed in its own order, so
    a cursor is a position in each; a commit's entries stay together, so a page holds at least
    one commit's whatever `limit`); the last ids consumed, and whether both are read out."""
    out: list[dict[str, Any]] = []
    i = j = 0
    events_at = noted_at = None
    while i < len(events) or j < len(noted):
        if i == len(events) and len(events) == limit:
            break  # the event stream may hold more, older than the next timeline entry
        if j == len(noted) and len(noted) == limit:
            break
        first = _event(events[i][1]) if i < len(events) else None
        second = _decoded(noted[j][1]) if j < len(noted) else None
        first_at = first.at if first is not None else ""
        take_event = i < len(events) and (second is None or first_at <= _at(second))
        batch = from_event(first) if take_event else [second or {}]
        if out and len(out) + len(batch) > limit:
            break
        out.extend(batch)
        if take_event:
            events_at, i = events[i][0], i + 1
        else:
            noted_at, j = noted[j][0], j + 1
    # read out: every entry read was consumed, and neither stream was cut at `limit`
    done = i == len(events) and j == len(noted) and len(events) < limit and len(noted) < limit
    # the timeline stream is in the order of its writes (a batch lands up to a flush interval
    # after its entries happened): the page is put in the order things happened
    out.sort(key=_at)
    return out, events_at, noted_at, done


def from_event(event: EventEntry | None) -> list[dict[str, Any]]:
    """What one commit shows: the call, webhook, timer or correction behind it, the transition
    (every commit is one, its state changed or not), the agent's presence if it changed, the
    operations it moved."""
    if event is None:  # an entry this release cannot read
        return [{"at": "", "kind": "unreadable"}]
    base: dict[str, Any] = {"at": event.at}
    if event.trace_id:
        base["traceId"] = event.trace_id
    cause = event.cause or (Cause.COMMAND if event.command_id else None)
    shown: list[dict[str, Any]] = []
    if cause in CALLS and event.method:
        command = {**base, "kind": "command", "method": event.method, "outcome": "applied"}
        if event.command_id:
            command["commandId"] = event.command_id
        if event.generation:  # a provider call: which of the session's agents made it
            command["generation"] = event.generation
        shown.append(command)
    elif cause == Cause.WEBHOOK and event.webhook is not None:
        hook = event.webhook
        shown.append(
            {**base, "kind": "webhook", "event": hook.event, "id": hook.id, "verdict": "applied"}
        )
    elif cause == Cause.TIMER and event.timer:
        shown.append({**base, "kind": "timer", "timer": event.timer, "result": "fired"})
    elif cause == Cause.RECONCILER and event.correction is not None:
        shown.append({**base, "kind": "reconciler", "correction": event.correction})
    transition = {
        **base,
        "kind": "transition",
        "from": event.from_,
        "to": event.to,
        "epoch": event.epoch,
        "version": event.version,
        "cause": cause,
    }
    if cause == Cause.EFFECT and event.effect:
        transition["effect"] = event.effect
    shown.append(transition)
    if event.agent is not None:
        moved = event.agent
        agent = {"from": moved.from_, "to": moved.to, "dispatchAttempt": moved.dispatch_attempt}
        if moved.generation:  # the serving agent's generation, and a successor under way
            agent["generation"] = moved.generation
        if moved.successor:
            agent |= {"successor": moved.successor, "successorAttempt": moved.successor_attempt}
        shown.append({**base, "kind": "agent", **agent, "changes": list(moved.changes)})
    shown.extend(
        {**base, "kind": "operation", **msgspec.to_builtins(moved)} for moved in event.operations
    )
    return shown


def _event(raw: bytes) -> EventEntry | None:
    try:
        return EVENT_DECODER.decode(raw)
    except msgspec.DecodeError:
        return None


def _decoded(raw: bytes) -> dict[str, Any]:
    """A timeline stream entry as the page shows it: its members (`TimelineEntry`), nothing
    else it may hold."""
    try:
        shown: dict[str, Any] = msgspec.to_builtins(TIMELINE_DECODER.decode(raw))
    except (msgspec.DecodeError, msgspec.ValidationError):
        return {"at": "", "kind": "unreadable"}
    return shown


def _at(entry: dict[str, Any]) -> str:
    at = entry.get("at")
    return at if isinstance(at, str) else ""


# --- params ---------------------------------------------------------------------------------------


def check_id(session_id: str) -> None:
    """A session id is a lower-case UUID; anything else is not found (like an unknown one)."""
    if not _UUID.fullmatch(session_id):
        raise SessionNotFound(session_id)


def _limit(query: Mapping[str, str], default: int, maximum: int) -> int:
    raw = query.get("limit")
    if raw is None or raw == "":
        return default
    # ASCII digits only: str.isdigit() also takes '²', which int() does not
    if not (raw.isascii() and raw.isdigit()) or not 1 <= int(raw) <= maximum:
        raise invalid_params("limit", f"must be an integer from 1 to {maximum}")
    return int(raw)


def _encode(*parts: str) -> str:
    return base64.urlsafe_b64encode("|".join(parts).encode()).decode().rstrip("=")


def _decode(cursor: str, count: int) -> list[str]:
    try:
        text = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
    except (binascii.Error, UnicodeDecodeError, ValueError):
        raise invalid_params("cursor", "is not a cursor this API issued") from None
    parts = text.split("|")
    if len(parts) != count:
        raise invalid_params("cursor", "is not a cursor this API issued")
    return parts


def _session_cursor(cursor: str | None) -> Position | None:
    if not cursor:
        return None
    score, session_id = _decode(cursor, 2)
    if not (score.isascii() and score.isdigit() and len(score) <= 20) or not _UUID.fullmatch(
        session_id
    ):
        raise invalid_params("cursor", "is not a cursor this API issued")
    return int(score), session_id


def _timeline_cursor(cursor: str | None) -> tuple[str, str]:
    if not cursor:
        return _START, _START
    events_after, noted_after = _decode(cursor, 2)
    if not (is_entry_id(events_after) and is_entry_id(noted_after)):
        raise invalid_params("cursor", "is not a cursor this API issued")
    return events_after, noted_after


# --- GET /ops/api/usage ---------------------------------------------------------------------------

# days one usage listing covers at most (a quarter): one round trip of as many HVALS
MAX_USAGE_DAYS: Final = 93
DEFAULT_USAGE_DAYS: Final = 31
USAGE_COLUMNS: Final = (
    "day",
    "sessions",
    "sessionSeconds",
    "connectedSeconds",
    "agentSeconds",
    "handoffs",
    "rotations",
)
_USAGE_DECODER: Final = msgspec.json.Decoder(Usage)


def _day(query: Mapping[str, str], name: str, default: date) -> date:
    raw = query.get(name)
    if raw is None:
        return default
    try:
        parsed = date.fromisoformat(raw)
    except ValueError:
        raise invalid_params(name, "must be a UTC day, YYYY-MM-DD") from None
    if len(raw) != len("YYYY-MM-DD"):
        raise invalid_params(name, "must be a UTC day, YYYY-MM-DD")
    return parsed


async def usage(deps: OperatorDeps, operator: Principal, query: Mapping[str, str]) -> Any:
    """The usage of the operator's tenant (every session's when no tenant claim is configured)
    per UTC day from `from` to `to` (both included; the last 31 days by default, 93 at most):
    `{tenant, from, to, days: [{day, sessions, sessionSeconds, connectedSeconds, agentSeconds,
    handoffs, rotations}], limits, now}` with a row per day that had sessions end, the limits
    the tenant policy sets it (`limits`, null without a policy file; a limit that does not
    apply null) and where it stands now (`now`: live sessions, session minutes of the UTC day
    and month, live sessions' included), or the rows alone as CSV (`format=csv`; bytes)."""
    fmt = query.get("format", "json")
    if fmt not in ("json", "csv"):
        raise invalid_params("format", "must be json or csv")
    today = datetime.fromtimestamp(deps.now_ms() / 1000, tz=UTC).date()
    last = _day(query, "to", today)
    first = _day(query, "from", last - timedelta(days=DEFAULT_USAGE_DAYS - 1))
    span = (last - first).days + 1
    if span < 1:
        raise invalid_params("from", "must not be after `to`")
    if span > MAX_USAGE_DAYS:
        raise invalid_params("from", f"a listing covers {MAX_USAGE_DAYS} days at most")
    tenant = operator.tenant if deps.settings.auth_tenant_claim is not None else None
    days = [(first + timedelta(days=n)).isoformat() for n in range(span)]
    rows = []
    for day, entries in zip(days, await deps.reads.usage(tenant, days), strict=True):
        if not entries:
            continue
        used = [_USAGE_DECODER.decode(entry) for entry in entries]
        rows.append(
            {
                "day": day,
                "sessions": len(used),
                "sessionSeconds": sum(u.session_ms for u in used) / 1000,
                "connectedSeconds": sum(u.connected_ms for u in used) / 1000,
                "agentSeconds": sum(u.agent_ms for u in used) / 1000,
                "handoffs": sum(u.handoffs for u in used),
                "rotations": sum(u.rotations for u in used),
            }
        )
    if fmt == "csv":
        lines = [",".join(USAGE_COLUMNS)]
        lines += [",".join(str(row[column]) for column in USAGE_COLUMNS) for row in rows]
        return ("\r\n".join(lines) + "\r\n").encode()
    limits, now = await deps.admission.standing(tenant)
    return {
        "tenant": tenant,
        "from": first.isoformat(),
        "to": last.isoformat(),
        "days": rows,
        "limits": _limits_view(limits) if deps.admission.enabled else None,
        "now": {
            "liveSessions": now.live,
            "sessionMinutesToday": round(now.today_ms / 60_000, 1),
            "sessionMinutesThisMonth": round(now.this_month_ms / 60_000, 1),
        },
    }


def _limits_view(limits: Limits) -> dict[str, int | None]:
    return {
        "liveSessions": limits.live_sessions,
        "startsPerMinute": limits.starts_per_minute,
        "sessionMinutesPerDay": None if limits.day_ms is None else limits.day_ms // 60_000,
        "sessionMinutesPerMonth": None if limits.month_ms is None else limits.month_ms // 60_000,
        "maxSessionMinutes": limits.max_session_s // 60,
        "liveSessionsPerPrincipal": limits.per_principal,
    }
