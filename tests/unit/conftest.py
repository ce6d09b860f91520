"""Fixtures shared by the unit tests beyond tests/conftest.py."""

import asyncio
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

from tests.jwks_server import JwksServer, PrivateKey, jwk, jwks_server, rsa_key


@pytest.fixture
def one_key_jwks() -> Iterator[tuple[JwksServer, PrivateKey]]:
    """A JWKS endpoint on 127.0.0.1 publishing one new RSA key as kid "k": (endpoint, key)."""
    key = rsa_key()
    with jwks_server([jwk(key, "k")]) as server:
        yield server, key


@pytest.fixture
async def loop_reports() -> AsyncIterator[list[dict[str, Any]]]:
    """What reaches the event loop's exception handler while the test runs (its contexts)."""
    loop = asyncio.get_running_loop()
    contexts: list[dict[str, Any]] = []
    loop.set_exception_handler(lambda _, context: contexts.append(context))
    yield contexts
    loop.set_exception_handler(None)
