"""Provider API parameters (profile §10): one strict Struct per `aim.provider.*` method.

The provider is the agent worker LiveKit dispatched into the session's room. Its calls are
JSON-RPC 2.0 at `POST /provider`, authenticated by the provider token of that session.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Final, Literal

import msgspec
from msgspec import UNSET, Meta, UnsetType

from realtime.a2a.params import Params, decode_as
from realtime.a2a.scalars import Epoch, Timestamp, Uuid
from realtime.errors import invalid_params

MAX_RESULT_BYTES: Final = 16 * 1024
# an operation's action is kept in the session's snapshot, rewritten by every commit, until the
# session ends: bounded like a result (decision 172)
MAX_ACTION_BYTES: Final = 16 * 1024
# the context an agent saves for its successor: opaque to the service, kept beside the session
# until it ends (profile §23)
MAX_CONTEXT_BYTES: Final = 64 * 1024
# interactions acknowledged in one call
MAX_ACKS: Final = 100
Title = Annotated[str, Meta(min_length=1, max_length=200)]


class ProviderParams(Params, frozen=True):
    """Every provider call names the session its token is for."""

    session_id: Uuid


class ReportAgentStateParams(ProviderParams, frozen=True):
    session_epoch: Epoch
    state: Literal["joined", "listening", "thinking", "speaking", "left"]


class Action(Params, frozen=True):
    title: Title
    description: Annotated[str, Meta(max_length=2000)] | UnsetType = UNSET
    tool: Annotated[str, Meta(min_length=1, max_length=128)] | UnsetType = UNSET
    arguments: dict[str, Any] | UnsetType = UNSET


class MediaTarget(Params, frozen=True):
    side: Literal["user", "agent"]
    source: Literal["camera", "screen"]


class RequestOperationParams(ProviderParams, frozen=True):
    session_epoch: Epoch
    request_id: Uuid
    kind: Literal["action", "media.request"]
    confirmation: Literal["required", "none"]
    action: Action | UnsetType = UNSET
    media: MediaTarget | UnsetType = UNSET
    expires_in_seconds: Annotated[int, Meta(ge=1, le=86400)] | UnsetType = UNSET

    def __post_init__(self) -> None:
        if self.kind == "action" and (self.action is UNSET or self.media is not UNSET):
            raise ValueError("an `action` operation carries `action` and no `media`")
        if self.kind == "media.request" and (self.media is UNSET or self.action is not UNSET):
            raise ValueError("a `media.request` operation carries `media` and no `action`")
        if self.kind == "media.request" and self.confirmation != "required":
            raise ValueError(
                "a media request always needs the user's decision: confirmation must be `required`"
            )


class UpdateOperationParams(ProviderParams, frozen=True):
    request_id: Uuid
    operation_id: Uuid
    state: Literal["running", "succeeded", "failed"]
    result: Any | UnsetType = UNSET
    error: dict[str, Any] | UnsetType = UNSET

    def __post_init__(self) -> None:
        if self.result is not UNSET and self.state != "succeeded":
            raise ValueError("`result` belongs to state `succeeded`")
        if self.error is not UNSET and self.state != "failed":
            raise ValueError("`error` belongs to state `failed`")


class AppendTranscriptParams(ProviderParams, frozen=True):
    session_epoch: Epoch
    item_id: Annotated[str, Meta(min_length=1, max_length=128)]
    role: Literal["user", "agent"]
    text: Annotated[str, Meta(min_length=1, max_length=16000)]


class ReportDeadlineParams(ProviderParams, frozen=True):
    """When the agent's connection to its model ends, and why (profile §23)."""

    session_epoch: Epoch
    deadline: Timestamp
    reason: Literal["provider_cap", "provider_goaway", "planned"]


class SaveContextParams(ProviderParams, frozen=True):
    """An opaque context for the agent's successor; replaces the last."""

    session_epoch: Epoch
    context: Annotated[str, Meta(min_length=1)]


class AckInteractionsParams(ProviderParams, frozen=True):
    """The interactions (by commandId) the agent has taken in."""

    session_epoch: Epoch
    command_ids: Annotated[
        list[Annotated[str, Meta(min_length=1, max_length=200)]],
        Meta(min_length=1, max_length=MAX_ACKS),
    ]


class GetHandoverParams(ProviderParams, frozen=True):
    """A read: what an agent taking over needs (context, open operations, interactions)."""


class ListOperationsParams(ProviderParams, frozen=True):
    """A read: every operation of the session."""


class GetOperationParams(ProviderParams, frozen=True):
    operation_id: Uuid


PROVIDER_PARAMS: Final[Mapping[str, type[ProviderParams]]] = {
    "aim.provider.ReportAgentState": ReportAgentStateParams,
    "aim.provider.RequestOperation": RequestOperationParams,
    "aim.provider.UpdateOperation": UpdateOperationParams,
    "aim.provider.AppendTranscript": AppendTranscriptParams,
    "aim.provider.ListOperations": ListOperationsParams,
    "aim.provider.GetOperation": GetOperationParams,
    "aim.provider.ReportDeadline": ReportDeadlineParams,
    "aim.provider.SaveContext": SaveContextParams,
    "aim.provider.AckInteractions": AckInteractionsParams,
    "aim.provider.GetHandover": GetHandoverParams,
}


def decode_provider_params(method: str, raw: bytes) -> ProviderParams:
    """The method's params, or -32602 naming the offending path."""
    try:
        value = msgspec.json.decode(raw)
    except msgspec.DecodeError:
        raise invalid_params("params", "must be a JSON object") from None
    params = decode_as(PROVIDER_PARAMS[method], value, root="params")
    if isinstance(params, RequestOperationParams) and params.action is not UNSET:
        size = len(msgspec.json.encode(params.action))
        if size > MAX_ACTION_BYTES:
            raise invalid_params(
                "params.action",
                f"encodes to {size} bytes; an operation's action holds at most "
                f"{MAX_ACTION_BYTES} bytes of JSON: keep large arguments elsewhere and pass "
                "a reference",
            )
    if isinstance(params, SaveContextParams):
        size = len(params.context.encode())
        if size > MAX_CONTEXT_BYTES:
            raise invalid_params(
                "params.context",
                f"is {size} bytes of UTF-8; a saved context holds at most {MAX_CONTEXT_BYTES} "
                "bytes: keep the conversation's summary here and the rest elsewhere",
            )
    if isinstance(params, UpdateOperationParams):
        for name in ("result", "error"):
            member = getattr(params, name)
            if member is not UNSET and len(msgspec.json.encode(member)) > MAX_RESULT_BYTES:
                raise invalid_params(f"params.{name}", f"larger than {MAX_RESULT_BYTES} bytes")
    return params
