"""What the Python client does with the service's 401s (a real service, real HTTP): an expired
token makes it ask the app's token function again and send the call again, once; a token the
service can never accept is raised at once as `AuthMisconfiguredError`, without asking again."""

from __future__ import annotations

import time

import pytest
from opentelemetry.sdk.trace import TracerProvider

from aim_realtime_client import AimClient, AuthError, AuthMisconfiguredError, TokenExpiredError
from realtime.app import create_app
from realtime.auth import mint_dev_token
from realtime.settings import Settings
from realtime.store.redis_client import RedisClient
from tests.conftest import ALL_SCOPES, TEST_SECRET, serving

pytestmark = pytest.mark.e2e

OTHER_SECRET = "another-secret-0123456789-abcdefghijklmnop"


def minted(*, secret: str = TEST_SECRET, age_s: int = 0) -> str:
    """A token of alice's, issued `age_s` ago, valid for 60 s from then."""
    issued = time.time() - age_s
    return mint_dev_token(secret, subject="alice", scopes=ALL_SCOPES, ttl_s=60, now=issued)


class TokenSource:
    """The app's token function: hands out `tokens` in turn (the last one again when they run
    out), counting how often it was asked."""

    def __init__(self, *tokens: str) -> None:
        self.tokens = list(tokens)
        self.asked = 0

    def __call__(self) -> str:
        self.asked += 1
        return self.tokens[min(self.asked, len(self.tokens)) - 1]


async def test_the_client_refreshes_an_expired_token_once_and_names_the_rest(
    settings: Settings, store: RedisClient, tracer_provider: TracerProvider
) -> None:
    app = create_app(settings, store=store, tracer_provider=tracer_provider)
    async with serving(app) as base:
        # expired in the app's hands: the service says so, the client asks for a new one
        refreshing = TokenSource(minted(age_s=3600), minted())
        async with AimClient(base, token=refreshing) as client:
            assert (await client.call("ListTasks", {}))["tasks"] == []
        assert refreshing.asked == 2

        # the function keeps handing out expired tokens: asked once more, then raised
        stale = TokenSource(minted(age_s=3600))
        async with AimClient(base, token=stale) as client:
            with pytest.raises(TokenExpiredError) as expired:
                await client.call("ListTasks", {})
        assert (expired.value.auth_reason, expired.value.http_status) == ("token_expired", 401)
        assert stale.asked == 2

        # signed with a key the service does not hold: no new token can help
        foreign = TokenSource(minted(secret=OTHER_SECRET))
        async with AimClient(base, token=foreign) as client:
            with pytest.raises(AuthMisconfiguredError) as wrong:
                await client.call("ListTasks", {})
        assert (wrong.value.auth_reason, wrong.value.code) == ("invalid_signature", -31401)
        assert foreign.asked == 1

        # no token at all: an AuthError that says so, neither expired nor misconfigured
        empty = TokenSource("")
        async with AimClient(base, token=empty) as client:
            with pytest.raises(AuthError) as missing:
                await client.call("ListTasks", {})
        assert type(missing.value) is AuthError
        assert missing.value.auth_reason == "missing_token"
        assert empty.asked == 1
