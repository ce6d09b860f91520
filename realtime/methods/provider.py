"""The provider API (profile §10): what the agent worker asks of its session.

Every call names its session and is authorized by that session's provider token (checked by the
dispatcher). RequestOperation and UpdateOperation are exactly-once by `requestId` (stored like a
client's commandId); AppendTranscript is idempotent by `itemId`; ReportAgentState is
last-writer-wins. ListOperations and GetOperation are reads: they commit nothing, and are fenced
as the calls are: by the agent of the current room, while the session is live.
"""

from __future__ import annotations

import hashlib
from collections.abc import Awaitable, Callable
from typing import Any, Final

import msgspec
import rfc8785
from msgspec import UNSET

from realtime.a2a import provider as p
from realtime.a2a import types as wire
from realtime.engine.core import AnyEvent
from realtime.engine.entries import Command, Note, params_digest
from realtime.engine.outcomes import Decided
from realtime.errors import CommandConflict, SessionNotFound, invalid_params
from realtime.methods.commands import applied, execute, run_command
from realtime.methods.context import ProviderDeps
from realtime.methods.operations import operation_result, operations_result
from realtime.methods.rejections import reject
from realtime.provider_tokens import ProviderGrant
from realtime.store.records import Cause
from state_machines import Requirement, Session, provider

_TITLES: Final = {
    ("user", "camera"): "Allow the agent to see your camera",
    ("user", "screen"): "Allow the agent to see your screen",
    ("agent", "camera"): "Let the agent show its camera",
    ("agent", "screen"): "Let the agent share its screen",
}


# a reported deadline further ahead than this is a mistake (no model connection lasts so long)
MAX_DEADLINE_AHEAD_S: Final = 24 * 3600
# the operations a successor must know of: not over yet
OPEN_OPERATION_STATES: Final = frozenset({"pending", "awaiting_confirmation", "running"})


def action_digest(action: Any) -> str:
    """`sha256:` + lowercase hex of SHA-256 over the RFC 8785 canonical JSON of `action`, or
    -32602 for an action JCS cannot encode (integers beyond ±2^53, non-finite numbers)."""
    try:
        canonical = rfc8785.dumps(action)
    except rfc8785.CanonicalizationError as exc:
        raise invalid_params(
            "params.action",
            f"cannot be canonicalized for its digest (RFC 8785): {exc}; write large integers "
            "as strings",
        ) from None
    return "sha256:" + hashlib.sha256(canonical).hexdigest()


def _command(method: str, params: msgspec.Struct) -> Command:
    body = msgspec.to_builtins(params)
    request_id = body.pop("requestId")
    return Command(method, f"provider:{request_id}", params_digest(method, body))


async def _exactly_once(
    deps: ProviderDeps,
    method: str,
    params: p.RequestOperationParams | p.UpdateOperationParams,
    event: AnyEvent,
    operation_id: str,
    generation: int,
) -> Any:
    def render(decided: Decided) -> dict[str, Any]:
        return {"operation": operation_result(params.session_id, decided.session, operation_id)}

    try:
        return await run_command(
            deps.commands,
            params.session_id,
            event,
            owner=None,
            command=_command(method, params),
            render=render,
            note=Note(Cause.PROVIDER, generation=generation),
        )
    except CommandConflict:
        raise CommandConflict(
            f"requestId {params.request_id} was already used for a different request; use a "
            "new requestId for a new request.",
            details={"requestId": params.request_id, "method": method},
        ) from None


async def report_agent_state(
    deps: ProviderDeps, grant: ProviderGrant, params: p.ReportAgentStateParams
) -> Any:
    event = provider.ReportAgentState(
        params.session_epoch, grant.epoch, params.state, generation=grant.generation
    )
    outcome = await execute(
        deps.commands,
        params.session_id,
        event,
        note=Note(
            Cause.PROVIDER, method="aim.provider.ReportAgentState", generation=grant.generation
        ),
    )
    session = applied(outcome).session
    return {
        "sessionId": session.session_id,
        "sessionEpoch": session.epoch,
        "agentState": session.agent_state,
        "agentGeneration": session.agent_generation,
    }


async def request_operation(
    deps: ProviderDeps, grant: ProviderGrant, params: p.RequestOperationParams
) -> Any:
    now_ms = deps.now_ms()
    media = params.media
    if isinstance(media, p.MediaTarget):
        action: Any = {
            "title": _TITLES[media.side, media.source],
            "media": {"side": media.side, "source": media.source},
        }
    else:
        action = msgspec.to_builtins(params.action)
    requirement = None
    if params.confirmation == "required":
        ttl_s = (
            params.expires_in_seconds
            if params.expires_in_seconds is not UNSET
            else deps.settings.requirement_ttl_s
        )
        requirement = Requirement(
            requirement_id=deps.new_id(),
            action_digest=action_digest(action),
            expires_at=wire.timestamp(now_ms + ttl_s * 1000),
        )
    operation_id = deps.new_id()
    event = provider.RequestOperation(
        epoch=params.session_epoch,
        room_epoch=grant.epoch,
        operation_id=operation_id,
        kind=params.kind,
        action_json=msgspec.json.encode(action).decode(),
        requirement=requirement,
        media_side=media.side if isinstance(media, p.MediaTarget) else None,
        media_source=media.source if isinstance(media, p.MediaTarget) else None,
        generation=grant.generation,
    )
    return await _exactly_once(
        deps, "aim.provider.RequestOperation", params, event, operation_id, grant.generation
    )


async def update_operation(
    deps: ProviderDeps, grant: ProviderGrant, params: p.UpdateOperationParams
) -> Any:
    event = provider.UpdateOperation(
        room_epoch=grant.epoch,
        operation_id=params.operation_id,
        state=params.state,
        result_json=msgspec.json.encode(
            params.result if params.result is not UNSET else None
        ).decode(),
        error_json=msgspec.json.encode(
            params.error if params.error is not UNSET else None
        ).decode(),
        generation=grant.generation,
    )
    return await _exactly_once(
        deps, "aim.provider.UpdateOperation", params, event, params.operation_id, grant.generation
    )


async def append_transcript(
    deps: ProviderDeps, grant: ProviderGrant, params: p.AppendTranscriptParams
) -> Any:
    event = provider.AppendTranscript(
        params.session_epoch,
        grant.epoch,
        params.item_id,
        params.role,
        params.text,
        generation=grant.generation,
    )
    note = Note(Cause.PROVIDER, method="aim.provider.AppendTranscript", generation=grant.generation)
    applied(await execute(deps.commands, params.session_id, event, note=note))
    return {"itemId": params.item_id}


async def report_deadline(
    deps: ProviderDeps, grant: ProviderGrant, params: p.ReportDeadlineParams
) -> Any:
    deadline_ms = int(params.deadline.timestamp() * 1000)
    if deadline_ms > deps.now_ms() + MAX_DEADLINE_AHEAD_S * 1000:
        raise invalid_params(
            "params.deadline",
            f"lies more than {MAX_DEADLINE_AHEAD_S // 3600} hours ahead; report the deadline "
            "of the agent's current connection to its model",
        )
    event = provider.ReportDeadline(
        params.session_epoch,
        grant.epoch,
        grant.generation,
        wire.timestamp(deadline_ms),
        params.reason,
    )
    note = Note(Cause.PROVIDER, method="aim.provider.ReportDeadline", generation=grant.generation)
    session = applied(await execute(deps.commands, params.session_id, event, note=note)).session
    deadline = session.agent_deadline
    return {
        "sessionId": session.session_id,
        "agentGeneration": session.agent_generation,
        "deadline": deadline.at if deadline is not None else None,
        "reason": deadline.reason if deadline is not None else None,
        "rotating": session.rotation is not None,
    }


async def save_context(
    deps: ProviderDeps, grant: ProviderGrant, params: p.SaveContextParams
) -> Any:
    data = params.context.encode()
    event = provider.SaveContext(params.session_epoch, grant.epoch, grant.generation, len(data))
    note = Note(Cause.PROVIDER, method="aim.provider.SaveContext", generation=grant.generation)
    outcome = await execute(deps.commands, params.session_id, event, note=note, context=data)
    session = applied(outcome).session
    return {"sessionId": session.session_id, "generation": grant.generation, "bytes": len(data)}


async def ack_interactions(
    deps: ProviderDeps, grant: ProviderGrant, params: p.AckInteractionsParams
) -> Any:
    event = provider.AckInteractions(
        params.session_epoch, grant.epoch, grant.generation, tuple(params.command_ids)
    )
    note = Note(Cause.PROVIDER, method="aim.provider.AckInteractions", generation=grant.generation)
    session = applied(await execute(deps.commands, params.session_id, event, note=note)).session
    return {"sessionId": session.session_id, "unacknowledged": len(session.unacked)}


async def get_handover(
    deps: ProviderDeps, grant: ProviderGrant, params: p.GetHandoverParams
) -> Any:
    """What an agent taking over needs: the saved context, the operations not over, and the
    interactions no agent acknowledged (the data messages' bodies, in the order sent)."""
    session = await _readable(deps, grant, params.session_id)
    saved = await deps.sessions.saved_context(params.session_id)
    meta = session.agent_context
    rotation = session.rotation
    successor = rotation is not None and grant.generation == rotation.generation
    return {
        "sessionId": session.session_id,
        "sessionEpoch": session.epoch,
        "generation": grant.generation,
        "agentGeneration": session.agent_generation,
        "serving": grant.generation == session.agent_generation,
        "successorOf": session.agent_generation if successor else None,
        "reason": rotation.reason if successor and rotation is not None else None,
        "context": (
            {"data": saved.decode(), "generation": meta.generation, "savedAt": meta.saved_at}
            if saved is not None and meta is not None
            else None
        ),
        "operations": [
            op
            for op in operations_result(params.session_id, session)
            if op["state"] in OPEN_OPERATION_STATES
        ],
        "interactions": [msgspec.json.decode(item.body) for item in session.unacked],
    }


async def _readable(deps: ProviderDeps, grant: ProviderGrant, session_id: str) -> Session:
    """The session as stored, for a read of the agent of its current room while it is live
    (-31001 once it is gone, -31002 for another room's token, -31003 once it ended); nothing is
    committed."""
    record = (await deps.sessions.load(session_id)).record
    if record is None:
        raise SessionNotFound(session_id)
    session = record.session
    refused = provider.read_refused(session, grant.epoch)
    if refused is not None:
        raise reject(refused, session)
    return session


async def list_operations(
    deps: ProviderDeps, grant: ProviderGrant, params: p.ListOperationsParams
) -> Any:
    session = await _readable(deps, grant, params.session_id)
    return {"operations": operations_result(params.session_id, session)}


async def get_operation(
    deps: ProviderDeps, grant: ProviderGrant, params: p.GetOperationParams
) -> Any:
    session = await _readable(deps, grant, params.session_id)
    return {"operation": operation_result(params.session_id, session, params.operation_id)}


Handler = Callable[[ProviderDeps, ProviderGrant, Any], Awaitable[Any]]

PROVIDER_METHODS: Final[dict[str, Handler]] = {
    "aim.provider.ReportAgentState": report_agent_state,
    "aim.provider.RequestOperation": request_operation,
    "aim.provider.UpdateOperation": update_operation,
    "aim.provider.AppendTranscript": append_transcript,
    "aim.provider.ListOperations": list_operations,
    "aim.provider.GetOperation": get_operation,
    "aim.provider.ReportDeadline": report_deadline,
    "aim.provider.SaveContext": save_context,
    "aim.provider.AckInteractions": ack_interactions,
    "aim.provider.GetHandover": get_handover,
}
