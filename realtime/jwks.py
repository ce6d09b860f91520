"""Signing keys from the production JWKS URL (profile §2), cached, with every refetch throttled."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Final

import jwt

from realtime.errors import REALM, AuthError

JWKS_KEY_TYPES: Final = {"RS256": "RSA", "ES256": "EC"}
_REFRESH_THROTTLE_S: Final = 30.0  # at most one JWKS fetch per window, whatever kids tokens name
_KEYS_MAX_AGE_S: Final = 3600.0  # refetch hourly so keys the issuer withdrew stop verifying
_FETCH_TIMEOUT_S: Final = 5.0

_log = logging.getLogger(__name__)


def invalid_token(message: str) -> AuthError:
    """401 `invalid_token`: the bearer token cannot be used; `message` says why."""
    return AuthError(401, "invalid_token", message)


class JwksKeys:
    """Signing keys from the JWKS URL, cached, with every refetch throttled.

    A fetch happens when a token names an unknown `kid` or the keys are older than
    `_KEYS_MAX_AGE_S`, but never twice within `_REFRESH_THROTTLE_S` (failed fetches count too),
    so tokens with made-up kids cannot make the service hammer the issuer. If a refresh
    fails, the keys already held keep working: a brief issuer outage must not log everyone out.
    """

    def __init__(self, url: str, now: Callable[[], float]) -> None:
        # pyjwt's own caches are off: caching and throttling live here, on the injectable clock
        self._client = jwt.PyJWKClient(
            url, cache_jwk_set=False, timeout=_FETCH_TIMEOUT_S, headers={"User-Agent": REALM}
        )
        self._now = now
        self._keys: dict[str, jwt.PyJWK] = {}
        self._fetched_at: float | None = None
        self._attempted_at: float | None = None
        self._last_fetch_failed = False
        self._lock = asyncio.Lock()
        self.generation = 0  # counts the key sets fetched: tokens verified before one are stale

    async def key(self, kid: object, alg: str) -> jwt.PyJWK:
        if not isinstance(kid, str) or not kid:
            raise invalid_token("the token header has no 'kid' naming its signing key")
        # a request for an unknown kid also waits for a fetch already in flight, which may bring it
        if self._wants_fetch(kid) or (kid not in self._keys and self._lock.locked()):
            async with self._lock:
                if self._wants_fetch(kid):  # another request may have fetched meanwhile
                    await self._fetch()
        key = self._keys.get(kid)
        if key is None:
            if self._last_fetch_failed:
                raise invalid_token(
                    "the token signing keys (JWKS) could not be fetched; retry later"
                )
            raise invalid_token("the token's signing key (kid) is not in the issuer's key set")
        if key.key_type != JWKS_KEY_TYPES[alg] or key.algorithm_name != alg:
            raise invalid_token("the token's algorithm does not match its signing key")
        return key

    def _wants_fetch(self, kid: str) -> bool:
        now = self._now()
        stale = self._fetched_at is None or now - self._fetched_at >= _KEYS_MAX_AGE_S
        throttled = (
            self._attempted_at is not None and now - self._attempted_at < _REFRESH_THROTTLE_S
        )
        return (kid not in self._keys or stale) and not throttled

    async def _fetch(self) -> None:
        self._attempted_at = self._now()
        try:
            # urllib blocks, so it runs in a worker thread to keep the event loop free
            keys = await asyncio.to_thread(self._client.get_signing_keys, True)
        except (jwt.PyJWTError, ValueError, OSError) as exc:
            self._last_fetch_failed = True
            _log.warning("could not fetch JWKS from %s: %s", self._client.uri, exc)
            return
        self._keys = {
            key.key_id: key
            for key in keys
            if key.key_id and JWKS_KEY_TYPES.get(key.algorithm_name) == key.key_type
        }
        self._fetched_at = self._now()
        self._last_fetch_failed = False
        self.generation += 1

    async def aclose(self) -> None:
        async with self._lock:
            self._keys = {}
