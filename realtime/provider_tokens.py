"""The agent's provider tokens (profile §10; docs/protocol.md, Provider API).

The service mints one per room it dispatches an agent to and hands it over in the job's
dispatch metadata; `/provider` verifies it. An HS256 JWT of its own issuer, audience and scope,
signed with the provider key (`Settings.provider_token_secret`), never with the client token
key, so a provider token is useless on `/a2a` and a client token on `/provider`. It grants
calls for one session (`sid`) from the agent of one room (`epoch`), the session's `gen`-th
agent (profile §23: a token without `gen`, minted before rotation, is the first's). The
`Authorization` header is read, and a token refused (401 with a cause, 403 without the
scope), as client tokens are (realtime/auth.py).
"""

from __future__ import annotations

from typing import Final

import jwt
import msgspec

from realtime.auth import (
    CLAIM_CAUSES,
    MAX_LEEWAY_S,
    bearer_token,
    granted_scopes,
    numeric_date,
    refusal,
)
from realtime.errors import AuthError
from realtime.jwks import invalid_token

PROVIDER_AUDIENCE: Final = "urn:aim:a2a:realtime:v1:provider"
PROVIDER_ISSUER: Final = "aim-realtime"
PROVIDER_SCOPE: Final = "aim.provider"


class ProviderGrant(msgspec.Struct, frozen=True):
    """What a verified provider token allows: calls for one session, from its room's agent."""

    session_id: str
    epoch: int
    generation: int = 1


def mint_provider_token(
    secret: str, *, session_id: str, epoch: int, ttl_s: int, now: int, generation: int = 1
) -> str:
    """The provider token of the `generation`-th agent of `session_id`, sent to its room of
    `epoch` (handed over in dispatch metadata)."""
    claims = {
        "iss": PROVIDER_ISSUER,
        "aud": PROVIDER_AUDIENCE,
        "sub": f"provider:{session_id}",
        "sid": session_id,
        "epoch": epoch,
        "gen": generation,
        "scope": PROVIDER_SCOPE,
        "iat": now,
        "exp": now + ttl_s,
    }
    return jwt.encode(claims, secret, algorithm="HS256")


def verify_provider_token(
    secret: str, authorization: str | None, *, now: float, leeway: int
) -> ProviderGrant:
    """The grant of a provider token, or AuthError (401, or 403 without the provider scope)."""
    token = bearer_token(authorization)
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
        raise invalid_token(
            "invalid_audience", f"this is not a provider token (aud must be '{PROVIDER_AUDIENCE}')"
        ) from None
    except jwt.MissingRequiredClaimError as exc:
        raise invalid_token(
            CLAIM_CAUSES.get(exc.claim, "invalid_claims"),
            f"the provider token lacks the '{exc.claim}' claim",
        ) from None
    except jwt.PyJWTError as exc:
        cause = refusal(exc, issuer=PROVIDER_ISSUER, audience=PROVIDER_AUDIENCE).cause
        raise invalid_token(
            cause or "invalid_claims",
            "the provider token could not be verified; use the session's token",
        ) from None
    exp = numeric_date(claims, "exp")
    if exp is None or now >= exp + min(leeway, MAX_LEEWAY_S):
        raise invalid_token("token_expired", "the provider token has expired")
    session_id, epoch = claims.get("sid"), claims.get("epoch")
    if not isinstance(session_id, str) or not isinstance(epoch, int) or isinstance(epoch, bool):
        raise invalid_token(
            "invalid_claims", "the provider token's sid and epoch claims are malformed"
        )
    generation = claims.get("gen", 1)
    if not isinstance(generation, int) or isinstance(generation, bool) or generation < 1:
        raise invalid_token("invalid_claims", "the provider token's gen claim is malformed")
    if PROVIDER_SCOPE not in granted_scopes(claims):
        raise AuthError(
            403,
            "insufficient_scope",
            f"the token lacks the scope {PROVIDER_SCOPE}",
            required_scope=PROVIDER_SCOPE,
        )
    return ProviderGrant(session_id=session_id, epoch=epoch, generation=generation)
