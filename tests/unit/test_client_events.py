"""A session's events for listeners: the `Events` names, `on` / `once` / `off` and `follow()`
next to `events()`, on a scripted service whose stream the test writes. Listening starts the
stream; a listener that raises stops neither the stream nor the other listeners."""

from __future__ import annotations

import asyncio
import gc
import weakref
from collections.abc import AsyncIterator
from typing import Any

import pytest

from aim_realtime_client import (
    AgentChanged,
    AimError,
    Ended,
    Events,
    Interaction,
    Rebound,
    Requirement,
    Session,
    StateChanged,
    StreamFailed,
    Superseded,
    Update,
)
from aim_realtime_client.session import MAX_UNREAD
from tests.unit.client_service_helpers import (
    Service,
    failure,
    result,
    session_object,
    task,
    until,
)

NAMES = ("state", "agent", "requirement", "interaction", "superseded", "rebound", "ended",
         "error", "update")  # fmt: skip


def test_the_event_names_are_constants_and_each_event_class_carries_its_own():
    constants = {key: value for key, value in vars(Events).items() if key.isupper()}
    assert constants == {name.upper(): name for name in NAMES}
    classes = (StateChanged, AgentChanged, Requirement, Interaction, Superseded, Rebound, Ended,
               StreamFailed, Update)  # fmt: skip
    assert tuple(cls.name for cls in classes) == NAMES
    assert StateChanged.name is Events.STATE
    assert StreamFailed.name is Events.ERROR


def frame(version: int, state: str = "active") -> dict[str, Any]:
    return {"task": task("TASK_STATE_WORKING", state, version=version)}


@pytest.fixture
def service() -> Service:
    return Service({
        "SendMessage": lambda _: result({"task": task("TASK_STATE_WORKING", "ready")}),
        "aim.realtime.GetSession": lambda _: result({"session": session_object("ready")}),
    })  # fmt: skip


@pytest.fixture
async def session(service: Service) -> AsyncIterator[Session]:
    async with service.client() as client:
        yield await client.create_session("phone", return_immediately=True)


async def test_listening_starts_the_stream_and_close_stops_it(service, session):
    await asyncio.sleep(0.01)
    assert "SubscribeToTask" not in service.methods
    assert not session.following
    seen: list[StateChanged] = []
    session.on(Events.STATE, seen.append)
    assert session.following
    feed = await service.feed()
    feed.send(frame(2), "1-0")
    await until(lambda: seen)
    assert seen == [StateChanged("active", 1, "TASK_STATE_WORKING", 2)]
    await session.close()
    assert not session.following
    session.once(Events.ENDED, seen.append)  # listening again starts it again
    assert session.following
    await service.feed(2)
    assert service.methods.count("SubscribeToTask") == 2


async def test_follow_starts_the_stream_without_listening_and_twice_does_nothing(service, session):
    session.follow()
    session.follow()
    assert session.following
    await service.feed()
    session.on(Events.STATE, lambda _: None)
    session.follow()
    await asyncio.sleep(0.01)
    assert service.methods.count("SubscribeToTask") == 1


async def test_on_once_and_off(session):
    every: list[Any] = []
    first: list[Any] = []
    stop = session.on(Events.STATE, every.append)
    session.once(Events.STATE, first.append)
    removed = session.once(Events.STATE, first.append)  # the same function: listens once
    events = [StateChanged("active", 1, "TASK_STATE_WORKING", v) for v in (2, 3, 4)]
    session.emit(events[0])
    session.emit(Superseded(2))  # another name: not theirs
    session.emit(events[1])
    assert (every, first) == (events[:2], events[:1])
    stop()
    session.emit(events[2])
    assert every == events[:2]
    removed()  # called already: nothing to remove
    session.off(Events.STATE, every.append)  # not listening: nothing happens

    later: list[Any] = []
    session.once(Events.SUPERSEDED, later.append)
    session.off(Events.SUPERSEDED, later.append)
    session.emit(Superseded(2))
    assert later == []


async def test_a_listener_that_removes_another_before_its_turn_stops_it(session):
    seen: list[str] = []

    def second(_: object) -> None:
        seen.append("second")

    def first(_: object) -> None:
        seen.append("first")
        session.off(Events.REBOUND, second)

    session.on(Events.REBOUND, first)
    session.on(Events.REBOUND, second)
    session.emit(Rebound(2))
    assert seen == ["first"]


@pytest.mark.parametrize("method", ["on", "once", "off"])
async def test_an_unknown_name_raises_value_error_naming_the_valid_ones(session, method):
    with pytest.raises(ValueError, match="no event 'State'") as refused:
        getattr(session, method)("State", print)
    assert str(refused.value).endswith(": one of " + ", ".join(NAMES))
    assert not session.following


async def test_a_listener_that_raises_stops_neither_the_stream_nor_the_others(
    service, session, loop_reports
):
    seen: list[int] = []

    def broken(_: StateChanged) -> None:
        raise RuntimeError("a bug in the app")

    async def broken_later(_: StateChanged) -> None:
        await asyncio.sleep(0)
        raise KeyError("a bug in the app, later")

    session.on(Events.STATE, broken)
    session.on(Events.STATE, broken_later)
    session.on(Events.STATE, lambda event: seen.append(event.task_version))
    feed = await service.feed()
    feed.send(frame(2), "1-0")
    feed.send(frame(3), "2-0")
    await until(lambda: len(seen) == 2 and len(loop_reports) == 4)
    assert seen == [2, 3]
    assert session.following
    raised = [type(context["exception"]) for context in loop_reports]
    assert sorted(raised, key=str) == sorted([RuntimeError, RuntimeError, KeyError, KeyError],
                                             key=str)  # fmt: skip
    assert all("the session's 'state' events" in context["message"] for context in loop_reports)


async def test_an_async_listener_runs_as_a_task_kept_until_it_is_over(session, loop_reports):
    """Its task waits on a future only it holds: the loop keeps tasks weakly, so only the
    session's reference keeps it from being collected midway."""
    waiting: weakref.WeakValueDictionary[str, asyncio.Future[None]] = weakref.WeakValueDictionary()
    done: list[Any] = []

    async def slow(event: Rebound) -> None:
        future = asyncio.get_running_loop().create_future()
        waiting["future"] = future
        await future
        done.append(event)

    session.on(Events.REBOUND, slow)
    session.emit(Rebound(3))
    await asyncio.sleep(0)
    assert done == []
    gc.collect()
    waiting["future"].set_result(None)
    await until(lambda: done)
    assert done == [Rebound(3)]
    assert loop_reports == []


async def test_the_stream_s_end_and_failure_reach_listeners_as_they_reach_events(session, service):
    service.answers["SubscribeToTask"] = lambda _: result({})  # an answer, not a stream
    failed: list[StreamFailed] = []
    session.once(Events.ERROR, failed.append)
    await until(lambda: failed)
    assert isinstance(failed[0].error, AimError)

    ended: list[Ended] = []
    service.answers["GetTask"] = lambda _: result(task("TASK_STATE_COMPLETED", "ended"))
    service.answers["SubscribeToTask"] = lambda _: failure(-32004)  # the task is terminal
    session.on(Events.ENDED, ended.append)  # the stream failed: listening follows again
    await until(lambda: ended)
    assert ended[0].task_state == "TASK_STATE_COMPLETED"


async def test_an_iterator_nobody_reads_ends_after_max_unread_events_saying_so(session):
    unread = session.events()
    reading = asyncio.ensure_future(anext(unread))  # subscribed, then never read again
    await until(lambda: session.following)
    first = StateChanged("active", 1, "TASK_STATE_WORKING", 2)
    session.emit(first)
    assert await reading == first
    for version in range(3, MAX_UNREAD + 4):  # one more than it holds
        session.emit(StateChanged("active", 1, "TASK_STATE_WORKING", version))
    rest = [event async for event in unread]
    [failed] = rest
    assert isinstance(failed, StreamFailed)
    assert failed.error.reason == "EVENTS_UNREAD"
    listened: list[Any] = []
    session.on(Events.STATE, listened.append)  # the session itself goes on
    session.emit(first)
    assert listened == [first]
