"""The operation lifecycle (state_machines/operation.py): the table, every rejection, invariants."""

from __future__ import annotations

from typing import get_args

import msgspec
import pytest
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from state_machines import Accepted, Rejected, RejectReason
from state_machines.operation import (
    TERMINAL,
    TRANSITIONS,
    AskConfirmation,
    Cancel,
    Confirm,
    Deny,
    Expire,
    Fail,
    Operation,
    OperationEvent,
    OperationEventName,
    OperationState,
    Requirement,
    Start,
    Succeed,
    Update,
    allowed_events,
    decide,
    event_name,
    is_terminal,
    new_operation,
)
from tests.unit.machine_table_helpers import by_state, refused_in, table_pairs

TERMINALS: tuple[OperationState, ...] = ("succeeded", "failed", "canceled", "expired")
LIVE: tuple[OperationState, ...] = ("pending", "awaiting_confirmation", "running")
T0 = "2025-01-01T00:00:00Z"
T1 = "2025-01-01T00:00:05Z"
REQ = Requirement(
    requirement_id="req-1", action_digest="sha256:aa", expires_at="2025-01-01T00:02:00Z"
)
OTHER_REQ = Requirement(requirement_id="req-2", action_digest="sha256:bb", expires_at=T1)

# the lifecycle written out by hand, so a change to the table shows up as a failing test
EXPECTED: dict[tuple[OperationState, OperationEventName], OperationState] = by_state(
    {
        "pending": {
            "start": "running",
            "ask_confirmation": "awaiting_confirmation",
            "update": "running",
            "cancel": "canceled",
        },
        "awaiting_confirmation": {
            "confirm": "running",
            "deny": "canceled",
            "expire": "expired",
            "cancel": "canceled",
        },
        "running": {
            "update": "running",
            "succeed": "succeeded",
            "fail": "failed",
            "cancel": "canceled",
        },
    }
)

# one well-formed event per name, matching REQ where it has to
GOOD: dict[OperationEventName, OperationEvent] = {
    "start": Start(),
    "ask_confirmation": AskConfirmation(requirement=REQ),
    "confirm": Confirm(requirement_id="req-1", action_digest="sha256:aa"),
    "deny": Deny(requirement_id="req-1", action_digest="sha256:aa"),
    "cancel": Cancel(),
    "expire": Expire(requirement_id="req-1"),
    "succeed": Succeed(result_json='{"ok":true}'),
    "fail": Fail(error_json='{"code":"boom"}'),
    "update": Update(),
}
STATES: tuple[OperationState, ...] = get_args(OperationState)
NAMES: tuple[OperationEventName, ...] = get_args(OperationEventName)
ACCEPTED_PAIRS, REJECTED_PAIRS = table_pairs(STATES, NAMES, EXPECTED)


def op(state: OperationState = "pending", requirement: Requirement | None = REQ) -> Operation:
    return Operation(
        operation_id="op-1",
        kind="action",
        created_by="provider",
        state=state,
        created_at=T0,
        updated_at=T0,
        requirement=requirement if state != "pending" else None,
    )


def test_the_table_is_the_documented_lifecycle() -> None:
    assert dict(TRANSITIONS) == EXPECTED


def test_terminal_states_are_the_four_resolutions() -> None:
    assert set(TERMINALS) == TERMINAL
    assert [s for s in STATES if is_terminal(s)] == list(TERMINALS)


@pytest.mark.parametrize("name", NAMES)
def test_every_event_has_its_name_as_wire_tag(name: OperationEventName) -> None:
    event = GOOD[name]

    assert event_name(event) == name
    assert msgspec.json.decode(msgspec.json.encode(event), type=OperationEvent) == event
    assert msgspec.json.decode(msgspec.json.encode(event))["type"] == name


def test_a_new_operation_without_requirement_is_pending() -> None:
    fresh = new_operation(
        operation_id="op-9", kind="media.request", created_by="client", now=T0, requirement=None
    )

    assert fresh == Operation(
        operation_id="op-9",
        kind="media.request",
        created_by="client",
        state="pending",
        created_at=T0,
        updated_at=T0,
    )
    assert (fresh.requirement, fresh.result_json, fresh.error_json) == (None, None, None)


def test_a_new_operation_with_a_requirement_awaits_confirmation() -> None:
    fresh = new_operation(
        operation_id="op-1", kind="action", created_by="provider", now=T0, requirement=REQ
    )

    assert fresh == op("awaiting_confirmation")


@pytest.mark.parametrize(("state", "name"), ACCEPTED_PAIRS)
def test_an_accepted_event_moves_to_the_documented_state(
    state: OperationState, name: OperationEventName
) -> None:
    outcome = decide(op(state), GOOD[name], now=T1)

    assert isinstance(outcome, Accepted)
    assert outcome.state.state == EXPECTED[state, name]
    assert not outcome.has_effects
    assert (outcome.state.operation_id, outcome.state.created_at) == ("op-1", T0)


@pytest.mark.parametrize(("state", "name"), REJECTED_PAIRS)
def test_an_event_outside_the_table_is_rejected_with_the_allowed_events(
    state: OperationState, name: OperationEventName
) -> None:
    outcome = decide(op(state), GOOD[name], now=T1)

    outcome = refused_in(outcome, state)
    assert set(outcome.allowed) == {n for (s, n) in EXPECTED if s == state}
    assert "op-1" in outcome.detail
    assert f"`{name}`" in outcome.detail


@pytest.mark.parametrize("state", TERMINALS)
def test_a_terminal_operation_rejects_everything_with_nothing_allowed(
    state: OperationState,
) -> None:
    assert allowed_events(state) == ()
    for event in GOOD.values():
        outcome = decide(op(state), event, now=T1)
        assert isinstance(outcome, Rejected)
        assert (outcome.reason, outcome.allowed) == (RejectReason.INVALID_STATE, ())


def test_start_runs_a_pending_operation_and_stamps_it() -> None:
    outcome = decide(op("pending"), Start(), now=T1)

    assert outcome == Accepted(
        msgspec.structs.replace(op("pending"), state="running", updated_at=T1)
    )


def test_ask_confirmation_opens_the_requirement() -> None:
    outcome = decide(op("pending"), AskConfirmation(requirement=OTHER_REQ), now=T1)

    assert isinstance(outcome, Accepted)
    assert outcome.state == msgspec.structs.replace(
        op("awaiting_confirmation", OTHER_REQ), updated_at=T1
    )


@pytest.mark.parametrize(
    ("event", "target"),
    [
        (Confirm(requirement_id="req-1", action_digest="sha256:aa"), "running"),
        (Deny(requirement_id="req-1", action_digest="sha256:aa"), "canceled"),
        (Expire(requirement_id="req-1"), "expired"),
    ],
)
def test_answering_the_open_requirement_resolves_it_and_keeps_it(
    event: OperationEvent, target: OperationState
) -> None:
    outcome = decide(op("awaiting_confirmation"), event, now=T1)

    assert isinstance(outcome, Accepted)
    assert outcome.state == msgspec.structs.replace(
        op("awaiting_confirmation"), state=target, updated_at=T1
    )


@pytest.mark.parametrize(
    ("event", "words"),
    [
        (Confirm(requirement_id="req-2", action_digest="sha256:aa"), "`req-2` is not the open"),
        (Deny(requirement_id="req-2", action_digest="sha256:aa"), "`req-2` is not the open"),
        (Expire(requirement_id="req-2"), "`req-2` is not the open"),
        (Confirm(requirement_id="req-1", action_digest="sha256:zz"), "actionDigest does not"),
        (Deny(requirement_id="req-1", action_digest="sha256:zz"), "actionDigest does not"),
    ],
)
def test_a_wrong_requirement_or_digest_is_a_requirement_mismatch(
    event: OperationEvent, words: str
) -> None:
    outcome = decide(op("awaiting_confirmation"), event, now=T1)

    assert isinstance(outcome, Rejected)
    assert outcome.reason is RejectReason.REQUIREMENT_MISMATCH
    assert outcome.state == "awaiting_confirmation"
    assert outcome.allowed == ("confirm", "deny", "expire", "cancel")
    assert words in outcome.detail


@pytest.mark.parametrize("name", ["confirm", "deny", "expire"])
def test_without_an_open_requirement_nothing_can_answer_it(name: OperationEventName) -> None:
    outcome = decide(op("awaiting_confirmation", requirement=None), GOOD[name], now=T1)

    assert isinstance(outcome, Rejected)
    assert outcome.reason is RejectReason.REQUIREMENT_MISMATCH
    assert "has no open requirement" in outcome.detail


def test_the_second_of_two_converging_answers_gets_a_clear_error() -> None:
    first = decide(op("awaiting_confirmation"), GOOD["confirm"], now=T1)
    assert isinstance(first, Accepted)

    second = decide(first.state, GOOD["deny"], now=T1)

    assert isinstance(second, Rejected)
    assert (second.reason, second.state) == (RejectReason.INVALID_STATE, "running")


@pytest.mark.parametrize("state", LIVE)
def test_cancel_ends_any_live_operation(state: OperationState) -> None:
    outcome = decide(op(state), Cancel(), now=T1)

    assert outcome == Accepted(msgspec.structs.replace(op(state), state="canceled", updated_at=T1))


def test_update_runs_a_pending_operation() -> None:
    outcome = decide(op("pending"), Update(), now=T1)

    assert isinstance(outcome, Accepted)
    assert (outcome.state.state, outcome.state.updated_at) == ("running", T1)


def test_update_of_a_running_operation_is_idempotent() -> None:
    running = op("running")

    assert decide(running, Update(), now=T1) == Accepted(running)


def test_succeed_keeps_the_result_and_fail_keeps_the_error() -> None:
    succeeded = decide(op("running"), Succeed(result_json="[1]"), now=T1)
    failed = decide(op("running"), Fail(error_json='{"e":1}'), now=T1)

    assert isinstance(succeeded, Accepted)
    assert isinstance(failed, Accepted)
    assert (succeeded.state.state, succeeded.state.result_json, succeeded.state.error_json) == (
        "succeeded",
        "[1]",
        None,
    )
    assert (failed.state.state, failed.state.result_json, failed.state.error_json) == (
        "failed",
        None,
        '{"e":1}',
    )


@pytest.mark.parametrize("state", STATES)
def test_allowed_events_lists_what_the_state_accepts_in_table_order(
    state: OperationState,
) -> None:
    assert allowed_events(state) == tuple(n for (s, n) in TRANSITIONS if s == state)


def test_an_operation_round_trips_through_msgspec() -> None:
    stored = msgspec.structs.replace(op("succeeded"), result_json="{}")

    assert msgspec.json.decode(msgspec.json.encode(stored), type=Operation) == stored


# events the property test draws from: good ones, and ones with the wrong requirement or digest
EVENTS = st.one_of(
    st.sampled_from(list(GOOD.values())),
    st.builds(AskConfirmation, requirement=st.just(OTHER_REQ)),
    st.builds(
        Confirm,
        requirement_id=st.sampled_from(["req-1", "req-2"]),
        action_digest=st.sampled_from(["sha256:aa", "sha256:bb"]),
    ),
    st.builds(
        Deny,
        requirement_id=st.sampled_from(["req-1", "req-2"]),
        action_digest=st.sampled_from(["sha256:aa", "sha256:bb"]),
    ),
    st.builds(Expire, requirement_id=st.sampled_from(["req-1", "req-2"])),
)


class OperationLifecycle(RuleBasedStateMachine):
    """Random event sequences against the operation table."""

    operation: Operation
    step: int

    @initialize(with_requirement=st.booleans())
    def create(self, with_requirement: bool) -> None:
        self.operation = new_operation(
            operation_id="op-1",
            kind="action",
            created_by="provider",
            now=T0,
            requirement=REQ if with_requirement else None,
        )
        self.step = 0

    @rule(event=EVENTS)
    def apply(self, event: OperationEvent) -> None:
        self.step += 1
        now = f"t{self.step}"
        before = self.operation
        outcome = decide(before, event, now=now)
        if isinstance(outcome, Rejected):
            assert self.operation is before  # a rejection leaves the operation unchanged
            assert outcome.state == before.state
            if outcome.reason is RejectReason.INVALID_STATE:
                assert (before.state, event_name(event)) not in EXPECTED
            else:
                assert outcome.reason is RejectReason.REQUIREMENT_MISMATCH
                assert before.state == "awaiting_confirmation"
            return
        assert not is_terminal(before.state), f"{before.state} accepted {event}"
        after = outcome.state
        assert after.state == EXPECTED[before.state, event_name(event)]
        if after == before:
            assert (before.state, event_name(event)) == ("running", "update")
        else:
            assert after.updated_at == now
        if isinstance(event, Confirm | Deny | Expire):
            assert before.requirement is not None
            assert event.requirement_id == before.requirement.requirement_id
        if isinstance(event, Confirm | Deny):
            assert before.requirement is not None
            assert event.action_digest == before.requirement.action_digest
        self.operation = after

    @invariant()
    def identity_never_changes(self) -> None:
        assert (self.operation.operation_id, self.operation.created_at) == ("op-1", T0)

    @invariant()
    def terminal_states_absorb(self) -> None:
        if is_terminal(self.operation.state):
            assert allowed_events(self.operation.state) == ()
            for event in GOOD.values():
                assert isinstance(decide(self.operation, event, now="later"), Rejected)

    @invariant()
    def awaiting_confirmation_always_has_an_open_requirement(self) -> None:
        if self.operation.state == "awaiting_confirmation":
            assert self.operation.requirement is not None

    @invariant()
    def only_a_success_has_a_result_and_only_a_failure_an_error(self) -> None:
        assert (self.operation.result_json is not None) is (self.operation.state == "succeeded")
        assert (self.operation.error_json is not None) is (self.operation.state == "failed")


OperationLifecycle.TestCase.settings = hypothesis_settings(max_examples=200, stateful_step_count=20)
test_operation_lifecycle_invariants = OperationLifecycle.TestCase
