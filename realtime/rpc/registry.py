"""The method table, read top to bottom: scope (schema `x-aim-transport.oauthScopes`),
handler (with the family whose dependencies it gets: `on_tasks`, `on_sessions`,
`on_streams`, or `plain` for one that needs none), and whether the realtime extension must be
active. The A2A methods this agent does not offer are in it too, with their scopes (A2A §7:
every method is authenticated and authorized) and a handler that answers A2A's error for each
(`methods/unoffered`); older A2A versions' names map onto these names in their codec
(`rpc/codec`, `rpc/v01`, over `a2a/v03.METHODS` and `a2a/v01.METHODS`)."""

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
from realtime.methods.context import Call, MethodDeps, SessionDeps, StreamDeps, TaskDeps

# a method's handler as the dispatcher calls it: with the dependencies of every family, of which
# the family's adapter below hands the handler its own
Handler = Callable[[MethodDeps, Call[Any]], Awaitable[Any]]


def on_tasks(handler: Callable[[TaskDeps, Call[Any]], Awaitable[Any]]) -> Handler:
    return lambda deps, call: handler(deps.tasks, call)


def on_sessions(handler: Callable[[SessionDeps, Call[Any]], Awaitable[Any]]) -> Handler:
    return lambda deps, call: handler(deps.sessions, call)


def on_streams(handler: Callable[[StreamDeps, Call[Any]], Awaitable[Any]]) -> Handler:
    return lambda deps, call: handler(deps.streams, call)


def plain(handler: Callable[[Call[Any]], Awaitable[Any]]) -> Handler:
    return lambda deps, call: handler(call)


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


_NO_PUSH: Final = plain(unoffered.push_notifications)
_NO_EXTENDED_CARD: Final = plain(unoffered.extended_agent_card)

METHODS: Final[dict[str, MethodSpec]] = {
    "SendMessage": MethodSpec(INVOKE, on_sessions(messages.send_message)),
    "SendStreamingMessage": MethodSpec(
        INVOKE, on_streams(streaming.send_streaming_message), streaming=True
    ),
    "ContinueTask": MethodSpec(INVOKE, on_sessions(operations.continue_task)),
    "GetTask": MethodSpec(READ, on_tasks(tasks.get_task)),
    "ListTasks": MethodSpec(READ, on_tasks(tasks.list_tasks)),
    "CancelTask": MethodSpec(CANCEL, on_sessions(sessions.cancel_task)),
    "SubscribeToTask": MethodSpec(READ, on_streams(streaming.subscribe_to_task), streaming=True),
    "aim.realtime.GetSession": MethodSpec(READ, on_sessions(sessions.get_session), realtime=True),
    "aim.realtime.RegisterEndpoint": MethodSpec(
        INVOKE, on_sessions(sessions.register_endpoint), realtime=True
    ),
    "aim.realtime.JoinSession": MethodSpec(
        INVOKE, on_sessions(sessions.join_session), realtime=True
    ),
    "aim.realtime.EndSession": MethodSpec(INVOKE, on_sessions(sessions.end_session), realtime=True),
    "aim.realtime.SendInteraction": MethodSpec(
        INVOKE, on_sessions(operations.send_interaction), realtime=True
    ),
    "aim.realtime.GetCommand": MethodSpec(READ, on_sessions(commands.get_command), realtime=True),
    "aim.realtime.GetOperation": MethodSpec(
        READ, on_sessions(operations.get_operation), realtime=True
    ),
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
