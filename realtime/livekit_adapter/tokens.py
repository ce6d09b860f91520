"""Join tokens (profile §9): the claims of an endpoint's token, built with livekit-api's grant
types, and their signature. The profile stores claims, never tokens: signing the same claims
again gives the byte-identical JWT, so a replayed JoinSession carries the token it first did."""

from __future__ import annotations

import base64
import dataclasses
import functools
import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import jwt
from livekit import api
from livekit.api.access_token import Claims, snake_to_lower_camel

from realtime.livekit_adapter.api import SOURCE_NAMES, LiveKitNotConfigured
from realtime.settings import Settings
from state_machines import MintJoinToken


@dataclass(frozen=True, slots=True)
class JoinMedia:
    """What an endpoint needs to join its session's room: where, as whom, and the claims of
    its token (signed by `sign_join_token` into every reply, as outcomes keep claims only)."""

    url: str  # the LiveKit URL clients connect to (AIM_LIVEKIT_PUBLIC_URL)
    room: str
    identity: str
    expires_at_ms: int
    claims: dict[str, Any]


def issue_join(
    settings: Settings, mint: MintJoinToken, *, name: str, session_id: str, now_ms: int
) -> JoinMedia:
    """The join token the core asked for, as claims."""
    claims = join_token_claims(
        settings,
        room=mint.room,
        identity=mint.identity,
        name=name,
        epoch=mint.epoch,
        session_id=session_id,
        can_subscribe=mint.can_subscribe,
        publish_sources=mint.publish_sources,
        now=now_ms // 1000,
    )
    return JoinMedia(
        url=settings.livekit_public_url or "",
        room=mint.room,
        identity=mint.identity,
        expires_at_ms=int(claims["exp"]) * 1000,
        claims=claims,
    )


def join_token_claims(
    settings: Settings,
    *,
    room: str,
    identity: str,
    name: str,
    epoch: int,
    session_id: str,
    can_subscribe: bool,
    publish_sources: Sequence[str],
    now: int,
) -> dict[str, Any]:
    """The claims of an endpoint's join token, built with livekit-api's grant types (§9)."""
    if settings.livekit_api_key is None:
        raise LiveKitNotConfigured("AIM_LIVEKIT_API_KEY is not set")
    unknown = [source for source in publish_sources if source not in SOURCE_NAMES]
    if unknown:  # an unknown source name silently allows nothing in LiveKit
        raise ValueError(f"unknown LiveKit track sources: {unknown}")
    grants = api.VideoGrants(
        room_join=True,
        room=room,
        can_subscribe=can_subscribe,
        can_publish=bool(publish_sources),
        can_publish_sources=list(publish_sources),
        can_publish_data=False,
        can_update_own_metadata=False,
    )
    token = (
        api.AccessToken(settings.livekit_api_key, settings.livekit_api_secret)
        .with_identity(identity)
        .with_name(name)
        .with_metadata(
            json.dumps(
                {"sessionId": session_id, "endpointId": identity, "sessionEpoch": epoch},
                separators=(",", ":"),
            )
        )
        .with_ttl(timedelta(seconds=settings.join_token_ttl_s))
        .with_grants(grants)
    )
    claims = claims_dict(token.claims)
    claims.update(
        {
            "sub": identity,
            "iss": settings.livekit_api_key,
            "nbf": now,
            "exp": now + settings.join_token_ttl_s,
        }
    )
    return claims


def claims_dict(grants: Claims) -> dict[str, Any]:
    """`grants.asdict()` (livekit-api's JWT claims: camelCase names, None and "" left out) without
    the deep copy `dataclasses.asdict` makes, which cost ~50 µs of each join. A token with a room
    configuration (a protobuf message) takes livekit-api's own path."""
    if grants.room_config:
        full: dict[str, Any] = grants.asdict()
        return full
    return _shallow(grants)


def _shallow(value: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    kind: Any = type(value)
    for name, key in _camel_fields(kind):
        item = getattr(value, name)
        if item is None or item == "":
            continue
        if dataclasses.is_dataclass(item):
            item = _shallow(item)
        elif isinstance(item, list):
            item = list(item)
        elif isinstance(item, dict):
            item = dict(item)
        out[key] = item
    return out


@functools.cache
def _camel_fields(cls: Any) -> tuple[tuple[str, str], ...]:
    return tuple(
        (field.name, snake_to_lower_camel(field.name)) for field in dataclasses.fields(cls)
    )


def sign_join_token(settings: Settings, claims: dict[str, Any]) -> str:
    """Deterministic: the same claims always give the byte-identical JWT (replays rely on it)."""
    if settings.livekit_api_secret is None:
        raise LiveKitNotConfigured("AIM_LIVEKIT_API_SECRET is not set")
    return jwt.encode(claims, _signing_key(settings.livekit_api_secret), algorithm="HS256")


@functools.lru_cache(maxsize=4)
def _signing_key(secret: str) -> jwt.PyJWK:
    """The secret as a prepared HS256 key, made once (PyJWT checks and prepares a string key
    on every `encode`); the same token as signing with the string."""
    encoded = base64.urlsafe_b64encode(secret.encode()).rstrip(b"=").decode()
    return jwt.PyJWK({"kty": "oct", "k": encoded}, algorithm="HS256")
