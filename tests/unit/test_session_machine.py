"""The session lifecycle (state_machines/session.py and session_rules.py, through
`state_machines.decide`): table, epochs, handoff, rebind, end."""

from __future__ import annotations

from collections.abc import Callable
from typing import get_args

import msgspec
import pytest
from hypothesis import event as observe
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from state_machines import Accepted, Rejected, RejectReason, decide
from state_machines.effects import (
    CreateRoom,
    DeleteDispatch,
    DeleteRoom,
    DispatchAgent,
    MintJoinToken,
    OutboxEffect,
    RemoveParticipant,
    UpdatePermissions,
)
from state_machines.endpoint import Capabilities, Endpoint
from state_machines.session import (
    LIVE_STATES,
    MAX_REBINDS,
    TERMINAL_STATES,
    TRANSITIONS,
    AgentDeadline,
    AgentDispatched,
    AgentJobEnded,
    AgentJobStarted,
    AgentStartTimeout,
    Cancel,
    End,
    EpochBump,
    GraceExpired,
    IdleTimeout,
    Join,
    LeaveGrace,
    MaxDuration,
    ParticipantJoined,
    ParticipantLeft,
    Provisioned,
    ProvisioningFailed,
    ProvisioningTimeout,
    RegisterEndpoint,
    Requested,
    RoomDeleted,
    RoomLost,
    RotationDue,
    Session,
    SessionEvent,
    SessionEventName,
    SessionState,
    allowed_events,
    derive_task_state,
    event_name,
    new_session,
    parse_room_name,
    room_name,
)
from tests.unit.session_operation_helpers import AUDIO_TEXT, created

T0 = "2025-01-01T00:00:00Z"
T1 = "2025-01-01T00:00:05Z"
T9 = "2025-01-01T01:00:00Z"
LISTENER = Capabilities(
    audio_input=False, audio_output=True, camera=True, screen=False, interactions=()
)
MUTE = Capabilities(
    audio_input=True, audio_output=False, camera=False, screen=False, interactions=()
)
STATES: tuple[SessionState, ...] = get_args(SessionState)
NAMES: tuple[SessionEventName, ...] = get_args(SessionEventName)
ENDED_LIKE = ("ending", "ended", "failed")
replace = msgspec.structs.replace

# the lifecycle written out by hand: event → (source states, target; "same" keeps the state)
EXPECTED: dict[str, tuple[tuple[str, ...], str]] = {
    "provisioned": (("provisioning",), "ready"),
    "provisioning_failed": (("provisioning",), "failed"),
    "provisioning_timeout": (("provisioning",), "failed"),
    "register_endpoint": (LIVE_STATES, "same"),
    "join": (("ready", "joining", "active", "reconnecting"), "joining"),
    "participant_left": (("active",), "reconnecting"),
    "agent_joined": (LIVE_STATES, "same"),
    "agent_left": (LIVE_STATES, "same"),
    "grace_expired": (("reconnecting",), "ready"),
    "idle_timeout": (("ready",), "ending"),
    "max_duration": (LIVE_STATES, "ending"),
    "room_lost": (LIVE_STATES, "provisioning"),
    "cancel": (LIVE_STATES, "ending"),
    "room_deleted": (("ending",), "ended"),
    "agent_dispatched": (LIVE_STATES, "same"),
    "agent_job_started": (LIVE_STATES, "same"),
    "agent_job_ended": (LIVE_STATES, "same"),
    "agent_start_timeout": (LIVE_STATES, "same"),
    "rotation_due": (LIVE_STATES, "same"),
    "agent_deadline": (LIVE_STATES, "same"),
    "leave_grace": (LIVE_STATES, "same"),
}
EXPECTED_PAIRS: dict[tuple[str, str], str] = {
    (source, name): source if target == "same" else target
    for name, (sources, target) in EXPECTED.items()
    for source in sources
}
SPECIAL_PAIRS: dict[tuple[str, str], str] = {
    ("joining", "participant_joined"): "active",
    ("reconnecting", "participant_joined"): "active",
    ("ready", "participant_joined"): "ready",  # only a superseded device, removed again
    ("active", "participant_joined"): "active",
    **{(state, "end"): "ending" for state in LIVE_STATES},
    **{(state, "end"): state for state in ENDED_LIKE},
}
EXPECTED_PAIRS |= SPECIAL_PAIRS


def fresh() -> Session:
    return created(now=T0)


def outcome_of(session: Session, event: SessionEvent) -> Accepted[Session]:
    outcome = decide(session, event, now=T1)
    assert isinstance(outcome, Accepted), outcome
    return outcome


def run(session: Session, *events: SessionEvent) -> Session:
    for event in events:
        session = outcome_of(session, event).state
    return session


def rejected(session: Session, event: SessionEvent, reason: RejectReason) -> Rejected:
    outcome = decide(session, event, now=T1)
    assert isinstance(outcome, Rejected), outcome
    assert outcome.reason is reason
    assert outcome.current_epoch == session.epoch
    return outcome


def register(
    key: str, epoch: int = 1, caps: Capabilities = AUDIO_TEXT, limit: int = 8
) -> RegisterEndpoint:
    return RegisterEndpoint(epoch, f"ep-{key}", key, caps, limit)


def ready(*keys: str) -> Session:
    return run(fresh(), Provisioned(1), *(register(key) for key in keys))


def active() -> Session:
    return run(ready("a", "b"), Join(1, "ep-a"), ParticipantJoined(1, "ep-a", False))


def handed_off() -> Session:
    """ep-a was active, ep-b took over: epoch 2, ep-a superseded, room still of epoch 1."""
    return run(active(), Join(1, "ep-b"))


def in_state(state: SessionState) -> Session:
    session = replace(active(), state=state)
    return replace(session, task_state=derive_task_state(session))


def sample(name: SessionEventName, session: Session) -> SessionEvent:
    """An event called `name` that passes the session's epoch fences."""
    epoch, room_epoch = session.epoch, session.room_epoch
    events: dict[str, SessionEvent] = {
        "provisioned": Provisioned(room_epoch),
        "provisioning_failed": ProvisioningFailed(room_epoch, "livekit down"),
        "provisioning_timeout": ProvisioningTimeout(room_epoch),
        "register_endpoint": register("a", epoch),
        "join": Join(epoch, "ep-a"),
        "participant_joined": ParticipantJoined(epoch, "ep-a", False),
        "participant_left": ParticipantLeft(epoch, "ep-a", False),
        "agent_joined": ParticipantJoined(room_epoch, "agent-1", True),
        "agent_left": ParticipantLeft(room_epoch, "agent-1", True),
        "grace_expired": GraceExpired(epoch, "ep-a"),
        "idle_timeout": IdleTimeout(),
        "max_duration": MaxDuration(),
        "room_lost": RoomLost(session.room),
        "end": End("done"),
        "cancel": Cancel(),
        "room_deleted": RoomDeleted(room_epoch),
        "agent_dispatched": AgentDispatched(room_epoch, session.agent_attempt, "AD_1"),
        "agent_job_started": AgentJobStarted(room_epoch, session.agent_attempt, "AJ_1", "agent-1"),
        "agent_job_ended": AgentJobEnded(room_epoch, session.agent_attempt, "AJ_1", "agent-1"),
        "agent_start_timeout": AgentStartTimeout(room_epoch, session.agent_attempt),
        "rotation_due": RotationDue(room_epoch, session.agent_generation, T9, "provider_cap"),
        "agent_deadline": AgentDeadline(room_epoch, session.agent_generation, T9),
        "leave_grace": LeaveGrace(room_epoch, "agent-0"),
    }
    return events[name]


# --- the table ----------------------------------------------------------------------------------


def test_the_table_is_the_documented_lifecycle() -> None:
    assert dict(TRANSITIONS) == EXPECTED_PAIRS


def test_every_event_name_appears_in_the_table() -> None:
    assert {name for _, name in TRANSITIONS} == set(NAMES)


@pytest.mark.parametrize(
    ("state", "name"), [(s, n) for s in STATES for n in NAMES if (s, n) not in EXPECTED_PAIRS]
)
def test_an_event_outside_the_table_is_rejected_with_the_allowed_events(
    state: SessionState, name: SessionEventName
) -> None:
    session = in_state(state)

    outcome = rejected(session, sample(name, session), RejectReason.INVALID_STATE)

    assert outcome.state == state
    assert set(outcome.allowed) == {n for (s, n) in EXPECTED_PAIRS if s == state}
    assert name in outcome.detail


@pytest.mark.parametrize("state", TERMINAL_STATES)
def test_a_terminal_state_accepts_only_the_idempotent_end(state: SessionState) -> None:
    assert allowed_events(state) == ("end",)


def test_event_names_tell_the_agent_from_endpoints() -> None:
    assert event_name(ParticipantJoined(1, "x", True)) == "agent_joined"
    assert event_name(ParticipantLeft(1, "x", False)) == "participant_left"
    assert {event_name(sample(n, fresh())) for n in NAMES} == set(NAMES)


def test_events_and_effects_encode_as_tagged_unions() -> None:
    events = [sample(name, active()) for name in NAMES]
    effects = [
        CreateRoom("r", 1),
        DispatchAgent("r", 1),
        DispatchAgent("r", 1, 2),
        DeleteDispatch("r", 1, 2),
        RemoveParticipant("r", "ep"),
        DeleteRoom("r", 1),
        UpdatePermissions("r", "ep", True, ("microphone",)),
        MintJoinToken("r", "ep", 1, True, ("microphone",)),
    ]
    assert msgspec.json.decode(msgspec.json.encode(events), type=list[SessionEvent]) == events
    assert (
        msgspec.json.decode(msgspec.json.encode(effects), type=list[OutboxEffect | MintJoinToken])
        == effects
    )
    assert b'"type":"CreateRoom"' in msgspec.json.encode(effects[0])


def test_a_session_snapshot_round_trips() -> None:
    session = handed_off()
    assert msgspec.json.decode(msgspec.json.encode(session), type=Session) == session


# --- creation and provisioning ------------------------------------------------------------------


def test_a_new_session_provisions_a_room_of_epoch_one_and_dispatches_the_agent() -> None:
    created = new_session(
        session_id="s1",
        task_id="t1",
        context_id="c1",
        client_session_id="cs1",
        requested=Requested((), (), ()),
        required_capabilities=(),
        transcript="on",
        now=T0,
    )

    session = created.state
    assert (session.state, session.epoch, session.room, session.room_epoch) == (
        "provisioning",
        1,
        "aim-s1-e1",
        1,
    )
    assert (session.task_state, session.task_version) == ("TASK_STATE_WORKING", 1)
    assert (session.created_at, session.updated_at, session.agent_state) == (T0, T0, "dispatching")
    # one call provisions it: the room is created with the agent's dispatch in it
    assert created.outbox == (CreateRoom("aim-s1-e1", 1, with_agent=True),)


def test_room_names_carry_the_epoch() -> None:
    assert room_name("abc", 7) == "aim-abc-e7"


SID = "0f8e2c4a-1b3d-4e5f-8a7b-9c0d1e2f3a4b"


@pytest.mark.parametrize("epoch", [1, 7, 123_456_789])
def test_a_room_name_gives_back_its_session_and_epoch(epoch: int) -> None:
    assert parse_room_name(room_name(SID, epoch)) == (SID, epoch)
    assert parse_room_name(room_name(SID, epoch)).session_id == SID


@pytest.mark.parametrize(
    "name",
    [
        "",
        "aim-abc-e1",  # not a session id
        f"aim-{SID.upper()}-e1",  # session ids are written in lower case
        f"aim-{SID}-e0",  # epochs start at 1
        f"aim-{SID}-e01",  # never written with a leading zero
        f"aim-{SID}-e1234567890",  # not a small integer
        f"aim-{SID}-e{'9' * 5000}",
        f"aim-{SID}-e1\n",
        f"xaim-{SID}-e1",
        f"aim-{SID}-e1-copy",
        f"aim-{SID}-e١",  # a digit, but not an ASCII one
    ],
)
def test_other_names_are_not_rooms_of_this_service(name: str) -> None:
    assert parse_room_name(name) is None


def test_provisioned_makes_the_session_ready_with_the_agent_dispatched() -> None:
    outcome = outcome_of(fresh(), Provisioned(1))

    assert (outcome.state.state, outcome.state.agent_state) == ("ready", "dispatched")
    assert outcome.state.updated_at == T1
    assert not outcome.has_effects


def test_an_agent_that_joined_before_the_confirmation_stays_joined() -> None:
    session = run(fresh(), ParticipantJoined(1, "agent-7", True), Provisioned(1))
    assert (session.state, session.agent_state) == ("ready", "joined")


@pytest.mark.parametrize(
    ("event", "reason"),
    [
        (ProvisioningFailed(1, "create_room: 401"), "create_room: 401"),
        (ProvisioningTimeout(1), "provisioning_timeout"),
    ],
)
def test_failed_provisioning_fails_the_session_and_the_task(
    event: SessionEvent, reason: str
) -> None:
    session = run(fresh(), register("a"), event)

    assert (session.state, session.end_reason, session.ended_at) == ("failed", reason, T1)
    assert (session.task_state, session.task_version) == ("TASK_STATE_FAILED", 2)
    assert [e.state for e in session.endpoints] == ["removed"]


@pytest.mark.parametrize(
    "event",
    [Provisioned(2), ProvisioningFailed(0, "x"), ProvisioningTimeout(2), RoomDeleted(2)],
)
def test_events_about_another_room_are_fenced(event: SessionEvent) -> None:
    outcome = rejected(fresh(), event, RejectReason.INVALID_STATE)
    assert outcome.detail.startswith("fenced")


# --- epochs -------------------------------------------------------------------------------------


@pytest.mark.parametrize("event", [register("z", 2), Join(2, "ep-a")])
def test_a_command_from_an_epoch_the_server_never_issued_is_ahead(event: SessionEvent) -> None:
    outcome = rejected(ready("a"), event, RejectReason.STALE_EPOCH)
    assert (outcome.epoch_reason, outcome.current_epoch, outcome.state) == ("ahead", 1, "ready")


def test_a_command_of_the_epoch_before_a_handoff_is_superseded() -> None:
    outcome = rejected(handed_off(), Join(1, "ep-a"), RejectReason.STALE_EPOCH)
    assert (outcome.epoch_reason, outcome.current_epoch) == ("superseded", 2)


def test_a_command_of_the_epoch_before_a_rebind_is_rebound() -> None:
    session = run(handed_off(), RoomLost("aim-s1-e1"))

    assert rejected(session, register("c", 2), RejectReason.STALE_EPOCH).epoch_reason == "rebound"
    assert (
        rejected(session, register("c", 1), RejectReason.STALE_EPOCH).epoch_reason == "superseded"
    )


@pytest.mark.parametrize("state", ENDED_LIKE)
def test_an_old_epoch_of_a_finished_session_is_ended(state: SessionState) -> None:
    session = replace(handed_off(), state=state)
    assert rejected(session, Join(1, "ep-b"), RejectReason.STALE_EPOCH).epoch_reason == "ended"


def test_an_old_epoch_without_a_recorded_bump_reads_as_superseded() -> None:
    session = replace(ready("a"), epoch=3)
    assert rejected(session, Join(2, "ep-a"), RejectReason.STALE_EPOCH).epoch_reason == "superseded"


def test_the_epoch_check_comes_before_the_state_check() -> None:
    assert rejected(fresh(), Join(5, "ep-a"), RejectReason.STALE_EPOCH).state == "provisioning"


# --- endpoints ----------------------------------------------------------------------------------


def test_registering_adds_an_endpoint_without_effects_or_an_epoch_bump() -> None:
    outcome = outcome_of(ready(), register("a"))

    assert outcome.state.endpoints == (
        Endpoint(
            endpoint_id="ep-a", client_endpoint_key="a", capabilities=AUDIO_TEXT, registered_at=T1
        ),
    )
    assert (outcome.state.epoch, outcome.has_effects) == (1, False)


def test_registering_the_same_key_again_keeps_the_endpoint_and_updates_its_capabilities() -> None:
    session = ready("a")

    again = outcome_of(session, RegisterEndpoint(1, "ep-new", "a", LISTENER, 8)).state

    assert [(e.endpoint_id, e.capabilities) for e in again.endpoints] == [("ep-a", LISTENER)]


def test_registering_the_same_device_unchanged_changes_nothing() -> None:
    session = ready("a")
    assert outcome_of(session, register("a")).state == session


def test_registering_a_superseded_device_again_makes_it_registered() -> None:
    session = run(handed_off(), register("a", 2))
    assert [e.state for e in session.endpoints] == ["registered", "joining"]


def test_a_removed_device_cannot_register_again() -> None:
    session = ready("a")
    session = replace(session, endpoints=(replace(session.endpoints[0], state="removed"),))

    outcome = rejected(session, register("a"), RejectReason.INVALID_STATE)

    assert (outcome.state, outcome.allowed) == ("removed", ())


def test_a_new_device_beyond_the_limit_is_refused() -> None:
    outcome = rejected(ready("a", "b"), register("c", limit=2), RejectReason.LIMIT_EXCEEDED)
    assert (outcome.limit, outcome.state) == ("endpoints_per_session", "ready")


# --- join and handoff ---------------------------------------------------------------------------


def test_joining_issues_a_token_for_the_room_and_marks_the_endpoint_active() -> None:
    outcome = outcome_of(ready("a"), Join(1, "ep-a"))

    session = outcome.state
    assert (session.state, session.active_endpoint_id, session.epoch) == ("joining", "ep-a", 1)
    assert session.endpoints[0].state == "joining"
    assert (session.endpoints[0].joined_at, session.endpoints[0].joined_epoch) == (T1, 1)
    assert (outcome.outbox, outcome.token) == (
        (),
        MintJoinToken("aim-s1-e1", "ep-a", 1, True, ("microphone",)),
    )


@pytest.mark.parametrize(
    ("caps", "subscribe", "sources"), [(LISTENER, True, ()), (MUTE, False, ("microphone",))]
)
def test_the_token_follows_the_capabilities(
    caps: Capabilities, subscribe: bool, sources: tuple[str, ...]
) -> None:
    session = run(ready(), register("a", caps=caps))
    token = outcome_of(session, Join(1, "ep-a")).token

    assert isinstance(token, MintJoinToken)
    assert (token.can_subscribe, token.publish_sources) == (subscribe, sources)


def test_join_during_provisioning_is_refused() -> None:
    session = run(fresh(), register("a"))
    assert rejected(session, Join(1, "ep-a"), RejectReason.INVALID_STATE).allowed


def test_join_by_an_unknown_endpoint_is_refused() -> None:
    rejected(ready("a"), Join(1, "ep-zzz"), RejectReason.ENDPOINT_NOT_FOUND)


def test_join_by_a_superseded_endpoint_is_refused() -> None:
    outcome = rejected(handed_off(), Join(2, "ep-a"), RejectReason.INVALID_STATE)
    assert outcome.state == "superseded"


def test_a_join_by_another_endpoint_hands_off_with_a_new_epoch() -> None:
    outcome = outcome_of(active(), Join(1, "ep-b"))

    session = outcome.state
    assert (session.epoch, session.bumps) == (2, (EpochBump(2, "superseded"),))
    assert (session.active_endpoint_id, session.state, session.room) == (
        "ep-b",
        "joining",
        "aim-s1-e1",
    )
    assert [e.state for e in session.endpoints] == ["superseded", "joining"]
    assert (outcome.outbox, outcome.token) == (
        (RemoveParticipant("aim-s1-e1", "ep-a", revoke_before=T1),),
        MintJoinToken("aim-s1-e1", "ep-b", 2, True, ("microphone",)),
    )


def test_a_rejoin_by_the_active_endpoint_keeps_the_epoch() -> None:
    session = run(active(), Join(1, "ep-a"))
    assert (session.epoch, session.state, session.bumps) == (1, "joining", ())


def test_a_join_after_the_grace_period_is_not_a_handoff() -> None:
    session = run(active(), ParticipantLeft(1, "ep-a", False), GraceExpired(1, "ep-a"))

    session = run(session, Join(1, "ep-b"))

    assert (session.epoch, session.active_endpoint_id) == (1, "ep-b")
    assert [e.state for e in session.endpoints] == ["disconnected", "joining"]


def at(seconds: float) -> str:
    """T0 plus `seconds`, written as the shell writes times (milliseconds, UTC)."""
    whole, ms = divmod(round(seconds * 1000), 1000)
    return f"2025-01-01T00:{whole // 60:02d}:{whole % 60:02d}.{ms:03d}Z"


def take_over(
    session: Session, key: str, seconds: float, limit: int
) -> Accepted[Session] | Rejected:
    """Device `key` registers (again) and joins at `seconds`, handoffs bounded by `limit`."""
    registered = decide(session, register(key, session.epoch), now=at(seconds))
    assert isinstance(registered, Accepted), registered
    joining = Join(session.epoch, f"ep-{key}", max_handoffs_per_minute=limit)
    return decide(registered.state, joining, now=at(seconds))


def handed(session: Session, key: str, seconds: float, limit: int) -> Session:
    outcome = take_over(session, key, seconds, limit)
    assert isinstance(outcome, Accepted), outcome
    assert outcome.state.active_endpoint_id == f"ep-{key}"
    return outcome.state


def test_handoffs_past_the_bound_in_a_minute_are_refused_until_the_oldest_leaves_it() -> None:
    session = handed(handed(active(), "b", 0, 2), "a", 10, 2)  # two in this minute: epoch 3

    refused = take_over(session, "b", 20, 2)
    assert isinstance(refused, Rejected)
    assert refused.reason is RejectReason.LIMIT_EXCEEDED
    assert (refused.limit, refused.retry_after) == ("handoffs_per_minute", 40)
    assert refused.current_epoch == 3
    assert "at most 2 times a minute" in refused.detail
    almost = take_over(session, "b", 59.5, 2)
    assert isinstance(almost, Rejected)
    assert almost.retry_after == 1  # whole seconds, rounded up

    later = handed(session, "b", 60, 2)  # the first one left the window
    assert later.epoch == 4
    assert later.handoffs == (at(10), at(60))


def test_only_a_handoff_counts_against_the_bound() -> None:
    session = handed(active(), "b", 0, 1)
    assert session.handoffs == (at(0),)
    again = decide(session, Join(2, "ep-b", max_handoffs_per_minute=1), now=at(1))
    assert isinstance(again, Accepted)  # the active device joining again: no handoff
    assert (again.state.epoch, again.state.handoffs) == (2, (at(0),))
    first = decide(ready("a"), Join(1, "ep-a", max_handoffs_per_minute=1), now=at(0))
    assert isinstance(first, Accepted)
    assert first.state.handoffs == ()  # nobody was active: no handoff


def test_unbounded_handoffs_are_not_recorded() -> None:
    session = handed(handed(active(), "b", 0, 0), "a", 1, 0)
    assert (session.epoch, session.handoffs) == (3, ())


# --- webhooks and timers ------------------------------------------------------------------------


def test_the_active_endpoint_joining_the_room_makes_the_session_active() -> None:
    session = active()
    assert (session.state, session.endpoints[0].state) == ("active", "connected")


def test_a_duplicate_participant_joined_is_refused() -> None:
    rejected(active(), ParticipantJoined(1, "ep-a", False), RejectReason.INVALID_STATE)


def test_a_superseded_device_entering_the_room_is_removed_again() -> None:
    session = handed_off()

    outcome = outcome_of(session, ParticipantJoined(1, "ep-a", False))

    assert outcome.state is session
    assert outcome.outbox == (RemoveParticipant("aim-s1-e1", "ep-a", revoke_before=T1),)


def test_the_active_endpoint_with_a_token_of_an_older_epoch_is_not_counted() -> None:
    session = run(handed_off(), register("a", 2), Join(2, "ep-a"))  # back to ep-a at epoch 3

    rejected(session, ParticipantJoined(2, "ep-a", False), RejectReason.INVALID_STATE)


@pytest.mark.parametrize("epoch", [0, 3])
def test_participant_events_outside_the_rooms_epochs_are_fenced(epoch: int) -> None:
    session = handed_off()
    rejected(session, ParticipantJoined(epoch, "ep-b", False), RejectReason.INVALID_STATE)


def test_the_agent_joining_and_leaving_keeps_the_session_state() -> None:
    session = run(active(), ParticipantJoined(1, "agent-7", True))
    assert (session.state, session.agent_state, session.agent_identity) == (
        "active",
        "joined",
        "agent-7",
    )

    left = outcome_of(session, ParticipantLeft(1, "agent-7", True))
    # lost while live: replaced in the same room and epoch (test_agent_presence.py)
    assert (left.state.state, left.state.agent_state, left.state.agent_attempt) == (
        "active",
        "dispatching",
        2,
    )
    assert left.outbox == (
        DeleteDispatch(session.room, 1, 2),
        DispatchAgent(session.room, 1, 2, generation=2),
    )


def test_agent_events_of_another_room_are_fenced() -> None:
    rejected(handed_off(), ParticipantJoined(2, "agent-7", True), RejectReason.INVALID_STATE)


def test_the_active_endpoint_leaving_starts_reconnecting_and_it_can_come_back() -> None:
    session = run(active(), ParticipantLeft(1, "ep-a", False))
    assert (session.state, session.endpoints[0].state) == ("reconnecting", "disconnected")

    session = run(session, ParticipantJoined(1, "ep-a", False))
    assert (session.state, session.endpoints[0].state) == ("active", "connected")


def test_another_participant_leaving_is_refused() -> None:
    session = run(handed_off(), ParticipantJoined(2, "ep-b", False))
    assert session.state == "active"

    rejected(session, ParticipantLeft(1, "ep-a", False), RejectReason.INVALID_STATE)
    rejected(session, ParticipantLeft(1, "ep-b", False), RejectReason.INVALID_STATE)


def test_grace_expiry_returns_to_ready_without_an_active_endpoint() -> None:
    session = run(active(), ParticipantLeft(1, "ep-a", False), GraceExpired(1, "ep-a"))

    assert (session.state, session.active_endpoint_id) == ("ready", None)
    assert session.endpoints[0].state == "disconnected"


def test_grace_expiry_for_an_endpoint_no_longer_active_is_refused() -> None:
    session = run(active(), ParticipantLeft(1, "ep-a", False))

    rejected(session, GraceExpired(1, "ep-b"), RejectReason.INVALID_STATE)
    rejected(session, GraceExpired(0, "ep-a"), RejectReason.INVALID_STATE)


def test_idle_timeout_ends_a_ready_session() -> None:
    outcome = outcome_of(ready("a"), IdleTimeout())

    assert (outcome.state.state, outcome.state.end_reason) == ("ending", "idle_timeout")
    assert (outcome.state.task_state, outcome.state.task_version) == ("TASK_STATE_COMPLETED", 2)
    assert outcome.outbox == (DeleteRoom("aim-s1-e1", 1),)


def test_the_session_counts_its_idle_periods_and_an_earlier_periods_timer_is_stale() -> None:
    session = ready("a")
    assert session.idles == 1  # provisioned: idle for the first time
    rejected(session, IdleTimeout(0), RejectReason.INVALID_STATE)
    outcome = outcome_of(session, IdleTimeout(1))
    assert outcome.state.state == "ending"


def test_idle_timeout_with_an_active_endpoint_is_refused() -> None:
    session = replace(ready("a"), active_endpoint_id="ep-a")
    rejected(session, IdleTimeout(), RejectReason.INVALID_STATE)


@pytest.mark.parametrize("state", LIVE_STATES)
def test_max_duration_ends_any_live_session(state: SessionState) -> None:
    session = run(in_state(state), MaxDuration())
    assert (session.state, session.end_reason) == ("ending", "max_duration")


# --- rebind -------------------------------------------------------------------------------------


def test_losing_the_room_rebinds_to_a_new_room_at_a_new_epoch() -> None:
    outcome = outcome_of(handed_off(), RoomLost("aim-s1-e1"))

    session = outcome.state
    assert (session.epoch, session.room, session.room_epoch, session.rebinds) == (
        3,
        "aim-s1-e3",
        3,
        1,
    )
    assert session.bumps[-1] == EpochBump(3, "rebound")
    assert (session.state, session.agent_state, session.active_endpoint_id) == (
        "provisioning",
        "dispatching",
        None,
    )
    assert [(e.state, e.joined_epoch) for e in session.endpoints] == [
        ("superseded", 1),
        ("registered", None),
    ]
    # the new room's agent is the session's next generation (the first was 1)
    assert outcome.outbox == (CreateRoom("aim-s1-e3", 3, with_agent=True, generation=2),)
    assert session.task_state == "TASK_STATE_WORKING"


def test_losing_an_old_room_is_fenced() -> None:
    session = run(active(), RoomLost("aim-s1-e1"))
    rejected(session, RoomLost("aim-s1-e1"), RejectReason.INVALID_STATE)


def test_losing_the_room_once_too_often_fails_the_session() -> None:
    session = active()
    for _ in range(MAX_REBINDS):
        session = run(session, RoomLost(session.room))

    session = run(session, RoomLost(session.room))

    assert (session.state, session.end_reason, session.task_state) == (
        "failed",
        "room_lost",
        "TASK_STATE_FAILED",
    )


HOLDING_TOKENS = ("joining", "connected", "disconnected")


# --- end and cancel -----------------------------------------------------------------------------


@pytest.mark.parametrize("state", LIVE_STATES)
def test_end_makes_the_task_completed_at_once_and_deletes_the_room(state: SessionState) -> None:
    outcome = outcome_of(in_state(state), End("user_hangup"))

    session = outcome.state
    assert (session.state, session.end_reason, session.canceled) == ("ending", "user_hangup", False)
    assert (session.task_state, session.task_version) == ("TASK_STATE_COMPLETED", 2)
    # every device that was issued a token is removed with its tokens revoked, then the room goes
    holders = [e.endpoint_id for e in session.endpoints if e.state in HOLDING_TOKENS]
    assert outcome.outbox == (
        *(RemoveParticipant("aim-s1-e1", holder, revoke_before=T1) for holder in holders),
        DeleteRoom("aim-s1-e1", 1),
    )
    if state == "active":
        assert holders == ["ep-a"]


@pytest.mark.parametrize("state", ENDED_LIKE)
def test_ending_a_finished_session_returns_it_unchanged(state: SessionState) -> None:
    session = in_state(state)

    outcome = outcome_of(session, End("again"))

    assert outcome.state is session
    assert not outcome.has_effects


def test_cancel_makes_the_task_canceled() -> None:
    session = run(active(), Cancel())

    assert (session.state, session.end_reason, session.canceled) == ("ending", "canceled", True)
    assert (session.task_state, session.task_version) == ("TASK_STATE_CANCELED", 2)


def test_room_deleted_finishes_the_session_and_removes_its_endpoints() -> None:
    session = run(handed_off(), End("bye"), RoomDeleted(1))

    assert (session.state, session.ended_at, session.active_endpoint_id) == ("ended", T1, None)
    assert [e.state for e in session.endpoints] == ["removed", "removed"]
    assert (session.task_state, session.task_version) == ("TASK_STATE_COMPLETED", 2)


@pytest.mark.parametrize(
    ("state", "canceled", "task_state"),
    [
        *[(s, False, "TASK_STATE_WORKING") for s in LIVE_STATES],
        ("ending", False, "TASK_STATE_COMPLETED"),
        ("ended", True, "TASK_STATE_CANCELED"),
        ("failed", False, "TASK_STATE_FAILED"),
    ],
)
def test_the_task_state_is_derived_from_the_session(
    state: SessionState, canceled: bool, task_state: str
) -> None:
    assert derive_task_state(replace(fresh(), state=state, canceled=canceled)) == task_state


# --- properties ---------------------------------------------------------------------------------

KEYS = ("a", "b", "c")
OFFSETS = (0, 0, 0, -1, 1)
# deep starting points, so short runs still reach handoffs, reconnects and rebinds
STARTS: dict[str, Callable[[], Session]] = {
    "fresh": fresh,
    "ready": lambda: ready("a", "b"),
    "active": active,
    "handed_off": handed_off,
    "reconnecting": lambda: run(active(), ParticipantLeft(1, "ep-a", False)),
    "rebound": lambda: run(handed_off(), RoomLost("aim-s1-e1"), Provisioned(3)),
    "ended": lambda: run(active(), End("bye"), RoomDeleted(1)),
    "failed": lambda: run(fresh(), ProvisioningFailed(1, "boom")),
}


class SessionLifecycle(RuleBasedStateMachine):
    """Commands, webhooks and timers against the session, with invariants after every step.

    Most rules send the event a well-behaved client, LiveKit or timer would send now, so runs get
    deep (joins, handoffs, reconnects, rebinds); `fuzz` sends any event with any nearby epoch.
    """

    session: Session
    tick: int
    bound: int  # handoffs per minute of the bounded joins
    handoffs: list[int]  # when the bounded joins handed the session off (ticks: seconds)

    @initialize(start=st.sampled_from(tuple(STARTS)), bound=st.sampled_from((1, 2, 3)))
    def create(self, start: str, bound: int) -> None:
        self.session = STARTS[start]()
        self.tick = 0
        self.bound = bound
        self.handoffs = []

    @staticmethod
    def at(tick: int) -> str:
        return f"2025-01-01T{tick // 3600:02d}:{tick // 60 % 60:02d}:{tick % 60:02d}Z"

    def step(self, event: SessionEvent) -> None:
        before = self.session
        self.tick += 1
        now = self.at(self.tick)
        outcome = decide(before, event, now=now)
        assert decide(before, event, now=now) == outcome  # pure: same input, same answer
        name = event_name(event)
        if isinstance(event, RegisterEndpoint | Join) and event.epoch != before.epoch:
            assert isinstance(outcome, Rejected)
            assert outcome.reason is RejectReason.STALE_EPOCH
        if isinstance(outcome, Rejected):
            assert outcome.current_epoch == before.epoch
            observe(f"rejected: {outcome.reason}")
            return  # the shell keeps `before`
        after = outcome.state
        observe(f"accepted: {before.state} --{name}--> {after.state}")
        if before.state in TERMINAL_STATES:
            assert after is before
            assert not outcome.has_effects
        assert after.epoch >= before.epoch
        assert after.task_version - before.task_version == int(
            after.task_state != before.task_state
        )
        assert after == before or after.updated_at == now  # any change stamps updated_at
        self.session = after

    def active_or(self, key: str) -> str:
        return self.session.active_endpoint_id or f"ep-{key}"

    @rule()
    def provision(self) -> None:
        self.step(Provisioned(self.session.room_epoch))

    @rule(key=st.sampled_from(KEYS), limit=st.sampled_from((2, 8)))
    def register(self, key: str, limit: int) -> None:
        self.step(RegisterEndpoint(self.session.epoch, f"ep-{key}", key, AUDIO_TEXT, limit))

    @rule(key=st.sampled_from(KEYS))
    def join(self, key: str) -> None:
        self.step(Join(self.session.epoch, f"ep-{key}"))

    @rule(key=st.sampled_from(KEYS))
    def bounded_join(self, key: str) -> None:
        """A join with handoffs bounded: it hands off only while fewer than the bound did in
        the minute before, and a refusal names a wait after which the bound lets it through."""
        before, now = self.session, self.tick + 1
        event = Join(before.epoch, f"ep-{key}", max_handoffs_per_minute=self.bound)
        outcome = decide(before, event, now=self.at(now))
        recent = [tick for tick in self.handoffs if tick > now - 60]
        if isinstance(outcome, Rejected) and outcome.reason is RejectReason.LIMIT_EXCEEDED:
            assert len(recent) >= self.bound
            assert 1 <= outcome.retry_after <= 60
            assert recent[-self.bound] + 60 == now + outcome.retry_after
            later = decide(before, event, now=self.at(now + outcome.retry_after))
            assert not isinstance(later, Rejected) or later.reason != outcome.reason
        elif isinstance(outcome, Accepted) and outcome.state.epoch > before.epoch:
            assert len(recent) < self.bound
            self.handoffs.append(now)
        self.step(event)

    @rule(seconds=st.sampled_from((20, 61)))
    def wait(self, seconds: int) -> None:
        self.tick += seconds

    @rule(key=st.sampled_from(KEYS))
    def connect(self, key: str) -> None:
        self.step(ParticipantJoined(self.session.epoch, self.active_or(key), False))

    @rule(key=st.sampled_from(KEYS))
    def superseded_device_connects(self, key: str) -> None:
        self.step(ParticipantJoined(self.session.room_epoch, f"ep-{key}", False))

    @rule(key=st.sampled_from(KEYS))
    def drop(self, key: str) -> None:
        self.step(ParticipantLeft(self.session.epoch, self.active_or(key), False))

    @rule(key=st.sampled_from(KEYS))
    def grace_expires(self, key: str) -> None:
        self.step(GraceExpired(self.session.epoch, self.active_or(key)))

    @rule(joined=st.booleans())
    def agent(self, joined: bool) -> None:
        kind = ParticipantJoined if joined else ParticipantLeft
        self.step(kind(self.session.room_epoch, "agent", True))

    @rule()
    def delete_room(self) -> None:
        self.step(RoomDeleted(self.session.room_epoch))

    @rule(
        name=st.sampled_from(NAMES),
        key=st.sampled_from(KEYS),
        offset=st.sampled_from(OFFSETS),
        limit=st.sampled_from((2, 8)),
    )
    def fuzz(self, name: SessionEventName, key: str, offset: int, limit: int) -> None:
        self.step(self.event(name, key, offset, limit))

    def event(self, name: SessionEventName, key: str, offset: int, limit: int) -> SessionEvent:
        session = self.session
        epoch, room_epoch = session.epoch + offset, session.room_epoch + offset
        attempt = session.agent_attempt + offset
        identity = f"ep-{key}"
        events: dict[str, SessionEvent] = {
            "provisioned": Provisioned(room_epoch),
            "provisioning_failed": ProvisioningFailed(room_epoch, "boom"),
            "provisioning_timeout": ProvisioningTimeout(room_epoch),
            "register_endpoint": RegisterEndpoint(epoch, identity, key, AUDIO_TEXT, limit),
            "join": Join(epoch, identity),
            "participant_joined": ParticipantJoined(epoch, identity, False),
            "participant_left": ParticipantLeft(epoch, identity, False),
            "agent_joined": ParticipantJoined(room_epoch, "agent", True),
            "agent_left": ParticipantLeft(room_epoch, "agent", True),
            "grace_expired": GraceExpired(epoch, identity),
            "idle_timeout": IdleTimeout(),
            "max_duration": MaxDuration(),
            "room_lost": RoomLost(room_name(session.session_id, room_epoch)),
            "end": End("bye"),
            "cancel": Cancel(),
            "room_deleted": RoomDeleted(room_epoch),
            "agent_dispatched": AgentDispatched(room_epoch, attempt, "AD_1"),
            "agent_job_started": AgentJobStarted(room_epoch, attempt, "AJ_1", "agent"),
            "agent_job_ended": AgentJobEnded(room_epoch, attempt, "AJ_1", "agent"),
            "agent_start_timeout": AgentStartTimeout(room_epoch, attempt),
            "rotation_due": RotationDue(
                room_epoch, session.agent_generation, "2025-01-01T01:00:00Z", "planned"
            ),
            "agent_deadline": AgentDeadline(
                room_epoch, session.agent_generation, "2025-01-01T01:00:00Z"
            ),
            "leave_grace": LeaveGrace(room_epoch, "agent"),
        }
        return events[name]

    @rule(
        name=st.sampled_from(("register_endpoint", "join")), offset=st.sampled_from((-2, -1, 1, 2))
    )
    def stale_commands_are_rejected(self, name: SessionEventName, offset: int) -> None:
        outcome = decide(self.session, self.event(name, "a", offset, 8), now="later")
        assert isinstance(outcome, Rejected)
        assert outcome.reason is RejectReason.STALE_EPOCH
        assert (outcome.current_epoch, outcome.state) == (self.session.epoch, self.session.state)
        if offset > 0:
            assert outcome.epoch_reason == "ahead"
        else:
            assert outcome.epoch_reason in ("superseded", "rebound", "ended")

    @invariant()
    def the_task_follows_the_session(self) -> None:
        assert self.session.task_state == derive_task_state(self.session)
        terminal = self.session.task_state != "TASK_STATE_WORKING"
        assert self.session.task_version == 1 + int(terminal)

    @invariant()
    def one_endpoint_at_most_is_in_the_room_and_it_is_the_active_one(self) -> None:
        present = [
            e.endpoint_id for e in self.session.endpoints if e.state in ("joining", "connected")
        ]
        assert len(present) <= 1
        assert all(endpoint_id == self.session.active_endpoint_id for endpoint_id in present)

    @invariant()
    def every_epoch_has_a_recorded_bump(self) -> None:
        session = self.session
        assert [bump.epoch for bump in session.bumps] == list(range(2, session.epoch + 1))
        assert session.room == room_name(session.session_id, session.room_epoch)
        assert session.room_epoch <= session.epoch
        assert session.rebinds == sum(b.reason == "rebound" for b in session.bumps)
        assert session.rebinds <= MAX_REBINDS

    @invariant()
    def at_most_the_bound_of_handoffs_is_remembered(self) -> None:
        assert len(self.session.handoffs) <= self.bound

    @invariant()
    def terminal_states_absorb(self) -> None:
        if self.session.state in TERMINAL_STATES:
            for name in NAMES:
                outcome = decide(self.session, self.event(name, "a", 0, 8), now="later")
                assert isinstance(outcome, Rejected) or outcome.state is self.session


SessionLifecycle.TestCase.settings = hypothesis_settings(max_examples=200, stateful_step_count=50)
test_session_lifecycle_invariants = SessionLifecycle.TestCase
