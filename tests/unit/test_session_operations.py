"""Operations inside a session in the pure core: the agent asks (state_machines/provider.py),
the user answers (state_machines/interactions.py), and the task follows (INPUT_REQUIRED)."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from state_machines import Accepted, Rejected, RejectReason, SendData, UpdatePermissions
from state_machines import provider as agent
from state_machines.effects import AppendHistory
from state_machines.endpoint import Capabilities
from state_machines.interactions import (
    MAX_OPERATIONS,
    AgentMedia,
    Deliver,
    Resolve,
    TrackChanged,
    UserMedia,
)
from state_machines.operation import Requirement
from state_machines.session import (
    End,
    Requested,
    RoomLost,
    Session,
    new_session,
)
from state_machines.task import INPUT_REQUIRED, WORKING
from tests.unit.session_operation_helpers import (
    DIGEST,
    OTHER,
    T0,
    ask,
    confirm,
    live,
    run,
    step,
)


def cont(decision: str = "confirm", req: str = "req-1", version: int = 3, **kw: object) -> Resolve:
    return Resolve(
        command_id="m-1",
        decision=decision,  # type: ignore[arg-type]
        via="continue",
        requirement_id=req,
        action_digest=DIGEST,
        expected_version=version,
        **kw,  # type: ignore[arg-type]
    )


def refused(session: Session, event: object, reason: RejectReason) -> Rejected:
    outcome = step(session, event)
    assert isinstance(outcome, Rejected), outcome
    assert outcome.reason is reason, outcome
    return outcome


def op_state(session: Session, op: str = "op-1") -> str:
    return next(item.state for item in session.operations if item.operation_id == op)


# --- requests and the task -------------------------------------------------------------------


def test_a_confirmable_request_waits_and_the_task_requires_input() -> None:
    session = live()
    before = session.task_version
    asked = run(session, ask())
    assert op_state(asked) == "awaiting_confirmation"
    assert asked.task_state == INPUT_REQUIRED
    assert asked.task_version == before + 1
    assert asked.task_requirement == "op-1"


def test_a_request_without_confirmation_runs_at_once_and_the_task_keeps_working() -> None:
    session = run(live(), ask(requirement=None))
    assert op_state(session) == "running"
    assert session.task_state == WORKING


def test_a_second_open_requirement_shows_after_the_first_is_answered() -> None:
    session = run(live(), ask(), ask("op-2", "req-2"))
    version = session.task_version
    answered = run(session, confirm())
    assert answered.task_state == INPUT_REQUIRED
    assert answered.task_requirement == "op-2"
    assert answered.task_version == version + 1  # a new requirement is a task change


def test_continue_approve_runs_the_operation_and_keeps_the_message() -> None:
    session = run(live(), ask())
    note = AppendHistory("m-1", "user", "[]")
    outcome = step(session, cont(version=session.task_version, history=note))
    assert isinstance(outcome, Accepted)
    assert op_state(outcome.state) == "running"
    assert outcome.state.task_state == WORKING
    assert note in outcome.history
    update = next(e for e in outcome.outbox if isinstance(e, SendData))
    assert json.loads(update.body)["payload"] == {"operationId": "op-1", "state": "running"}


def test_continue_deny_cancels() -> None:
    session = run(live(), ask())
    answered = run(session, cont("deny", version=session.task_version))
    assert op_state(answered) == "canceled"


def test_continue_checks_state_then_requirement_then_version() -> None:
    session = live()
    refused(session, cont(), RejectReason.INVALID_STATE)
    session = run(session, ask())
    refused(session, cont(req="req-x", version=session.task_version),
            RejectReason.REQUIREMENT_MISMATCH)  # fmt: skip
    wrong = Resolve(command_id="m", decision="confirm", via="continue", requirement_id="req-1",
                    action_digest=OTHER, expected_version=0)  # fmt: skip
    refused(session, wrong, RejectReason.REQUIREMENT_MISMATCH)
    stale = refused(session, cont(version=1), RejectReason.VERSION_MISMATCH)
    assert stale.current_version == session.task_version


def test_the_second_path_meets_a_resolved_operation() -> None:
    session = run(live(), ask())
    first = run(session, confirm())
    refused(first, cont(version=first.task_version), RejectReason.INVALID_STATE)
    refused(first, confirm(), RejectReason.INVALID_STATE)
    via_continue = run(session, cont(version=session.task_version))
    refused(via_continue, confirm(), RejectReason.INVALID_STATE)


def test_expiry_expires_only_the_open_requirement() -> None:
    session = run(live(), ask())
    expire = Resolve(command_id="x", decision="expire", via="timer", operation_id="op-1",
                     requirement_id="req-1")  # fmt: skip
    expired = run(session, expire)
    assert op_state(expired) == "expired"
    assert expired.task_state == WORKING
    refused(expired, expire, RejectReason.INVALID_STATE)
    other = Resolve(command_id="x", decision="expire", via="timer", operation_id="op-1",
                    requirement_id="req-old")  # fmt: skip
    refused(session, other, RejectReason.REQUIREMENT_MISMATCH)


def test_answers_after_the_session_ended_are_refused() -> None:
    session = run(live(), ask())
    ended = run(session, End("done"))
    assert op_state(ended) == "canceled"  # the session's end cancels what is open
    refused(ended, cont(version=ended.task_version), RejectReason.INVALID_STATE)


def test_cancel_and_unknown_operations() -> None:
    session = run(live(), ask())
    cancel = Resolve(command_id="c", decision="cancel", via="interaction", epoch=1,
                     operation_id="op-1")  # fmt: skip
    assert op_state(run(session, cancel)) == "canceled"
    unknown = Resolve(command_id="c", decision="cancel", via="interaction", epoch=1,
                      operation_id="nope")  # fmt: skip
    refused(session, unknown, RejectReason.OPERATION_NOT_FOUND)


def test_confirmation_must_be_requested_and_offered() -> None:
    refused(
        run(live(interactions=("text",)), ask()), confirm(), RejectReason.CAPABILITY_UNAVAILABLE
    )
    plain = Capabilities(True, True, True, False, ("text",))
    refused(run(live(caps=plain), ask()), confirm(), RejectReason.CAPABILITY_UNAVAILABLE)


def test_resolutions_without_the_agent_send_no_message() -> None:
    session = run(live(agent_joined=False), ask())
    outcome = step(session, confirm())
    assert isinstance(outcome, Accepted)
    assert not any(isinstance(e, SendData) for e in outcome.outbox)


# --- media requests of the agent -------------------------------------------------------------


def media_ask(side: str = "user", source: str = "camera", op: str = "op-m") -> object:
    return ask(op, f"req-{op}", kind="media.request", media_side=side, media_source=source)


def decide_media(decision: str, op: str = "op-m") -> Resolve:
    return Resolve(command_id="d", decision=decision, via="interaction", epoch=1,  # type: ignore[arg-type]
                   operation_id=op)  # fmt: skip


def test_the_agent_asks_for_the_camera_and_the_user_allows_it() -> None:
    session = run(live(), media_ask())
    assert session.media.user_camera == "requested"
    outcome = step(session, decide_media("allow"))
    assert isinstance(outcome, Accepted)
    assert outcome.state.media.user_camera == "granted"
    permission = next(e for e in outcome.outbox if isinstance(e, UpdatePermissions))
    assert "camera" in permission.publish_sources


def test_the_user_denies_and_the_source_goes_back_off() -> None:
    session = run(live(), media_ask())
    denied = run(session, decide_media("deny"))
    assert denied.media.user_camera == "off"
    assert op_state(denied, "op-m") == "canceled"


def test_media_decide_answers_only_a_media_request_of_the_agent() -> None:
    session = run(live(), ask())
    refused(session, decide_media("allow", "op-1"), RejectReason.INVALID_STATE)


def test_agent_media_requests_need_requested_and_offered_sources() -> None:
    refused(live(), media_ask("agent", "camera"), RejectReason.CAPABILITY_UNAVAILABLE)
    refused(live(), media_ask("user", "screen"), RejectReason.CAPABILITY_UNAVAILABLE)
    no_screen = Requested(("camera",), (), ("confirmation",))
    session = msgspec_replace(live(), requested=no_screen)
    refused(session, media_ask("user", "screen"), RejectReason.CAPABILITY_UNAVAILABLE)
    asked = run(live(), media_ask("agent", "screen"))
    assert asked.media.agent_screen == "requested"
    refused(asked, media_ask("agent", "screen", "op-n"), RejectReason.INVALID_STATE)


def test_without_an_active_device_only_the_request_is_checked() -> None:
    gone = msgspec_replace(live(), active_endpoint_id=None)
    assert run(gone, media_ask()).media.user_camera == "requested"


def msgspec_replace(session: Session, **changes: object) -> Session:
    import msgspec

    return msgspec.structs.replace(session, **changes)


def test_the_user_asks_the_agent_for_its_screen() -> None:
    session = live()
    request = AgentMedia(1, "c-9", "screen", "request", "op-a")
    outcome = step(session, request)
    assert isinstance(outcome, Accepted)
    asked = outcome.state
    assert asked.media.agent_screen == "requested"
    assert op_state(asked, "op-a") == "running"
    body = json.loads(next(e for e in outcome.outbox if isinstance(e, SendData)).body)
    assert body["type"] == "media.request"
    assert body["payload"] == {"side": "agent", "source": "screen", "operationId": "op-a"}
    done = run(asked, agent.UpdateOperation(1, "op-a", "succeeded", "{}"))
    assert done.media.agent_screen == "granted"
    live_screen = run(done, TrackChanged(1, "agent-1", "screen_share", True, is_agent=True))
    assert live_screen.media.agent_screen == "live"
    stopped = step(live_screen, AgentMedia(1, "c-10", "screen", "stop", ""))
    assert isinstance(stopped, Accepted)
    assert stopped.state.media.agent_screen == "stopped"
    assert json.loads(stopped.outbox[0].body)["type"] == "media.stop"  # type: ignore[union-attr]


def test_a_failed_agent_media_request_leaves_the_source_off() -> None:
    asked = run(live(), AgentMedia(1, "c", "screen", "request", "op-a"))
    failed = run(asked, agent.UpdateOperation(1, "op-a", "failed", error_json='{"m":1}'))
    assert failed.media.agent_screen == "off"
    assert op_state(failed, "op-a") == "failed"


def test_agent_media_needs_the_source_requested_and_the_agent_present() -> None:
    refused(
        live(), AgentMedia(1, "c", "camera", "request", "o"), RejectReason.CAPABILITY_UNAVAILABLE
    )
    refused(live(agent_joined=False), AgentMedia(1, "c", "screen", "request", "o"),
            RejectReason.INVALID_STATE)  # fmt: skip
    refused(live(), AgentMedia(1, "c", "screen", "prepare", ""), RejectReason.INVALID_STATE)


def test_agent_tracks_of_another_identity_are_fenced() -> None:
    session = live()
    refused(session, TrackChanged(1, "someone", "screen_share", True, is_agent=True),
            RejectReason.INVALID_STATE)  # fmt: skip


def test_operations_per_session_are_limited() -> None:
    session = live()
    for index in range(MAX_OPERATIONS):
        session = run(session, ask(f"op-{index}", requirement=None))
    refused(session, ask("op-x", requirement=None), RejectReason.LIMIT_EXCEEDED)
    refused(session, AgentMedia(1, "c", "screen", "request", "op-y"), RejectReason.LIMIT_EXCEEDED)


# --- the provider's other calls --------------------------------------------------------------


def test_update_runs_finishes_and_repeats_are_no_ops() -> None:
    session = run(live(), ask(requirement=None))
    same = step(session, agent.UpdateOperation(1, "op-1", "running"))
    assert isinstance(same, Accepted)
    assert same.state == session
    done = run(session, agent.UpdateOperation(1, "op-1", "succeeded", '{"ok":true}'))
    assert next(op for op in done.operations).result_json == '{"ok":true}'
    refused(done, agent.UpdateOperation(1, "op-1", "failed"), RejectReason.INVALID_STATE)
    refused(done, agent.UpdateOperation(1, "nope", "running"), RejectReason.OPERATION_NOT_FOUND)


def test_the_provider_cannot_run_what_the_user_has_not_confirmed() -> None:
    session = run(live(), ask())
    refused(session, agent.UpdateOperation(1, "op-1", "running"), RejectReason.INVALID_STATE)


def test_agent_state_is_last_writer_wins() -> None:
    session = run(live(), agent.ReportAgentState(1, 1, "thinking"))
    assert session.agent_state == "thinking"
    assert run(session, agent.ReportAgentState(1, 1, "speaking")).agent_state == "speaking"


def test_transcript_lines_need_retention() -> None:
    line = agent.AppendTranscript(1, 1, "item-1", "agent", "hello")
    refused(live(), line, RejectReason.CAPABILITY_UNAVAILABLE)
    outcome = step(live(transcript="on"), line)
    assert isinstance(outcome, Accepted)
    assert (outcome.outbox, outcome.history) == (
        (),
        (AppendHistory("item-1", "agent", '[{"text":"hello"}]'),),
    )


def test_user_text_joins_the_history_only_with_retention() -> None:
    text = Deliver(1, "c-1", "input.text", '{"text":"hi"}')
    kept = step(live(transcript="on"), text)
    assert isinstance(kept, Accepted)
    assert AppendHistory("c-1", "user", '[{"text":"hi"}]') in kept.history
    plain = step(live(), text)
    assert isinstance(plain, Accepted)
    assert not plain.history


@pytest.mark.parametrize(
    ("epoch", "room_epoch", "why"),
    [(2, 1, "ahead"), (1, 0, "rebound")],
)
def test_provider_calls_are_fenced_by_room(epoch: int, room_epoch: int, why: str) -> None:
    rejected = refused(live(), agent.ReportAgentState(epoch, room_epoch, "joined"),
                       RejectReason.STALE_EPOCH)  # fmt: skip
    assert rejected.epoch_reason == why


def test_the_agent_of_a_lost_room_is_fenced_and_an_ended_session_says_so() -> None:
    rebound = run(live(), RoomLost("aim-s1-e1"))
    rejected = refused(rebound, agent.ReportAgentState(1, 1, "joined"), RejectReason.STALE_EPOCH)
    assert rejected.epoch_reason == "rebound"
    ended = run(rebound, End("bye"))
    rejected = refused(ended, agent.ReportAgentState(1, 1, "left"), RejectReason.STALE_EPOCH)
    assert rejected.epoch_reason == "ended"
    refused(run(live(), End("bye")), agent.ReportAgentState(1, 1, "left"),
            RejectReason.INVALID_STATE)  # fmt: skip


def test_provider_calls_need_a_session_past_provisioning() -> None:
    fresh = new_session(
        session_id="s1", task_id="t1", context_id="c1", client_session_id="cs1",
        requested=Requested((), (), ()), required_capabilities=(), transcript="off", now=T0,
    ).state  # fmt: skip
    refused(fresh, agent.ReportAgentState(1, 1, "joined"), RejectReason.INVALID_STATE)


@given(st.lists(st.sampled_from(["ask", "confirm", "cancel", "expire", "end"]), max_size=12))
def test_the_task_always_follows_its_operations(steps: list[str]) -> None:
    """INPUT_REQUIRED exactly while a live session has an operation awaiting confirmation."""
    session = live()
    count = 0
    for name in steps:
        last = f"op-{count}"
        event: object
        if name == "ask":
            count += 1
            event = ask(f"op-{count}", f"req-{count}")
        elif name == "confirm":
            event = confirm(last, f"req-{count}")
        elif name == "cancel":
            event = Resolve(command_id="c", decision="cancel", via="interaction", epoch=1,
                            operation_id=last)  # fmt: skip
        elif name == "expire":
            event = Resolve(command_id="x", decision="expire", via="timer", operation_id=last,
                            requirement_id=f"req-{count}")  # fmt: skip
        else:
            event = End("done")
        before = session.task_version
        outcome = step(session, event)
        if isinstance(outcome, Accepted):
            changed = outcome.state.task_state != session.task_state
            session = outcome.state
            if changed:
                assert session.task_version == before + 1
        waiting = any(op.state == "awaiting_confirmation" for op in session.operations)
        live_now = session.state not in ("ending", "ended", "failed")
        assert (session.task_state == INPUT_REQUIRED) == (waiting and live_now)
        if not live_now:
            assert not waiting


# --- late and stale answers ------------------------------------------------------------------


def test_an_older_media_operation_never_settles_a_source_asked_for_again() -> None:
    granted = run(live(), media_ask(op="op-a"), decide_media("allow", "op-a"))
    stopped = run(granted, UserMediaStop())
    asked_again = run(stopped, media_ask(op="op-b"))
    assert asked_again.media.user_camera == "requested"
    late_success = step(asked_again, agent.UpdateOperation(1, "op-a", "succeeded", "{}"))
    assert isinstance(late_success, Accepted)
    assert late_success.state.media.user_camera == "requested"  # still the user's to decide
    assert not late_success.has_effects
    cancel_old = Resolve(command_id="c", decision="cancel", via="interaction", epoch=1,
                         operation_id="op-a")  # fmt: skip
    assert run(asked_again, cancel_old).media.user_camera == "requested"
    assert run(asked_again, decide_media("allow", "op-b")).media.user_camera == "granted"


def UserMediaStop() -> UserMedia:  # noqa: N802 - reads like the event it builds
    return UserMedia(1, "c-stop", "camera", "stop")


def test_an_answer_after_the_requirement_expired_is_refused() -> None:
    late = Requirement(requirement_id="req-1", action_digest=DIGEST, expires_at=T0)
    session = run(live(), ask(requirement=late))
    rejected = refused(session, confirm(), RejectReason.INVALID_STATE)
    assert "expired" in rejected.detail
    cancel = Resolve(command_id="c", decision="cancel", via="interaction", epoch=1,
                     operation_id="op-1")  # fmt: skip
    assert op_state(run(session, cancel)) == "canceled"  # canceling stays possible


def test_a_rebind_cancels_the_lost_agents_operations_and_expiry_still_applies() -> None:
    session = run(live(), ask(), ask("op-2", "req-2", requirement=None))
    rebound = run(session, RoomLost("aim-s1-e1"))
    assert rebound.state == "provisioning"
    assert {op.state for op in rebound.operations} == {"canceled"}
    assert rebound.task_state == WORKING
    expire = Resolve(command_id="x", decision="expire", via="timer", operation_id="op-1",
                     requirement_id="req-1")  # fmt: skip
    refused(rebound, expire, RejectReason.INVALID_STATE)  # the operation is over, not the timer


def test_expiry_fires_while_the_session_provisions_again() -> None:
    import msgspec

    session = run(live(), ask())
    provisioning = msgspec.structs.replace(session, state="provisioning")
    expire = Resolve(command_id="x", decision="expire", via="timer", operation_id="op-1",
                     requirement_id="req-1")  # fmt: skip
    assert op_state(run(provisioning, expire)) == "expired"


def test_reporting_the_same_agent_state_changes_nothing() -> None:
    session = run(live(), agent.ReportAgentState(1, 1, "listening"))
    same = step(session, agent.ReportAgentState(1, 1, "listening"))
    assert isinstance(same, Accepted)
    assert same.state is session


def test_the_agent_leaving_ends_delivery_whatever_it_reports() -> None:
    from state_machines.session import ParticipantLeft

    gone = run(live(), ParticipantLeft(1, "agent-1", True))
    assert gone.agent_identity is None
    # the lost agent's report is refused (its generation was replaced); its replacement's
    # report, before it joined, does not make it reachable either
    refused(gone, agent.ReportAgentState(1, 1, "listening"), RejectReason.AGENT_REPLACED)
    reported = run(gone, agent.ReportAgentState(1, 1, "listening", generation=2))
    refused(reported, Deliver(1, "c", "input.text", '{"text":"hi"}'), RejectReason.INVALID_STATE)


def test_the_interaction_and_provider_tables_name_every_event() -> None:
    from typing import get_args

    from state_machines import interactions

    for table in (interactions.ALLOWED, interactions.NOTES):
        assert tuple(table) == get_args(interactions.InteractionEventName)
    for table in (agent.ALLOWED, agent.NOTES):
        assert tuple(table) == get_args(agent.ProviderEventName)


@pytest.mark.parametrize(
    "state",
    ["provisioning", "ready", "joining", "active", "reconnecting", "ending", "ended", "failed"],
)
def test_an_event_is_refused_in_every_state_its_table_leaves_out(state: str) -> None:
    import msgspec

    from state_machines import interactions

    session = msgspec.structs.replace(run(live(), ask()), state=state)
    expire = Resolve(command_id="x", decision="expire", via="timer", operation_id="op-1",
                     requirement_id="req-1")  # fmt: skip
    events: list[interactions.InteractionEvent | agent.ProviderEvent] = [
        Deliver(1, "c", "response.interrupt", "{}"),
        confirm(),
        cont(version=session.task_version),
        expire,
        agent.ReportAgentState(1, 1, "thinking"),
    ]
    for event in events:
        if isinstance(event, agent.ProviderEvent):
            allowed = agent.ALLOWED[agent.event_name(event)]
        else:
            allowed = interactions.ALLOWED[interactions.event_name(event)]
        outcome = step(session, event)
        if state in allowed:
            assert isinstance(outcome, Accepted), (state, event, outcome)
        else:
            assert isinstance(outcome, Rejected), (state, event)
            assert outcome.reason is RejectReason.INVALID_STATE


def test_the_agent_reads_only_as_the_agent_of_the_current_room_of_a_live_session() -> None:
    session = run(live(), ask())
    assert agent.read_refused(session, session.room_epoch) is None
    ahead = agent.read_refused(session, session.room_epoch + 98)
    assert ahead is not None
    assert (ahead.reason, ahead.epoch_reason) == (RejectReason.STALE_EPOCH, "ahead")
    ended = run(session, End("done"))
    gone = agent.read_refused(ended, ended.room_epoch)
    assert gone is not None
    assert gone.reason is RejectReason.INVALID_STATE
    stale = agent.read_refused(ended, ended.room_epoch + 1)
    assert stale is not None
    assert (stale.reason, stale.epoch_reason) == (RejectReason.STALE_EPOCH, "ended")
