"""The A2A 0.1 Agent Card (`GET /.well-known/agent.json`), derived from the 1.0 card.

0.1 has no `protocolVersion`, no interface list and no extensions member: `url` is the 0.1
endpoint, `version` the agent's, and the description says how to start a session, since the
card cannot declare the realtime extension. Public, so it never carries `credentials`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from realtime.a2a.v01 import PATH


def _scopes(scopes: Mapping[str, str]) -> str:
    """`scope (method, method); …` in the order the scopes first appear."""
    methods: dict[str, list[str]] = {}
    for method, scope in scopes.items():
        methods.setdefault(scope, []).append(method)
    return "; ".join(f"{scope} ({', '.join(names)})" for scope, names in methods.items())


def agent_card(
    card: Mapping[str, Any], *, base_url: str, scopes: Mapping[str, str]
) -> dict[str, Any]:
    """The 0.1 card for the service whose 1.0 card is `card`, served at `base_url`; `scopes`
    is the scope each 0.1 method needs."""
    description = (
        "Starts live voice/video sessions with an AI agent over LiveKit WebRTC; text-only chat "
        "is not offered. To start one, send tasks/send or tasks/sendSubscribe with a task id "
        "of your choice (1 to 128 characters) and a message holding a data part "
        '{"type": "data", "data": {"operation": "session.create", ...}}: the session.create '
        "object of the realtime extension urn:aim:a2a:realtime:v1. Read, follow and cancel the "
        "task with tasks/get, tasks/resubscribe and tasks/cancel. The realtime session's id is "
        'the task\'s metadata["urn:aim:a2a:realtime:v1"].sessionId; registering a device and '
        f"joining it (aim.realtime.*) need A2A 1.0 at {base_url}/a2a. Authentication: an OAuth "
        f"2.0 bearer JWT with the scope of the method: {_scopes(scopes)}."
    )
    return {
        "name": card["name"],
        "description": description,
        "url": f"{base_url}{PATH}",
        "version": card["version"],
        "capabilities": {
            "streaming": True,
            "pushNotifications": False,
            "stateTransitionHistory": False,
        },
        "authentication": {"schemes": ["Bearer"]},
        "defaultInputModes": list(card["defaultInputModes"]),
        "defaultOutputModes": list(card["defaultOutputModes"]),
        "skills": [
            {k: v for k, v in skill.items() if k not in ("securityRequirements", "security")}
            for skill in card["skills"]
        ],
    }
