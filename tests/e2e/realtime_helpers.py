"""Building blocks for realtime session tests."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import AsyncIterator
from typing import Any

import httpx

from realtime.app import create_app
from realtime.settings import Settings
from realtime.store.redis_client import RedisClient
from tests.conftest import TEST_SECRET, rpc, serving


def new_id() -> str:
    return str(uuid.uuid4())


def create_part(client_session_id: str | None = None, **overrides: Any) -> dict[str, Any]:
    data: dict[str, Any] = {
        "operation": "session.create",
        "clientSessionId": client_session_id or new_id(),
        "requested": {
            "mediaBinding": "livekit-webrtc-v1",
            "audio": "bidirectional",
            "userVideoSources": [],
            "agentVideoSources": [],
            "interactions": ["text"],
        },
        "requiredCapabilities": ["audio_input", "audio_output"],
        "recording": "off",
        "retention": {"transcript": "off", "summary": "off"},
    }
    data.update(overrides)
    return {"data": data, "mediaType": "application/json"}


CAPS = {"audioInput": True, "audioOutput": True, "camera": False, "screen": False,
        "interactions": ["text"]}  # fmt: skip


async def create_session(
    client: httpx.AsyncClient,
    *,
    subject: str = "alice",
    part: dict[str, Any] | None = None,
    message_id: str | None = None,
    **configuration: Any,
) -> dict[str, Any]:
    params: dict[str, Any] = {
        "message": {
            "messageId": message_id or new_id(),
            "role": "ROLE_USER",
            "parts": [part or create_part()],
        }
    }
    if configuration:
        params["configuration"] = configuration
    return await rpc(client, "SendMessage", params, subject=subject, realtime=True)


def session_of(task: dict[str, Any]) -> dict[str, Any]:
    meta: dict[str, Any] = task["metadata"]["urn:aim:a2a:realtime:v1"]
    return meta


async def call(client: httpx.AsyncClient, method: str, subject: str = "alice", **params: Any):
    return await rpc(client, f"aim.realtime.{method}", params, subject=subject, realtime=True)


async def register(client, session_id: str, epoch: int, key: str, subject: str = "alice"):
    return await call(
        client, "RegisterEndpoint", subject, sessionId=session_id, sessionEpoch=epoch,
        commandId=new_id(), clientEndpointKey=key, capabilities=CAPS,
    )  # fmt: skip


async def hand_over(client: Any, sid: str, epoch: int, key: str) -> tuple[str, int]:
    """The device `key` registers and joins at `epoch`, taking the session over: its endpoint
    id and the session's new epoch."""
    registered = await register(client, sid, epoch, key)
    endpoint: str = registered["result"]["endpoint"]["endpointId"]
    joined = await call(
        client, "JoinSession", sessionId=sid, sessionEpoch=epoch, endpointId=endpoint,
        commandId=new_id(),
    )  # fmt: skip
    assert "result" in joined, joined
    return endpoint, int(joined["result"]["session"]["sessionEpoch"])


@contextlib.asynccontextmanager
async def plain_service(store: RedisClient, **settings: Any) -> AsyncIterator[httpx.AsyncClient]:
    """A client of a service without LiveKit (the tests' secret, no rate limit, `settings`),
    served in this event loop."""
    every = {"auth_hs256_secret": TEST_SECRET, "rate_limit_rps": 0, **settings}
    app = create_app(Settings(**every), store=store)
    async with serving(app) as base_url, httpx.AsyncClient(base_url=base_url) as client:
        yield client
