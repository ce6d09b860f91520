"""Principals are unambiguous (profile §2): a `sub` or tenant claim holding a control character
is refused (each character a principal may not hold, in `test_auth_limits.py`), and
`Principal.key` (the owner key of stored sessions and tasks) is the same as ever
for every principal that can exist, while no two of them can share it."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from typing import Any

import jwt
import pytest
from hypothesis import given
from hypothesis import strategies as st

from realtime.auth import Authenticator, Principal
from realtime.settings import Settings
from tests.jwks_server import (
    NOW,
    Clock,
    JwksServer,
    PrivateKey,
    jwks_authenticator,
    signed,
)
from tests.unit.auth_helpers import refused

SECRET = "s" * 40


def dev_token(**claims: Any) -> str:
    payload = {"sub": "alice", "iat": int(NOW), "exp": int(NOW) + 600, **claims}
    return "Bearer " + jwt.encode(payload, SECRET, algorithm="HS256")


def dev_auth(**settings: Any) -> Authenticator:
    return Authenticator(Settings(auth_hs256_secret=SECRET, **settings), now=Clock())


async def test_the_pair_that_used_to_collide_cannot_authenticate() -> None:
    # ("b\0c", "A") and ("c", "A\0b") hashed alike: neither gets through any more
    auth = dev_auth(auth_tenant_claim="org")
    await refused(auth, dev_token(sub="b\x00c", org="A"))
    await refused(auth, dev_token(sub="c", org="A\x00b"))
    assert (await auth.authenticate(dev_token(sub="b c", org="A\xe9b"))).tenant == "A\xe9b"


async def test_a_control_character_is_refused_in_jwks_mode_too(
    one_key_jwks: tuple[JwksServer, PrivateKey],
) -> None:
    server, key = one_key_jwks
    auth = jwks_authenticator(server, auth_tenant_claim="tid")
    assert "'sub'" in (await refused(auth, signed(key, "k", sub="a\x00", tid="t"))).message
    assert "'tid'" in (await refused(auth, signed(key, "k", sub="a", tid="t\x7f"))).message
    assert (await auth.authenticate(signed(key, "k", sub="a", tid="t"))).tenant == "t"
    await auth.aclose()


@pytest.mark.parametrize(
    ("subject", "tenant"), [("b\x00c", "A"), ("c", "A\x00b"), ("a\x7f", None), ("a", "")]
)
def test_a_principal_that_would_make_keys_ambiguous_cannot_be_made(
    subject: str, tenant: str | None
) -> None:
    with pytest.raises(ValueError, match="control characters"):
        Principal(subject, tenant, frozenset())


# --- the owner key, over every principal that can exist ---------------------------------------

# text biased towards the characters that matter: NUL, other controls, and look-alikes
ANY_TEXT = st.text(st.one_of(st.sampled_from("a\x00\x1f\x7f\x80 é"), st.characters()), max_size=6)
ANY_PAIR = st.tuples(st.one_of(st.none(), ANY_TEXT), ANY_TEXT)  # (tenant, subject)


def legacy_key(tenant: str | None, subject: str) -> str:
    """The owner key stored data is keyed by."""
    return hashlib.sha256(f"{tenant or ''}\x00{subject}".encode()).hexdigest()[:32]


def principal(pair: tuple[str | None, str]) -> Principal | None:
    """The principal of (tenant, subject), or None where none can exist."""
    try:
        return Principal(pair[1], pair[0], frozenset())
    except ValueError:
        return None


def same_preimage(pair: tuple[str | None, str]) -> Iterator[tuple[str | None, str]]:
    """Every (tenant, subject) whose legacy key text equals that of `pair`."""
    text = f"{pair[0] or ''}\x00{pair[1]}"
    for at, char in enumerate(text):
        if char == "\x00":
            tenant, subject = text[:at], text[at + 1 :]
            yield tenant, subject
            if not tenant:
                yield None, subject


@given(ANY_PAIR)
def test_the_owner_key_is_unchanged_for_every_principal_that_can_exist(
    pair: tuple[str | None, str],
) -> None:
    made = principal(pair)
    if made is not None:
        assert made.key == legacy_key(*pair)


@given(ANY_PAIR, st.data())
def test_distinct_principals_never_share_an_owner_key(
    pair: tuple[str | None, str], data: st.DataObject
) -> None:
    # the other pair: any, or one built to meet the first (same text under the hash)
    other = data.draw(st.one_of(ANY_PAIR, st.sampled_from(list(same_preimage(pair)))))
    first, second = principal(pair), principal(other)
    if first is None or second is None or pair == other:
        return
    assert first.key != second.key, (pair, other)


def test_a_valid_principal_has_exactly_one_pair_behind_its_key_text() -> None:
    assert list(same_preimage(("acme", "alice"))) == [("acme", "alice")]
    assert list(same_preimage((None, "alice"))) == [("", "alice"), (None, "alice")]
    assert principal(("", "alice")) is None
