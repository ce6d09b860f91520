"""SendMessage: a session.create data part starts a realtime session, anything else is refused.

The one handler behind SendMessage, SendStreamingMessage and their A2A 0.3 names. After the
params (the session.create part included) are valid, the parts' media types are checked
(-32005) before anything is stored: before the realtime-only rejection and before a session is
created."""

from __future__ import annotations

from typing import Any, Final

from realtime.a2a import params as p
from realtime.a2a import types as wire
from realtime.a2a.modes import require_input_modes
from realtime.errors import ExtensionSupportRequired
from realtime.methods import sessions, tasks
from realtime.methods.context import Call, SessionDeps

SESSION_CREATE_MEDIA_TYPE: Final = "application/json"


def session_create_part(message: p.Message) -> tuple[int, Any] | None:
    """(index, data) of the message's session.create data part, if it has one."""
    for index, part in enumerate(message.parts):
        data = part.data
        if (
            part.media_type == SESSION_CREATE_MEDIA_TYPE
            and isinstance(data, dict)
            and data.get("operation") == "session.create"
        ):
            return index, data
    return None


def require_realtime_extension(call: Call[Any]) -> None:
    if wire.REALTIME_EXTENSION not in call.extensions:
        raise ExtensionSupportRequired(
            f"{call.method} with a session.create part needs the extension "
            f"{wire.REALTIME_EXTENSION}: list it in the A2A-Extensions header.",
            details={"extension": wire.REALTIME_EXTENSION},
        )


async def send_message(deps: SessionDeps, call: Call[p.SendParams]) -> wire.SendMessageResult:
    message = call.params.message
    found = session_create_part(message)
    if found is None:
        require_input_modes(message.parts)
        return await tasks.send_message_rejected(deps.tasks, call)
    index, data = found
    require_realtime_extension(call)
    create = p.decode_as(p.SessionCreate, data, root=f"params.message.parts[{index}].data")
    require_input_modes(message.parts)
    return await sessions.create_session(deps, call, create, data)
