"""LiveKit's own room fits the room binding: mypy (strict, `scripts/check`) accepts a
`livekit.rtc.Room` wherever the client's `Room` protocol is expected. Never run; the client
itself imports nothing of LiveKit (livekit is a development dependency only)."""

from __future__ import annotations

from livekit import rtc

from aim_realtime_client import Room, RoomBinding, Session


def bind(session: Session) -> RoomBinding:
    room: Room = rtc.Room()
    return RoomBinding(session, room)
