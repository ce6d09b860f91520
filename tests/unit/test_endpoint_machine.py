"""The endpoint lifecycle (state_machines/endpoint.py): the table, every rejection, invariants."""

from __future__ import annotations

from typing import get_args

import pytest
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from state_machines import Accepted, Rejected
from state_machines.endpoint import (
    TRANSITIONS,
    Capabilities,
    Endpoint,
    EndpointEvent,
    EndpointState,
    accepts,
    allowed_events,
    decide,
    transition,
)
from tests.unit.machine_table_helpers import assert_allowed_is_accepted, refused_in, table_pairs

USABLE: tuple[EndpointState, ...] = ("registered", "joining", "connected", "disconnected")
CAPS = Capabilities(
    audio_input=True, audio_output=True, camera=False, screen=False, interactions=()
)

# the lifecycle written out by hand, so a change to the table shows up as a failing test
EXPECTED: dict[tuple[EndpointState, EndpointEvent], EndpointState] = {
    **{(state, "join"): "joining" for state in USABLE},
    ("joining", "connected"): "connected",
    ("disconnected", "connected"): "connected",
    ("joining", "disconnected"): "disconnected",
    ("connected", "disconnected"): "disconnected",
    **{(state, "supersede"): "superseded" for state in USABLE},
    **{(state, "remove"): "removed" for state in (*USABLE, "superseded")},
    ("superseded", "reregister"): "registered",
    **{(state, "reregister"): state for state in USABLE},
    **{(state, "rebind"): "registered" for state in USABLE},
}
STATES: tuple[EndpointState, ...] = get_args(EndpointState)
EVENTS: tuple[EndpointEvent, ...] = get_args(EndpointEvent)
ACCEPTED_PAIRS, REJECTED_PAIRS = table_pairs(STATES, EVENTS, EXPECTED)


def device(state: EndpointState = "registered") -> Endpoint:
    return Endpoint(
        endpoint_id="ep-1",
        client_endpoint_key="phone",
        capabilities=CAPS,
        registered_at="2025-01-01T00:00:00Z",
        state=state,
        joined_at="2025-01-01T00:00:01Z",
        joined_epoch=1,
    )


def test_the_table_is_the_documented_lifecycle() -> None:
    assert dict(TRANSITIONS) == EXPECTED


def test_a_new_endpoint_is_registered_and_has_not_joined() -> None:
    fresh = Endpoint(
        endpoint_id="ep-1", client_endpoint_key="k", capabilities=CAPS, registered_at="t"
    )
    assert (fresh.state, fresh.joined_at, fresh.joined_epoch) == ("registered", None, None)


@pytest.mark.parametrize(("state", "event"), ACCEPTED_PAIRS)
def test_an_accepted_event_changes_only_the_state(
    state: EndpointState, event: EndpointEvent
) -> None:
    outcome = decide(device(state), event)

    assert isinstance(outcome, Accepted)
    assert outcome.state == device(EXPECTED[state, event])
    assert not outcome.has_effects
    assert accepts(device(state), event)


@pytest.mark.parametrize(("state", "event"), REJECTED_PAIRS)
def test_an_event_outside_the_table_is_rejected_with_the_allowed_events(
    state: EndpointState, event: EndpointEvent
) -> None:
    outcome = decide(device(state), event)

    outcome = refused_in(outcome, state)
    assert set(outcome.allowed) == {e for (s, e) in EXPECTED if s == state}
    assert "ep-1" in outcome.detail
    assert not accepts(device(state), event)


@pytest.mark.parametrize(("state", "event"), REJECTED_PAIRS)
def test_transition_refuses_an_illegal_event_loudly(
    state: EndpointState, event: EndpointEvent
) -> None:
    with pytest.raises(KeyError):
        transition(device(state), event)


def test_a_removed_endpoint_accepts_nothing() -> None:
    assert allowed_events("removed") == ()


def test_a_superseded_endpoint_comes_back_only_by_registering_again_or_goes_away() -> None:
    assert set(allowed_events("superseded")) == {"reregister", "remove"}


@pytest.mark.parametrize("state", STATES)
def test_allowed_events_lists_what_the_state_accepts_in_table_order(
    state: EndpointState,
) -> None:
    assert allowed_events(state) == tuple(e for (s, e) in TRANSITIONS if s == state)


class EndpointLifecycle(RuleBasedStateMachine):
    """Random event sequences against the endpoint table."""

    endpoint: Endpoint
    was_removed: bool

    @initialize()
    def register(self) -> None:
        self.endpoint = device()
        self.was_removed = False

    @rule(event=st.sampled_from(EVENTS))
    def apply(self, event: EndpointEvent) -> None:
        before = self.endpoint
        outcome = decide(before, event)
        if isinstance(outcome, Rejected):
            assert (before.state, event) not in EXPECTED
            assert self.endpoint is before
            return
        assert not self.was_removed, f"removed accepted {event}"
        assert outcome.state.state == EXPECTED[before.state, event]
        if event == "reregister" and before.state != "superseded":
            assert outcome.state == before  # registering again never moves a live device
        self.endpoint = outcome.state
        self.was_removed = outcome.state.state == "removed"

    @invariant()
    def only_the_state_ever_changes(self) -> None:
        assert self.endpoint == device(self.endpoint.state)

    @invariant()
    def removed_absorbs(self) -> None:
        if self.was_removed:
            assert all(isinstance(decide(self.endpoint, e), Rejected) for e in EVENTS)

    @invariant()
    def allowed_events_are_exactly_the_accepted_ones(self) -> None:
        assert_allowed_is_accepted(decide, allowed_events, self.endpoint, EVENTS)


EndpointLifecycle.TestCase.settings = hypothesis_settings(max_examples=100, stateful_step_count=25)
test_endpoint_lifecycle_invariants = EndpointLifecycle.TestCase
