"""Random interleavings of webhooks, timers and commands against `state_machines.decide`.

LiveKit delivers webhooks late, twice, out of order or not at all; timers are never cancelled and
fire after the session moved on; clients retry with stale epochs. Whatever the order, the session
machine must keep its invariants after every step and never raise. Steps are symbolic ("the active
endpoint", "a stale epoch") and resolved against the session as it is when they arrive, so the
runs reach handoffs, reconnects and rebinds instead of being rejected at the door.
"""

from __future__ import annotations

from typing import Any

import msgspec
from hypothesis import event as hypothesis_event
from hypothesis import given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st
from hypothesis.control import currently_in_test_context

from state_machines import Accepted, Rejected, RejectReason, decide
from state_machines import session as machine
from state_machines.effects import (
    CreateRoom,
    DeleteDispatch,
    DeleteRoom,
    DispatchAgent,
    RemoveParticipant,
)
from state_machines.session_model import AWAITING_AGENT, agent_started
from tests.unit.session_operation_helpers import AUDIO_TEXT, created

SID = "s1"  # the session `created` makes
T0 = "2025-01-01T00:00:00Z"
AGENT = "agent-AJ_1"
OVER = ("ending", "ended", "failed")
# the state of the active endpoint each session state implies (None: there is no active one)
ACTIVE_ENDPOINT_STATE = {
    "provisioning": None,
    "ready": None,
    "joining": "joining",
    "active": "connected",
    "reconnecting": "disconnected",
}

# --- symbolic steps ------------------------------------------------------------------------------

# the current epoch and the active endpoint are the likelier cases, as in real traffic
WHO = st.sampled_from(("active", "active", "superseded", "registered", "unknown", "agent"))
EPOCH = st.sampled_from(("current", "current", "current", "room", "stale", "ahead"))
KEY = st.sampled_from(("a", "b", "c"))
# events that end the session are rarer, so runs get deep (handoffs, reconnects, rebinds)
ENDINGS = st.sampled_from(("end", "cancel", "max_duration", "idle_timeout"))
# which dispatch a job report or timer belongs to, and which of two agents (LiveKit may start
# a second job, or an old agent may linger)
ATTEMPT = st.sampled_from(("current", "current", "current", "older", "newer"))
AGENTS = st.sampled_from(("1", "1", "2"))

STEPS = st.one_of(
    st.tuples(st.just("participant_joined"), WHO, EPOCH),
    st.tuples(st.just("participant_joined"), WHO, EPOCH),
    st.tuples(st.just("participant_left"), WHO, EPOCH),
    st.tuples(st.just("room_finished"), st.sampled_from(("current", "old", "foreign"))),
    # a grace timer names the drop that armed it (-1: an older timer that names none)
    st.tuples(st.just("grace_expired"), WHO, EPOCH, st.sampled_from(("this", "earlier", "none"))),
    st.tuples(st.sampled_from(("provisioned", "room_deleted")), EPOCH),
    st.tuples(st.sampled_from(("provisioning_timeout", "provisioning_failed")), EPOCH),
    st.tuples(st.just("register"), KEY, EPOCH, st.sampled_from((2, 8))),
    st.tuples(st.just("join"), st.sampled_from(("a", "b", "c", "active", "superseded")), EPOCH),
    st.tuples(st.just("join"), st.sampled_from(("a", "b", "c", "active", "superseded")), EPOCH),
    st.tuples(ENDINGS),
    st.tuples(st.sampled_from(("agent_job_started", "agent_job_ended")), ATTEMPT, AGENTS),
    st.tuples(st.sampled_from(("agent_job_started", "agent_job_ended")), ATTEMPT, AGENTS),
    st.tuples(st.just("agent_start_timeout"), ATTEMPT),
    st.tuples(st.just("agent_dispatched"), ATTEMPT),
    st.tuples(st.just("agent_participant"), st.booleans(), AGENTS, EPOCH),
)


def epoch_of(session: machine.Session, which: str) -> int:
    return {
        "current": session.epoch,
        "room": session.room_epoch,
        "stale": session.epoch - 1,
        "ahead": session.epoch + 1,
    }[which]


def attempt_of(session: machine.Session, which: str) -> int:
    return {"current": 0, "older": -1, "newer": 1}[which] + session.agent_attempt


def identity_of(session: machine.Session, who: str) -> str:
    """An endpoint id (or the agent's identity) playing the role `who` in `session`."""

    def first(*states: str) -> str | None:
        return next((e.endpoint_id for e in session.endpoints if e.state in states), None)

    if who == "active":
        return session.active_endpoint_id or "ep-a"
    if who == "superseded":
        return first("superseded") or "ep-b"
    if who == "registered":
        return first("registered") or "ep-c"
    if who == "agent":
        return AGENT
    if who in ("a", "b", "c"):
        return f"ep-{who}"
    return "ep-stranger"


def event_of(session: machine.Session, step: tuple[Any, ...]) -> machine.SessionEvent:
    """The concrete event `step` means for `session` as it is now."""
    kind, *args = step
    if kind in ("participant_joined", "participant_left"):
        who, which = args
        agent = who == "agent"
        # the agent belongs to a room's epoch, an endpoint to its token's
        epoch = epoch_of(session, "room" if agent and which == "current" else which)
        cls = machine.ParticipantJoined if kind == "participant_joined" else machine.ParticipantLeft
        return cls(epoch, identity_of(session, who), agent)
    if kind == "room_finished":
        which = args[0]
        if which == "current":
            return machine.RoomLost(session.room)
        if which == "old":
            return machine.RoomLost(machine.room_name(SID, max(1, session.room_epoch - 1)))
        return machine.RoomLost("somebody-elses-room")
    if kind == "grace_expired":
        who, which, drop = args
        disconnect = {"this": session.disconnects, "earlier": session.disconnects - 1}.get(drop, -1)
        return machine.GraceExpired(epoch_of(session, which), identity_of(session, who), disconnect)
    if kind == "idle_timeout":
        return machine.IdleTimeout()
    if kind == "max_duration":
        return machine.MaxDuration()
    if kind in ("provisioning_timeout", "provisioned", "room_deleted"):
        which = "room" if args[0] == "current" else args[0]
        cls = {
            "provisioning_timeout": machine.ProvisioningTimeout,
            "provisioned": machine.Provisioned,
            "room_deleted": machine.RoomDeleted,
        }[kind]
        return cls(epoch_of(session, which))
    if kind == "provisioning_failed":
        which = "room" if args[0] == "current" else args[0]
        return machine.ProvisioningFailed(epoch_of(session, which), "create_room failed")
    if kind == "register":
        key, which, limit = args
        return machine.RegisterEndpoint(
            epoch_of(session, which), f"ep-{key}", key, AUDIO_TEXT, limit
        )
    if kind == "join":
        who, which = args
        return machine.Join(epoch_of(session, which), identity_of(session, who))
    if kind in ("agent_job_started", "agent_job_ended"):
        which, agent = args
        attempt = attempt_of(session, which)
        job = f"AJ_{attempt}_{agent}"  # one job per dispatch and agent
        if kind == "agent_job_started":
            return machine.AgentJobStarted(session.room_epoch, attempt, job, f"agent-{agent}", "AD")
        return machine.AgentJobEnded(session.room_epoch, attempt, job, f"agent-{agent}")
    if kind == "agent_start_timeout":
        return machine.AgentStartTimeout(session.room_epoch, attempt_of(session, args[0]))
    if kind == "agent_dispatched":
        return machine.AgentDispatched(session.room_epoch, attempt_of(session, args[0]), "AD_x")
    if kind == "agent_participant":
        joined, agent, which = args
        epoch = epoch_of(session, "room" if which == "current" else which)
        cls = machine.ParticipantJoined if joined else machine.ParticipantLeft
        return cls(epoch, f"agent-{agent}", True)
    if kind == "end":
        return machine.End("bye")
    return machine.Cancel()


# --- starting points -----------------------------------------------------------------------------


def fresh() -> machine.Session:
    return created(required=("audio_input", "audio_output"), now=T0)


ACTIVE_PREFIX: tuple[machine.SessionEvent, ...] = (
    machine.Provisioned(1),
    machine.RegisterEndpoint(1, "ep-a", "a", AUDIO_TEXT, 8),
    machine.Join(1, "ep-a"),
    machine.ParticipantJoined(1, "ep-a", False),
)
PREFIXES: dict[str, tuple[machine.SessionEvent, ...]] = {
    "provisioning": (),
    "ready": (machine.Provisioned(1),),
    "active": ACTIVE_PREFIX,
    "handed off": (
        *ACTIVE_PREFIX,
        machine.RegisterEndpoint(1, "ep-b", "b", AUDIO_TEXT, 8),
        machine.Join(1, "ep-b"),
    ),
    "rebound": (*ACTIVE_PREFIX, machine.RoomLost(machine.room_name(SID, 1))),
    "agent present": (
        *ACTIVE_PREFIX,
        machine.AgentJobStarted(1, 1, "AJ_1_1", "agent-1", "AD"),
        machine.ParticipantJoined(1, "agent-1", True),
    ),
    # two dispatches started nothing: one more miss and no agent can be had
    "agent missing": (
        *ACTIVE_PREFIX,
        machine.AgentStartTimeout(1, 1),
        machine.AgentStartTimeout(1, 2),
    ),
}


def start(name: str) -> machine.Session:
    session = fresh()
    for event in PREFIXES[name]:
        outcome = decide(session, event, now=T0)
        assert isinstance(outcome, Accepted), (name, event, outcome)
        session = outcome.state
    return session


# --- invariants ----------------------------------------------------------------------------------


def check_session(session: machine.Session) -> None:
    """What must hold of every session the machine produces."""
    present = [e.endpoint_id for e in session.endpoints if e.state in ("joining", "connected")]
    assert len(present) <= 1, present
    assert all(endpoint_id == session.active_endpoint_id for endpoint_id in present)
    assert session.task_state == machine.derive_task_state(session)
    assert session.room == machine.room_name(SID, session.room_epoch)
    assert 1 <= session.room_epoch <= session.epoch
    assert [bump.epoch for bump in session.bumps] == list(range(2, session.epoch + 1))
    assert session.rebinds == sum(bump.reason == "rebound" for bump in session.bumps)
    assert session.rebinds <= machine.MAX_REBINDS
    assert session.disconnects >= 0
    ids = [e.endpoint_id for e in session.endpoints]
    assert len(ids) == len(set(ids))
    if session.state in ACTIVE_ENDPOINT_STATE:
        expected = ACTIVE_ENDPOINT_STATE[session.state]
        active = next(
            (e for e in session.endpoints if e.endpoint_id == session.active_endpoint_id), None
        )
        if expected is None:
            assert session.active_endpoint_id is None
        else:
            assert active is not None, session.active_endpoint_id
            assert active.state == expected, (session.state, active.state)
    if session.state in machine.TERMINAL_STATES:
        assert session.active_endpoint_id is None
        assert all(e.state == "removed" for e in session.endpoints)
        assert session.ended_at is not None
    if session.state in OVER:
        assert session.end_reason
    # the agent's presence: a job heard or an agent in the room means it started
    if session.agent_job is not None or session.agent_identity is not None:
        assert agent_started(session)
        assert session.agent_state not in AWAITING_AGENT
    assert 1 <= session.agent_attempt <= machine.MAX_AGENT_DISPATCHES
    assert 0 <= session.agent_misses < machine.MAX_AGENT_MISSES
    assert session.agent_identity not in session.agents_replaced
    assert len(set(session.agents_replaced)) == len(session.agents_replaced)
    if session.end_reason == "agent_unavailable":
        assert session.state == "failed"


def must_be_fenced(before: machine.Session, event: machine.SessionEvent) -> bool:
    """Events that belong to another epoch or room: the machine must refuse them."""
    match event:
        case machine.RegisterEndpoint() | machine.Join():
            return event.epoch != before.epoch
        case (
            machine.Provisioned()
            | machine.ProvisioningFailed()
            | machine.ProvisioningTimeout()
            | machine.RoomDeleted()
        ):
            return event.epoch != before.room_epoch
        case machine.ParticipantJoined() | machine.ParticipantLeft() if event.is_agent:
            return event.epoch != before.room_epoch or event.identity in before.agents_replaced
        case machine.ParticipantJoined() | machine.ParticipantLeft():
            return not before.room_epoch <= event.epoch <= before.epoch
        case machine.GraceExpired():
            return event.epoch != before.epoch or event.disconnect not in (-1, before.disconnects)
        case machine.RoomLost():
            return event.room != before.room
        case (
            machine.AgentDispatched()
            | machine.AgentJobStarted()
            | machine.AgentJobEnded()
            | machine.AgentStartTimeout()
        ):
            return (event.epoch, event.attempt) != (before.room_epoch, before.agent_attempt)
    return False


def check_step(
    before: machine.Session,
    event: machine.SessionEvent,
    outcome: Accepted[machine.Session] | Rejected,
) -> None:
    if isinstance(outcome, Rejected):
        assert outcome.current_epoch == before.epoch
        if (
            isinstance(event, machine.RegisterEndpoint | machine.Join)
            and event.epoch != before.epoch
        ):
            assert outcome.reason is RejectReason.STALE_EPOCH
            if event.epoch > before.epoch:
                assert outcome.epoch_reason == "ahead"
            else:
                assert outcome.epoch_reason in ("superseded", "rebound", "ended")
        return
    after = outcome.state
    assert not must_be_fenced(before, event), f"{event} was not fenced in {before.state}"
    if before.state in machine.TERMINAL_STATES:
        assert after == before, "a terminal session changed"
        assert not outcome.has_effects
    if before.state in OVER:
        assert after.state in OVER, f"{before.state} went back to {after.state}"
    assert before.epoch <= after.epoch <= before.epoch + 1
    assert before.task_version <= after.task_version
    assert before.disconnects <= after.disconnects <= before.disconnects + 1
    assert after.task_version - before.task_version == int(after.task_state != before.task_state)
    if before.task_state != "TASK_STATE_WORKING":
        assert after.task_state == before.task_state, "a terminal task changed"
    effects = outcome.outbox
    for effect in effects:
        if isinstance(effect, RemoveParticipant):
            # a live session never removes its active device; its end removes every device,
            # each with its tokens revoked, before the room is deleted
            assert effect.identity != after.active_endpoint_id or after.state == "ending"
            assert effect.revoke_before is not None
        if isinstance(effect, RemoveParticipant) and after.state in ("ending", "failed"):
            assert isinstance(effects[-1], DeleteRoom)
        if isinstance(effect, CreateRoom | DispatchAgent):
            assert (effect.room, effect.epoch) == (after.room, after.room_epoch)
        if isinstance(effect, DeleteRoom):
            assert after.state == "ending" or after.end_reason == "agent_unavailable"
        if isinstance(effect, DeleteDispatch | DispatchAgent) and after.room == before.room:
            # a replacement: the next dispatch into the same room, the stale ones deleted first
            assert after.agent_attempt == before.agent_attempt + 1 == effect.attempt
            assert (after.agent_state, after.agent_identity, after.agent_job) == (
                "dispatching",
                None,
                None,
            )
            # the new agent is the session's next generation: its token passes for no other's
            assert after.agent_generation == before.agent_generation + 1
            assert effects == (
                DeleteDispatch(after.room, after.room_epoch, after.agent_attempt),
                DispatchAgent(
                    after.room,
                    after.room_epoch,
                    after.agent_attempt,
                    generation=after.agent_generation,
                ),
            )
    if after.room == before.room:
        assert after.agent_attempt >= before.agent_attempt  # never back to an older dispatch
    else:
        assert (after.agent_attempt, after.agents_replaced) == (1, ())
    if after.room != before.room:  # a rebind: a new room for the new epoch, provisioned once
        assert after.room_epoch == after.epoch == before.epoch + 1
        assert after.bumps[-1].reason == "rebound"
        assert after.agent_generation == before.agent_generation + 1
        assert effects == (
            CreateRoom(after.room, after.epoch, with_agent=True, generation=after.agent_generation),
        )
        assert (outcome.token, outcome.history) == (None, ())


def observe(what: str) -> None:
    """Count `what` in the property test's statistics (--hypothesis-show-statistics)."""
    if currently_in_test_context():
        hypothesis_event(what)


def run(session: machine.Session, steps: list[tuple[Any, ...]]) -> machine.Session:
    check_session(session)
    for index, step in enumerate(steps):
        event = event_of(session, step)
        frozen = msgspec.json.encode(session)
        now = f"2025-01-01T00:{index // 60:02d}:{index % 60:02d}Z"
        outcome = decide(session, event, now=now)
        assert msgspec.json.encode(session) == frozen  # decide never touches its input
        check_step(session, event, outcome)
        verdict = "refused" if isinstance(outcome, Rejected) else "accepted"
        observe(f"{type(event).__name__} {verdict}")
        if isinstance(outcome, Accepted):
            if outcome.state.agent_attempt > session.agent_attempt:
                observe("agent replaced")
            if outcome.state.end_reason != session.end_reason == None:  # noqa: E711
                observe(f"ended: {outcome.state.end_reason}")
            session = outcome.state
        check_session(session)
    return session


@hypothesis_settings(max_examples=300, derandomize=True, deadline=None, database=None)
@given(prefix=st.sampled_from(tuple(PREFIXES)), steps=st.lists(STEPS, min_size=5, max_size=60))
def test_any_interleaving_keeps_the_session_invariants(
    prefix: str, steps: list[tuple[Any, ...]]
) -> None:
    run(start(prefix), steps)


# --- a few interleavings spelled out (they also keep the property test honest) -----------------


def test_a_left_before_its_joined_is_refused_and_the_joined_still_works() -> None:
    session = start("handed off")
    assert session.state == "joining"
    left_first = [
        ("participant_left", "active", "current"),
        ("participant_joined", "active", "current"),
    ]
    final = run(session, left_first)
    assert final.state == "active"


def test_a_grace_timer_of_an_earlier_drop_is_refused() -> None:
    drop = ("participant_left", "active", "current")
    back = ("participant_joined", "active", "current")
    session = run(start("active"), [drop, back])
    first = session.disconnects
    endpoint = session.active_endpoint_id or ""
    # back in the room: the first drop's timer finds nothing to expire
    assert isinstance(
        decide(session, machine.GraceExpired(session.epoch, endpoint, first), now=T0), Rejected
    )
    session = run(session, [drop])
    assert (session.state, session.disconnects) == ("reconnecting", first + 1)
    # dropped again: the first drop's timer must not cut the second grace short
    assert isinstance(
        decide(session, machine.GraceExpired(session.epoch, endpoint, first), now=T0), Rejected
    )
    expired = decide(session, machine.GraceExpired(session.epoch, endpoint, first + 1), now=T0)
    assert isinstance(expired, Accepted)
    assert expired.state.state == "ready"


def test_repeated_room_loss_ends_in_failed_and_stays_there() -> None:
    steps = [("room_finished", "current"), ("provisioned", "current")] * (machine.MAX_REBINDS + 1)
    final = run(start("active"), [*steps, ("participant_joined", "agent", "current"), ("end",)])
    assert final.state == "failed"
    assert final.epoch == 1 + machine.MAX_REBINDS
    assert final.task_state == "TASK_STATE_FAILED"


def test_a_superseded_endpoint_that_reconnects_is_removed_and_changes_nothing() -> None:
    session = run(start("handed off"), [("participant_joined", "active", "current")])
    assert session.state == "active"
    old = decide(session, machine.ParticipantJoined(1, "ep-a", False), now=T0)
    assert isinstance(old, Accepted)
    assert old.state == session
    assert old.outbox == (RemoveParticipant(session.room, "ep-a", revoke_before=T0),)
