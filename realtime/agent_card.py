"""The A2A 1.0 Agent Card served at /.well-known/agent-card.json, with the members an A2A 0.3
client reads beside the 1.0 ones (`url`, `preferredTransport`, `protocolVersion`, the 0.3 form
of the security scheme and `security`), as the 0.3 interface it declares needs."""

from __future__ import annotations

from importlib import metadata
from typing import Any, get_args

from realtime.a2a.modes import INPUT_MODES
from realtime.a2a.params import InteractionType
from realtime.a2a.sessions import MEDIA_BINDING
from realtime.a2a.types import REALTIME_EXTENSION
from realtime.rpc.registry import CANCEL, INVOKE, METHODS, READ
from realtime.settings import Settings

INTERACTION_TYPES = get_args(InteractionType)
SCHEME = "bearer"
SCHEME_DESCRIPTION = (
    f"OAuth 2.0 bearer JWT. Scopes: {INVOKE} (send, realtime commands), "
    f"{READ} (get/list/subscribe), {CANCEL} (cancel)."
)


def requirements(*scopes: str) -> list[dict[str, Any]]:
    """1.0 `securityRequirements`: one alternative per scope (OR-ed)."""
    return [{"schemes": {SCHEME: {"list": [scope]}}} for scope in scopes]


def requirements_v03(*scopes: str) -> list[dict[str, list[str]]]:
    """The same requirements as A2A 0.3's `security`: `[{name: [scopes]}]`."""
    return [{SCHEME: [scope]} for scope in scopes]


def _version() -> str:
    try:
        return metadata.version("aim-realtime")
    except metadata.PackageNotFoundError:
        return "0.0.0"


def build_agent_card(settings: Settings) -> dict[str, Any]:
    """The card as a JSON-ready dict; depends only on settings, so it is built once."""
    base = settings.public_base_url
    return {
        "name": "AIM realtime session orchestrator",
        "description": (
            "Starts live voice/video sessions with an AI agent over LiveKit WebRTC. "
            "Send a message with a session.create data part (extension "
            f"{REALTIME_EXTENSION}) to start one; text-only chat is not offered. Message parts "
            "may be application/json (session.create, ContinueTask's decision) or text/plain "
            "(a text-only message is answered with a rejected task saying how to start a "
            "session); parts of any other media type are refused with -32005."
        ),
        "version": _version(),
        # in order of preference; one entry per protocol version, both on the same URL
        "supportedInterfaces": [
            {"url": f"{base}/a2a", "protocolBinding": "JSONRPC", "protocolVersion": "1.0"},
            {"url": f"{base}/a2a", "protocolBinding": "JSONRPC", "protocolVersion": "0.3"},
        ],
        # what an A2A 0.3 client reads from a card (ignored by 1.0 clients)
        "url": f"{base}/a2a",
        "preferredTransport": "JSONRPC",
        "protocolVersion": "0.3.0",
        "capabilities": {
            "streaming": True,
            "pushNotifications": False,
            "extendedAgentCard": False,
            "extensions": [
                {
                    "uri": REALTIME_EXTENSION,
                    "description": (
                        "Realtime sessions: session.create data part, aim.realtime.* methods, "
                        "commandId idempotency and sessionEpoch fencing."
                    ),
                    "required": False,
                    "params": {
                        "methods": [name for name in METHODS if name.startswith("aim.realtime.")],
                        "mediaBindings": [MEDIA_BINDING],
                        "interactionTypes": list(INTERACTION_TYPES),
                        "interactionClasses": ["text", "pointer", "tool", "confirmation"],
                        "providerCapabilities": sorted(settings.provider_capabilities),
                        "sessionCreate": {
                            "mediaType": "application/json",
                            "operation": "session.create",
                        },
                    },
                }
            ],
        },
        # the 1.0 form (`httpAuthSecurityScheme`) and, beside it, the 0.3 form of the same
        # scheme (`type`, `scheme`, `bearerFormat`): each generation reads its own members
        "securitySchemes": {
            SCHEME: {
                "httpAuthSecurityScheme": {
                    "scheme": "Bearer",
                    "bearerFormat": "JWT",
                    "description": SCHEME_DESCRIPTION,
                },
                "type": "http",
                "scheme": "bearer",
                "bearerFormat": "JWT",
                "description": SCHEME_DESCRIPTION,
            }
        },
        # OR-ed: a token with any one of the scopes may call the methods that scope covers
        "securityRequirements": requirements(INVOKE, READ, CANCEL),
        "security": requirements_v03(INVOKE, READ, CANCEL),  # the same, as 0.3 writes it
        # what message parts may carry (checked: `a2a/modes`)
        "defaultInputModes": list(INPUT_MODES),
        "defaultOutputModes": ["application/json", "text/plain"],
        "skills": [
            {
                "id": "realtime-session",
                "name": "Realtime voice/video session",
                "description": (
                    "Creates a LiveKit room with the AI agent dispatched, registers devices, "
                    "issues WebRTC join tokens, hands sessions over between devices."
                ),
                "tags": ["realtime", "voice", "video", "webrtc", "livekit"],
                "examples": ["Start a voice session with the assistant"],
                "inputModes": ["application/json"],
                "outputModes": ["application/json"],
                "securityRequirements": requirements(INVOKE),
                "security": requirements_v03(INVOKE),
            },
            {
                "id": "tasks",
                "name": "Task tracking",
                "description": "Get, list and cancel the tasks of your sessions.",
                "tags": ["tasks"],
                "securityRequirements": requirements(READ, CANCEL),
                "security": requirements_v03(READ, CANCEL),
            },
        ],
    }
