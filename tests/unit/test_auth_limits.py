"""What a client token may be (profile §2): valid for at most AIM_AUTH_MAX_TOKEN_LIFETIME_S
(`exp - iat`; without `iat`, from when it is presented), minted for this service's audience when
one is configured (production always configures one), and naming a principal without control
or format characters (C0, C1, bidi controls, zero-width characters, U+2028/2029)."""

from __future__ import annotations

from typing import Any

import jwt
import pytest

from realtime.auth import Authenticator, Principal
from realtime.settings import Settings, SettingsError
from tests.unit.auth_helpers import refused, refused_claim

NOW = 1_800_000_000
SECRET = "s" * 40
AUDIENCE = "aim-realtime"
DAY = 24 * 3600
# each a character a principal may not hold, with the category that makes it so
UNPRINTABLE = [
    "\u202e",  # RIGHT-TO-LEFT OVERRIDE (Cf): "alice\u202eevil" shows reversed
    "\u2066",  # LEFT-TO-RIGHT ISOLATE (Cf)
    "\u200b",  # ZERO WIDTH SPACE (Cf)
    "\ufeff",  # ZERO WIDTH NO-BREAK SPACE (Cf)
    "\u061c",  # ARABIC LETTER MARK (Cf)
    "\u2028",  # LINE SEPARATOR (Zl)
    "\u2029",  # PARAGRAPH SEPARATOR (Zp)
    "\x85",  # NEXT LINE (Cc, C1)
    "\x9b",  # CONTROL SEQUENCE INTRODUCER (Cc, C1)
    "\x1b",  # ESCAPE (Cc, C0)
    "\x00",  # NULL (Cc, C0): "b\x00c" of no tenant and "c" of tenant "A\x00b" were one key once
    "\x01",  # START OF HEADING (Cc, C0)
    "\t",  # CHARACTER TABULATION (Cc, C0)
    "\n",  # LINE FEED (Cc, C0): a line of its own in a log
    "\r",  # CARRIAGE RETURN (Cc, C0)
    "\x1f",  # UNIT SEPARATOR (Cc, C0)
    "\x7f",  # DELETE (Cc)
    "\ud800",  # a lone surrogate (Cs): a JSON escape makes one; it has no UTF-8, so no owner key
]


class Clock:
    def __init__(self, t: float = NOW) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def bearer(**claims: Any) -> str:
    payload = {"sub": "alice", "iat": NOW, "exp": NOW + 600, **claims}
    return "Bearer " + jwt.encode(
        {k: v for k, v in payload.items() if v is not None}, SECRET, algorithm="HS256"
    )


def auth(clock: Clock | None = None, **settings: Any) -> Authenticator:
    return Authenticator(Settings(auth_hs256_secret=SECRET, **settings), now=clock or Clock())


# --- lifetime -------------------------------------------------------------------------------


async def test_a_token_valid_for_100_years_is_refused() -> None:
    err = await refused(auth(), bearer(exp=NOW + 100 * 365 * DAY))
    assert "at most 86400 s" in err.message


async def test_a_token_lives_at_most_a_day_by_default() -> None:
    assert (await auth().authenticate(bearer(exp=NOW + DAY))).subject == "alice"
    await refused(auth(), bearer(exp=NOW + DAY + 1))


async def test_the_lifetime_counts_from_iat_even_for_a_token_presented_late() -> None:
    clock = Clock(NOW + DAY)  # a week-long token, presented a day after it was issued
    await refused(auth(clock), bearer(exp=NOW + 7 * DAY))


async def test_the_maximum_lifetime_is_configurable() -> None:
    short = auth(auth_max_token_lifetime_s=300)
    assert (await short.authenticate(bearer(exp=NOW + 300))).subject == "alice"
    err = await refused(short, bearer(exp=NOW + 301))
    assert "at most 300 s" in err.message


async def test_a_token_without_iat_counts_from_when_it_is_presented() -> None:
    clock = Clock()
    authenticator = auth(clock)
    # within the maximum (and the 30 s leeway) from now: accepted
    assert (await authenticator.authenticate(bearer(iat=None, exp=NOW + DAY + 30))).subject
    err = await refused(authenticator, bearer(iat=None, exp=NOW + DAY + 31))
    assert "no iat" in err.message
    # the same token, presented an hour later, is within the bound
    clock.t += 3600
    assert (await authenticator.authenticate(bearer(iat=None, exp=NOW + DAY + 31))).subject


def test_the_maximum_lifetime_is_read_with_bounds() -> None:
    assert Settings.from_env({}).auth_max_token_lifetime_s == DAY
    read = Settings.from_env({"AIM_AUTH_MAX_TOKEN_LIFETIME_S": "3600"})
    assert read.auth_max_token_lifetime_s == 3600
    for bad in ("59", "31536001", "soon"):
        with pytest.raises(SettingsError, match="AIM_AUTH_MAX_TOKEN_LIFETIME_S"):
            Settings.from_env({"AIM_AUTH_MAX_TOKEN_LIFETIME_S": bad})


# --- audience -------------------------------------------------------------------------------


def production() -> Settings:
    """Settings as production reads them: AIM_REQUIRE_REDIS=1 with an HS256 secret."""
    return Settings.from_env(
        {"AIM_REQUIRE_REDIS": "1", "AIM_AUTH_HS256_SECRET": SECRET, "AIM_AUTH_AUDIENCE": AUDIENCE}
    )


@pytest.mark.parametrize("aud", [None, "other-service", ["other-service", "billing"]])
async def test_production_refuses_a_token_minted_for_another_audience(aud: object) -> None:
    authenticator = Authenticator(production(), now=Clock())
    err = await refused(authenticator, bearer(aud=aud))
    assert "aud" in err.message


@pytest.mark.parametrize("aud", [AUDIENCE, [AUDIENCE, "billing"]])
async def test_production_accepts_a_token_for_its_audience(aud: object) -> None:
    authenticator = Authenticator(production(), now=Clock())
    assert (await authenticator.authenticate(bearer(aud=aud))).subject == "alice"


# --- principals -----------------------------------------------------------------------------


@pytest.mark.parametrize("char", UNPRINTABLE)
async def test_a_sub_with_a_control_or_format_character_is_refused(char: str) -> None:
    message = await refused_claim(auth(), bearer(sub=f"alice{char}evil"), "sub")
    assert "control characters or format characters" in message


@pytest.mark.parametrize("char", UNPRINTABLE)
async def test_a_tenant_with_a_control_or_format_character_is_refused(char: str) -> None:
    message = await refused_claim(auth(auth_tenant_claim="org"), bearer(org=f"acme{char}"), "org")
    assert "control characters or format characters" in message


@pytest.mark.parametrize("char", UNPRINTABLE)
def test_no_principal_holds_a_control_or_format_character(char: str) -> None:
    with pytest.raises(ValueError, match="format characters"):
        Principal(f"a{char}", None, frozenset())
    with pytest.raises(ValueError, match="format characters"):
        Principal("a", f"t{char}", frozenset())


@pytest.mark.parametrize(
    ("sub", "tenant"),
    [("Zoë", "Société Générale"), ("山田", "株式会社"), ("a b\u00a0c", "x y"), ("Ω-42", "org")],
)
async def test_names_in_any_script_are_principals(sub: str, tenant: str) -> None:
    got = await auth(auth_tenant_claim="org").authenticate(bearer(sub=sub, org=tenant))
    assert (got.subject, got.tenant) == (sub, tenant)
