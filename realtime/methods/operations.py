"""Inside a live session: SendInteraction (all ten types), GetOperation, and ContinueTask, the
A2A way to answer a requirement (profile §7, §8)."""

from __future__ import annotations

from typing import Any, Final

import msgspec

from realtime.a2a import params as p
from realtime.a2a import payloads
from realtime.a2a import sessions as views
from realtime.a2a import types as wire
from realtime.a2a.modes import require_input_modes
from realtime.engine.entries import Command, params_digest
from realtime.engine.outcomes import Decided
from realtime.errors import InvalidState, OperationNotFound, invalid_params, task_ref, task_state
from realtime.methods import tasks
from realtime.methods.commands import load_own, run_client_command, run_command
from realtime.methods.context import Call, NewId, SessionDeps
from realtime.methods.sessions import session_result
from state_machines import Session, interactions
from state_machines.effects import AppendHistory
from state_machines.interactions import find_operation
from state_machines.operation import Operation

_DELIVERED: Final[dict[str, interactions.DeliveredKind]] = {
    "input.text": "input.text",
    "visual.select": "visual.select",
    "response.interrupt": "response.interrupt",
}
_MEDIA: Final[dict[str, interactions.MediaAction]] = {
    "media.request": "request",
    "media.prepare": "prepare",
    "media.stop": "stop",
    "media.revoke": "revoke",
}
_ENCODER: Final = msgspec.json.Encoder()
_TASK: Final = msgspec.json.Decoder(dict[str, wire.Task])


def operation_result(session_id: str, session: Session, operation_id: str) -> dict[str, Any]:
    found = find_operation(session, operation_id)
    if found is None:
        raise OperationNotFound(
            f"No operation {operation_id} in session {session_id}. Pending ones are listed in "
            "the session's pendingOperationIds.",
            details={"operationId": operation_id},
        )
    return _operation_object(session_id, found)


def operations_result(session_id: str, session: Session) -> list[dict[str, Any]]:
    """Every operation of the session, oldest first, each as `operation_result` shows it."""
    return [_operation_object(session_id, op) for op in session.operations]


def _operation_object(session_id: str, op: Operation) -> dict[str, Any]:
    """The Operation object (profile §4) every method answers."""
    result: dict[str, Any] = msgspec.to_builtins(views.operation_view(session_id, op))
    return result


def _event(
    new_id: NewId, params: p.SendInteractionParams, payload: p.Params
) -> tuple[interactions.InteractionEvent, str | None]:
    """The core event of an interaction, and the operation it concerns (if any)."""
    epoch, command_id = params.session_epoch, params.command_id
    if params.type in _DELIVERED:
        body = _ENCODER.encode(payload).decode()
        return interactions.Deliver(epoch, command_id, _DELIVERED[params.type], body), None
    if isinstance(payload, payloads.MediaTarget):
        action = _MEDIA[params.type]
        if payload.side == "user":
            return interactions.UserMedia(epoch, command_id, payload.source, action), None
        operation_id = new_id() if action == "request" else None
        event = interactions.AgentMedia(
            epoch, command_id, payload.source, action, operation_id or ""
        )
        return event, operation_id
    if isinstance(payload, payloads.OperationConfirm):
        return interactions.Resolve(
            command_id=command_id,
            decision="confirm",
            via="interaction",
            epoch=epoch,
            operation_id=payload.operation_id,
            requirement_id=payload.requirement_id,
            action_digest=payload.action_digest,
        ), payload.operation_id
    if isinstance(payload, payloads.MediaDecide):
        return interactions.Resolve(
            command_id=command_id,
            decision=payload.decision,
            via="interaction",
            epoch=epoch,
            operation_id=payload.operation_id,
        ), payload.operation_id
    assert isinstance(payload, payloads.OperationCancel)  # noqa: S101 - PAYLOADS is closed
    return interactions.Resolve(
        command_id=command_id,
        decision="cancel",
        via="interaction",
        epoch=epoch,
        operation_id=payload.operation_id,
    ), payload.operation_id


async def send_interaction(deps: SessionDeps, call: Call[p.SendInteractionParams]) -> Any:
    """SendInteraction: typed payload, then the session's interaction rules (profile §7)."""
    params = call.params
    payload = payloads.decode_payload(params.type, params.payload)
    event, operation_id = _event(deps.new_id, params, payload)

    def render(decided: Decided) -> dict[str, Any]:
        session = decided.session
        result = {
            "session": session_result(deps.settings, session, decided.version),
            "interaction": {
                "commandId": params.command_id,
                "type": params.type,
                "acceptedAt": session.updated_at,
            },
        }
        if operation_id is not None:
            result["operation"] = operation_result(params.session_id, session, operation_id)
        return result

    return await run_client_command(
        deps.commands, call, params.session_id, params.command_id, event, render
    )


async def get_operation(deps: SessionDeps, call: Call[p.GetOperationParams]) -> Any:
    params = call.params
    loaded = await load_own(deps, params.session_id, call.principal.key)
    assert loaded.record is not None  # noqa: S101
    session = loaded.record.session
    return {"operation": operation_result(params.session_id, session, params.operation_id)}


def _decision(message: p.ContinueMessage) -> str:
    """approve | deny from the message's `{"decision"}` data part (profile §8, §15)."""
    for index, part in enumerate(message.parts):
        if isinstance(part.data, dict) and "decision" in part.data:
            path = f"params.message.parts[{index}].data"
            if set(part.data) != {"decision"}:
                extra = sorted(set(part.data) - {"decision"})
                raise invalid_params(path, f"unknown members {', '.join(extra)}")
            decision = part.data["decision"]
            if decision not in ("approve", "deny"):
                raise invalid_params(f"{path}.decision", 'must be "approve" or "deny"')
            return str(decision)
    raise invalid_params(
        "params.message.parts",
        'a data part {"decision": "approve"|"deny"} is required to answer the requirement',
    )


async def continue_task(deps: SessionDeps, call: Call[p.ContinueParams]) -> Any:
    """ContinueTask: answer the task's open requirement; a repeated messageId replays."""
    params = call.params
    message = params.message
    decision = _decision(message)
    require_input_modes(message.parts)  # -32005, like SendMessage, before the task is read
    owner = call.principal.key
    record = await tasks.load_own_task(deps.tasks, owner, params.id)
    if message.context_id is not None and message.context_id != record.task.context_id:
        raise invalid_params(
            "params.message.contextId", "must equal the task's contextId (or be left out)"
        )
    metadata = record.task.metadata
    if metadata is msgspec.UNSET or wire.REALTIME_EXTENSION not in metadata:
        state = task_state(record.task.status.state)
        raise InvalidState(
            ("Task ", task_ref(params.id), " is ", state, " and waits for no input."),
            details={"state": state, "allowed": ()},
        )
    session_id = metadata[wire.REALTIME_EXTENSION]["sessionId"]
    # the messageId identifies the answer: a repeat replays the first result (profile §8)
    body = {"id": params.id, "messageId": message.message_id}
    command = Command(
        call.method, f"continue:{message.message_id}", params_digest(call.method, body)
    )
    parts = [tasks.to_wire_part(part) for part in message.parts]
    event = interactions.Resolve(
        command_id=message.message_id,
        decision="confirm" if decision == "approve" else "deny",
        via="continue",
        requirement_id=params.requirement_id,
        action_digest=params.action_digest,
        expected_version=params.expected_version,
        history=AppendHistory(message.message_id, "user", _ENCODER.encode(parts).decode()),
    )
    stored = await run_command(
        deps.commands,
        session_id,
        event,
        owner=owner,
        command=command,
        render=lambda decided: {"task": decided.task.task},
    )
    task = _TASK.decode(stored)["task"]
    return {"task": tasks.view(task, params.history_length)}
