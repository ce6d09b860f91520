"""JWKS key rotation against a real JWKS endpoint on 127.0.0.1 (profile §2): a key removed
from the set stops verifying within `VERIFIED_TTL_S`, whatever the refresh throttle did; held
keys survive an issuer outage; only a real change of a kid's key forgets the tokens verified
with it, so forged tokens naming unknown kids cannot flush the verified-token cache; and every
fetch is counted, by outcome, in `aim.auth.jwks.fetches`."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from prometheus_client.parser import text_string_to_metric_families

from realtime.auth import VERIFIED_TTL_S, Authenticator
from realtime.errors import AuthError
from realtime.metrics import Metrics, PrometheusScrape
from tests.jwks_server import (
    NOW,
    Clock,
    CountingDecode,
    JwksServer,
    PrivateKey,
    ec_key,
    jwk,
    jwks_authenticator,
    jwks_server,
    rsa_key,
    signed,
)

THROTTLE_S = 30.0


@pytest.fixture(scope="module")
def keys() -> dict[str, PrivateKey]:
    """Kid a's key, the key that replaces it, kid b's key, and a forger's key."""
    return {"a": rsa_key(), "a2": rsa_key(), "b": ec_key(), "forger": rsa_key()}


@pytest.fixture
def server(keys: dict[str, PrivateKey]) -> Iterator[JwksServer]:
    with jwks_server([jwk(keys["a"], "a"), jwk(keys["b"], "b")]) as endpoint:
        yield endpoint


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
async def auth(server: JwksServer, clock: Clock) -> AsyncIterator[Authenticator]:
    """An authenticator of the server's key set, on the test's clock; closed afterwards."""
    authenticator = jwks_authenticator(server, clock)
    yield authenticator
    await authenticator.aclose()


@pytest.fixture
def good(keys: dict[str, PrivateKey]) -> str:
    """A token of kid a, whose key the server holds at first."""
    return signed(keys["a"], "a")


async def refused(auth: Authenticator, header: str) -> AuthError:
    with pytest.raises(AuthError) as info:
        await auth.authenticate(header)
    assert (info.value.status, info.value.reason) == (401, "invalid_token")
    return info.value


# --- 6: a removed key stops working within the TTL -------------------------------------------


async def test_a_removed_key_is_refused_from_the_ttl_on(
    server: JwksServer, keys: dict[str, PrivateKey], auth: Authenticator, clock: Clock, good: str
) -> None:
    assert (await auth.authenticate(good)).subject == "alice"
    server.keys = [jwk(keys["b"], "b")]  # kid a removed at T = NOW
    clock.t = NOW + VERIFIED_TTL_S - 1
    assert (await auth.authenticate(good)).subject == "alice"
    assert server.requests == 1
    for t in (NOW + VERIFIED_TTL_S, NOW + VERIFIED_TTL_S + 1, NOW + VERIFIED_TTL_S + 45):
        clock.t = t
        assert "kid" in (await refused(auth, good)).message
    assert server.requests == 3  # refetched once the keys were a TTL old, then throttled


async def test_a_token_first_verified_late_is_bound_by_the_age_of_its_key_set(
    server: JwksServer, keys: dict[str, PrivateKey], auth: Authenticator, clock: Clock
) -> None:
    # the key set is fetched at NOW, kid a removed at T = NOW + 1; a token of kid a first seen
    # at NOW + 250 is verified with the keys held (250 s old), and must not live 300 s from then
    await auth.authenticate(signed(keys["b"], "b"))
    clock.t = NOW + 1
    server.keys = [jwk(keys["b"], "b")]
    late = signed(keys["a"], "a")
    clock.t = NOW + 250
    assert (await auth.authenticate(late)).subject == "alice"
    clock.t = NOW + VERIFIED_TTL_S - 0.5
    assert (await auth.authenticate(late)).subject == "alice"
    for t in (NOW + 1 + VERIFIED_TTL_S, NOW + 1 + VERIFIED_TTL_S + THROTTLE_S / 2):
        clock.t = t
        await refused(auth, late)
    assert server.requests == 2


async def test_a_refresh_just_before_the_removal_bounds_the_token_by_that_refresh(
    server: JwksServer, keys: dict[str, PrivateKey], auth: Authenticator, clock: Clock, good: str
) -> None:
    await auth.authenticate(good)  # fetch 1, at NOW
    clock.t = NOW + 290
    await refused(auth, signed(keys["forger"], "unknown"))  # fetch 2: kid a still there
    clock.t = removed = NOW + 295
    server.keys = [jwk(keys["b"], "b")]
    clock.t = NOW + 301  # verified again, with the keys of NOW + 290 (throttle: no refetch)
    assert (await auth.authenticate(good)).subject == "alice"
    clock.t = NOW + 290 + VERIFIED_TTL_S - 1
    assert (await auth.authenticate(good)).subject == "alice"
    assert server.requests == 2
    for t in (NOW + 290 + VERIFIED_TTL_S, removed + VERIFIED_TTL_S, removed + 400):
        clock.t = t
        await refused(auth, good)


async def test_a_call_while_the_refresh_is_in_flight_waits_for_it(
    server: JwksServer, keys: dict[str, PrivateKey], auth: Authenticator, clock: Clock, good: str
) -> None:
    await auth.authenticate(good)
    server.keys = [jwk(keys["b"], "b")]
    clock.t = NOW + VERIFIED_TTL_S
    server.gate.clear()  # the refresh hangs until released
    server.arrived.clear()
    first = asyncio.create_task(auth.authenticate(good))
    assert await asyncio.to_thread(server.arrived.wait, 5)
    second = asyncio.create_task(auth.authenticate(good))
    await asyncio.sleep(0.2)
    assert not second.done()  # not answered with the stale key while the refresh is out
    server.gate.set()
    results = await asyncio.gather(first, second, return_exceptions=True)
    assert all(isinstance(result, AuthError) for result in results), results
    assert server.requests == 2


async def test_while_the_issuer_is_down_the_keys_held_keep_working(
    server: JwksServer, keys: dict[str, PrivateKey], auth: Authenticator, clock: Clock, good: str
) -> None:
    await auth.authenticate(good)
    server.down = True
    server.keys = [jwk(keys["b"], "b")]  # the removal cannot be seen while the issuer is down
    clock.t = NOW + VERIFIED_TTL_S
    assert (await auth.authenticate(good)).subject == "alice"
    assert (await auth.authenticate(signed(keys["a"], "a", jti="new"))).subject == "alice"
    clock.t += THROTTLE_S + 1
    assert (await auth.authenticate(good)).subject == "alice"
    assert auth.jwks_fetches() == {"ok": 1, "failed": 2}
    server.down = False  # back: the next fetch shows the removal
    clock.t += THROTTLE_S + 1
    await refused(auth, good)
    assert auth.jwks_fetches() == {"ok": 2, "failed": 2}
    assert server.requests == 4


# --- 7: forged tokens cannot flush the cache; a rotation forgets its own kid's tokens ----------


async def test_forged_tokens_with_unknown_kids_leave_a_cached_token_cached(
    server: JwksServer,
    keys: dict[str, PrivateKey],
    auth: Authenticator,
    clock: Clock,
    good: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    decodes = CountingDecode(monkeypatch)
    await auth.authenticate(good)
    windows = 9  # 9 throttle windows: well within the TTL of the good token
    for window in range(windows):
        clock.t += THROTTLE_S + 1
        for n in range(5):
            forged = signed(keys["forger"], f"forged-{window}-{n}")
            assert "kid" in (await refused(auth, forged)).message
            assert (await auth.authenticate(good)).subject == "alice"
    assert decodes.calls == 1  # the good token was never verified again
    assert server.requests == 1 + windows  # each window fetched once
    assert auth.jwks_fetches() == {"ok": 1 + windows, "failed": 0}


async def test_a_rotated_key_forgets_only_the_tokens_of_its_kid(
    server: JwksServer,
    keys: dict[str, PrivateKey],
    auth: Authenticator,
    clock: Clock,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    decodes = CountingDecode(monkeypatch)
    token_a, token_b = signed(keys["a"], "a"), signed(keys["b"], "b")
    await auth.authenticate(token_a)
    await auth.authenticate(token_b)
    assert decodes.calls == 2
    server.keys = [jwk(keys["a2"], "a"), jwk(keys["b"], "b")]  # kid a gets new material
    clock.t += THROTTLE_S + 1
    await refused(auth, signed(keys["forger"], "unknown"))  # makes the fetch that shows it
    assert server.requests == 2
    assert (await auth.authenticate(token_b)).subject == "alice"
    assert decodes.calls == 2  # kid b's token stayed cached
    assert "signature" in (await refused(auth, token_a)).message
    assert decodes.calls == 3
    assert (await auth.authenticate(signed(keys["a2"], "a"))).subject == "alice"
    # kid b removed: its cached token goes at the fetch that shows it
    server.keys = [jwk(keys["a2"], "a")]
    clock.t += THROTTLE_S + 1
    await refused(auth, signed(keys["forger"], "unknown-2"))
    assert "kid" in (await refused(auth, token_b)).message


async def test_an_empty_key_set_is_an_answer_that_removes_every_key(
    server: JwksServer, auth: Authenticator, clock: Clock, good: str
) -> None:
    await auth.authenticate(good)
    server.keys = []
    clock.t += VERIFIED_TTL_S
    assert "kid" in (await refused(auth, good)).message
    assert auth.jwks_fetches() == {"ok": 2, "failed": 0}


async def test_jwks_fetches_are_exposed_by_outcome_in_the_prometheus_format(
    server: JwksServer, keys: dict[str, PrivateKey], auth: Authenticator, clock: Clock
) -> None:
    scrape = PrometheusScrape()
    provider = MeterProvider(metric_readers=[scrape.reader])
    metrics = Metrics(provider, scrape=scrape)
    metrics.count_jwks_fetches(auth.jwks_fetches)

    def fetches() -> dict[str, float]:
        return {
            sample.labels["outcome"]: sample.value
            for family in text_string_to_metric_families(scrape.render().decode())
            for sample in family.samples
            if sample.name == "aim_auth_jwks_fetches_total"
        }

    try:
        await auth.authenticate(signed(keys["a"], "a"))
        assert fetches() == {"ok": 1, "failed": 0}
        server.down = True
        clock.t += THROTTLE_S + 1
        await refused(auth, signed(keys["forger"], "unknown"))
        clock.t += THROTTLE_S + 1
        await refused(auth, signed(keys["forger"], "unknown"))
        assert fetches() == {"ok": 1, "failed": 2}
    finally:
        provider.shutdown()
