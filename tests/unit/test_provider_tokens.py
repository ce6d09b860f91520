"""Provider tokens (realtime/provider_tokens.py): minted per session, good for nothing else."""

from __future__ import annotations

import jwt
import pytest

from realtime.auth import Authenticator
from realtime.errors import AuthError
from realtime.provider_tokens import PROVIDER_AUDIENCE, mint_provider_token, verify_provider_token
from realtime.settings import Settings, SettingsError

SECRET = "p" * 40
NOW = 1_800_000_000


def bearer(token: str) -> str:
    return f"Bearer {token}"


def test_a_minted_token_names_its_session_and_room_epoch() -> None:
    token = mint_provider_token(SECRET, session_id="s-1", epoch=3, ttl_s=60, now=NOW)
    grant = verify_provider_token(SECRET, bearer(token), now=NOW + 1, leeway=0)
    assert (grant.session_id, grant.epoch) == ("s-1", 3)


@pytest.mark.parametrize(
    ("claims", "status"),
    [
        ({"aud": "something-else"}, 401),
        ({"exp": NOW - 100}, 401),
        ({"sid": None}, 401),
        ({"scope": "a2a.invoke"}, 403),
    ],
)
def test_wrong_audience_expiry_claims_or_scope_are_refused(
    claims: dict[str, object], status: int
) -> None:
    body = {
        "iss": "aim-realtime",
        "aud": PROVIDER_AUDIENCE,
        "sid": "s-1",
        "epoch": 1,
        "scope": "aim.provider",
        "exp": NOW + 60,
    }
    body.update(claims)
    body = {key: value for key, value in body.items() if value is not None}
    token = jwt.encode(body, SECRET, algorithm="HS256")
    with pytest.raises(AuthError) as caught:
        verify_provider_token(SECRET, bearer(token), now=NOW, leeway=0)
    assert caught.value.status == status


def test_another_key_and_no_token_are_unauthenticated() -> None:
    token = mint_provider_token("q" * 40, session_id="s-1", epoch=1, ttl_s=60, now=NOW)
    for header in (bearer(token), None):
        with pytest.raises(AuthError) as caught:
            verify_provider_token(SECRET, header, now=NOW, leeway=0)
        assert caught.value.status == 401


async def test_a_provider_token_is_no_client_token() -> None:
    settings = Settings(auth_hs256_secret="c" * 40, livekit_api_secret="l" * 40)
    token = mint_provider_token(
        settings.provider_secret, session_id="s-1", epoch=1, ttl_s=60, now=NOW
    )
    with pytest.raises(AuthError) as caught:
        await Authenticator(settings, now=lambda: NOW).authenticate(bearer(token))
    assert caught.value.status == 401


def test_the_provider_key_is_shared_by_replicas_and_differs_from_every_other_key() -> None:
    one = Settings(livekit_api_secret="l" * 40)
    two = Settings(livekit_api_secret="l" * 40)
    assert one.provider_secret == two.provider_secret
    assert one.provider_secret not in ("l" * 40, one.auth_hs256_secret)
    assert Settings(provider_token_secret=SECRET).provider_secret == SECRET


def test_a_short_provider_secret_is_a_configuration_error_that_hides_the_value() -> None:
    with pytest.raises(SettingsError) as caught:
        Settings.from_env({"AIM_PROVIDER_TOKEN_SECRET": "short-secret-value"})
    assert "AIM_PROVIDER_TOKEN_SECRET" in str(caught.value)
    assert "short-secret-value" not in str(caught.value)
