"""Every SendInteraction type meets the same refusals: a stale epoch, a session without an
active device, an interaction class the session did not request, and a payload with an unknown
member (profile §6, §7)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.conftest import error_info, violations
from tests.e2e.agent_operation_helpers import interact, open_session
from tests.e2e.realtime_helpers import new_id

pytestmark = pytest.mark.e2e

DIGEST = "sha256:" + "0" * 64
USER_CAMERA = {"side": "user", "source": "camera"}

# each type with a payload that is valid on its own, and the class it needs (None: none)
TYPES: dict[str, tuple[dict[str, Any], str | None]] = {
    "input.text": ({"text": "hello"}, "text"),
    "visual.select": ({"targetId": "card-3"}, "pointer"),
    "response.interrupt": ({}, None),
    "operation.confirm": (
        {"operationId": new_id(), "requirementId": new_id(), "actionDigest": DIGEST},
        "confirmation",
    ),
    "operation.cancel": ({"operationId": new_id()}, "confirmation"),
    "media.request": (USER_CAMERA, None),
    "media.decide": ({"operationId": new_id(), "decision": "allow"}, "confirmation"),
    "media.prepare": (USER_CAMERA, None),
    "media.stop": (USER_CAMERA, None),
    "media.revoke": (USER_CAMERA, None),
}
ALL_CLASSES = ("text", "pointer", "confirmation")


@pytest.mark.parametrize("kind", TYPES)
async def test_each_type_is_fenced_checked_and_validated(rt_client, livekit, kind):
    payload, needed = TYPES[kind]
    live = await open_session(rt_client, livekit, interactions=ALL_CLASSES)

    stale = await interact(rt_client, live.sid, kind, payload, epoch=2)
    assert stale["error"]["code"] == -31002
    assert error_info(stale)["metadata"]["reason"] == "ahead"

    bad = await interact(rt_client, live.sid, kind, {**payload, "bogus": 1})
    assert bad["error"]["code"] == -32602
    assert violations(bad) == ["params.payload.bogus"]

    idle = await open_session(rt_client, livekit, interactions=ALL_CLASSES, join=False)
    no_device = await interact(rt_client, idle.sid, kind, payload)
    assert no_device["error"]["code"] == -31003

    if needed is not None:
        others = tuple(c for c in ALL_CLASSES if c != needed)
        narrow = await open_session(rt_client, livekit, interactions=others)
        missing = await interact(rt_client, narrow.sid, kind, payload)
        assert missing["error"]["code"] == -31009
        assert error_info(missing)["metadata"]["missing"] == needed
