"""SendMessage: a session.create data part starts a realtime session, anything else is refused."""

from __future__ import annotations

from typing import Any, Final

from realtime.a2a import params as p
from realtime.a2a import types as wire
from realtime.errors import ExtensionSupportRequired
from realtime.methods import sessions, tasks
from realtime.methods.context import Call, Services

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


async def send_message(services: Services, call: Call[p.SendParams]) -> wire.SendMessageResult:
    found = session_create_part(call.params.message)
    if found is None:
        return await tasks.send_message_rejected(services, call)
    index, data = found
    require_realtime_extension(call)
    return await sessions.create_session(services, call, data, index)
