"""The JWKS fetch takes the key set from the configured URL only: a redirect is a failed fetch
(the keys held stay, none come from the redirect's target), and an answer too large to be a key
set is refused unread."""

from __future__ import annotations

import logging

import pytest

from realtime.errors import AuthError
from realtime.jwks import MAX_JWKS_BYTES, JwksKeys
from tests.jwks_server import Clock, jwk, jwks_server, rsa_key


@pytest.mark.parametrize("status", [301, 302, 303, 307, 308])
async def test_a_redirect_is_a_failed_fetch_and_its_target_is_never_asked(
    status: int, caplog: pytest.LogCaptureFixture
) -> None:
    with jwks_server([jwk(rsa_key(), "k")]) as target, jwks_server([]) as configured:
        configured.redirect = (status, target.url)
        keys = JwksKeys(configured.url, Clock(), max_age_s=300)
        with (
            caplog.at_level(logging.WARNING, "realtime.jwks"),
            pytest.raises(AuthError, match="could not be fetched"),
        ):
            await keys.key("k", "RS256")
        await keys.aclose()

    assert keys.fetches == {"ok": 0, "failed": 1}
    assert (configured.requests, target.requests) == (1, 0)
    assert f"the JWKS URL answered a redirect ({status}), which is not followed" in caplog.text


async def test_an_answer_larger_than_a_key_set_is_refused() -> None:
    key = jwk(rsa_key(), "k")
    padding = [{**key, "kid": f"pad-{n}"} for n in range(MAX_JWKS_BYTES // len(str(key)) + 1)]
    with jwks_server([key, *padding]) as server:
        keys = JwksKeys(server.url, Clock(), max_age_s=300)
        with pytest.raises(AuthError, match="could not be fetched"):
            await keys.key("k", "RS256")
        server.keys = [key]
        keys_again = JwksKeys(server.url, Clock(), max_age_s=300)
        assert (await keys_again.key("k", "RS256")).key_id == "k"
    assert keys.fetches == {"ok": 0, "failed": 1}
