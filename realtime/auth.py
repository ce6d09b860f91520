"""Bearer JWT authentication and scope checks (profile §2).

Two key sources, pinned per algorithm family so one can never stand in for the other:
HS256 tokens are verified only with the development secret, RS256/ES256 tokens only with keys
from the production JWKS URL. Time claims are checked against the injectable clock, so the
same clock drives token expiry and the JWKS refresh throttle.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import math
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final

import jwt
import msgspec
from jwt.exceptions import InvalidSubjectError

from realtime.errors import REALM, AuthError
from realtime.settings import MIN_HS256_SECRET_BYTES, Settings

_HS_ALGS = ("HS256",)
_JWKS_KEY_TYPES = {"RS256": "RSA", "ES256": "EC"}
_MAX_LEEWAY_S = 30
_MAX_TOKEN_CHARS = 8192  # far above any real token; stops huge headers reaching the decoder
_REFRESH_THROTTLE_S = 30.0  # at most one JWKS fetch per window, whatever kids tokens name
_KEYS_MAX_AGE_S = 3600.0  # refetch hourly so keys the issuer withdrew stop verifying
_FETCH_TIMEOUT_S = 5.0

_log = logging.getLogger(__name__)


class Principal(msgspec.Struct, frozen=True):
    """The authenticated caller: token subject, optional tenant and granted scopes."""

    subject: str
    tenant: str | None
    scopes: frozenset[str]

    @property
    def key(self) -> str:
        """Stable opaque owner key; the NUL separator keeps (tenant, subject) pairs distinct."""
        raw = f"{self.tenant or ''}\x00{self.subject}".encode()
        return hashlib.sha256(raw).hexdigest()[:32]


def _missing(message: str) -> AuthError:
    return AuthError(401, "missing_credentials", message)


def _invalid(message: str) -> AuthError:
    return AuthError(401, "invalid_token", message)


class Authenticator:
    """Turns an `Authorization` header into a `Principal`, or raises `AuthError`."""

    def __init__(self, settings: Settings, *, now: Callable[[], float] = time.time) -> None:
        self._settings = settings
        self._now = now
        self._secret = settings.auth_hs256_secret
        self._leeway = min(max(settings.auth_leeway_s, 0), _MAX_LEEWAY_S)
        self._jwks = _JwksKeys(settings.auth_jwks_url, now) if settings.auth_jwks_url else None
        accepted = (_HS_ALGS if self._secret else ()) + (
            tuple(_JWKS_KEY_TYPES) if self._jwks else ()
        )
        self._accepted = ", ".join(accepted) or "none (no token keys are configured)"

    async def authenticate(self, authorization: str | None) -> Principal:
        """Verify the bearer token in `authorization`; raise `AuthError` (401) when unusable."""
        token = _bearer_token(authorization)
        try:
            header = jwt.get_unverified_header(token)
        except jwt.PyJWTError:
            raise _invalid("the bearer token is not a well-formed JWT") from None
        alg = header.get("alg")
        alg = alg if isinstance(alg, str) else ""
        key: str | jwt.PyJWK
        # pin each algorithm family to its own key source: no HS/RS confusion, no 'none'
        if alg in _HS_ALGS and self._secret:
            key = self._secret
        elif alg in _JWKS_KEY_TYPES and self._jwks is not None:
            key = await self._jwks.key(header.get("kid"), alg)
        else:
            raise _invalid(f"the token's signing algorithm is not accepted; use {self._accepted}")
        claims = self._decode(token, key, alg)
        self._check_times(claims)
        return self._principal(claims)

    def require_scope(self, principal: Principal, scope: str) -> None:
        """Raise `AuthError` (403, insufficient_scope) unless `principal` was granted `scope`."""
        if scope not in principal.scopes:
            raise AuthError(
                403,
                "insufficient_scope",
                f"this method needs the '{scope}' scope; ask for a token that grants it",
                required_scope=scope,
            )

    async def aclose(self) -> None:
        """Wait for any JWKS fetch in flight, so nothing outlives the application."""
        if self._jwks is not None:
            await self._jwks.aclose()

    def _decode(self, token: str, key: str | jwt.PyJWK, alg: str) -> dict[str, Any]:
        issuer, audience = self._settings.auth_issuer, self._settings.auth_audience
        try:
            return jwt.decode(
                token,
                key,
                algorithms=[alg],
                issuer=issuer,
                audience=audience,
                options={
                    "require": ["exp", "sub"],
                    # times are checked in _check_times against the injectable clock
                    "verify_exp": False,
                    "verify_nbf": False,
                    "verify_iat": False,
                    "verify_iss": issuer is not None,
                    "verify_aud": audience is not None,
                    "enforce_minimum_key_length": True,
                },
            )
        except jwt.MissingRequiredClaimError as exc:
            raise _invalid(f"the token lacks the required '{exc.claim}' claim") from None
        except jwt.InvalidSignatureError:
            raise _invalid("the token signature does not verify with the configured keys") from None
        except jwt.InvalidIssuerError:
            raise _invalid(f"the token issuer (iss) must be '{issuer}'") from None
        except jwt.InvalidAudienceError:
            raise _invalid(f"the token audience (aud) must include '{audience}'") from None
        except InvalidSubjectError:
            raise _invalid("the token's 'sub' claim must be a non-empty string") from None
        except jwt.PyJWTError:
            raise _invalid("the bearer token could not be verified; get a new one") from None

    def _check_times(self, claims: Mapping[str, Any]) -> None:
        now, leeway = self._now(), self._leeway
        exp, nbf, iat = (_numeric_date(claims, name) for name in ("exp", "nbf", "iat"))
        if exp is not None and now >= exp + leeway:
            raise _invalid("the token has expired; get a new one")
        if nbf is not None and nbf > now + leeway:
            raise _invalid("the token is not valid yet (nbf is in the future); check clocks")
        if iat is not None and iat > now + leeway:
            raise _invalid("the token was issued in the future (iat); check clocks")

    def _principal(self, claims: Mapping[str, Any]) -> Principal:
        subject = claims.get("sub")
        if not isinstance(subject, str) or not subject.strip():
            raise _invalid("the token's 'sub' claim must be a non-empty string")
        tenant: str | None = None
        if tenant_claim := self._settings.auth_tenant_claim:
            value = claims.get(tenant_claim)
            if not isinstance(value, str) or not value:
                raise _invalid(f"the token needs a non-empty string '{tenant_claim}' claim")
            tenant = value
        return Principal(subject=subject, tenant=tenant, scopes=_scopes(claims))


def _bearer_token(authorization: str | None) -> str:
    # a blank header carries no credentials at all, so it is answered like an absent one
    if authorization is None or not authorization.strip():
        raise _missing("send an 'Authorization: Bearer <token>' header")
    if "," in authorization:
        # no token68 holds a comma: this is two header lines joined (RFC 9110 §5.3), or two
        # credentials in one, and a proxy may have checked the other one (profile §16)
        raise AuthError(
            401, "invalid_request", "send exactly one Authorization header with one Bearer token"
        )
    parts = authorization.split(None, 1)
    if parts[0].lower() != "bearer":
        # RFC 6750 §3.1: an unsupported scheme counts as no credentials (no error attribute)
        raise _missing("the Authorization header must use the Bearer scheme")
    token = parts[1].strip() if len(parts) == 2 else ""
    if not token or any(c.isspace() for c in token) or len(token) > _MAX_TOKEN_CHARS:
        raise _invalid("the Authorization header must be 'Bearer' followed by one JWT")
    return token


def _numeric_date(claims: Mapping[str, Any], name: str) -> float | None:
    value = claims.get(name)
    if value is None:
        return None
    # NaN/Infinity parse from JSON and would make a token that never expires
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise _invalid(f"the token's '{name}' claim must be a number of seconds since the epoch")
    return float(value)


def _scopes(claims: Mapping[str, Any]) -> frozenset[str]:
    """Granted scopes: `scope` (space separated) and/or `scp` (array, or string as Azure AD sends).

    Decision: a scope claim of any other shape makes the token invalid (401) rather than
    granting nothing, so a misconfigured issuer shows up as a clear error, not a puzzling 403.
    """
    found: set[str] = set()
    for name in ("scope", "scp"):
        value = claims.get(name)
        if value is None:
            continue
        if isinstance(value, str):
            found.update(value.split())
        elif isinstance(value, list) and all(isinstance(item, str) for item in value):
            found.update(item for item in value if item)
        else:
            raise _invalid(f"the token's '{name}' claim must be a string or an array of strings")
    return frozenset(found)


class _JwksKeys:
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

    async def key(self, kid: object, alg: str) -> jwt.PyJWK:
        if not isinstance(kid, str) or not kid:
            raise _invalid("the token header has no 'kid' naming its signing key")
        # a request for an unknown kid also waits for a fetch already in flight, which may bring it
        if self._wants_fetch(kid) or (kid not in self._keys and self._lock.locked()):
            async with self._lock:
                if self._wants_fetch(kid):  # another request may have fetched meanwhile
                    await self._fetch()
        key = self._keys.get(kid)
        if key is None:
            if self._last_fetch_failed:
                raise _invalid("the token signing keys (JWKS) could not be fetched; retry later")
            raise _invalid("the token's signing key (kid) is not in the issuer's key set")
        if key.key_type != _JWKS_KEY_TYPES[alg] or key.algorithm_name != alg:
            raise _invalid("the token's algorithm does not match its signing key")
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
            if key.key_id and _JWKS_KEY_TYPES.get(key.algorithm_name) == key.key_type
        }
        self._fetched_at = self._now()
        self._last_fetch_failed = False

    async def aclose(self) -> None:
        async with self._lock:
            self._keys = {}


def mint_dev_token(
    secret: str,
    *,
    subject: str,
    scopes: Sequence[str],
    ttl_s: int,
    now: float,
    tenant_claim: str | None = None,
    tenant: str | None = None,
    issuer: str | None = None,
    audience: str | None = None,
) -> str:
    """Sign a development HS256 token the way `Authenticator` expects (`aim-realtime token`).

    `issuer`/`audience` are only needed when the development settings also configure them.
    """
    if len(secret.encode()) < MIN_HS256_SECRET_BYTES:
        raise ValueError(f"the HS256 secret must be at least {MIN_HS256_SECRET_BYTES} bytes")
    if ttl_s <= 0:
        raise ValueError("ttl_s must be positive")
    if (tenant_claim is None) != (tenant is None):
        raise ValueError("tenant_claim and tenant must be given together")
    claims: dict[str, Any] = {
        "sub": subject,
        "scope": " ".join(scopes),
        "iat": int(now),
        "exp": int(now) + ttl_s,
    }
    if tenant_claim is not None:
        claims[tenant_claim] = tenant
    if issuer is not None:
        claims["iss"] = issuer
    if audience is not None:
        claims["aud"] = audience
    return jwt.encode(claims, secret, algorithm="HS256")


PROVIDER_AUDIENCE: Final = "urn:aim:a2a:realtime:v1:provider"
PROVIDER_ISSUER: Final = "aim-realtime"
PROVIDER_SCOPE: Final = "aim.provider"


class ProviderGrant(msgspec.Struct, frozen=True):
    """What a verified provider token allows: calls for one session, from its room's agent."""

    session_id: str
    epoch: int


def mint_provider_token(secret: str, *, session_id: str, epoch: int, ttl_s: int, now: int) -> str:
    """The provider token of `session_id`'s room of `epoch` (handed over in dispatch metadata)."""
    claims = {
        "iss": PROVIDER_ISSUER,
        "aud": PROVIDER_AUDIENCE,
        "sub": f"provider:{session_id}",
        "sid": session_id,
        "epoch": epoch,
        "scope": PROVIDER_SCOPE,
        "iat": now,
        "exp": now + ttl_s,
    }
    return jwt.encode(claims, secret, algorithm="HS256")


def verify_provider_token(
    secret: str, authorization: str | None, *, now: float, leeway: int
) -> ProviderGrant:
    """The grant of a provider token, or AuthError (401, or 403 without the provider scope)."""
    token = _bearer_token(authorization)
    try:
        claims = jwt.decode(
            token,
            secret,
            algorithms=["HS256"],
            issuer=PROVIDER_ISSUER,
            audience=PROVIDER_AUDIENCE,
            # times are checked below against the service's clock
            options={
                "require": ["exp", "sid", "epoch", "aud", "iss"],
                "verify_exp": False,
                "verify_iat": False,
                "verify_nbf": False,
            },
        )
    except jwt.InvalidAudienceError:
        raise _invalid(
            f"this is not a provider token (aud must be '{PROVIDER_AUDIENCE}')"
        ) from None
    except jwt.MissingRequiredClaimError as exc:
        raise _invalid(f"the provider token lacks the '{exc.claim}' claim") from None
    except jwt.PyJWTError:
        raise _invalid(
            "the provider token could not be verified; use the session's token"
        ) from None
    exp = _numeric_date(claims, "exp")
    if exp is None or now >= exp + min(leeway, _MAX_LEEWAY_S):
        raise _invalid("the provider token has expired")
    session_id, epoch = claims.get("sid"), claims.get("epoch")
    if not isinstance(session_id, str) or not isinstance(epoch, int) or isinstance(epoch, bool):
        raise _invalid("the provider token's sid and epoch claims are malformed")
    if PROVIDER_SCOPE not in _scopes(claims):
        raise AuthError(
            403,
            "insufficient_scope",
            f"the token lacks the scope {PROVIDER_SCOPE}",
            required_scope=PROVIDER_SCOPE,
        )
    return ProviderGrant(session_id=session_id, epoch=epoch)
