"""The A2A 0.1 endpoint, `POST /a2a/v0.1`: every call there is 0.1 (`a2a/v01` maps the shapes).

Order of checks: size → JSON → envelope (`jsonrpc` may be absent) → method → authentication →
scope → rate limit → 0.1 params → the translated 1.0 params → the id map → handler. Nothing is
read from or written to Redis before the params are valid, as on /a2a.

The id map (decision 116): a 0.1 client names its task. Per principal, each 0.1 id has a
record `{digest, taskId?}` (`TaskStore.claim_client_task`), created before the first SendMessage
and bound to its task after; the derived messageId makes a repeated request replay that task.
A known id with another message is -32004; an id without a bound task is -32001 for reads.
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
from collections.abc import AsyncIterator, Mapping
from typing import Any, Final

import msgspec
import rfc8785

from realtime.a2a import params as p
from realtime.a2a import v01, v01_card, v03
from realtime.a2a.params import decode_params
from realtime.a2a.types import REALTIME_EXTENSION
from realtime.errors import (
    BodyTooLarge,
    InternalError,
    MethodNotFound,
    PushNotificationNotSupported,
    ServiceError,
    TaskNotFound,
    UnsupportedOperation,
    VersionNotSupported,
)
from realtime.methods.context import Call
from realtime.methods.messages import session_create_part
from realtime.methods.streaming import TaskStream
from realtime.rpc.dispatch import (
    LAST_EVENT_ID_HEADER,
    Dispatcher,
    Reply,
    Served,
    SseEvent,
    error_reply,
    requested_extensions,
)
from realtime.rpc.envelope import RequestId
from realtime.rpc.errors import code_of, error_object
from realtime.rpc.registry import EXTENSIONS, INVOKE, METHODS, READ, SUPPORTED_VERSIONS
from realtime.settings import Settings
from realtime.store import keys
from realtime.telemetry import ATTR_PRINCIPAL, RpcSpan

log = logging.getLogger(__name__)

_ENCODER: Final = msgspec.json.Encoder()
_SORTED: Final = msgspec.json.Encoder(order="sorted")
# the scope of each 0.1 method: its 1.0 method's; the push methods as the 0.1 schema pairs them
SCOPES: Final[Mapping[str, str]] = {
    **{name: METHODS[target].scope for name, target in v01.METHODS.items()},
    "tasks/pushNotification/set": INVOKE,
    "tasks/pushNotification/get": READ,
}


def agent_card_v01(card: Mapping[str, Any], settings: Settings) -> dict[str, Any]:
    """The A2A 0.1 card (`GET /.well-known/agent.json`) beside the 1.0 `card`."""
    return v01_card.agent_card(card, base_url=settings.public_base_url, scopes=SCOPES)


def digest(params: v01.SendParams) -> str:
    """What makes a tasks/send a retry of an earlier one: sha256 over the RFC 8785 JSON of its
    sessionId, message, pushNotification and metadata (null is absent; ignored members are not
    part of it). Values JCS cannot write (integers beyond 2^53) fall back to sorted JSON."""
    sent = {
        "sessionId": params.session_id,
        "message": params.message,
        "pushNotification": params.push_notification,
        "metadata": params.metadata,
    }
    value = msgspec.to_builtins({k: v for k, v in sent.items() if v is not None})
    try:
        canonical = rfc8785.dumps(value)
    except rfc8785.CanonicalizationError:
        canonical = b"sorted:" + _SORTED.encode(value)
    return "sha256:" + hashlib.sha256(canonical).hexdigest()


@dataclasses.dataclass(slots=True)
class TaskIds:
    """The task a 0.1 call is about: the client's id, and the server's once it is known."""

    client: str | None = None
    server: str | None = None


def error_body(error: ServiceError, request_id: RequestId | None, ids: TaskIds) -> bytes:
    body = v01.error(error_object(error), client_id=ids.client, server_id=ids.server)
    return _ENCODER.encode({"jsonrpc": "2.0", "id": request_id, "error": body})


async def events(
    stream: TaskStream, request_id: RequestId, ids: TaskIds
) -> AsyncIterator[SseEvent]:
    """The stream's frames as 0.1 events (a frame's SSE id on the last event made of it); a
    failure after the first event is one more `data:` event carrying a JSON-RPC error, with no
    `event:` name (decision 118), and ends the stream."""
    client_id = ids.client or ""
    indexes: dict[str, int] = {}
    try:
        async for frame in stream.frames():
            if frame is None:
                yield SseEvent(None)
                continue
            event_id, value = frame
            mapped = v01.stream_events(value, client_id, indexes)
            for number, event in enumerate(mapped, 1):
                body = {"jsonrpc": "2.0", "id": request_id, "result": event}
                yield SseEvent(_ENCODER.encode(body), event_id if number == len(mapped) else None)
    except ServiceError as exc:
        yield SseEvent(error_body(exc, request_id, ids))
    except Exception:
        log.exception("internal error in an A2A 0.1 SSE stream")
        yield SseEvent(error_body(InternalError(), request_id, ids))


class V01Dispatcher(Dispatcher):
    """Serves `POST /a2a/v0.1` bodies: the /a2a handlers, 0.1 shapes in and out."""

    path = v01.PATH
    jsonrpc_optional = True  # `jsonrpc` may be absent (decision 119)

    async def handle(
        self, body: bytes, headers: Mapping[str, str], *, too_large: bool = False
    ) -> Reply:
        reply = await super().handle(body, headers, too_large=too_large)
        if too_large:  # refused before `_handle` runs: in the 0.1 error form as well
            error = BodyTooLarge(self.services.settings.max_body_bytes)
            return Reply(reply.status, error_body(error, None, TaskIds()), reply.headers)
        return reply

    async def _handle(
        self, body: bytes, headers: Mapping[str, str], span: RpcSpan, served: Served
    ) -> Reply:
        served.v03 = True  # an error past this method (-32603) takes the object form too
        ids = TaskIds()
        try:
            return await self._serve(body, headers, span, served, ids)
        except ServiceError as exc:
            span.set_error(code_of(exc), exc.message)
            reply = error_reply(exc, served)  # its status and headers (challenge, Retry-After)
            return Reply(reply.status, error_body(exc, served.request_id, ids), reply.headers)

    async def _serve(
        self,
        body: bytes,
        headers: Mapping[str, str],
        span: RpcSpan,
        served: Served,
        ids: TaskIds,
    ) -> Reply:
        envelope = self._envelope(body, span, served)
        method = envelope.method
        target = self._target(method, span)
        span.set_method(method)
        principal = await self._authorize(headers, SCOPES[method])
        span.set_attribute(ATTR_PRINCIPAL, principal.key)
        self.limiter.charge(principal.key, "requests")
        if target is None:  # after authentication and scope; the params are not examined
            raise PushNotificationNotSupported(
                f"{method}: this agent sends no push notifications (its card says "
                "pushNotifications: false); follow a task with tasks/sendSubscribe or "
                "tasks/resubscribe, or read it with tasks/get.",
                details={"method": method},
            )
        spec = METHODS[target]
        request = v01.decode(method, bytes(envelope.params))
        ids.client = request.id
        if isinstance(request, v01.SendParams) and request.push_notification is not None:
            raise PushNotificationNotSupported(
                "params.pushNotification: this agent sends no push notifications (its card says "
                "pushNotifications: false); leave it out and follow the task with "
                "tasks/sendSubscribe or tasks/resubscribe.",
                details={"taskId": request.id},
            )
        params = decode_params(target, v01.to_v10_params(request))
        active = requested_extensions(headers) & EXTENSIONS
        if isinstance(params, p.SendParams) and session_create_part(params.message) is not None:
            active |= {REALTIME_EXTENSION}  # the part is enough in 0.1 (decision 113)
        if active:
            served.headers["A2A-Extensions"] = ", ".join(sorted(active))
        call = Call(
            method=target,
            principal=principal,
            params=params,
            extensions=active,
            last_event_id=headers.get(LAST_EVENT_ID_HEADER) if spec.streaming else None,
        )
        if isinstance(request, v01.SendParams):
            result = await self._send(call, request, ids)
        else:
            result = await self._read(call, request, ids)
        if isinstance(result, TaskStream):
            return Reply(200, b"", served.headers, stream=events(result, envelope.id, ids))
        answer = v01.result(
            target, msgspec.to_builtins(result), request.id, history=v01.wants_history(request)
        )
        return Reply(
            200,
            _ENCODER.encode({"jsonrpc": "2.0", "id": envelope.id, "result": answer}),
            served.headers,
        )

    def _target(self, method: str, span: RpcSpan) -> str | None:
        """The 1.0 method a 0.1 one is served as (None: a push notification method)."""
        if method in v01.METHODS:
            return v01.METHODS[method]
        if method in v01.PUSH_METHODS:
            return None
        span.set_unknown_method(method)
        base = self.services.settings.public_base_url
        if method in METHODS:  # aim.realtime.*, ContinueTask, ListTasks, …: as the 0.3 adapter
            raise VersionNotSupported(
                f"{method} is an A2A 1.0 method and this endpoint serves A2A 0.1: call it at "
                f"{base}/a2a with the header A2A-Version: {SUPPORTED_VERSIONS[-1]}.",
                details={"supportedVersions": SUPPORTED_VERSIONS, "requestedVersion": v01.VERSION},
            )
        served = ", ".join((*v01.METHODS, *v01.PUSH_METHODS))
        if method in v03.METHODS:
            raise MethodNotFound(
                f"{method} is an A2A 0.3 method: send it to {base}/a2a without A2A-Version. "
                f"A2A 0.1 methods here: {served}.",
                details={"method": method},
            )
        raise MethodNotFound(
            f"Method {method!r} does not exist in A2A 0.1. Methods: {served}.",
            details={"method": method},
        )

    async def _send(self, call: Call[Any], request: v01.SendParams, ids: TaskIds) -> Any:
        """tasks/send, tasks/sendSubscribe through the id map (decisions 111, 116)."""
        store = self.services.task_store
        owner = call.principal.key
        request_digest = digest(request)
        ttl = self.services.settings.task_ttl_s + keys.IDEMPOTENCY_GRACE_S  # the messageId's
        record = await store.claim_client_task(owner, request.id, request_digest, ttl_s=ttl)
        if record is not None and record.d != request_digest:
            raise await self._follow_up(owner, request.id, record.t)
        handler = METHODS[call.method].handler
        try:
            result = await handler(self.services, call)
        except ServiceError:
            # a task may exist all the same (-31012 while provisioning goes on): bind it; else
            # the id is free again for a corrected request
            found = await store.message_task(owner, v01.message_id(request.id))
            if found is not None:
                ids.server = found  # its error may name it: it is the 0.1 id's task now
                await store.bind_client_task(owner, request.id, request_digest, found, ttl_s=ttl)
            elif record is None or record.t is None:
                await store.release_client_task(owner, request.id, request_digest)
            raise
        task_id: str = result.task.id  # a SendMessageResult or a TaskStream
        ids.server = task_id
        if record is None or record.t != task_id:
            await store.bind_client_task(owner, request.id, request_digest, task_id, ttl_s=ttl)
        return result

    async def _follow_up(
        self, owner: str, client_id: str, task_id: str | None
    ) -> UnsupportedOperation:
        """-32004 for a known 0.1 id with a new message (decision 111): nothing is stored."""
        store = self.services.task_store
        task_id = task_id or await store.message_task(owner, v01.message_id(client_id))
        state = "submitted"  # the first request for this id is still under way
        if task_id is not None:
            record = await store.get(task_id)
            mine = record is not None and record.owner == owner
            state = v01.state(record.task.status.state) if record and mine else "unknown"
        return UnsupportedOperation(
            f"Task {client_id} exists already and A2A 0.1 cannot add a message to it (this "
            "message differs from the one that created it). Start a new task with a new `id` "
            "(the same `sessionId` keeps the conversation), or answer the task's requirement "
            "over A2A 1.0 with ContinueTask or aim.realtime.SendInteraction.",
            details={"taskId": client_id, "state": state},
        )

    async def _read(self, call: Call[Any], request: v01.TaskId, ids: TaskIds) -> Any:
        """tasks/get, tasks/cancel, tasks/resubscribe of the task the 0.1 id is bound to."""
        record = await self.services.task_store.client_task(call.principal.key, request.id)
        if record is None or record.t is None:
            raise TaskNotFound(request.id)
        ids.server = record.t
        params = msgspec.structs.replace(call.params, id=record.t)
        return await METHODS[call.method].handler(
            self.services, dataclasses.replace(call, params=params)
        )
