"""The A2A task lifecycle (state_machines/task.py): the table, every rejection, and invariants."""

from __future__ import annotations

from typing import get_args

import pytest
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from state_machines import Accepted, Rejected, RejectReason
from state_machines.task import (
    AUTH_REQUIRED,
    CANCELED,
    COMPLETED,
    FAILED,
    INPUT_REQUIRED,
    REJECTED,
    SUBMITTED,
    TERMINAL,
    TRANSITIONS,
    WORKING,
    TaskCore,
    TaskEvent,
    TaskState,
    allowed_events,
    created,
    decide,
    is_terminal,
)
from tests.unit.machine_table_helpers import (
    assert_allowed_is_accepted,
    by_state,
    refused_in,
    table_pairs,
)

# the lifecycle written out by hand, so a change to the table shows up as a failing test
# the three ways out of every state a task can still leave
ENDINGS: dict[TaskEvent, TaskState] = {"complete": COMPLETED, "fail": FAILED, "cancel": CANCELED}
EXPECTED_TRANSITIONS: dict[tuple[TaskState, TaskEvent], TaskState] = by_state(
    {
        SUBMITTED: {"start": WORKING, "reject": REJECTED, **ENDINGS},
        WORKING: {"require_input": INPUT_REQUIRED, "require_auth": AUTH_REQUIRED, **ENDINGS},
        INPUT_REQUIRED: {"resume": WORKING, **ENDINGS},
        AUTH_REQUIRED: {"resume": WORKING, **ENDINGS},
    }
)
STATES: tuple[TaskState, ...] = get_args(TaskState)
EVENTS: tuple[TaskEvent, ...] = get_args(TaskEvent)
ACCEPTED_PAIRS, REJECTED_PAIRS = table_pairs(STATES, EVENTS, TRANSITIONS)


def accepted_by(state: str) -> set[str]:
    return {event for (source, event) in EXPECTED_TRANSITIONS if source == state}


def test_the_table_is_the_documented_lifecycle() -> None:
    assert dict(TRANSITIONS) == EXPECTED_TRANSITIONS


def test_the_terminal_states_are_completed_failed_canceled_and_rejected() -> None:
    assert frozenset({COMPLETED, FAILED, CANCELED, REJECTED}) == TERMINAL


def test_every_state_and_event_of_the_wire_types_is_covered() -> None:
    assert len(STATES) == 8
    assert len(EVENTS) == 8
    assert {source for source, _ in TRANSITIONS} | set(TERMINAL) == set(STATES)
    assert {event for _, event in TRANSITIONS} == set(EVENTS)


@pytest.mark.parametrize(("state", "event"), ACCEPTED_PAIRS)
@pytest.mark.parametrize("version", [0, 7])
def test_an_accepted_event_lands_in_the_table_target_with_the_version_bumped(
    state: TaskState, event: TaskEvent, version: int
) -> None:
    outcome = decide(TaskCore(state=state, version=version), event)

    assert isinstance(outcome, Accepted)
    assert outcome.state == TaskCore(state=EXPECTED_TRANSITIONS[state, event], version=version + 1)
    assert not outcome.has_effects


@pytest.mark.parametrize(("state", "event"), REJECTED_PAIRS)
def test_an_event_outside_the_table_is_rejected_with_the_allowed_events(
    state: TaskState, event: TaskEvent
) -> None:
    task = TaskCore(state=state, version=3)

    outcome = decide(task, event)

    outcome = refused_in(outcome, state)
    assert set(outcome.allowed) == accepted_by(state)
    assert len(outcome.allowed) == len(set(outcome.allowed))
    assert state in outcome.detail
    assert event in outcome.detail
    assert task == TaskCore(state=state, version=3)  # a value: nothing to mutate, nothing moved


@pytest.mark.parametrize("state", STATES)
def test_allowed_events_lists_what_the_state_accepts_in_table_order(state: TaskState) -> None:
    expected = tuple(event for (source, event) in TRANSITIONS if source == state)

    assert allowed_events(state) == expected
    assert set(allowed_events(state)) == accepted_by(state)


@pytest.mark.parametrize("state", sorted(TERMINAL))
def test_a_terminal_state_accepts_nothing(state: TaskState) -> None:
    assert allowed_events(state) == ()
    for event in EVENTS:
        outcome = decide(TaskCore(state=state, version=1), event)
        assert isinstance(outcome, Rejected)
        assert outcome.allowed == ()


@pytest.mark.parametrize("state", STATES)
def test_is_terminal_agrees_with_terminal(state: TaskState) -> None:
    assert is_terminal(state) is (state in {COMPLETED, FAILED, CANCELED, REJECTED})


def test_a_new_task_starts_at_version_zero_in_submitted() -> None:
    assert TaskCore(state=SUBMITTED) == TaskCore(state=SUBMITTED, version=0)


@pytest.mark.parametrize(
    ("event", "target"),
    [
        ("start", WORKING),
        ("reject", REJECTED),
        ("complete", COMPLETED),
        ("fail", FAILED),
        ("cancel", CANCELED),
    ],
)
def test_created_applies_the_first_event_to_a_submitted_task(
    event: TaskEvent, target: TaskState
) -> None:
    outcome = created(event)

    assert isinstance(outcome, Accepted)
    assert outcome.state == TaskCore(state=target, version=1)


@pytest.mark.parametrize("event", ["require_input", "require_auth", "resume"])
def test_created_rejects_an_event_a_submitted_task_does_not_accept(event: TaskEvent) -> None:
    outcome = created(event)

    outcome = refused_in(outcome, SUBMITTED)
    assert set(outcome.allowed) == accepted_by(SUBMITTED)


class TaskLifecycle(RuleBasedStateMachine):
    """Random event sequences against the machine, checked against a hand-written model."""

    task: TaskCore
    previous_version: int
    model_accepted: int
    terminal_seen: bool

    @initialize(event=st.sampled_from(EVENTS))
    def create(self, event: TaskEvent) -> None:
        outcome = created(event)
        if isinstance(outcome, Accepted):
            assert (SUBMITTED, event) in EXPECTED_TRANSITIONS
            self.task = outcome.state
            self.model_accepted = 1
        else:
            assert (SUBMITTED, event) not in EXPECTED_TRANSITIONS
            self.task = TaskCore(state=SUBMITTED)
            self.model_accepted = 0
        self.previous_version = self.task.version
        self.terminal_seen = is_terminal(self.task.state)

    @rule(event=st.sampled_from(EVENTS))
    def apply(self, event: TaskEvent) -> None:
        before = self.task
        self.previous_version = before.version
        outcome = decide(before, event)
        if isinstance(outcome, Rejected):
            assert (before.state, event) not in EXPECTED_TRANSITIONS
            assert outcome.reason is RejectReason.INVALID_STATE
            assert outcome.state == before.state
            assert set(outcome.allowed) == accepted_by(before.state)
            return  # the shell keeps `before`: a rejection changes nothing
        assert not self.terminal_seen, f"{before.state} is terminal but accepted {event}"
        assert outcome.state.state == EXPECTED_TRANSITIONS[before.state, event]
        assert outcome.state.version == before.version + 1
        self.task = outcome.state
        self.model_accepted += 1
        self.terminal_seen = is_terminal(self.task.state)

    @rule(event=st.sampled_from(EVENTS))
    def rejection_changes_nothing(self, event: TaskEvent) -> None:
        before = self.task
        outcome = decide(before, event)
        if isinstance(outcome, Rejected):
            assert self.task == before
            assert outcome.state == before.state

    @invariant()
    def version_counts_accepted_events_and_never_decreases(self) -> None:
        assert self.task.version == self.model_accepted
        assert self.task.version >= self.previous_version
        assert self.task.version - self.previous_version in (0, 1)

    @invariant()
    def terminal_states_absorb(self) -> None:
        if self.terminal_seen:
            assert is_terminal(self.task.state)
            assert allowed_events(self.task.state) == ()
            for event in EVENTS:
                assert isinstance(decide(self.task, event), Rejected)

    @invariant()
    def is_terminal_agrees_with_terminal(self) -> None:
        assert is_terminal(self.task.state) is (self.task.state in TERMINAL)

    @invariant()
    def the_allowed_events_are_exactly_the_accepted_ones(self) -> None:
        assert_allowed_is_accepted(decide, allowed_events, self.task, EVENTS)


TaskLifecycle.TestCase.settings = hypothesis_settings(max_examples=200, stateful_step_count=30)
test_task_lifecycle_invariants = TaskLifecycle.TestCase
