"""AimClient: the device side of the AIM realtime service (`POST <base_url>/a2a`)."""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import Any, Final

import httpx

from aim_realtime_client.errors import AimError
from aim_realtime_client.events import Capabilities
from aim_realtime_client.rpc import (
    A2A_HEADERS,
    REALTIME,
    Link,
    RetryPolicy,
    RpcCaller,
    Sleep,
    TokenSource,
)
from aim_realtime_client.session import Session
from aim_realtime_client.stream import IDLE_TIMEOUT_S, STREAM_BACKOFF

DEFAULT_REQUESTED: Final[Mapping[str, Any]] = {
    "mediaBinding": "livekit-webrtc-v1",
    "audio": "bidirectional",
    "userVideoSources": [],
    "agentVideoSources": [],
    "interactions": ["text", "confirmation"],
}
DEFAULT_REQUIRED: Final = ("audio_input", "audio_output")
DEFAULT_RETENTION: Final[Mapping[str, str]] = {"transcript": "off", "summary": "off"}


class AimClient:
    """`AimClient(base_url, token=...)`: `token` is a string or a function (sync or async)
    returning one, called for every request. `retry` (a RetryPolicy or a mapping of its
    fields) and `request_timeout_ms` apply to every call; `ready_timeout_ms` bounds how long
    `join()` waits for a provisioning session. `http` / `transport`: an httpx client or
    transport of the caller's. Use as `async with AimClient(...) as client:` or `aclose()`."""

    def __init__(
        self,
        base_url: str,
        *,
        token: TokenSource,
        retry: RetryPolicy | Mapping[str, int] | None = None,
        request_timeout_ms: int = 30_000,
        ready_timeout_ms: int = 20_000,
        http: httpx.AsyncClient | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
        stream_backoff: RetryPolicy = STREAM_BACKOFF,
        stream_idle_timeout_s: float = IDLE_TIMEOUT_S,
        sleep: Sleep | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        extra: dict[str, Any] = {} if sleep is None else {"sleep": sleep}
        self.rpc = RpcCaller(
            f"{self.base_url}/a2a",
            token=token,
            headers=A2A_HEADERS,
            retry=retry,
            request_timeout_ms=request_timeout_ms,
            http=http,
            transport=transport,
            **extra,
        )
        self.ready_timeout_ms = ready_timeout_ms
        self.stream_backoff = stream_backoff
        self.stream_idle_timeout_s = stream_idle_timeout_s
        # what each Session is given of this client (it never reaches back into it)
        self.link = Link(
            self.rpc,
            ready_timeout_ms=ready_timeout_ms,
            stream_backoff=stream_backoff,
            stream_idle_timeout_s=stream_idle_timeout_s,
        )
        self._sessions: list[Session] = []

    async def __aenter__(self) -> AimClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close every session's stream, then the HTTP client (if it is this client's)."""
        for session in self._sessions:
            await session.close()
        await self.rpc.aclose()

    async def call(self, method: str, params: Mapping[str, Any]) -> Any:
        """Any other JSON-RPC method (GetTask, ListTasks, …), retried the same way."""
        return await self.rpc.call(method, params)

    async def create_session(
        self,
        endpoint_key: str,
        *,
        capabilities: Capabilities | Mapping[str, Any] | None = None,
        requested: Mapping[str, Any] | None = None,
        required_capabilities: tuple[str, ...] | list[str] = DEFAULT_REQUIRED,
        recording: str = "off",
        retention: Mapping[str, str] | None = None,
        text: str = "Start a voice session",
        return_immediately: bool = False,
    ) -> Session:
        """SendMessage with a `session.create` part (messageId and clientSessionId minted once,
        kept on retries); it waits up to 5 s for `ready`, then reads GetSession (`info`); with
        `return_immediately` neither. A REJECTED task → AimError with reason "REJECTED" and the
        status message's text."""
        data = {
            "operation": "session.create",
            "clientSessionId": str(uuid.uuid4()),
            "requested": dict(requested or DEFAULT_REQUESTED),
            "requiredCapabilities": list(required_capabilities),
            "recording": recording,
            "retention": dict(retention or DEFAULT_RETENTION),
        }
        parts: list[dict[str, Any]] = [{"text": text}] if text else []
        parts.append({"mediaType": "application/json", "data": data})
        configuration: dict[str, Any] = {"historyLength": 0}
        if return_immediately:
            configuration["returnImmediately"] = True
        result = await self.rpc.call(
            "SendMessage",
            {
                "message": {"messageId": str(uuid.uuid4()), "role": "ROLE_USER", "parts": parts},
                "configuration": configuration,
            },
        )
        task: dict[str, Any] = result["task"]
        status: dict[str, Any] = task.get("status") or {}
        meta = (task.get("metadata") or {}).get(REALTIME)
        if status.get("state") == "TASK_STATE_REJECTED" or meta is None:
            raise rejected(task)
        session = Session(
            self.link,
            session_id=meta["sessionId"],
            task_id=task["id"],
            endpoint_key=endpoint_key,
            capabilities=Capabilities.of(capabilities),
        )
        session.state = meta.get("sessionState", "")
        session.observe_epoch(int(meta.get("sessionEpoch", 1)))
        session.task_state = str(status.get("state", ""))
        session.task_version = int(meta.get("taskVersion", 0))
        self._sessions.append(session)
        if not return_immediately:
            await session.refresh()  # the session object, in `info`
        return session

    async def resume_session(
        self,
        session_id: str,
        *,
        endpoint_key: str,
        task_id: str | None = None,
        capabilities: Capabilities | Mapping[str, Any] | None = None,
    ) -> Session:
        """A Session for a session created earlier (an app restart, a second device): read
        with GetSession, then GetTask (its state, version and open requirement are known at
        once); join() registers this key (the same key: the same endpointId)."""
        got = await self.rpc.call("aim.realtime.GetSession", {"sessionId": session_id})
        info: dict[str, Any] = got["session"]
        session = Session(
            self.link,
            session_id=session_id,
            task_id=task_id or str(info["taskId"]),
            endpoint_key=endpoint_key,
            capabilities=Capabilities.of(capabilities),
        )
        session.apply_session(info)
        for endpoint in info.get("endpoints") or ():
            if endpoint.get("clientEndpointKey") == endpoint_key:
                session.endpoint_id = str(endpoint["endpointId"])
        task = await self.rpc.call("GetTask", {"id": session.task_id, "historyLength": 0})
        session.apply_task(task)
        self._sessions.append(session)
        return session


def rejected(task: Mapping[str, Any]) -> AimError:
    """The error for a task the service rejected: its status message's text and data."""
    status = task.get("status") or {}
    message = status.get("message") or {}
    texts, metadata = [], {}
    for part in message.get("parts") or ():
        if "text" in part:
            texts.append(str(part["text"]))
        if isinstance(part.get("data"), dict):
            for key, value in part["data"].items():
                items = value if isinstance(value, list) else [value]
                metadata[str(key)] = ",".join(str(item) for item in items)
    said = " ".join(texts) or f"the task came back {status.get('state', 'without a session')}"
    return AimError(said, reason="REJECTED", metadata=metadata, method="SendMessage")
