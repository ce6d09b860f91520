"""What the client-token tests share: a refused token, and a refused principal claim."""

from __future__ import annotations

import pytest

from realtime.auth import Authenticator
from realtime.errors import AuthError


async def refused(authenticator: Authenticator, header: str) -> AuthError:
    """The token is refused as a client sees it: 401 invalid_token."""
    with pytest.raises(AuthError) as info:
        await authenticator.authenticate(header)
    assert (info.value.status, info.value.reason) == (401, "invalid_token")
    return info.value


async def refused_claim(authenticator: Authenticator, header: str, claim: str) -> str:
    """The token is refused for its `claim`, which the message names; the message."""
    message = (await refused(authenticator, header)).message
    assert f"'{claim}'" in message
    return message
