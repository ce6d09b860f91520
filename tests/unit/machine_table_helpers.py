"""What the tests of the table-driven machines (endpoint, media, operation, task) share: the
(state, event) pairs a table accepts and the ones it refuses, and the refusal of an event
outside the table."""

from __future__ import annotations

from collections.abc import Callable, Container, Iterable, Mapping
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
    decide: Callable[[Any, Any], object],
    allowed_events: Callable[[Any], Container[E]],
    machine: Any,
    events: Iterable[E],
) -> None:
    """Each of `events` is one `allowed_events` lists for the machine's state exactly when
    `decide` accepts it of `machine`."""
    allowed = allowed_events(machine.state)
    for event in events:
        accepted = isinstance(decide(machine, event), Accepted)
        assert accepted is (event in allowed)


def by_state(lifecycle: Mapping[S, Mapping[E, S]]) -> dict[tuple[S, E], S]:
    """A lifecycle written state by state (each event it accepts and the state it leads to) as
    the machine's table of (state, event) pairs."""
    return {(state, event): to for state, moves in lifecycle.items() for event, to in moves.items()}
