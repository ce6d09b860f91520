"""Signing keys from the production JWKS URL (profile §2), cached, with every refetch throttled.

Freshness: the key set is fetched again once it is `max_age_s` old (the authenticator passes
its verified-token TTL), so a key the issuer removed stops verifying within that TTL. A key that
did not change (same `kid`, same key material) keeps its `PyJWK` object across fetches: a
cached verification stays good while its key object is still the one held, so a fetch, whoever
caused it, invalidates only the tokens of a `kid` that was removed or given new material.

Outage: if a fetch fails, the keys already held keep working, stale or not, so a brief issuer
outage does not log everyone out. This is a deliberate trade-off: a failed fetch cannot show a
removal, so while the issuer cannot be reached a removed key is honoured until the next fetch
that answers. A well-formed key set that answers counts, even an empty one.

Transport: whoever can answer in the issuer's place can mint any token, so the URL is https
(http only to this machine; `Settings.from_env` refuses anything else) and the fetch is ours,
not a library's default: a redirect is never followed (it counts as a failed fetch, naming the
status), and at most `MAX_JWKS_BYTES` of the answer are read.
"""

from __future__ import annotations

import asyncio
import http.client
import json
import logging
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any, Final, NoReturn
from urllib.parse import urlsplit

import jwt
from cryptography.hazmat.primitives.asymmetric.ec import EllipticCurvePrivateKey
from cryptography.hazmat.primitives.asymmetric.rsa import RSAPrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from realtime.environment import without_credentials
from realtime.errors import REALM, AuthCause, AuthError

JWKS_KEY_TYPES: Final = {"RS256": "RSA", "ES256": "EC"}
JWKS_FETCH_OUTCOMES: Final = ("ok", "failed")
_REFRESH_THROTTLE_S: Final = 30.0  # at most one JWKS fetch per window, whatever kids tokens name
_FETCH_TIMEOUT_S: Final = 5.0
MAX_JWKS_BYTES: Final = 512 * 1024  # a key set is a few KiB; a larger answer is refused

_log = logging.getLogger(__name__)


def invalid_token(cause: AuthCause, message: str) -> AuthError:
    """401 `invalid_token`: the bearer token cannot be used; `cause` says why in data,
    `message` in words."""
    return AuthError(401, "invalid_token", message, cause=cause)


class JwksKeys:
    """Signing keys from the JWKS URL, cached, with every refetch throttled.

    A fetch happens when a token names an unknown `kid` or the keys are `max_age_s` old, but
    never twice within `_REFRESH_THROTTLE_S` (failed fetches count too), so tokens with made-up
    kids cannot make the service hammer the issuer, nor (since unchanged keys keep their
    objects) make it forget the tokens it verified. `fetches` counts the fetches by outcome.
    """

    def __init__(self, url: str, now: Callable[[], float], *, max_age_s: float) -> None:
        if max_age_s <= _REFRESH_THROTTLE_S:
            raise ValueError(f"max_age_s must exceed the {_REFRESH_THROTTLE_S:g} s throttle")
        self._url = url
        self._now = now
        self._max_age_s = max_age_s
        self._keys: dict[str, jwt.PyJWK] = {}
        # when the last fetch that answered began: the key set shows the issuer's no earlier
        self.fetched_at: float | None = None
        self._attempted_at: float | None = None
        self._last_fetch_failed = False
        self._lock = asyncio.Lock()
        self.fetches = dict.fromkeys(JWKS_FETCH_OUTCOMES, 0)

    async def key(self, kid: object, alg: str) -> jwt.PyJWK:
        if not isinstance(kid, str) or not kid:
            raise invalid_token(
                "unknown_key", "the token header has no 'kid' naming its signing key"
            )
        # a request also waits for a fetch already in flight when that fetch may change its
        # answer: its kid is unknown, or the keys are stale and the last fetch did not fail
        if self._wants_fetch(kid) or (self._lock.locked() and self._waits_for_fetch(kid)):
            async with self._lock:
                if self._wants_fetch(kid):  # another request may have fetched meanwhile
                    await self._fetch()
        key = self._keys.get(kid)
        if key is None:
            if self._last_fetch_failed:
                raise invalid_token(
                    "keys_unavailable",
                    "the token signing keys (JWKS) could not be fetched; retry later",
                )
            raise invalid_token(
                "unknown_key", "the token's signing key (kid) is not in the issuer's key set"
            )
        if key.key_type != JWKS_KEY_TYPES[alg] or key.algorithm_name != alg:
            raise invalid_token(
                "invalid_signature", "the token's algorithm does not match its signing key"
            )
        return key

    def holds(self, kid: str, key: jwt.PyJWK) -> bool:
        """Whether `key` is still `kid`'s key in a key set younger than `max_age_s`: what a
        verification made with `key` needs to be reused without checking the signature."""
        return self._keys.get(kid) is key and not self._stale()

    def _stale(self) -> bool:
        fetched_at = self.fetched_at
        return fetched_at is None or self._now() - fetched_at >= self._max_age_s

    def _wants_fetch(self, kid: str) -> bool:
        throttled = (
            self._attempted_at is not None
            and self._now() - self._attempted_at < _REFRESH_THROTTLE_S
        )
        return (kid not in self._keys or self._stale()) and not throttled

    def _waits_for_fetch(self, kid: str) -> bool:
        return kid not in self._keys or (self._stale() and not self._last_fetch_failed)

    async def _fetch(self) -> None:
        started = self._attempted_at = self._now()
        try:
            # urllib blocks, so it runs in a worker thread to keep the event loop free
            data = await asyncio.to_thread(fetch_key_set, self._url)
            members = data.get("keys")
            if not isinstance(members, list):
                raise ValueError("the JWKS has no 'keys' array")
        except (ValueError, OSError, http.client.HTTPException) as exc:
            self._last_fetch_failed = True
            self.fetches["failed"] += 1
            _log.warning("could not fetch JWKS from %s: %s", without_credentials(self._url), exc)
            return
        keys: dict[str, jwt.PyJWK] = {}
        for member in members:
            key = _signing_key(member)
            if key is not None and key.key_id:
                held = self._keys.get(key.key_id)
                # an unchanged key keeps its object, and so the verifications made with it
                keys[key.key_id] = held if held is not None and _same(held, key) else key
        self._keys = keys
        self.fetched_at = started
        self._last_fetch_failed = False
        self.fetches["ok"] += 1

    async def aclose(self) -> None:
        async with self._lock:
            self._keys = {}


class _RefuseRedirects(urllib.request.HTTPRedirectHandler):
    """A redirect ends the fetch: the key set is taken from the configured URL or not at all."""

    def redirect_request(
        self,
        req: urllib.request.Request,
        fp: Any,
        code: int,
        msg: str,
        headers: Any,
        newurl: str,
    ) -> NoReturn:
        raise urllib.error.HTTPError(
            req.full_url,
            code,
            f"the JWKS URL answered a redirect ({code}), which is not followed: set "
            "AIM_AUTH_JWKS_URL to the URL that serves the key set",
            headers,
            None,
        )


# no redirect handler but ours; urllib's others (proxies from the environment, https) stay
_OPENER: Final = urllib.request.build_opener(_RefuseRedirects())


def fetch_key_set(url: str) -> dict[str, Any]:
    """GET the key set at `url` (blocking): its JSON object; OSError (urllib's errors, a
    redirect among them) or ValueError (too large, not a JSON object) when there is none."""
    if urlsplit(url).scheme not in ("http", "https"):
        raise ValueError("the JWKS URL must be an https:// URL")
    headers = {"User-Agent": REALM, "Accept": "application/json"}
    request = urllib.request.Request(url, headers=headers)  # noqa: S310 - scheme checked above
    with _OPENER.open(request, timeout=_FETCH_TIMEOUT_S) as response:
        body = response.read(MAX_JWKS_BYTES + 1)
    if len(body) > MAX_JWKS_BYTES:
        raise ValueError(f"the JWKS answer is larger than {MAX_JWKS_BYTES} bytes")
    data = json.loads(body)
    if not isinstance(data, dict):
        raise ValueError("the JWKS answer is not a JSON object")
    return data


def _signing_key(member: object) -> jwt.PyJWK | None:
    """A JWKS member usable to verify RS256/ES256 signatures, else None (skipped)."""
    if not isinstance(member, dict) or member.get("use") not in ("sig", None):
        return None
    try:
        key = jwt.PyJWK(member)
    except jwt.PyJWTError:
        return None
    return key if JWKS_KEY_TYPES.get(key.algorithm_name) == key.key_type else None


def _same(a: jwt.PyJWK, b: jwt.PyJWK) -> bool:
    return a.algorithm_name == b.algorithm_name and _public_bytes(a.key) == _public_bytes(b.key)


def _public_bytes(key: Any) -> bytes:
    if isinstance(key, RSAPrivateKey | EllipticCurvePrivateKey):  # a JWK may carry its private half
        key = key.public_key()
    return bytes(key.public_bytes(Encoding.DER, PublicFormat.SubjectPublicKeyInfo))
