"""JSON-RPC 2.0 envelope: decoded once, `params` kept raw for the method's own decoder; the
response objects written in one place (`result_response`, `error_response`)."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from itertools import accumulate
from typing import Any, Final

import msgspec

from realtime.errors import BadRequest, InvalidRequest, ParseError

RequestId = int | str

_ALLOWED_MEMBERS: Final = frozenset({"jsonrpc", "id", "method", "params"})
_OBJECT: Final = msgspec.json.Decoder(dict[str, msgspec.Raw])
_ID: Final = msgspec.json.Decoder(RequestId)
_STR: Final = msgspec.json.Decoder(str)
_FLOAT: Final = msgspec.json.Decoder(float)
_ENCODER: Final = msgspec.json.Encoder()

MAX_DEPTH: Final = 64  # profile §16: arrays and objects, the outermost one included
# a JSON string, escapes included; possessive, so a long string costs one linear pass
_STRING: Final = re.compile(rb'"(?:[^"\\]++|\\.)*+"', re.DOTALL)
_NOT_BRACKETS: Final = bytes(b for b in range(256) if b not in b"[]{}")
_DEPTH_STEP: Final = {ord("["): 1, ord("{"): 1, ord("]"): -1, ord("}"): -1}


class Envelope(msgspec.Struct, frozen=True):
    id: RequestId
    method: str
    params: msgspec.Raw


def result_response(request_id: RequestId | None, result: Any) -> bytes:
    """The JSON-RPC response carrying `result` (a msgspec Struct or builtins)."""
    return _ENCODER.encode({"jsonrpc": "2.0", "id": request_id, "result": result})


def error_response(request_id: RequestId | None, error: Mapping[str, Any]) -> bytes:
    """The JSON-RPC response carrying the error object `error` (`{code, message, data}`)."""
    return _ENCODER.encode({"jsonrpc": "2.0", "id": request_id, "error": error})


def body_error(body: bytes) -> BadRequest | None:
    """What makes `body` unreadable as JSON before any decoder runs (profile §16), or None.

    RFC 8259 JSON is UTF-8 throughout, string values included (decoders that keep values raw
    never look inside them); nesting is bounded so that no decoder recurses into Python's stack.
    """
    try:
        body.decode()
    except UnicodeDecodeError:
        return ParseError()
    if _nesting_depth(body) > MAX_DEPTH:
        return InvalidRequest(
            f"the JSON nests arrays and objects deeper than {MAX_DEPTH} levels; "
            f"at most {MAX_DEPTH} are accepted"
        )
    return None


def _nesting_depth(body: bytes) -> int:
    """The deepest nesting of arrays and objects, brackets inside strings not counted."""
    if body.count(b"[") + body.count(b"{") <= MAX_DEPTH:
        return 0  # too few brackets to go deeper: the common case, two scans in C
    brackets = _STRING.sub(b"", body).translate(None, _NOT_BRACKETS)
    return max(accumulate(map(_DEPTH_STEP.__getitem__, brackets)), default=0)


def decode_envelope(
    body: bytes, *, jsonrpc_optional: bool = False
) -> tuple[Envelope | None, BadRequest | None, RequestId | None]:
    """(envelope, None, id) for a valid request, or (None, error, id-if-readable).
    `jsonrpc_optional`: an absent `jsonrpc` reads as "2.0" (A2A 0.1's schema)."""
    unreadable = body_error(body)
    if unreadable is not None:
        return None, unreadable, None
    try:
        members = _OBJECT.decode(body)
    except msgspec.ValidationError:
        # not an object: a batch array, a scalar… or not JSON at all, which msgspec only finds
        # out past the first value (`[1,`, `1 x`): that is a parse error (JSON-RPC 2.0 §5.1)
        if not _is_json(body):
            return None, ParseError(), None
        if body.lstrip().startswith(b"["):
            return None, InvalidRequest("batches are not supported; send one request"), None
        return None, InvalidRequest("the request must be a JSON object"), None
    except msgspec.DecodeError:
        return None, ParseError(), None
    request_id: RequestId | None = None
    if "id" in members:
        request_id = _request_id(members["id"])
        if request_id is None:
            return None, InvalidRequest("`id` must be a string or an integer", "id"), None
    unknown = sorted(set(members) - _ALLOWED_MEMBERS)
    if unknown:
        return (
            None,
            InvalidRequest(f"unknown member `{unknown[0]}`", unknown[0]),
            request_id,
        )
    if jsonrpc_optional and "jsonrpc" not in members:
        members["jsonrpc"] = msgspec.Raw(b'"2.0"')
    if "jsonrpc" not in members or members["jsonrpc"] != b'"2.0"':
        try:
            version_ok = _STR.decode(members.get("jsonrpc", b"null")) == "2.0"
        except msgspec.ValidationError:
            version_ok = False
        if not version_ok:
            return None, InvalidRequest('`jsonrpc` must be "2.0"', "jsonrpc"), request_id
    if request_id is None:
        return (
            None,
            InvalidRequest("notifications are not supported: give the request an `id`", "id"),
            None,
        )
    try:
        method = _STR.decode(members.get("method", b"null"))
    except msgspec.ValidationError:
        return None, InvalidRequest("`method` must be a string", "method"), request_id
    params = members.get("params")
    if params is None or not bytes(params).lstrip().startswith(b"{"):
        return None, InvalidRequest("`params` must be an object", "params"), request_id
    return Envelope(id=request_id, method=method, params=params), None, request_id


def _request_id(raw: msgspec.Raw) -> RequestId | None:
    """The id, or None when it is not a string or an integer (JSON null, true, 1.5, [], {})."""
    try:
        return _ID.decode(raw)
    except msgspec.ValidationError:
        pass
    # the schema's `integer` includes numbers with a zero fraction (`1.0`, `1e2`): the same id
    try:
        number = _FLOAT.decode(raw)
    except msgspec.ValidationError:
        return None
    return int(number) if math.isfinite(number) and number.is_integer() else None


def _is_json(body: bytes) -> bool:
    try:
        msgspec.json.decode(body)
    except msgspec.ValidationError:
        return True  # well-formed, only beyond what Python holds (e.g. 1e400)
    except msgspec.DecodeError:
        return False
    return True
