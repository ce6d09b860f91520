"""A session bound to a LiveKit room: `RoomBinding` keeps this device's room connection in step
with its session.

`connect()` joins (JoinSession) and connects the room with the URL and token it got; from then
on the binding listens to the session (listening starts its stream) and to the room's
`disconnected` event, and acts on what they say:

- `superseded` (another device took the session over): it leaves the room; `connect()` again
  takes the session back;
- `ended`: it leaves the room and stops (its listeners removed, its timers cancelled);
- `rebound` (the room was replaced): it leaves the room, joins again (JoinSession waits while
  the new room is provisioned) and connects the new one;
- the room disconnected without the binding asking it to, while the session is live (neither
  ended nor superseded): it connects again, first with the token it holds while that is valid
  for more than `HELD_MARGIN_S` (and no newer epoch was seen), else with a new one (GetSession
  first: a device another one took over stays out, as the `superseded` event says, instead of
  taking the session back). Attempts are `rejoin_attempts` at most, a backoff with full
  jitter between them; giving up calls `on_error(error)`.

JoinSession's tokens are short-lived (`JoinResult.expires_at`; 300 s by default). The binding
joins again `refresh_before_s` before the token it holds expires (GetSession first, as above),
so it always holds a token a reconnect can use; for the device already in the room a second
JoinSession is no news to the service (the same epoch, a new token). A refresh that fails is
tried again after a backoff, then reported to `on_error`; it never reaches the session's
events. Without `on_error`, errors go to the running loop's exception handler.

The binding never raises into the session's stream, and it names only what it uses of the
room (`Room`): `livekit.rtc.Room` is one, and so is a test's stand-in. This module imports
nothing of LiveKit.
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
HELD_MARGIN_S: Final = 10.0  # a held token closer than this to its expiry is not used again
MIN_REFRESH_S: Final = 5.0  # never join again for a new token sooner than this
# between attempts to enter the room again (or to refresh the token): full jitter under a
# ceiling of 0.5 s, doubling up to 8 s
REJOIN_BACKOFF: Final = RetryPolicy(base_delay_ms=500, max_delay_ms=8000)
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

    `refresh_before_s`: how long before the held token expires a new one is fetched.
    `rejoin_attempts`: how often entering the room again (or refreshing the token) is tried
    before `on_error` is told. `on_error(error)`: a plain or async function; None sends errors
    to the loop's exception handler. `sleep`, `clock` (POSIX seconds, to compare with
    `expires_at`) and `random` are the waits, the time and the jitter."""

    def __init__(
        self,
        session: Session,
        room: Room,
        *,
        refresh_before_s: float = 60.0,
        rejoin_attempts: int = 5,
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
        self.joined: JoinResult | None = None  # the newest JoinSession's: the token held
        self._expires: float | None = None  # when that token expires (POSIX seconds)
        self._wanted = False  # connect() asked for the room, and nothing since said to leave
        self._in_room = False  # connected by the binding: a disconnect now is a drop
        self._unsubscribe: list[Callable[[], object]] = []
        self._room_turn = asyncio.Lock()  # one entry into or exit from the room at a time
        self._join_turn = asyncio.Lock()  # one JoinSession at a time
        self._rejoin: asyncio.Task[None] | None = None  # entering the room again
        self._refresher: asyncio.Task[None] | None = None  # the next token refresh
        self._tasks: set[asyncio.Future[Any]] = set()  # exits, on_error's coroutines

    def __repr__(self) -> str:
        return f"RoomBinding({self.session.session_id}, in room: {self._in_room})"

    @property
    def listening(self) -> bool:
        """True from `connect()` until the session ended or `aclose()`."""
        return bool(self._unsubscribe)

    @property
    def in_room(self) -> bool:
        """True while the room is connected by the binding's doing."""
        return self._in_room

    # ---- what the app calls ------------------------------------------------------------------
    async def connect(self) -> JoinResult:
        """`session.join()` (it waits while the session is provisioning, and after `Superseded`
        takes the session back), then `room.connect(url, token)` (a connected room is left
        first): the JoinResult. Listens to the session, which starts its stream, and to the
        room. Raises what the join or the connect raised (out of the room, the binding then
        stays out, and refreshes no token, until `connect()` is called again)."""
        self._listen()
        self._cancel_rejoin()
        self._wanted = True
        try:
            async with self._room_turn:
                joined = await self._join()
                await self._enter(joined)
        except BaseException:
            if not self._in_room:
                self._wanted = False
                self._cancel_refresh()
            raise
        return joined

    async def aclose(self) -> None:
        """Stop: the binding's listeners of the session and the room are removed, the token
        refresh and any reconnect cancelled. The room is not disconnected, and the session's
        stream goes on (`session.close()` stops it)."""
        running = (self._rejoin, self._refresher)
        self._stop()
        for task in running:
            if task is not None and task is not asyncio.current_task():
                with contextlib.suppress(asyncio.CancelledError):
                    await task

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
        """Every listener removed, every timer and reconnect cancelled."""
        unsubscribe, self._unsubscribe = self._unsubscribe, []
        for remove in unsubscribe:
            remove()
        self._wanted = False
        self._cancel_rejoin()
        self._cancel_refresh()

    def _superseded(self, event: Superseded) -> None:
        """Another device holds the session: out of the room, the token dropped (a refresh
        would take the session back); `connect()` takes it back."""
        self._wanted = False
        self._cancel_rejoin()
        self._cancel_refresh()
        self.joined = self._expires = None
        self._spawn(self._exit())

    def _ended(self, event: Ended) -> None:
        self._stop()
        self.joined = self._expires = None
        self._spawn(self._exit())

    def _rebound(self, event: Rebound) -> None:
        """The room was replaced: the token held is the old room's; leave, join, enter."""
        if not self._wanted:
            return
        self._cancel_refresh()
        self.joined = self._expires = None
        self._start_rejoin(leave=True)

    def _dropped(self, *reason: object) -> None:
        """The room's `disconnected`: a drop unless the binding left it."""
        if not self._in_room:
            return
        self._in_room = False
        if self._wanted and self._live:
            self._start_rejoin(leave=False)

    # ---- the room ----------------------------------------------------------------------------
    async def _enter(self, joined: JoinResult) -> None:
        if self.room.isconnected():
            await self._leave()
        await self.room.connect(joined.url, joined.token)
        self._in_room = True

    async def _leave(self) -> None:
        self._in_room = False  # its `disconnected` is the binding's doing
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
        """Into the room again, at most `rejoin_attempts` times: with the held token on the
        first attempt while it is valid, else with a new one; `leave` first (a rebind)."""
        error: Exception | None = None
        for attempt in range(1, self.rejoin_attempts + 1):
            if attempt > 1:
                await self.sleep(self._backoff_s(attempt - 1))
            if not (self._wanted and self._live):
                return
            try:
                async with self._room_turn:
                    if leave:
                        await self._leave()
                    held = self.joined if attempt == 1 and self._held_valid else None
                    joined = held or await self._join_again()
                    if joined is None:
                        return
                    await self._enter(joined)
                return
            except Exception as failed:  # noqa: BLE001 - tried again, then told to on_error
                error = failed
        self._wanted = False
        self._cancel_refresh()
        if error is not None and self._live:
            self._error(error)

    # ---- the token -----------------------------------------------------------------------
    async def _join(self) -> JoinResult:
        async with self._join_turn:
            joined = await self.session.join()
        self._hold(joined)
        return joined

    async def _join_again(self) -> JoinResult | None:
        """GetSession, then JoinSession unless it shows the session over or taken over (its
        `superseded` event then says so): None."""
        await self.session.refresh()
        if not self._live:
            return None
        return await self._join()

    def _hold(self, joined: JoinResult) -> None:
        """Keep `joined`'s token; its refresh is due `refresh_before_s` before it expires (at
        half its remaining time when that is shorter; never sooner than `MIN_REFRESH_S`)."""
        self.joined = joined
        self._expires = _posix(joined.expires_at)
        self._cancel_refresh()
        if self._expires is None:
            return
        remaining = self._expires - self.clock()
        delay = max(remaining - self.refresh_before_s, remaining / 2, MIN_REFRESH_S)
        self._refresher = asyncio.create_task(
            self._refresh(delay), name=f"aim-token-{self.session.session_id}"
        )

    @property
    def _held_valid(self) -> bool:
        """The held token may enter the room: it is for the session's newest epoch (a rebind
        or a takeover the stream showed makes it stale) and valid for `HELD_MARGIN_S` more."""
        joined, expires = self.joined, self._expires
        if joined is None or expires is None or joined.epoch < self.session.epoch:
            return False
        return expires - self.clock() > HELD_MARGIN_S

    async def _refresh(self, delay: float) -> None:
        await self.sleep(delay)
        error: Exception | None = None
        for attempt in range(1, self.rejoin_attempts + 1):
            if attempt > 1:
                await self.sleep(self._backoff_s(attempt - 1))
            if not self._live or not self.listening:
                return
            try:
                await self._join_again()  # holds the new token: the next refresh is due
                return
            except Exception as failed:  # noqa: BLE001 - tried again, then told to on_error
                error = failed
        if error is not None and self._live:
            self._error(error)

    def _cancel_refresh(self) -> None:
        refresher, self._refresher = self._refresher, None
        if refresher is not None and refresher is not asyncio.current_task():
            refresher.cancel()

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

    def _backoff_s(self, retry: int) -> float:
        return REJOIN_BACKOFF.backoff_ms(retry, self.random()) / 1000

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
