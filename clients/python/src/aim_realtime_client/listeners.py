"""Functions that listen to named events: what `Session.on`, `once` and `off` keep, and how
a listener, or the room binding's `on_error`, is called.

A listener is called with the event. A plain function runs at once, inside the emit; an async
one (its call returns an awaitable) runs as a task of its own, held here until it is over so
that it is not collected midway. A listener that raises, or whose task fails, stops neither
the emit nor the other listeners: its exception goes to the running loop's exception handler
(`loop.call_exception_handler`), which logs it unless the app set a handler of its own.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable
from typing import Any

Listener = Callable[[Any], object]


class Listeners:
    """The listeners of each name in `names`, in the order they were added; a function
    listens once to a name (adding it again changes only whether it is called once)."""

    def __init__(self, names: tuple[str, ...], owner: str) -> None:
        self.names = names
        self.owner = owner
        self._by_name: dict[str, dict[Listener, bool]] = {}
        self.tasks: set[asyncio.Future[Any]] = set()

    def check(self, name: str) -> None:
        """ValueError for a name that is none of `names`, listing them."""
        if name not in self.names:
            raise ValueError(f"no event {name!r}: one of {', '.join(self.names)}")

    def add(self, name: str, fn: Listener, *, once: bool = False) -> None:
        self.check(name)
        self._by_name.setdefault(name, {})[fn] = once

    def remove(self, name: str, fn: Listener) -> None:
        self.check(name)
        self._by_name.get(name, {}).pop(fn, None)

    def call(self, name: str, value: object) -> None:
        """Every listener of `name` with `value`; a `once` listener is removed before it is
        called, and one removed by a listener called before it is not called."""
        listening = self._by_name.get(name)
        if not listening:
            return
        for fn, once in list(listening.items()):
            if fn not in listening:
                continue
            if once:
                del listening[fn]
            run(fn, value, self.tasks, f"a listener of {self.owner}'s {name!r} events")


def run(fn: Listener, value: object, tasks: set[asyncio.Future[Any]], what: str) -> None:
    """`fn(value)`; an awaitable it returns runs as a task kept in `tasks` until it is over.
    What it raises goes to the loop's exception handler, said to come from `what`."""
    try:
        result = fn(value)
    except Exception as error:  # noqa: BLE001 - reported; the other listeners still run
        report(error, what)
        return
    if inspect.isawaitable(result):
        task = asyncio.ensure_future(result)
        tasks.add(task)

        def finished(done: asyncio.Future[Any]) -> None:
            tasks.discard(done)
            if not done.cancelled() and (error := done.exception()) is not None:
                report(error, what)

        task.add_done_callback(finished)


def report(error: BaseException, what: str) -> None:
    """`error` to the running loop's exception handler (it logs it, unless the app set its
    own with `loop.set_exception_handler`)."""
    asyncio.get_running_loop().call_exception_handler(
        {"message": f"{what} raised {type(error).__name__}", "exception": error}
    )
