"""SendInteraction payloads, one strict type per interaction (profile §7, §15)."""

from __future__ import annotations

from typing import Annotated, Any, Final, Literal

import msgspec
from msgspec import UNSET, Meta, UnsetType

from realtime.a2a.params import Params, decode_as
from realtime.a2a.scalars import Digest, Uuid
from realtime.errors import invalid_params

MAX_PAYLOAD_BYTES: Final = 16 * 1024
Label = Annotated[str, Meta(min_length=1, max_length=256)]
Fraction = Annotated[float, Meta(ge=0.0, le=1.0)]


class InputText(Params, frozen=True):
    text: Annotated[str, Meta(min_length=1, max_length=4000)]


class Point(Params, frozen=True):
    x: Fraction
    y: Fraction


class VisualSelect(Params, frozen=True):
    target_id: Label | UnsetType = UNSET
    point: Point | UnsetType = UNSET
    label: Label | UnsetType = UNSET

    def __post_init__(self) -> None:
        if self.target_id is UNSET and self.point is UNSET:
            raise ValueError("a selection needs `targetId` or `point`")


class ResponseInterrupt(Params, frozen=True):
    response_id: Label | UnsetType = UNSET


class OperationConfirm(Params, frozen=True):
    operation_id: Uuid
    requirement_id: Uuid
    action_digest: Digest


class OperationCancel(Params, frozen=True):
    operation_id: Uuid


class MediaTarget(Params, frozen=True):
    side: Literal["user", "agent"]
    source: Literal["camera", "screen"]


class MediaDecide(Params, frozen=True):
    operation_id: Uuid
    decision: Literal["allow", "deny"]


PAYLOADS: Final[dict[str, type[Params]]] = {
    "input.text": InputText,
    "visual.select": VisualSelect,
    "response.interrupt": ResponseInterrupt,
    "operation.confirm": OperationConfirm,
    "operation.cancel": OperationCancel,
    "media.request": MediaTarget,
    "media.decide": MediaDecide,
    "media.prepare": MediaTarget,
    "media.stop": MediaTarget,
    "media.revoke": MediaTarget,
}

_SIZE: Final = msgspec.json.Encoder()


def decode_payload(kind: str, payload: dict[str, Any]) -> Params:
    """The typed payload of interaction `kind`, or -32602 naming the offending path."""
    if len(_SIZE.encode(payload)) > MAX_PAYLOAD_BYTES:
        raise invalid_params("params.payload", f"larger than {MAX_PAYLOAD_BYTES} bytes")
    return decode_as(PAYLOADS[kind], payload, root="params.payload")
