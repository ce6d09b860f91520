"""Fixtures shared by the unit tests beyond tests/conftest.py."""

from collections.abc import Iterator

import pytest

from tests.jwks_server import JwksServer, PrivateKey, jwk, jwks_server, rsa_key


@pytest.fixture
def one_key_jwks() -> Iterator[tuple[JwksServer, PrivateKey]]:
    """A JWKS endpoint on 127.0.0.1 publishing one new RSA key as kid "k": (endpoint, key)."""
    key = rsa_key()
    with jwks_server([jwk(key, "k")]) as server:
        yield server, key
