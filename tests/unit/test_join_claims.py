"""Join-token claims are exactly what livekit-api's `Claims.asdict()` gives for the same grants
(`claims_dict` only skips its deep copy), for any endpoint, room and sources."""

from __future__ import annotations

from datetime import timedelta

from hypothesis import given
from hypothesis import strategies as st
from livekit import api

from realtime.livekit_adapter.api import SOURCE_NAMES
from realtime.livekit_adapter.tokens import claims_dict

texts = st.text(max_size=40)


@given(
    identity=texts,
    name=texts,
    metadata=texts,
    room=texts,
    can_subscribe=st.booleans(),
    sources=st.lists(st.sampled_from(sorted(SOURCE_NAMES)), unique=True),
    kind=st.sampled_from([None, "standard", "agent"]),
)
def test_claims_are_livekits_own(identity, name, metadata, room, can_subscribe, sources, kind):
    token = (
        api.AccessToken("key", "s" * 40)
        .with_identity(identity)
        .with_name(name)
        .with_metadata(metadata)
        .with_ttl(timedelta(seconds=600))
        .with_grants(
            api.VideoGrants(
                room_join=True,
                room=room,
                can_subscribe=can_subscribe,
                can_publish=bool(sources),
                can_publish_sources=sources,
                can_publish_data=False,
            )
        )
    )
    if kind is not None:
        token = token.with_kind(kind)
    assert claims_dict(token.claims) == token.claims.asdict()


def test_claims_with_a_room_configuration_take_livekits_path() -> None:
    token = api.AccessToken("key", "s" * 40).with_room_config(api.RoomConfiguration(name="r"))
    assert claims_dict(token.claims) == token.claims.asdict()
