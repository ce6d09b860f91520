"""The operator API's view of a session's events for the app's backend (profile §17, §21).

- `deliveries`: every kept event of the session, in seq order, with how sending it fared
  (attempts, the last HTTP status or error, the next attempt, when it was delivered);
- `redeliver`: send the session's kept events again from a seq, in order, with the same
  `webhook-id`s (a receiver that de-duplicates by it ignores what it already has).

The event bodies are what was sent: ids, states, times and reasons, never message text.
"""

from __future__ import annotations

from typing import Any, Final

import msgspec

from realtime.auth import Principal
from realtime.engine.session_events import webhook_id
from realtime.errors import SessionNotFound, invalid_params
from realtime.methods.context import OperatorDeps
from realtime.methods.operator_views import check_id, visible

MAX_BODY: Final = 1024


class RedeliverParams(msgspec.Struct, frozen=True, forbid_unknown_fields=True, rename="camel"):
    from_seq: int


async def _visible_session(deps: OperatorDeps, operator: Principal, session_id: str) -> None:
    check_id(session_id)
    loaded = await deps.sessions.load(session_id)
    if loaded.record is None or not visible(deps.settings, operator, loaded.record):
        raise SessionNotFound(session_id)


async def deliveries(deps: OperatorDeps, operator: Principal, session_id: str) -> dict[str, Any]:
    """`{enabled, dropped, deliveries: [...]}`: each kept event with how sending it fared (and
    `droppedBefore`, the events just before it that the backlog's bound dropped), and how many
    of the session's events were dropped in all."""
    await _visible_session(deps, operator, session_id)
    kept = await deps.deliveries.listing(session_id)
    items = []
    for item in kept.deliveries:
        body = msgspec.json.decode(item.body)
        state = msgspec.to_builtins(item.state)
        gap = {"droppedBefore": item.dropped_before} if item.dropped_before else {}
        items.append(
            {
                "seq": item.seq,
                "type": body.get("type"),
                "webhookId": webhook_id(session_id, item.seq),
                "occurredAt": body.get("occurredAt"),
                **state,
                **gap,
                "event": body,
            }
        )
    return {
        "enabled": deps.settings.events_enabled,
        "dropped": kept.dropped,
        "deliveries": items,
    }


async def redeliver(
    deps: OperatorDeps, operator: Principal, session_id: str, raw: bytes
) -> dict[str, Any]:
    """`POST …/events/redeliver {"fromSeq": N}` → `{sessionId, fromSeq, redelivering}`: how
    many kept events will be sent again, in seq order from N."""
    if len(raw) > MAX_BODY:
        raise invalid_params("body", f"must be at most {MAX_BODY} bytes")
    try:
        params = msgspec.json.decode(raw or b"null", type=RedeliverParams)
    except msgspec.ValidationError as exc:
        raise invalid_params(
            "fromSeq", f'the body must be {{"fromSeq": N}} with N ≥ 1 ({exc})'
        ) from None
    except msgspec.DecodeError:
        raise invalid_params("body", 'must be JSON: {"fromSeq": N}') from None
    if params.from_seq < 1:
        raise invalid_params("fromSeq", "must be 1 or more (seq starts at 1)")
    await _visible_session(deps, operator, session_id)
    if not deps.settings.events_enabled:
        raise invalid_params(
            "fromSeq", "session events are not configured here (AIM_EVENTS_URL): none to send"
        )
    again = await deps.ledger.redeliver(session_id, params.from_seq, deps.now_ms())
    return {"sessionId": session_id, "fromSeq": params.from_seq, "redelivering": again}
