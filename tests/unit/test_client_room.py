"""`RoomBinding` on a scripted service and a fake room, with a timeline the test moves: it
connects the room with what JoinSession gave (or an earlier join's, while its token is fresh);
leaves it when another device takes the session over or the session ends; enters the new room
after a rebind; enters again after a drop (GetSession, then a new token) and gives up after
`rejoin_attempts`; never joins again for a token while in the room; and stops at `aclose()`."""

from __future__ import annotations

import asyncio
import datetime
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from aim_realtime_client import AimClient, RoomBinding, Session
from aim_realtime_client.room import CLIENT_INITIATED
from aim_realtime_client.rpc import RetryPolicy
from tests.rooms import FakeRoom
from tests.unit.client_service_helpers import Service, result, session_object, task, until

START = 1_800_000_000.0  # POSIX seconds: where the timeline starts
LIFETIME_S = 300  # JoinSession's tokens
INSTANT_S = 30.0  # sleeps shorter than this pass at once (backoffs); longer ones wait
BACKOFF = RetryPolicy(base_delay_ms=500, max_delay_ms=8000)  # the binding's between re-joins


class Timeline:
    """The binding's clock and sleep: a sleep shorter than INSTANT_S passes at once (moving
    the clock), a longer one waits until the test moves the time past its end."""

    def __init__(self) -> None:
        self.now = START
        self.sleeps: list[float] = []
        self.waiting: list[tuple[float, asyncio.Future[None]]] = []

    def clock(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        if seconds < INSTANT_S:
            self.now += seconds
            await asyncio.sleep(0)
            return
        entry = (self.now + seconds, asyncio.get_running_loop().create_future())
        self.waiting.append(entry)
        try:
            await entry[1]
        finally:
            self.waiting.remove(entry)

    def pending(self) -> list[float]:
        """How long each sleep still waits."""
        return [due - self.now for due, future in self.waiting if not future.done()]

    async def advance(self, seconds: float) -> None:
        self.now += seconds
        for due, future in list(self.waiting):
            if due <= self.now and not future.done():
                future.set_result(None)
        for _ in range(5):
            await asyncio.sleep(0)


def rfc3339(seconds: float) -> str:
    when = datetime.datetime.fromtimestamp(seconds, tz=datetime.UTC)
    return when.isoformat(timespec="milliseconds").replace("+00:00", "Z")


class World:
    """One device's session (key "phone", endpoint e-phone) on a scripted service, a fake room
    and a timeline. `taken_over` makes GetSession show the endpoint superseded at epoch 2."""

    def __init__(self) -> None:
        self.timeline = Timeline()
        self.room = FakeRoom()
        self.epoch = 1
        self.state = "active"
        self.taken_over = False
        self.version = 0
        self.tokens = 0
        self.errors: list[BaseException] = []
        self.service = Service({
            "SendMessage": lambda _: result({"task": task("TASK_STATE_WORKING", "ready")}),
            "aim.realtime.GetSession": lambda _: result({"session": self.session()}),
            "aim.realtime.RegisterEndpoint": lambda _: result({
                "endpoint": {"endpointId": "e-phone", "clientEndpointKey": "phone"},
                "session": self.session()}),
            "aim.realtime.JoinSession": self.join,
        })  # fmt: skip

    def session(self) -> dict[str, Any]:
        self.version += 1
        state = "superseded" if self.taken_over else "active"
        mine = {"endpointId": "e-phone", "clientEndpointKey": "phone", "state": state}
        epoch = 2 if self.taken_over else self.epoch
        return session_object(self.state, epoch=epoch, version=self.version, endpoints=[mine])

    def join(self, params: dict[str, Any]) -> httpx.Response:
        self.tokens += 1
        media = {"url": "wss://media.test", "token": f"tok-{self.tokens}",
                 "room": f"aim-s1-e{self.epoch}", "identity": "e-phone",
                 "expiresAt": rfc3339(self.timeline.now + LIFETIME_S)}  # fmt: skip
        return result({"media": media, "session": self.session()})

    def binding(self, session: Session, **options: Any) -> RoomBinding:
        options.setdefault("on_error", self.errors.append)
        return RoomBinding(session, self.room, sleep=self.timeline.sleep,
                           clock=self.timeline.clock, random=lambda: 0.5, **options)  # fmt: skip

    def joins(self) -> int:
        return self.service.methods.count("aim.realtime.JoinSession")

    def frame(self, state: str, *, epoch: int, task_state: str = "TASK_STATE_WORKING") -> None:
        """A frame of the session's stream, on its open connection."""
        update = {"task": task(task_state, state, epoch=epoch, version=self.version + 1)}
        self.service.feeds[-1].send(update, f"{self.version + 1}-0")


@pytest.fixture
def world() -> World:
    return World()


@pytest.fixture
async def client(world: World) -> AsyncIterator[AimClient]:
    async with world.service.client() as client:
        yield client


@pytest.fixture
async def session(client: AimClient) -> Session:
    return await client.create_session("phone", return_immediately=True)


@pytest.fixture
async def binding(world: World, session: Session) -> AsyncIterator[RoomBinding]:
    binding = world.binding(session)
    yield binding
    await binding.aclose()


async def test_connect_joins_then_connects_the_room_and_follows_the_stream(world, session, binding):
    assert not session.following
    joined = await binding.connect()
    assert (joined.url, joined.token, joined.room) == ("wss://media.test", "tok-1", "aim-s1-e1")
    assert binding.joined == joined
    assert world.room.calls == [("connect", "wss://media.test", "tok-1")]
    assert binding.connected
    assert binding.listening
    methods = world.service.methods
    assert methods.index("aim.realtime.RegisterEndpoint") < methods.index(
        "aim.realtime.JoinSession")  # fmt: skip
    assert session.following  # listening started the stream
    await world.service.feed()
    assert len(world.room.listeners["disconnected"]) == 1


async def test_a_takeover_leaves_the_room_and_connect_takes_the_session_back(
    world, session, binding
):
    await binding.connect()
    await world.service.feed()
    world.taken_over = True  # the laptop joined at epoch 2: the stream shows it
    world.frame("active", epoch=2)
    await until(lambda: not world.room.connected)
    assert session.superseded
    assert world.room.calls[-1] == ("disconnect",)
    assert not binding.connected
    await world.timeline.advance(3600)  # nothing joins again (it would take the session back)
    assert world.joins() == 1
    assert world.room.connects == ["tok-1"]  # its own disconnect was no drop

    world.taken_over, world.epoch = False, 3  # the phone takes it back: a handoff to it
    joined = await binding.connect()
    assert joined.token == "tok-2"
    assert world.room.connects == ["tok-1", "tok-2"]
    assert not session.superseded
    assert world.errors == []


async def test_connect_right_after_a_takeover_is_not_undone_by_the_leaving(world, session, binding):
    await binding.connect()
    session.mark_superseded(2)  # the binding decides to leave; the app takes the session back
    joined = await binding.connect()
    await world.timeline.advance(0)
    assert joined.token == "tok-2"
    assert world.room.calls == [
        ("connect", "wss://media.test", "tok-1"),
        ("disconnect",),
        ("connect", "wss://media.test", "tok-2"),
    ]
    assert world.room.connected
    assert binding.connected


async def test_a_connect_that_fails_leaves_the_binding_out_of_the_room(world, session, binding):
    world.room.refusals.append(ConnectionError("refused"))
    with pytest.raises(ConnectionError):
        await binding.connect()
    assert not binding.connected
    assert binding.listening
    joined = await binding.connect()  # the app tries again
    assert world.room.connects == ["tok-1", joined.token]
    assert binding.connected


async def test_the_end_leaves_the_room_and_stops_everything(world, session, binding):
    await binding.connect()
    await world.service.feed()
    world.state = "ended"
    world.frame("ended", epoch=1, task_state="TASK_STATE_COMPLETED")
    await until(lambda: not world.room.connected)
    assert session.ended is not None
    assert world.room.calls == [("connect", "wss://media.test", "tok-1"), ("disconnect",)]
    assert not binding.listening
    assert world.room.listeners["disconnected"] == []
    session.emit(session.ended)  # nothing listens any more
    world.room.drop()
    await world.timeline.advance(3600)
    assert world.room.calls[-1] == ("disconnect",)
    assert world.joins() == 1
    assert world.errors == []


async def test_a_rebind_leaves_the_old_room_and_enters_the_new_one(world, session, binding):
    await binding.connect()
    await world.service.feed()
    world.epoch, world.state = 2, "ready"  # provisioned again by the time it asks
    world.frame("provisioning", epoch=2)
    await until(lambda: world.room.connects == ["tok-1", "tok-2"] and world.room.connected)
    assert world.room.calls == [
        ("connect", "wss://media.test", "tok-1"),
        ("disconnect",),
        ("connect", "wss://media.test", "tok-2"),
    ]
    assert binding.joined is not None
    assert (binding.joined.room, binding.joined.epoch) == ("aim-s1-e2", 2)
    assert world.service.methods.count("aim.realtime.RegisterEndpoint") == 2
    assert world.errors == []


async def test_an_earlier_join_enters_while_its_token_is_fresh_else_a_new_join(world, session):
    early = await session.join()
    binding = world.binding(session)
    assert await binding.connect(early) == early
    assert world.room.connects == ["tok-1"]
    assert world.joins() == 1
    await binding.aclose()
    await world.room.disconnect()

    later = world.binding(session)  # the same join, 61 s short of its expiry: too late
    await world.timeline.advance(LIFETIME_S - 60 + 1)
    joined = await later.connect(early)
    assert joined.token == "tok-2"
    assert world.room.connects == ["tok-1", "tok-2"]
    await later.aclose()


async def test_a_connected_room_is_never_joined_again_for_a_token(world, session, binding):
    """A JoinSession by the device in the room would make the session `joining` again, and
    LiveKit sends no second participant_joined: LiveKit refreshes a connected token itself."""
    await binding.connect()
    await world.timeline.advance(LIFETIME_S * 3)
    assert world.joins() == 1
    assert world.timeline.pending() == []
    assert world.room.connects == ["tok-1"]


async def test_a_drop_reads_the_session_then_enters_again_with_a_new_token(world, binding):
    await binding.connect()
    world.room.drop()
    await until(lambda: world.room.connected)
    assert world.room.connects == ["tok-1", "tok-2"]
    assert world.service.methods[-2:] == ["aim.realtime.GetSession", "aim.realtime.JoinSession"]
    assert binding.joined is not None
    assert binding.joined.token == "tok-2"
    assert binding.connected

    # refused at the first attempt: the next one joins again after a backoff
    world.room.refusals.append(ConnectionError("refused"))
    world.room.drop()
    await until(lambda: world.room.connects == ["tok-1", "tok-2", "tok-3", "tok-4"])
    assert world.timeline.sleeps[-1] == BACKOFF.backoff_ms(1, 0.5) / 1000
    assert world.errors == []


async def test_the_app_s_own_disconnect_is_no_drop(world, session, binding):
    await binding.connect()
    await world.service.feed()
    world.room.drop(CLIENT_INITIATED)  # what livekit.rtc says after the app's disconnect()
    await world.timeline.advance(60)
    assert world.room.connects == ["tok-1"]
    assert world.joins() == 1
    assert not binding.connected
    world.epoch, world.state = 2, "ready"  # a rebind after it: the app still stays out
    world.frame("provisioning", epoch=2)
    await until(lambda: session.epoch == 2)
    await world.timeline.advance(60)
    assert world.room.connects == ["tok-1"]
    assert world.joins() == 1


async def test_a_drop_after_a_takeover_does_not_take_the_session_back(world, session, binding):
    """LiveKit removed the participant before the stream said why: GetSession shows the
    endpoint superseded, and the binding stays out instead of taking the session back."""
    await binding.connect()
    world.taken_over = True
    world.room.drop()  # PARTICIPANT_REMOVED
    await until(lambda: session.superseded)
    await world.timeline.advance(60)
    assert world.room.connects == ["tok-1"]
    assert world.joins() == 1
    assert not world.room.connected
    assert world.errors == []


async def test_entering_again_gives_up_after_rejoin_attempts_and_tells_on_error(world, session):
    binding = world.binding(session, rejoin_attempts=3)
    await binding.connect()
    refusals = [ConnectionError(f"refused {n}") for n in range(1, 6)]
    world.room.refusals.extend(refusals)
    world.room.drop()
    await until(lambda: world.errors)
    assert world.errors == [refusals[2]]
    assert world.room.connects == ["tok-1", "tok-2", "tok-3", "tok-4"]
    backoffs = [seconds for seconds in world.timeline.sleeps if seconds < INSTANT_S]
    assert backoffs == [BACKOFF.backoff_ms(n, 0.5) / 1000 for n in (1, 2)]
    assert not binding.connected
    await world.timeline.advance(60)
    assert len(world.room.connects) == 4
    await binding.aclose()


async def test_without_on_error_giving_up_goes_to_the_loop_s_exception_handler(
    world, session, loop_reports
):
    binding = RoomBinding(session, world.room, rejoin_attempts=1, sleep=world.timeline.sleep,
                          clock=world.timeline.clock)  # fmt: skip
    await binding.connect()
    world.room.refusals.append(ConnectionError("refused"))
    world.room.drop()
    await until(lambda: loop_reports)
    [report] = loop_reports
    assert isinstance(report["exception"], ConnectionError)
    assert "the room binding" in report["message"]
    await binding.aclose()


async def test_aclose_removes_listeners_and_timers_and_leaves_the_room_as_it_is(
    world, session, binding
):
    await binding.connect()
    await binding.aclose()
    assert world.room.connected
    assert world.room.calls == [("connect", "wss://media.test", "tok-1")]
    assert not binding.listening
    assert world.room.listeners["disconnected"] == []
    assert world.timeline.pending() == []
    world.room.drop()
    session.mark_superseded(2)
    await world.timeline.advance(3600)
    assert world.room.calls == [("connect", "wss://media.test", "tok-1")]
    assert world.joins() == 1
    assert session.following  # the session's stream is the session's: close() stops it


def test_rejoin_attempts_are_at_least_one(world):
    with pytest.raises(ValueError, match="rejoin_attempts"):
        RoomBinding(Session.__new__(Session), world.room, rejoin_attempts=0)
