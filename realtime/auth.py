"""Bearer JWT authentication and scope checks (profile §2).

Two key sources, pinned per algorithm family so one can never stand in for the other:
HS256 tokens are verified only with the development secret, RS256/ES256 tokens only with keys
from the production JWKS URL. Time claims are checked against the injectable clock, so the
same clock drives token expiry and the JWKS refresh throttle.

A verified token is remembered (by its exact text) for at most `VERIFIED_TTL_S`, and only while
its JWKS key is still the one held in a key set younger than that TTL (`JwksKeys.holds`); the
key set is fetched again once it is that old. So a key removed from the JWKS at time T is
refused at every call from T + `VERIFIED_TTL_S` on, unless the last fetch of the JWKS failed:
keys already held keep working through an issuer outage (see realtime/jwks.py). Besides these
time bounds, only a change of a kid's key (removed, or new material) forgets the tokens verified
with that kid: fetches caused by tokens naming unknown kids leave the others remembered.

Owner keys: `Principal.key` hashes `tenant NUL subject` (an absent tenant as empty). Since a
principal holds no control character (so no NUL) and its tenant is None or non-empty, that
text splits back into exactly one (tenant, subject) pair: distinct principals never share it.
Nor does a principal hold a format character or a line or paragraph separator (Unicode Cf, Zl,
Zp: bidi controls such as U+202E, zero-width characters), so what the console and the logs show
of it is what it is.

Lifetime: a client token's `exp - iat` is at most `AIM_AUTH_MAX_TOKEN_LIFETIME_S`; a token
without `iat` counts from the moment it is first presented, so its `exp` must be that close
(within the leeway), which is as strict for a token that never says when it was issued.

The agent's provider tokens are read the same way (`bearer_token`, `refusal`, `numeric_date`,
`granted_scopes`) and minted and verified in realtime/provider_tokens.py.
"""

from __future__ import annotations

import functools
import hashlib
import math
import time
import unicodedata
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final, NamedTuple

import jwt
import msgspec
from jwt.exceptions import InvalidSubjectError

from realtime.environment import MIN_HS256_SECRET_BYTES
from realtime.errors import AuthCause, AuthError
from realtime.jwks import JWKS_KEY_TYPES, JwksKeys, invalid_token
from realtime.settings import Settings

_HS_ALGS = ("HS256",)
MAX_LEEWAY_S = 30
_MAX_TOKEN_CHARS = 8192  # far above any real token; stops huge headers reaching the decoder
# a verified token is remembered (by its exact text) so its next call skips the signature check;
# its time claims are checked on every call, and it is verified again after the TTL, or sooner
# when its key changes or the key set it was checked against grows that old (module docstring)
VERIFIED_MAX: Final = 4096
VERIFIED_TTL_S: Final = 300.0
# refused in `sub` and the tenant: controls (C0, DEL, C1: the NUL of the owner key stays
# unambiguous), format characters (bidi controls, zero-width ones), U+2028/U+2029, and lone
# surrogates (a JSON `\ud800` escape decodes to one; it has no UTF-8, so no owner key)
_REFUSED_CATEGORIES: Final = frozenset({"Cc", "Cf", "Zl", "Zp", "Cs"})
_REFUSED_WHAT: Final = (
    "control characters or format characters (C0/C1 controls, bidi controls, U+2028/U+2029, "
    "lone surrogates)"
)


def unprintable(text: str) -> bool:
    """Whether `text` holds a character a principal may not: Unicode Cc, Cf, Zl, Zp or Cs."""
    # isprintable() is true of almost every real name: the per-character look is the rare path
    return not text.isprintable() and any(
        unicodedata.category(char) in _REFUSED_CATEGORIES for char in text
    )


# the scopes a bearer token may grant (profile §2): a client's three, and the operator's
INVOKE_SCOPE: Final = "a2a.invoke"
READ_SCOPE: Final = "a2a.tasks.read"
CANCEL_SCOPE: Final = "a2a.tasks.cancel"
CLIENT_SCOPES: Final = (INVOKE_SCOPE, READ_SCOPE, CANCEL_SCOPE)
OPERATOR_SCOPE: Final = "aim.operator"  # the operator API and console (profile §17)


class Principal(msgspec.Struct, frozen=True):
    """The authenticated caller: token subject, optional tenant and granted scopes."""

    subject: str
    tenant: str | None
    scopes: frozenset[str]

    def __post_init__(self) -> None:
        # what makes `key` injective (module docstring); the Authenticator refuses such tokens
        if unprintable(self.subject):
            raise ValueError(f"a principal's subject must not contain {_REFUSED_WHAT}")
        if self.tenant is not None and (not self.tenant or unprintable(self.tenant)):
            raise ValueError(f"a principal's tenant must be None or text without {_REFUSED_WHAT}")

    @property
    def key(self) -> str:
        """Stable opaque owner key: distinct (tenant, subject) pairs get distinct keys."""
        return _owner_key(self.tenant, self.subject)


@functools.lru_cache(maxsize=VERIFIED_MAX)
def _owner_key(tenant: str | None, subject: str) -> str:
    return hashlib.sha256(f"{tenant or ''}\x00{subject}".encode()).hexdigest()[:32]


class _Verified(NamedTuple):
    principal: Principal
    times: tuple[float | None, float | None, float | None]  # exp, nbf, iat
    until: float  # verified again from then on
    kid: str  # the JWKS key it was verified with; "" with `key` None: the HS256 secret
    key: jwt.PyJWK | None


def _missing(message: str) -> AuthError:
    return AuthError(401, "missing_credentials", message, cause="missing_token")


_invalid = invalid_token
# a required claim that is missing, by the cause it makes (any other: invalid_claims)
CLAIM_CAUSES: Final[Mapping[str, AuthCause]] = {"aud": "invalid_audience", "iss": "invalid_issuer"}


def refusal(
    exc: jwt.PyJWTError, *, issuer: str | None, audience: str | None, what: str = "token"
) -> AuthError:
    """The 401 of what pyjwt refused while decoding (`what`: the token's name in messages)."""
    # most specific first: InvalidSignatureError is a DecodeError
    if isinstance(exc, jwt.InvalidSignatureError):
        return _invalid(
            "invalid_signature", f"the {what} signature does not verify with the configured keys"
        )
    if isinstance(exc, jwt.DecodeError):
        return _invalid("malformed_token", f"the {what} is not a well-formed JWT")
    if isinstance(exc, jwt.InvalidIssuerError):
        return _invalid("invalid_issuer", f"the {what} issuer (iss) must be '{issuer}'")
    if isinstance(exc, jwt.InvalidAudienceError):
        return _invalid("invalid_audience", f"the {what} audience (aud) must include '{audience}'")
    if isinstance(exc, InvalidSubjectError):
        return _invalid("invalid_claims", f"the {what}'s 'sub' claim must be a non-empty string")
    if isinstance(exc, jwt.InvalidKeyError | jwt.InvalidAlgorithmError):
        return _invalid("invalid_signature", f"the {what} cannot be verified with its algorithm")
    return _invalid("invalid_claims", f"the {what} could not be verified; get a new one")


class Authenticator:
    """Turns an `Authorization` header into a `Principal`, or raises `AuthError`."""

    def __init__(self, settings: Settings, *, now: Callable[[], float] = time.time) -> None:
        self._settings = settings
        self._now = now
        self._secret = settings.auth_hs256_secret
        self._leeway = min(max(settings.auth_leeway_s, 0), MAX_LEEWAY_S)
        self._max_lifetime_s = settings.auth_max_token_lifetime_s
        url = settings.auth_jwks_url
        self._jwks = JwksKeys(url, now, max_age_s=VERIFIED_TTL_S) if url else None
        accepted = (_HS_ALGS if self._secret else ()) + (
            tuple(JWKS_KEY_TYPES) if self._jwks else ()
        )
        self._accepted = ", ".join(accepted) or "none (no token keys are configured)"
        self._verified: dict[str, _Verified] = {}  # oldest first: evicted in insertion order

    async def authenticate(self, authorization: str | None) -> Principal:
        """Verify the bearer token in `authorization`; raise `AuthError` (401) when unusable."""
        token = bearer_token(authorization)
        known = self._verified.get(token)
        if known is not None and self._now() < known.until and self._key_held(known):
            self._check_times(known.times)
            return known.principal
        try:
            header = jwt.get_unverified_header(token)
        except jwt.PyJWTError:
            raise _invalid("malformed_token", "the bearer token is not a well-formed JWT") from None
        alg = header.get("alg")
        alg = alg if isinstance(alg, str) else ""
        key: str | jwt.PyJWK
        kid = ""
        # pin each algorithm family to its own key source: no HS/RS confusion, no 'none'
        if alg in _HS_ALGS and self._secret:
            key = self._secret
        elif alg in JWKS_KEY_TYPES and self._jwks is not None:
            key = await self._jwks.key(header.get("kid"), alg)
            kid = header["kid"]
        else:
            raise _invalid(
                "invalid_signature",
                f"the token's signing algorithm is not accepted; use {self._accepted}",
            )
        claims = self._decode(token, key, alg)
        times = (
            numeric_date(claims, "exp"),
            numeric_date(claims, "nbf"),
            numeric_date(claims, "iat"),
        )
        self._check_times(times)
        self._check_lifetime(times)
        principal = self._principal(claims)
        self._verified.pop(token, None)
        if len(self._verified) >= VERIFIED_MAX:
            del self._verified[next(iter(self._verified))]
        until = self._now() + VERIFIED_TTL_S
        held = None if isinstance(key, str) else key
        self._verified[token] = _Verified(principal, times, until, kid, held)
        return principal

    def _key_held(self, known: _Verified) -> bool:
        """Whether a remembered token's key is still held in a key set younger than the TTL."""
        if known.key is None:
            return True  # the HS256 secret, fixed for the authenticator's life
        return self._jwks is not None and self._jwks.holds(known.kid, known.key)

    def jwks_fetches(self) -> Mapping[str, int]:
        """JWKS fetches so far by outcome (`ok`, `failed`); empty without a JWKS URL."""
        return dict(self._jwks.fetches) if self._jwks is not None else {}

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
            raise _invalid(
                CLAIM_CAUSES.get(exc.claim, "invalid_claims"),
                f"the token lacks the required '{exc.claim}' claim",
            ) from None
        except jwt.PyJWTError as exc:
            raise refusal(exc, issuer=issuer, audience=audience) from None

    def _check_times(self, times: tuple[float | None, float | None, float | None]) -> None:
        now, leeway = self._now(), self._leeway
        exp, nbf, iat = times
        if exp is not None and now >= exp + leeway:
            raise _invalid("token_expired", "the token has expired; get a new one")
        if nbf is not None and nbf > now + leeway:
            raise _invalid(
                "token_not_yet_valid",
                "the token is not valid yet (nbf is in the future); check clocks",
            )
        if iat is not None and iat > now + leeway:
            raise _invalid(
                "token_not_yet_valid", "the token was issued in the future (iat); check clocks"
            )

    def _check_lifetime(self, times: tuple[float | None, float | None, float | None]) -> None:
        """exp - iat at most the configured maximum; without iat, exp - now (with the leeway)."""
        exp, _, iat = times
        if exp is None:
            return  # unreachable: `exp` is a required claim
        if iat is not None:
            lifetime, start, slack = exp - iat, "iat", 0
        else:
            lifetime, start, slack = exp - self._now(), "now (it has no iat)", self._leeway
        if lifetime > self._max_lifetime_s + slack:
            raise _invalid(
                "invalid_claims",
                f"the token is valid for {lifetime:.0f} s (exp - {start}); this service accepts "
                f"tokens valid for at most {self._max_lifetime_s} s: ask for a shorter-lived one",
            )

    def _principal(self, claims: Mapping[str, Any]) -> Principal:
        subject = claims.get("sub")
        if not isinstance(subject, str) or not subject.strip():
            raise _invalid("invalid_claims", "the token's 'sub' claim must be a non-empty string")
        if unprintable(subject):
            raise _invalid(
                "invalid_claims", f"the token's 'sub' claim must not contain {_REFUSED_WHAT}"
            )
        tenant: str | None = None
        if tenant_claim := self._settings.auth_tenant_claim:
            value = claims.get(tenant_claim)
            if not isinstance(value, str) or not value:
                raise _invalid(
                    "invalid_claims", f"the token needs a non-empty string '{tenant_claim}' claim"
                )
            if unprintable(value):
                raise _invalid(
                    "invalid_claims",
                    f"the token's '{tenant_claim}' claim must not contain {_REFUSED_WHAT}",
                )
            tenant = value
        return Principal(subject=subject, tenant=tenant, scopes=granted_scopes(claims))


def bearer_token(authorization: str | None) -> str:
    """The token of an `Authorization: Bearer <token>` header, or AuthError (401)."""
    # a blank header carries no credentials at all, so it is answered like an absent one
    if authorization is None or not authorization.strip():
        raise _missing("send an 'Authorization: Bearer <token>' header")
    if "," in authorization:
        # no token68 holds a comma: this is two header lines joined (RFC 9110 §5.3), or two
        # credentials in one, and a proxy may have checked the other one (profile §16)
        raise AuthError(
            401,
            "invalid_request",
            "send exactly one Authorization header with one Bearer token",
            cause="malformed_token",
        )
    parts = authorization.split(None, 1)
    if parts[0].lower() != "bearer":
        # RFC 6750 §3.1: an unsupported scheme counts as no credentials (no error attribute)
        raise _missing("the Authorization header must use the Bearer scheme")
    token = parts[1].strip() if len(parts) == 2 else ""
    if not token or len(token) > _MAX_TOKEN_CHARS or len(token.split(None, 1)) != 1:
        raise _invalid(
            "malformed_token", "the Authorization header must be 'Bearer' followed by one JWT"
        )
    return token


def numeric_date(claims: Mapping[str, Any], name: str) -> float | None:
    value = claims.get(name)
    if value is None:
        return None
    # NaN/Infinity parse from JSON and would make a token that never expires
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise _invalid(
            "invalid_claims",
            f"the token's '{name}' claim must be a number of seconds since the epoch",
        )
    return float(value)


def granted_scopes(claims: Mapping[str, Any]) -> frozenset[str]:
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
            raise _invalid(
                "invalid_claims",
                f"the token's '{name}' claim must be a string or an array of strings",
            )
    return frozenset(found)


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
