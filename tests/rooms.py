"""Rooms for the Python client's `RoomBinding` in tests, each fitting its `Room` protocol as
`livekit.rtc.Room` does: `FakeRoom` records what the binding asks and can be dropped;
`StandinRoom` also enters the LiveKit stand-in's room with the join token (`/dev/connect`),
so the service sees the device arrive and leave as it would on LiveKit."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import httpx

CLIENT_INITIATED, PARTICIPANT_REMOVED = 1, 4  # LiveKit's DisconnectReason values


class FakeRoom:
    """Records `("connect", url, token)` and `("disconnect",)`; `disconnected` is fired as
    livekit.rtc.Room fires it: after a disconnect it was asked for, and on `drop()`. The
    next connects raise the errors in `refusals`, in turn."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, ...]] = []
        self.listeners: dict[str, list[Callable[..., object]]] = {}
        self.connected = False
        self.refusals: list[Exception] = []

    async def connect(self, url: str, token: str) -> None:
        self.calls.append(("connect", url, token))
        await asyncio.sleep(0)
        if self.refusals:
            raise self.refusals.pop(0)
        self.connected = True

    async def disconnect(self) -> None:
        self.calls.append(("disconnect",))
        await asyncio.sleep(0)
        if self.connected:
            self.connected = False
            self.fire("disconnected", CLIENT_INITIATED)

    def on(self, event: str, callback: Callable[..., object]) -> Callable[..., object]:
        self.listeners.setdefault(event, []).append(callback)
        return callback

    def off(self, event: str, callback: Callable[..., object]) -> None:
        if callback in self.listeners.get(event, []):
            self.listeners[event].remove(callback)

    def isconnected(self) -> bool:
        return self.connected

    def drop(self, reason: int = PARTICIPANT_REMOVED) -> None:
        """The connection ends without the client asking (a network loss, a removal)."""
        self.connected = False
        self.fire("disconnected", reason)

    def fire(self, event: str, *args: Any) -> None:
        for callback in list(self.listeners.get(event, [])):
            callback(*args)

    @property
    def connects(self) -> list[str]:
        """The tokens of every connect, in order."""
        return [call[2] for call in self.calls if call[0] == "connect"]


class StandinRoom(FakeRoom):
    """A FakeRoom whose connect enters the LiveKit stand-in's room with the join token (`POST
    /dev/connect`, refused as LiveKit refuses a bad token) and whose disconnect leaves it
    (`/dev/disconnect`): the stand-in tells the service with its webhooks. `http` is a client
    of the stand-in's HTTP URL."""

    def __init__(self, http: httpx.AsyncClient) -> None:
        super().__init__()
        self.http = http
        self.token: str | None = None

    async def connect(self, url: str, token: str) -> None:
        self.calls.append(("connect", url, token))
        answer = await self.http.post("/dev/connect", json={"token": token})
        if answer.status_code != 200:
            raise ConnectionError(answer.json().get("error", answer.text))
        self.token, self.connected = token, True

    async def disconnect(self) -> None:
        self.calls.append(("disconnect",))
        if not self.connected or self.token is None:
            return
        answer = await self.http.post("/dev/disconnect", json={"token": self.token})
        answer.raise_for_status()
        self.connected = False
        self.fire("disconnected", CLIENT_INITIATED)
