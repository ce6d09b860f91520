"""Media source lifecycles (state_machines/media.py): the table, rejections, publish sources."""

from __future__ import annotations

from itertools import product
from typing import get_args

import msgspec
import pytest
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from state_machines import Accepted, Rejected
from state_machines.effects import CAMERA, MICROPHONE, SCREEN_SHARE, SCREEN_SHARE_AUDIO
from state_machines.media import (
    TRANSITIONS,
    MediaEvent,
    MediaSide,
    MediaSource,
    MediaSources,
    SourceState,
    allowed_events,
    decide,
    publish_sources,
)
from tests.unit.machine_table_helpers import by_state, refused_in, table_pairs

SIDES: tuple[MediaSide, ...] = get_args(MediaSide)
SOURCES: tuple[MediaSource, ...] = get_args(MediaSource)
SLOTS = list(product(SIDES, SOURCES))
AFTER_REQUEST: tuple[SourceState, ...] = ("requested", "granted", "preparing", "live", "stopped")

# the lifecycle written out by hand, so a change to the table shows up as a failing test
EXPECTED: dict[tuple[SourceState, MediaEvent], SourceState] = {
    **by_state(
        {
            "off": {"request": "requested"},
            "stopped": {"request": "requested"},
            "revoked": {"request": "requested"},
            "requested": {"grant": "granted", "deny": "off"},
            "granted": {"prepare": "preparing", "published": "live", "stop": "stopped"},
            "preparing": {"published": "live", "stop": "stopped"},
            "live": {"unpublished": "stopped", "stop": "stopped"},
        }
    ),
    **{(state, "revoke"): "revoked" for state in AFTER_REQUEST},
}
STATES: tuple[SourceState, ...] = get_args(SourceState)
EVENTS: tuple[MediaEvent, ...] = get_args(MediaEvent)
ACCEPTED_PAIRS, REJECTED_PAIRS = table_pairs(STATES, EVENTS, EXPECTED)


def test_the_table_is_the_documented_lifecycle() -> None:
    assert dict(TRANSITIONS) == EXPECTED


def test_every_source_starts_off() -> None:
    fresh = MediaSources()

    assert [fresh.get(side, source) for side, source in SLOTS] == ["off"] * 4


@pytest.mark.parametrize(("side", "source"), SLOTS)
def test_with_state_moves_exactly_one_source(side: MediaSide, source: MediaSource) -> None:
    moved = MediaSources().with_state(side, source, "live")

    assert moved.get(side, source) == "live"
    assert msgspec.structs.asdict(moved) == {
        f"{s}_{o}": "live" if (s, o) == (side, source) else "off" for s, o in SLOTS
    }


@pytest.mark.parametrize(("side", "source"), SLOTS)
@pytest.mark.parametrize(("state", "event"), ACCEPTED_PAIRS)
def test_an_accepted_event_moves_only_its_source(
    side: MediaSide, source: MediaSource, state: SourceState, event: MediaEvent
) -> None:
    before = MediaSources().with_state(side, source, state)

    outcome = decide(before, side, source, event)

    assert outcome == Accepted(MediaSources().with_state(side, source, EXPECTED[state, event]))


@pytest.mark.parametrize(("state", "event"), REJECTED_PAIRS)
def test_an_event_outside_the_table_is_rejected_with_the_allowed_events(
    state: SourceState, event: MediaEvent
) -> None:
    outcome = decide(MediaSources(user_screen=state), "user", "screen", event)

    outcome = refused_in(outcome, state)
    assert set(outcome.allowed) == {e for (s, e) in EXPECTED if s == state}
    assert outcome.detail == f"the user screen is {state}: `{event}` does not apply"


@pytest.mark.parametrize("state", STATES)
def test_allowed_events_lists_what_the_state_accepts_in_table_order(state: SourceState) -> None:
    assert allowed_events(state) == tuple(e for (s, e) in TRANSITIONS if s == state)


def test_revoke_needs_a_new_request_to_restart() -> None:
    assert allowed_events("revoked") == ("request",)


def test_a_denied_request_goes_back_to_off() -> None:
    assert decide(MediaSources(agent_camera="requested"), "agent", "camera", "deny") == Accepted(
        MediaSources()
    )


@pytest.mark.parametrize(
    ("camera", "screen", "audio_input", "expected"),
    [
        ("off", "off", False, ()),
        ("off", "off", True, (MICROPHONE,)),
        ("granted", "off", True, (MICROPHONE, CAMERA)),
        ("preparing", "off", False, (CAMERA,)),
        ("live", "live", True, (MICROPHONE, CAMERA, SCREEN_SHARE, SCREEN_SHARE_AUDIO)),
        ("requested", "granted", False, (SCREEN_SHARE, SCREEN_SHARE_AUDIO)),
        ("stopped", "preparing", True, (MICROPHONE, SCREEN_SHARE, SCREEN_SHARE_AUDIO)),
        ("revoked", "stopped", True, (MICROPHONE,)),
        ("revoked", "revoked", False, ()),
    ],
)
def test_publish_sources_follow_the_user_sources(
    camera: SourceState, screen: SourceState, audio_input: bool, expected: tuple[str, ...]
) -> None:
    sources = MediaSources(user_camera=camera, user_screen=screen)

    assert publish_sources(sources, audio_input=audio_input) == expected


def test_publish_sources_use_livekits_exact_names() -> None:
    everything = MediaSources(user_camera="live", user_screen="live")

    assert publish_sources(everything, audio_input=True) == (
        "microphone",
        "camera",
        "screen_share",
        "screen_share_audio",
    )


def test_the_agent_sources_never_open_the_users_permissions() -> None:
    agent_live = MediaSources(agent_camera="live", agent_screen="live")

    assert publish_sources(agent_live, audio_input=False) == ()


def test_media_sources_round_trip_through_msgspec() -> None:
    sources = MediaSources(user_camera="live", agent_screen="revoked")

    assert msgspec.json.decode(msgspec.json.encode(sources), type=MediaSources) == sources


class MediaLifecycle(RuleBasedStateMachine):
    """Random events on random sources against the media table."""

    sources: MediaSources
    # per source: granted since its last request (so `live` can be traced back to a grant)
    granted: dict[tuple[MediaSide, MediaSource], bool]

    @initialize()
    def start(self) -> None:
        self.sources = MediaSources()
        self.granted = dict.fromkeys(SLOTS, False)

    @rule(
        side=st.sampled_from(SIDES),
        source=st.sampled_from(SOURCES),
        event=st.sampled_from(EVENTS),
    )
    def apply(self, side: MediaSide, source: MediaSource, event: MediaEvent) -> None:
        before = self.sources
        state = before.get(side, source)
        outcome = decide(before, side, source, event)
        if isinstance(outcome, Rejected):
            assert self.sources is before  # a rejection leaves every source unchanged
            assert (state, event) not in EXPECTED
            assert outcome.state == state
            return
        after = outcome.state
        assert after.get(side, source) == EXPECTED[state, event]
        for other in SLOTS:
            if other != (side, source):
                assert after.get(*other) == before.get(*other)
        if event == "request":
            self.granted[side, source] = False
        elif event == "grant":
            self.granted[side, source] = True
        self.sources = after

    @invariant()
    def live_implies_granted(self) -> None:
        for side, source in SLOTS:
            if self.sources.get(side, source) in ("granted", "preparing", "live"):
                assert self.granted[side, source]

    @invariant()
    def stopped_and_revoked_sources_are_never_published(self) -> None:
        published = publish_sources(self.sources, audio_input=True)
        assert published[0] == MICROPHONE
        if self.sources.user_camera in ("stopped", "revoked", "off", "requested"):
            assert CAMERA not in published
        else:
            assert CAMERA in published
        screen_published = SCREEN_SHARE in published
        assert screen_published is (SCREEN_SHARE_AUDIO in published)
        if self.sources.user_screen in ("stopped", "revoked", "off", "requested"):
            assert not screen_published
        else:
            assert screen_published

    @invariant()
    def allowed_events_are_exactly_the_accepted_ones(self) -> None:
        for side, source in SLOTS:
            state = self.sources.get(side, source)
            for event in EVENTS:
                accepted = isinstance(decide(self.sources, side, source, event), Accepted)
                assert accepted is (event in allowed_events(state))


MediaLifecycle.TestCase.settings = hypothesis_settings(max_examples=200, stateful_step_count=30)
test_media_lifecycle_invariants = MediaLifecycle.TestCase
