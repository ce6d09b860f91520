"""The A2A methods this agent does not offer, answered with A2A's error for each rather than
-32601 (they exist in A2A; this agent lacks the capability, as its Agent Card says):

- the push notification config methods → -32003, the card declares `pushNotifications: false`;
- GetExtendedAgentCard → -32004, the card declares `extendedAgentCard: false` (A2A §3.3.4:
  -32007 is for a card that is declared but not configured).

They are authenticated, authorized (their scopes are in the method table) and rate-limited like
every method; their params are never read (`MethodSpec.reads_params`), since no params could
make them succeed. Older A2A versions' names for them map onto these 1.0 names in their
adapter's method table.
"""

from __future__ import annotations

from typing import Any, NoReturn

from realtime.errors import PushNotificationNotSupported, UnsupportedOperation, method_name
from realtime.methods.context import Call


async def push_notifications(call: Call[Any]) -> NoReturn:
    raise PushNotificationNotSupported(
        (
            "This agent does not send push notifications (its Agent Card declares "
            "capabilities.pushNotifications: false), so it keeps no push notification "
            "configs. Follow a task with ",
            method_name("SubscribeToTask"),
            ", or read it with ",
            method_name("GetTask"),
            ".",
        ),
        details={"capability": "pushNotifications"},
    )


async def extended_agent_card(call: Call[Any]) -> NoReturn:
    raise UnsupportedOperation(
        "This agent has no extended Agent Card (its Agent Card declares "
        "capabilities.extendedAgentCard: false): the public card at "
        "/.well-known/agent-card.json is all there is.",
        details={"capability": "extendedAgentCard"},
    )
