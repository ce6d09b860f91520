"""Interactions and user media consent in the pure core (state_machines/interactions.py and
interaction_media.py, through `state_machines.decide`)."""

from __future__ import annotations

import json

import pytest

from state_machines import Accepted, Rejected, RejectReason, SendData, UpdatePermissions, decide
from state_machines.endpoint import Capabilities
from state_machines.interactions import Deliver, TrackChanged, UserMedia
from state_machines.session import (
    GraceExpired,
    ParticipantJoined,
    ParticipantLeft,
    Session,
)
from tests.unit import session_operation_helpers as helpers
from tests.unit.session_operation_helpers import run

T0 = "2026-01-01T00:00:00.000Z"
T1 = "2026-01-01T00:00:01.000Z"
CAPS = Capabilities(True, True, True, False, ("text",))


def live(*, interactions: tuple[str, ...] = ("text",), agent: bool = True) -> Session:
    """A live session whose user may send camera and screen, the agent nothing."""
    return helpers.live(interactions=interactions, caps=CAPS, agent_joined=agent, agent_sources=())


def accepted(session: Session, event: object) -> Accepted[Session]:
    outcome = decide(session, event, now=T1)  # type: ignore[arg-type]
    assert isinstance(outcome, Accepted), outcome
    return outcome


def refused(session: Session, event: object, reason: RejectReason) -> Rejected:
    outcome = decide(session, event, now=T1)  # type: ignore[arg-type]
    assert isinstance(outcome, Rejected), outcome
    assert outcome.reason is reason
    return outcome


def test_text_goes_to_the_agent_with_command_id_and_epoch() -> None:
    outcome = accepted(live(), Deliver(1, "cmd-1", "input.text", '{"text":"hi"}'))
    (effect,) = outcome.outbox
    assert isinstance(effect, SendData)
    assert effect.destination == ("agent-1",)
    assert json.loads(effect.body) == {
        "type": "input.text",
        "commandId": "cmd-1",
        "sessionEpoch": 1,
        "payload": {"text": "hi"},
    }
    assert outcome.state.updated_at == T1


def test_before_the_agent_joined_a_message_for_it_is_refused() -> None:
    refusal = refused(
        live(agent=False), Deliver(1, "c", "response.interrupt", "{}"), RejectReason.INVALID_STATE
    )
    assert "agent is not in the room" in refusal.detail


def test_a_reconnecting_device_gets_the_permission_its_grants_allow() -> None:
    session = accepted(live(), UserMedia(1, "c", "camera", "request")).state
    session = run(session, ParticipantLeft(1, "ep-a", False))
    revoked = accepted(session, UserMedia(1, "c2", "camera", "revoke")).state
    back = decide(revoked, ParticipantJoined(1, "ep-a", False), now=T1)
    assert isinstance(back, Accepted)
    assert back.outbox == (UpdatePermissions("aim-s1-e1", "ep-a", True, ("microphone",)),)


def test_grants_reach_only_devices_that_offer_the_source() -> None:
    from state_machines.session_model import device_sources

    session = accepted(live(), UserMedia(1, "c", "camera", "request")).state
    no_camera = Capabilities(True, True, False, False, ("text",))
    assert device_sources(session, no_camera) == ("microphone",)
    assert device_sources(session, CAPS) == ("microphone", "camera")


def test_a_class_not_requested_or_not_offered_is_unavailable() -> None:
    refusal = refused(
        live(), Deliver(1, "c", "visual.select", "{}"), RejectReason.CAPABILITY_UNAVAILABLE
    )
    assert refusal.missing == ("pointer",)
    no_text = live(interactions=())
    refused(no_text, Deliver(1, "c", "input.text", "{}"), RejectReason.CAPABILITY_UNAVAILABLE)


def test_interactions_need_an_active_endpoint_and_the_current_epoch() -> None:
    session = live()
    refused(session, Deliver(2, "c", "input.text", "{}"), RejectReason.STALE_EPOCH)
    idle = run(live(), ParticipantLeft(1, "ep-a", False), GraceExpired(1, "ep-a"))
    refused(idle, Deliver(1, "c", "input.text", "{}"), RejectReason.INVALID_STATE)


def test_camera_request_grants_and_updates_the_full_permission_set() -> None:
    outcome = accepted(live(), UserMedia(1, "c", "camera", "request"))
    assert outcome.state.media.user_camera == "granted"
    (permission,) = outcome.outbox
    assert permission == UpdatePermissions("aim-s1-e1", "ep-a", True, ("microphone", "camera"))


def test_screen_not_offered_by_the_device_is_unavailable() -> None:
    refusal = refused(
        live(), UserMedia(1, "c", "screen", "request"), RejectReason.CAPABILITY_UNAVAILABLE
    )
    assert refusal.missing == ("screen",)


def test_published_track_makes_the_source_live_and_revoke_removes_the_permission() -> None:
    session = accepted(live(), UserMedia(1, "c", "camera", "request")).state
    prepared = accepted(session, UserMedia(1, "c2", "camera", "prepare"))
    assert not prepared.has_effects  # the permission does not change
    live_now = accepted(prepared.state, TrackChanged(1, "ep-a", "camera", True)).state
    assert live_now.media.user_camera == "live"
    stopped = accepted(live_now, TrackChanged(1, "ep-a", "camera", False)).state
    assert stopped.media.user_camera == "stopped"
    revoked = accepted(stopped, UserMedia(1, "c3", "camera", "revoke"))
    assert revoked.state.media.user_camera == "revoked"
    assert not revoked.has_effects  # stopped already dropped camera from the permission


def test_revoking_a_live_source_removes_it_live() -> None:
    session = accepted(live(), UserMedia(1, "c", "camera", "request")).state
    session = accepted(session, TrackChanged(1, "ep-a", "camera", True)).state
    revoked = accepted(session, UserMedia(1, "c2", "camera", "revoke"))
    assert revoked.outbox == (UpdatePermissions("aim-s1-e1", "ep-a", True, ("microphone",)),)


def test_a_media_step_out_of_order_is_invalid() -> None:
    refusal = refused(live(), UserMedia(1, "c", "camera", "prepare"), RejectReason.INVALID_STATE)
    assert refusal.state == "off"
    assert refusal.current_epoch == 1


@pytest.mark.parametrize(
    "event",
    [
        TrackChanged(1, "ep-other", "camera", True),
        TrackChanged(2, "ep-a", "camera", True),
        TrackChanged(1, "ep-a", "microphone", True),
    ],
)
def test_tracks_of_others_other_epochs_or_audio_are_fenced(event: TrackChanged) -> None:
    refused(live(), event, RejectReason.INVALID_STATE)


def test_a_track_out_of_order_is_invalid() -> None:
    refused(live(), TrackChanged(1, "ep-a", "camera", False), RejectReason.INVALID_STATE)


def test_media_without_an_active_endpoint_record_changes_no_permission() -> None:
    session = accepted(live(), UserMedia(1, "c", "camera", "request")).state
    orphan = session.__class__(
        **{**{f: getattr(session, f) for f in session.__struct_fields__}, "endpoints": ()}
    )
    outcome = accepted(orphan, TrackChanged(1, "ep-a", "camera", True))
    assert not outcome.has_effects


def test_a_grace_timer_of_an_earlier_drop_is_stale() -> None:
    session = run(live(), ParticipantLeft(1, "ep-a", False))
    first_drop = session.disconnects
    session = run(session, ParticipantJoined(1, "ep-a", False), ParticipantLeft(1, "ep-a", False))
    stale = decide(session, GraceExpired(1, "ep-a", first_drop), now=T1)
    assert isinstance(stale, Rejected)
    current = decide(session, GraceExpired(1, "ep-a", session.disconnects), now=T1)
    assert isinstance(current, Accepted)
    assert current.state.state == "ready"
