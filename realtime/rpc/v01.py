"""The A2A 0.1 endpoint, `POST /a2a/v0.1`: every call there is 0.1 (`a2a/v01` maps the shapes).

Order of checks: size → JSON → envelope (`jsonrpc` may be absent) → method → authentication →
scope → rate limit → 0.1 params → the translated 1.0 params → the id map → handler. Nothing is
read from or written to Redis before the params are valid, as on /a2a. The id map (decision
116), which binds the task ids a 0.1 client chooses to the server's, is `methods/client_tasks`.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any, Final

import msgspec

from realtime.a2a import params as p
from realtime.a2a import v01, v01_card, v03
from realtime.a2a.types import REALTIME_EXTENSION
from realtime.errors import (
    MethodNotFound,
    PushNotificationNotSupported,
    ServiceError,
    VersionNotSupported,
    Words,
)
from realtime.methods import client_tasks
from realtime.methods.client_tasks import TaskIds
from realtime.methods.context import Call, MethodDeps
from realtime.methods.messages import session_create_part
from realtime.rpc.codec import Codec, Resolved
from realtime.rpc.dispatch import Dispatcher
from realtime.rpc.errors import error_object
from realtime.rpc.registry import (
    INVOKE,
    METHODS,
    READ,
    SUPPORTED_VERSIONS,
    Handler,
    MethodSpec,
    plain,
)
from realtime.settings import Settings
from realtime.telemetry import RpcSpan

# the scope of each 0.1 method: its 1.0 method's; the push methods as the 0.1 schema pairs them
SCOPES: Final[Mapping[str, str]] = {
    **{name: METHODS[target].scope for name, target in v01.METHODS.items()},
    "tasks/pushNotification/set": INVOKE,
    "tasks/pushNotification/get": READ,
}
# answered -32003 after authentication, scope and rate limit; their params are not examined
_PUSH: Final[Mapping[str, MethodSpec]] = {
    name: MethodSpec(SCOPES[name], plain(client_tasks.push_notifications), reads_params=False)
    for name in v01.PUSH_METHODS
}


def agent_card_v01(card: Mapping[str, Any], settings: Settings) -> dict[str, Any]:
    """The A2A 0.1 card (`GET /.well-known/agent.json`) beside the 1.0 `card`."""
    return v01_card.agent_card(card, base_url=settings.public_base_url, scopes=SCOPES)


class V01Codec(Codec):
    """A2A 0.1, one per call: it keeps the call's task ids (the client's, then the server's),
    its request and the artifact indexes of its stream."""

    version = v01.VERSION
    echo_before_params = False
    error_event = None  # a failure inside a stream is one more `data:` event (decision 118)

    def __init__(self, base_url: str) -> None:
        self.base_url = base_url
        self.ids = TaskIds()
        self.request: v01.Request | None = None
        self.indexes: dict[str, int] = {}  # the stream's artifactId → index

    def resolve(self, method: str) -> Resolved | None:
        if method in v01.METHODS:
            target = v01.METHODS[method]
            return Resolved(target, METHODS[target])
        if method in _PUSH:
            return Resolved(method, _PUSH[method])
        return None

    def unknown(self, method: str) -> MethodNotFound | VersionNotSupported:
        base = self.base_url
        if method in METHODS:  # aim.realtime.*, ContinueTask, ListTasks, …: as the 0.3 adapter
            return VersionNotSupported(
                f"{method} is an A2A 1.0 method and this endpoint serves A2A 0.1: call it at "
                f"{base}/a2a with the header A2A-Version: {SUPPORTED_VERSIONS[-1]}.",
                details={"supportedVersions": SUPPORTED_VERSIONS, "requestedVersion": v01.VERSION},
            )
        served = ", ".join((*v01.METHODS, *v01.PUSH_METHODS))
        if method in v03.METHODS:
            return MethodNotFound(
                f"{method} is an A2A 0.3 method: send it to {base}/a2a without A2A-Version. "
                f"A2A 0.1 methods here: {served}.",
                details={"method": method},
            )
        return MethodNotFound(
            f"Method {method!r} does not exist in A2A 0.1. Methods: {served}.",
            details={"method": method},
        )

    def params(self, method: str, raw: bytes) -> bytes:
        request = self.request = v01.decode(method, raw)
        self.ids.client = request.id
        if isinstance(request, v01.SendParams) and request.push_notification is not None:
            raise PushNotificationNotSupported(
                "params.pushNotification: this agent sends no push notifications (its card says "
                "pushNotifications: false); leave it out and follow the task with "
                "tasks/sendSubscribe or tasks/resubscribe.",
                details={"taskId": request.id},
            )
        return v01.to_v10_params(request)

    def implied_extensions(self, params: p.Params) -> frozenset[str]:
        if isinstance(params, p.SendParams) and session_create_part(params.message) is not None:
            return frozenset({REALTIME_EXTENSION})  # the part is enough in 0.1 (decision 113)
        return frozenset()

    async def invoke(self, methods: MethodDeps, handler: Handler, call: Call[Any]) -> Any:
        run = functools.partial(handler, methods)
        request = self.request
        if isinstance(request, v01.SendParams):
            return await client_tasks.send(methods.tasks, run, call, request, self.ids)
        assert request is not None  # noqa: S101 - `params` ran before
        return await client_tasks.read(methods.tasks, run, call, request, self.ids)

    def result(self, target: str, value: Any) -> Any:
        assert self.request is not None  # noqa: S101 - `params` ran before
        history = v01.wants_history(self.request)
        return v01.result(target, msgspec.to_builtins(value), self.request.id, history=history)

    def events(self, value: Any) -> list[Any]:
        return v01.stream_events(value, self.ids.client or "", self.indexes)

    @property
    def words(self) -> Words:
        return v01.Words(self.ids.client, self.ids.server)

    def error(self, error: ServiceError) -> dict[str, Any]:
        return v03.error(error_object(error, self.words))  # 0.1 errors take the 0.3 form


class V01Dispatcher(Dispatcher):
    """Serves `POST /a2a/v0.1` bodies: the /a2a pipeline and handlers, 0.1 shapes in and out."""

    path = v01.PATH
    jsonrpc_optional = True  # `jsonrpc` may be absent (decision 119)

    def default_codec(self) -> Codec:
        return V01Codec(self.settings.public_base_url)

    def choose_codec(self, method: str, headers: Mapping[str, str], span: RpcSpan) -> Codec:
        # the codec the call started with: an error before this point took its form too
        return self.default_codec()
