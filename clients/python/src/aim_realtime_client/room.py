"""A session bound to a LiveKit room: `RoomBinding` keeps this device's room connection in step
with its session.

`connect()` joins (JoinSession) and connects the room with the URL and token it got (or with an
earlier join's, while its token is fresh); from then on the binding listens to the session
(listening starts its stream) and to the room's `disconnected` event, and acts on what they say:

- `superseded` (another device took the session over): it leaves the room; `connect()` again
  takes the session back;
- `ended`: it leaves the room and stops (its listeners removed);
- `rebound` (the room was replaced): it leaves the room, joins again (JoinSession waits while
  the new room is provisioned) and connects the new one;
- the room disconnected without the binding asking it to, while the session is live: GetSession
  first (a device another one took over stays out, as the `superseded` event then says, instead
  of taking the session back), then a new JoinSession (a fresh token) and the room connected
  again. Attempts are `rejoin_attempts` at most, a backoff with full jitter between them;
  giving up calls `on_error(error)`.

JoinSession's tokens are short-lived (`JoinResult.expires_at`; 300 s by default): a join
result is handed to LiveKit only while its token has more than `refresh_before_s` left, else
the binding joins again first. A connected room's token is never refreshed with a JoinSession:
LiveKit refreshes a connected participant's token itself, and a JoinSession by the device in
the room would put the session back to `joining` (docs/decisions.md, 211).

The binding never raises into the session's stream, and it names only what it uses of the
room (`Room`): `livekit.rtc.Room` is one, and so is a test's stand-in. This module imports
nothing of LiveKit. Without `on_error`, errors go to the running loop's exception handler.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import random as _random
import time
from collections.abc import Callable, Coroutine
from typing import Any, Final, Literal, Protocol

from aim_realtime_client.events import Ended, Events, JoinResult, Rebound, Superseded
from aim_realtime_client.listeners import report, run
from aim_realtime_client.rpc import RetryPolicy, Sleep
from aim_realtime_client.session import Session

DISCONNECTED: Final = "disconnected"  # the room's event when its connection ended
# livekit's DisconnectReason.CLIENT_INITIATED: the app (or the binding) called disconnect()
CLIENT_INITIATED: Final = 1
REJOIN_MAX_DELAY_S: Final = 8.0  # the backoff's ceiling between attempts to enter again
OVER_STATES: Final = frozenset({"ending", "ended", "failed"})

ErrorHandler = Callable[[BaseException], object]


class Room(Protocol):
    """What the binding uses of a LiveKit room; `livekit.rtc.Room` fits it (`room.connect(url,
    token)` joins the room, `disconnect()` leaves it, its `disconnected` event says the
    connection ended, whoever ended it)."""

    async def connect(self, url: str, token: str, /) -> None: ...

    async def disconnect(self) -> None: ...

    def on(self, event: Literal["disconnected"], callback: Callable[..., object], /) -> object: ...

    def off(self, event: Literal["disconnected"], callback: Callable[..., object], /) -> object: ...

    def isconnected(self) -> bool: ...


class RoomBinding:
    """`RoomBinding(session, room)`: `await binding.connect()` joins and enters the room, then
    keeps it in step with the session (the module's docstring says how); `await
    binding.aclose()` stops that, leaving the room as it is.

    `refresh_before_s`: a join result whose token expires sooner than this is not handed to
    LiveKit (a new JoinSession gives a fresh one). `rejoin_attempts`: how often entering the
    room again after a drop is tried before `on_error` is told; `rejoin_delay_s` the backoff's
    base (doubling, at most `REJOIN_MAX_DELAY_S`, full jitter). `on_error(error)`: a plain or
    async function; None sends errors to the loop's exception handler. `sleep`, `clock` (POSIX
    seconds, to compare with `expires_at`) and `random` are the waits, the time and the
    jitter."""

    def __init__(
        self,
        session: Session,
        room: Room,
        *,
        refresh_before_s: float = 60.0,
        rejoin_attempts: int = 5,
        rejoin_delay_s: float = 0.5,
        on_error: ErrorHandler | None = None,
        sleep: Sleep = asyncio.sleep,
        clock: Callable[[], float] = time.time,
        random: Callable[[], float] = _random.random,
    ) -> None:
        if rejoin_attempts < 1:
            raise ValueError("rejoin_attempts must be at least 1")
        self.session = session
        self.room = room
        self.refresh_before_s = refresh_before_s
        self.rejoin_attempts = rejoin_attempts
        self.on_error = on_error
        self.sleep = sleep
        self.clock = clock
        self.random = random
        self.joined: JoinResult | None = None  # the join the room is (or was last) entered with
        self._backoff = RetryPolicy(
            base_delay_ms=int(rejoin_delay_s * 1000), max_delay_ms=int(REJOIN_MAX_DELAY_S * 1000)
        )
        self._wanted = False  # connect() asked for the room, and nothing since said to leave
        self._connected = False  # connected by the binding: a disconnect now is a drop
        self._unsubscribe: list[Callable[[], object]] = []
        self._room_turn = asyncio.Lock()  # one entry into or exit from the room at a time
        self._rejoin: asyncio.Task[None] | None = None  # entering the room again
        self._tasks: set[asyncio.Future[Any]] = set()  # exits, on_error's coroutines

    def __repr__(self) -> str:
        return f"RoomBinding({self.session.session_id}, connected: {self._connected})"

    @property
    def listening(self) -> bool:
        """True from `connect()` until the session ended or `aclose()`."""
        return bool(self._unsubscribe)

    @property
    def connected(self) -> bool:
        """True while the room is connected by the binding's doing."""
        return self._connected

    # ---- what the app calls ------------------------------------------------------------------
    async def connect(self, joined: JoinResult | None = None) -> JoinResult:
        """`session.join()` (it waits while the session is provisioning, and after `Superseded`
        takes the session back), then `room.connect(url, token)` (a connected room is left
        first): the JoinResult. With `joined` (an earlier `session.join()`'s result), that one
        while its token has more than `refresh_before_s` left and its epoch is the session's.
        Listens to the session, which starts its stream, and to the room. Raises what the join
        or the connect raised (out of the room, the binding then stays out until `connect()`
        is called again)."""
        self._listen()
        self._cancel_rejoin()
        self._wanted = True
        try:
            async with self._room_turn:
                chosen = joined if joined is not None and self._usable(joined) else None
                chosen = chosen or await self.session.join()
                await self._enter(chosen)
        except BaseException:
            if not self._connected:
                self._wanted = False
            raise
        return chosen

    async def aclose(self) -> None:
        """Stop: the binding's listeners of the session and the room are removed, any reconnect
        cancelled. The room is not disconnected, and the session's stream goes on
        (`session.close()` stops it)."""
        running = self._rejoin
        self._stop()
        if running is not None and running is not asyncio.current_task():
            with contextlib.suppress(asyncio.CancelledError):
                await running

    # ---- listening ---------------------------------------------------------------------------
    def _listen(self) -> None:
        if self._unsubscribe:
            return
        self.room.on(DISCONNECTED, self._dropped)
        self._unsubscribe = [
            lambda: self.room.off(DISCONNECTED, self._dropped),
            self.session.on(Events.SUPERSEDED, self._superseded),
            self.session.on(Events.ENDED, self._ended),
            self.session.on(Events.REBOUND, self._rebound),
        ]

    def _stop(self) -> None:
        """Every listener removed, any reconnect cancelled."""
        unsubscribe, self._unsubscribe = self._unsubscribe, []
        for remove in unsubscribe:
            remove()
        self._wanted = False
        self._cancel_rejoin()

    def _superseded(self, event: Superseded) -> None:
        """Another device holds the session: out of the room; `connect()` takes it back."""
        self._wanted = False
        self._cancel_rejoin()
        self._spawn(self._exit())

    def _ended(self, event: Ended) -> None:
        self._stop()
        self._spawn(self._exit())

    def _rebound(self, event: Rebound) -> None:
        """The room was replaced: the token held is the old room's; leave, join, enter."""
        if self._wanted:
            self._start_rejoin(leave=True)

    def _dropped(self, *reason: object) -> None:
        """The room's `disconnected`: a drop unless the binding left it, or the app did (its
        reason CLIENT_INITIATED)."""
        if not self._connected:
            return
        self._connected = False
        if reason and reason[0] == CLIENT_INITIATED:
            self._wanted = False  # the app left the room: it stays out, a rebind included
        elif self._wanted and self._live:
            self._start_rejoin(leave=False)

    # ---- the room ----------------------------------------------------------------------------
    def _usable(self, joined: JoinResult) -> bool:
        """An earlier join may enter the room: its token is fresh and its epoch current."""
        expires = _posix(joined.expires_at)
        fresh = expires is not None and expires - self.clock() > self.refresh_before_s
        return fresh and joined.epoch >= self.session.epoch and not self.session.superseded

    async def _enter(self, joined: JoinResult) -> None:
        if self.room.isconnected():
            await self._leave()
        self.joined = joined
        await self.room.connect(joined.url, joined.token)
        self._connected = True

    async def _leave(self) -> None:
        self._connected = False  # its `disconnected` is the binding's doing
        if self.room.isconnected():
            await self.room.disconnect()

    async def _exit(self) -> None:
        """Out of the room, unless `connect()` was called since it was decided."""
        async with self._room_turn:
            if not self._wanted:
                await self._leave()

    def _start_rejoin(self, *, leave: bool) -> None:
        self._cancel_rejoin()
        self._rejoin = asyncio.create_task(
            self._reenter(leave=leave), name=f"aim-room-{self.session.session_id}"
        )

    async def _reenter(self, *, leave: bool) -> None:
        """Into the room again, at most `rejoin_attempts` times: GetSession, then JoinSession
        (a fresh token) while this device still holds a live session; `leave` first (a
        rebind)."""
        error: Exception | None = None
        for attempt in range(1, self.rejoin_attempts + 1):
            if attempt > 1:
                await self.sleep(self._backoff.backoff_ms(attempt - 1, self.random()) / 1000)
            if not (self._wanted and self._live):
                return
            try:
                async with self._room_turn:
                    if leave:
                        await self._leave()
                    await self.session.refresh()
                    if not self._live:  # taken over (its `superseded` event says so) or over
                        return
                    await self._enter(await self.session.join())
                return
            except Exception as failed:  # noqa: BLE001 - tried again, then told to on_error
                error = failed
        self._wanted = False
        if error is not None and self._live:
            self._error(error)

    def _cancel_rejoin(self) -> None:
        rejoin, self._rejoin = self._rejoin, None
        if rejoin is not None and rejoin is not asyncio.current_task():
            rejoin.cancel()

    # ---- helpers -----------------------------------------------------------------------------
    @property
    def _live(self) -> bool:
        """The session goes on for this device: not over, not taken over."""
        session = self.session
        over = session.ended is not None or session.state in OVER_STATES
        return not over and not session.superseded

    def _spawn(self, work: Coroutine[Any, Any, None]) -> None:
        """`work` as a task kept until it is over; what it raises goes to `on_error`."""

        async def reported() -> None:
            try:
                await work
            except Exception as error:  # noqa: BLE001 - told to on_error, never to the stream
                self._error(error)

        task = asyncio.create_task(reported())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _error(self, error: BaseException) -> None:
        if self.on_error is None:
            report(error, "the room binding")
        else:
            run(self.on_error, error, self._tasks, "the room binding's on_error")


def _posix(text: str) -> float | None:
    """An RFC 3339 time (`expires_at`) in POSIX seconds; None if it is not one."""
    try:
        when = datetime.datetime.fromisoformat(text)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=datetime.UTC)
    return when.timestamp()
