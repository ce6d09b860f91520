"""What the tests of the table-driven machines (endpoint, media, operation, task) share: the
(state, event) pairs a table accepts and the ones it refuses, and the refusal of an event
outside the table."""

from __future__ import annotations

from collections.abc import Callable, Container, Iterable
from typing import Any, TypeVar

from state_machines import Accepted, Rejected, RejectReason

S = TypeVar("S")
E = TypeVar("E")


def table_pairs(
    states: Iterable[S], events: Iterable[E], table: Container[tuple[S, E]]
) -> tuple[list[tuple[S, E]], list[tuple[S, E]]]:
    """Every (state, event) pair: those in `table`, and those outside it."""
    every = [(state, event) for state in states for event in list(events)]
    return [pair for pair in every if pair in table], [pair for pair in every if pair not in table]


def refused_in(outcome: Any, state: object) -> Rejected:
    """`outcome`, which must refuse an event the table has not for `state`, the state kept."""
    assert isinstance(outcome, Rejected)
    assert outcome.reason is RejectReason.INVALID_STATE
    assert outcome.state == state
    return outcome


def assert_allowed_is_accepted(
    decide: Callable[[Any, Any], object], machine: Any, events: Iterable[E], allowed: Container[E]
) -> None:
    """Each of `events` is in `allowed` exactly when `decide` accepts it of `machine`."""
    for event in events:
        accepted = isinstance(decide(machine, event), Accepted)
        assert accepted is (event in allowed)
