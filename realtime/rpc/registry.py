"""The method table, read top to bottom: scope (schema `x-aim-transport.oauthScopes`),
handler, and whether the realtime extension must be active. The A2A methods this agent does not
offer are in it too, with their scopes (A2A §7: every method is authenticated and authorized)
and a handler that answers A2A's error for each (`methods/unoffered`); older A2A versions' names
map onto these names in their codec (`rpc/codec`, `rpc/v01`, over `a2a/v03.METHODS` and
`a2a/v01.METHODS`)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Final, NamedTuple

from realtime.a2a.types import REALTIME_EXTENSION
from realtime.auth import CANCEL_SCOPE, INVOKE_SCOPE, READ_SCOPE
from realtime.methods import (
    commands,
    messages,
    operations,
    sessions,
    streaming,
    tasks,
    unoffered,
)
from realtime.methods.context import Call, Services

Handler = Callable[[Services, Call[Any]], Awaitable[Any]]

INVOKE: Final = INVOKE_SCOPE
READ: Final = READ_SCOPE
CANCEL: Final = CANCEL_SCOPE


class MethodSpec(NamedTuple):
    scope: str
    handler: Handler
    realtime: bool = False
    streaming: bool = False  # answers text/event-stream: the handler returns a TaskStream
    # False: a method A2A defines and this agent does not offer; its handler refuses it
    # whatever the params, so they are neither translated nor decoded
    reads_params: bool = True


_NO_PUSH: Final = unoffered.push_notifications
_NO_EXTENDED_CARD: Final = unoffered.extended_agent_card

METHODS: Final[dict[str, MethodSpec]] = {
    "SendMessage": MethodSpec(INVOKE, messages.send_message),
    "SendStreamingMessage": MethodSpec(INVOKE, streaming.send_streaming_message, streaming=True),
    "ContinueTask": MethodSpec(INVOKE, operations.continue_task),
    "GetTask": MethodSpec(READ, tasks.get_task),
    "ListTasks": MethodSpec(READ, tasks.list_tasks),
    "CancelTask": MethodSpec(CANCEL, sessions.cancel_task),
    "SubscribeToTask": MethodSpec(READ, streaming.subscribe_to_task, streaming=True),
    "aim.realtime.GetSession": MethodSpec(READ, sessions.get_session, realtime=True),
    "aim.realtime.RegisterEndpoint": MethodSpec(INVOKE, sessions.register_endpoint, realtime=True),
    "aim.realtime.JoinSession": MethodSpec(INVOKE, sessions.join_session, realtime=True),
    "aim.realtime.EndSession": MethodSpec(INVOKE, sessions.end_session, realtime=True),
    "aim.realtime.SendInteraction": MethodSpec(INVOKE, operations.send_interaction, realtime=True),
    "aim.realtime.GetCommand": MethodSpec(READ, commands.get_command, realtime=True),
    "aim.realtime.GetOperation": MethodSpec(READ, operations.get_operation, realtime=True),
    # defined by A2A, not offered here (Agent Card: pushNotifications, extendedAgentCard false)
    "CreateTaskPushNotificationConfig": MethodSpec(INVOKE, _NO_PUSH, reads_params=False),
    "GetTaskPushNotificationConfig": MethodSpec(READ, _NO_PUSH, reads_params=False),
    "ListTaskPushNotificationConfigs": MethodSpec(READ, _NO_PUSH, reads_params=False),
    "DeleteTaskPushNotificationConfig": MethodSpec(INVOKE, _NO_PUSH, reads_params=False),
    "GetExtendedAgentCard": MethodSpec(READ, _NO_EXTENDED_CARD, reads_params=False),
}
# the methods a caller can use (an unknown name's error lists these)
OFFERED: Final = tuple(name for name, spec in METHODS.items() if spec.reads_params)

SUPPORTED_VERSIONS: Final = ("1.0",)
EXTENSIONS: Final = frozenset({REALTIME_EXTENSION})
