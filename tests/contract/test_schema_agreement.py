"""The server agrees with the request schema (`aim-a2a-v1.schema.json`, copied beside this file).

For every method, requests are generated from the schema (objects assembled member by member
from the schema, each member's value drawn by hypothesis-jsonschema; hand-made strategies for
messages and parts, whose `oneOf`/`allOf`/`not` make hypothesis-jsonschema slow) and checked with
`jsonschema` (Draft 2020-12 with a FormatChecker; rfc3339-validator makes `date-time` checked):

- schema-valid → the server decodes it (no -32600/-32602), except the places where profile §15
  makes the server stricter than the schema; those are named below (`stricter_than_schema`) and
  must be refused with -32602 naming the member;
- schema-invalid (a valid request broken by one mutation) → -32600 or -32602 with a
  fieldViolation on the mutated member, one of its ancestors or one of its descendants.

Most cases run at the decoder level (`decode_envelope` + `decode_params` + the session.create data
part check of SendMessage), derandomized: random valid requests, random mutations, and every
targeted mutation of a few requests. A smaller pass sends cases through the real server.
"""

from __future__ import annotations

import asyncio
import base64
import copy
import functools
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Final

import httpx
import msgspec
import pytest
from hypothesis import HealthCheck, Phase, assume, event, given, settings
from hypothesis import strategies as st
from hypothesis_jsonschema import from_schema
from jsonschema import Draft202012Validator, FormatChecker

from realtime.a2a.params import (
    MAX_CONTEXT_ID_CHARS,
    MAX_MESSAGE_PART_BYTES,
    SendParams,
    SessionCreate,
    decode_as,
    decode_params,
)
from realtime.errors import ServiceError
from realtime.methods.messages import session_create_part
from realtime.rpc.envelope import decode_envelope
from realtime.rpc.errors import code_of
from tests.conftest import headers

SCHEMA: Final = json.loads(Path(__file__).with_name("aim-a2a-v1.schema.json").read_text())
DEFS: Final = SCHEMA["$defs"]
FORMATS: Final = FormatChecker()
REQUEST_VALIDATOR: Final = Draft202012Validator(SCHEMA, format_checker=FORMATS)
# x-aim-transport.realtimeSessionCreateDataPart: a SendMessage data part with mediaType
# application/json whose data has operation "session.create" must match this (profile §3)
SESSION_CREATE_VALIDATOR: Final = Draft202012Validator(
    {"$defs": DEFS, "$ref": SCHEMA["x-aim-transport"]["realtimeSessionCreateDataPart"]["schema"]},
    format_checker=FORMATS,
)
METHODS: Final[tuple[str, ...]] = tuple(SCHEMA["properties"]["method"]["enum"])
SEND_METHODS: Final = frozenset({"SendMessage", "SendStreamingMessage"})
CONTENT_MEMBERS: Final = ("text", "raw", "url", "data")
INVALID_CODES: Final = frozenset({-32600, -32602})

AGREEMENT: Final = settings(
    max_examples=150,
    derandomize=True,
    database=None,
    deadline=None,
    suppress_health_check=[
        HealthCheck.too_slow,
        HealthCheck.filter_too_much,
        HealthCheck.data_too_large,
    ],
)
HTTP_CASES: Final = 30  # valid and as many invalid, per method
HTTP_CONCURRENCY: Final = 8


def _params_definitions() -> dict[str, str]:
    """method → name of its params definition, read from the schema's if/then rules."""
    names: dict[str, str] = {}
    for rule in SCHEMA["allOf"]:
        condition = rule["if"]["properties"]["method"]
        definition = rule["then"]["properties"]["params"]["$ref"].rsplit("/", 1)[1]
        for method in condition.get("enum", [condition.get("const")]):
            names[method] = definition
    return names


PARAMS_DEFINITION: Final = _params_definitions()


def _uuid_members(schema: Any) -> frozenset[str]:
    """Names of the members whose schema is `$defs/uuid`, wherever they are declared."""
    found: set[str] = set()
    if isinstance(schema, dict):
        for name, member in schema.get("properties", {}).items():
            if member == {"$ref": "#/$defs/uuid"}:
                found.add(name)
        for value in schema.values():
            found |= _uuid_members(value)
    elif isinstance(schema, list):
        for value in schema:
            found |= _uuid_members(value)
    return frozenset(found)


UUID_MEMBERS: Final = _uuid_members(DEFS)
PATTERN_MEMBERS: Final = frozenset({"actionDigest", "statusTimestampAfter"})  # pattern, date-time
# members whose value is any JSON (`{}` or `type: object` with nothing inside): not descended into
FREE_FORM: Final = frozenset({"metadata", "payload"})


# ---------------------------------------------------------------------------------------------
# the two sides: the contract (jsonschema) and the server (its own decoders)


def is_session_create(part: Any, method: str) -> bool:
    """Mirrors `realtime.methods.messages.session_create_part` on the raw JSON (profile §3)."""
    return (
        method in SEND_METHODS
        and isinstance(part, dict)
        and part.get("mediaType") == "application/json"
        and isinstance(part.get("data"), dict)
        and part["data"].get("operation") == "session.create"
    )


def message_parts(request: dict[str, Any]) -> list[tuple[str, Any]]:
    params = request.get("params")
    message = params.get("message") if isinstance(params, dict) else None
    parts = message.get("parts") if isinstance(message, dict) else None
    if not isinstance(parts, list):
        return []
    return [(f"params.message.parts[{index}]", part) for index, part in enumerate(parts)]


def schema_valid(request: dict[str, Any]) -> bool:
    if not REQUEST_VALIDATOR.is_valid(request):
        return False
    method = request["method"]
    return all(
        SESSION_CREATE_VALIDATOR.is_valid(part["data"])
        for _, part in message_parts(request)
        if is_session_create(part, method)
    )


def server_verdict(body: bytes) -> ServiceError | None:
    """What the server's decoders say about `body`: None when it is accepted."""
    envelope, error, _ = decode_envelope(body)
    if error is not None:
        return error
    assert envelope is not None
    try:
        params = decode_params(envelope.method, bytes(envelope.params))
        if isinstance(params, SendParams):  # what SendMessage's handler decodes next
            found = session_create_part(params.message)
            if found is not None:
                index, data = found
                decode_as(SessionCreate, data, root=f"params.message.parts[{index}].data")
    except ServiceError as exc:
        return exc
    return None


def encode(request: dict[str, Any]) -> bytes:
    return msgspec.json.encode(request)


def json_path(steps: tuple[str | int, ...]) -> str:
    return "".join(f"[{step}]" if isinstance(step, int) else f".{step}" for step in steps)[1:]


def related(reported: str, mutated: str) -> bool:
    """One path is the other or an ancestor of it (`a.b` ~ `a.b[0].c`, `a.b[0]` ~ `a.b`)."""
    shorter, longer = sorted((reported, mutated), key=len)
    return longer == shorter or longer.startswith((shorter + ".", shorter + "["))


def field_paths(error: ServiceError) -> list[str]:
    return [field for field, _ in error.violations]


def assert_refused(error: ServiceError | None, paths: list[str], context: object) -> None:
    assert error is not None, f"the server accepts a request it must refuse: {context}"
    assert code_of(error) in INVALID_CODES, (code_of(error), error.message, context)
    reported = field_paths(error)
    assert any(related(field, path) for field in reported for path in paths), (
        f"the server blames {reported}, not {paths}: {error.message} / {context}"
    )


# ---------------------------------------------------------------------------------------------
# profile §15: schema-valid requests the server refuses on purpose (and only these)

CANONICAL_UUID: Final = re.compile(
    r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}", re.ASCII
)
PADDED_BASE64: Final = re.compile(
    r"(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?", re.ASCII
)


Path_ = tuple[str | int, ...]


def typed_nodes(value: Any, method: str, path: Path_ = ()) -> Iterator[tuple[Path_, Any, bool]]:
    """(path, value, free) of every node the schema types, and of the free-form members (any
    JSON; `free` is True), which are not descended into. A part's `data` is free-form except in
    a SendMessage session.create part, where `$defs/realtimeSessionCreate` types it.
    """
    yield path, value, False
    if isinstance(value, dict):
        for key, child in value.items():
            if key in FREE_FORM or (key == "data" and not is_session_create(value, method)):
                yield (*path, key), child, True
            else:
                yield from typed_nodes(child, method, (*path, key))
    elif isinstance(value, list):
        for index, child in enumerate(value):
            yield from typed_nodes(child, method, (*path, index))


def stricter_than_schema(request: dict[str, Any]) -> list[tuple[str, str]]:
    """(rule, JSON path) of each place where the server may refuse this schema-valid request.

    The list is deliberately short; each rule says why the schema alone lets the value through.
    """
    method = request["method"]
    hits: list[tuple[str, str]] = []
    for path, value, free in typed_nodes(request, method):
        name = path[-1] if path and not free else None
        if (
            name in UUID_MEMBERS
            and len(path) > 1
            and isinstance(value, str)
            and not CANONICAL_UUID.fullmatch(value)
        ):
            # §15: uuids are the hyphenated 8-4-4-4-12 form. jsonschema's `uuid` check is Python's
            # UUID() plus hyphens at 8/13/18/23, so it also passes e.g. an extra hyphen, `_`
            # between digits or a trailing space/newline in the last group
            hits.append(("uuid_not_hyphenated_8_4_4_4_12", json_path(path)))
        if name in PATTERN_MEMBERS and isinstance(value, str) and value.endswith("\n"):
            # not a server rule but a validator artefact: JSON Schema patterns and formats are
            # ECMA-262 / RFC 3339, where `$` does not match before a final newline; Python's
            # `re` (used by jsonschema and rfc3339-validator) does, so `sha256:<64 hex>\n` and
            # `…T00:00:00Z\n` pass jsonschema although the schema refuses them
            hits.append(("python_dollar_matches_before_final_newline", json_path(path)))
    for path, part in message_parts(request):
        if not isinstance(part, dict):
            continue
        contents = [member for member in CONTENT_MEMBERS if member in part]
        if len(contents) > 1:
            # §15: a part carries exactly one of text/raw/url/data (A2A's oneof); the schema's
            # oneOf lets e.g. {"text", "raw"} through when only one branch's `required` is met
            hits.append(("part_with_several_contents", path))
        raw = part.get("raw")
        if isinstance(raw, str) and not PADDED_BASE64.fullmatch(raw):
            # §15: `raw` is standard padded base64 (RFC 4648); the schema only bounds its length
            hits.append(("raw_not_padded_base64", f"{path}.raw"))
    params = request["params"]
    sent = params.get("message") if isinstance(params, dict) else None
    if isinstance(sent, dict):
        context_id = sent.get("contextId")
        if isinstance(context_id, str) and len(context_id) > MAX_CONTEXT_ID_CHARS:
            # decision 171: a contextId is an identifier the service stores and indexes; the
            # schema leaves its length open
            hits.append(("context_id_longer_than_an_identifier", "params.message"))
        parts = sent.get("parts")
        if isinstance(parts, list) and len(msgspec.json.encode(parts)) > MAX_MESSAGE_PART_BYTES:
            # decision 171: one message's parts are bounded before anything is stored (the
            # encoded parts over-count the bound's bytes, so this names every refusal)
            hits.append(("message_parts_over_the_byte_bound", "params.message"))
    if method == "ContinueTask":
        task_id = params["message"]["taskId"]
        if task_id.lower() != params["id"].lower():
            # the schema's own `x-aim-crossFieldConstraints` ("message.taskId equals params.id"),
            # which JSON Schema cannot express; profile §8 repeats it
            hits.append(("continue_task_id_differs_from_id", "params.message.taskId"))
    return hits


# Deliberately NOT exceptions (the server was fixed to agree with the schema instead):
# - integers written with a zero fraction (`1.0`, `1e2`, also as the request `id`): JSON Schema's
#   `integer` includes them and ProtoJSON readers accept them, so the server does too;
# - date-times: RFC 3339 exactly. rfc3339-validator refuses leap seconds (`:60`) and so does the
#   server; the server no longer takes a space for `T` or a `+hhmm` offset (msgspec does), and
#   truncates a fraction beyond microseconds instead of rounding `…23:59:59.9999999Z` of year
#   9999 into year 10000.


# ---------------------------------------------------------------------------------------------
# strategies for schema-valid requests

# Each request is drawn in one of two flavours: `odd` ones (about one in four) may carry the §15
# values above (odd uuids, unpadded raw, several contents, a digest/date-time with a final newline,
# a ContinueTask message naming another task); plain ones never do, so most cases must decode.
# Strategies are built once (`functools.cache`) and only drawn from inside composites: building
# strategies on every draw is what makes hypothesis slow.


def spread(choices: list[Any]) -> st.SearchStrategy[Any]:
    """Like `sampled_from`, without its lean towards the first choices (a wide integer, modulo)."""
    return st.integers(0, 2**32 - 1).map(lambda n: choices[n % len(choices)])


def pick(*strategies: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """Like `one_of`, without its lean towards the first strategy."""
    return spread(list(strategies)).flatmap(lambda strategy: strategy)


rarely = spread([False, False, False, True])
sometimes = spread([False, True])
short_texts = st.text(max_size=40)


@st.composite
def _uuids(draw: st.DrawFn, *, odd: bool) -> str:
    value = str(draw(st.uuids()))
    style = draw(spread(["lower", "upper", "odd"] if odd else ["lower", "upper"]))
    if style == "upper":
        return value.upper()
    if style == "lower":
        return value
    # accepted by jsonschema's `format: uuid` (see stricter_than_schema), refused by §15
    digits = value.replace("-", "")
    head, tail = value[:24], digits[20:]
    variant = draw(spread(["hyphen", "underscore", "space", "newline"]))
    if variant == "hyphen":
        return head + tail[:6] + "-" + tail[6:]
    if variant == "underscore":
        return head + tail[:5] + "_" + tail[6:]
    return head + tail[:11] + (" " if variant == "space" else "\n")


@functools.cache
def uuids(*, odd: bool) -> st.SearchStrategy[str]:
    return _uuids(odd=odd)


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=12),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=6,
)
json_objects = st.dictionaries(st.text(max_size=8), json_values, max_size=3)
rfc3339_edges = st.builds(
    "{}{}{}{}{}".format,
    st.dates().map(str),
    spread(["T", "t"]),
    st.times().map(lambda t: t.strftime("%H:%M:%S")),
    spread(["", ".5", ".123456", ".9999999", ".000000000001"]),
    spread(["Z", "z", "+00:00", "-00:00", "+23:59", "-23:59", "+05:30"]),
) | spread(["9999-12-31T23:59:59.9999999Z", "0001-01-01T00:00:00+23:59", "2024-02-29T12:00:00Z"])


def _resolve(schema: dict[str, Any]) -> dict[str, Any]:
    while "$ref" in schema:
        schema = DEFS[schema["$ref"].removeprefix("#/$defs/")]
    return schema


def schema_strategy(schema: dict[str, Any], *, odd: bool) -> st.SearchStrategy[Any]:
    """A strategy for `schema`: plain objects are assembled member by member (fast), every other
    member schema goes to hypothesis-jsonschema (whose own object strategy re-canonicalises the
    schema on every draw, too slow for hundreds of cases per method)."""
    return _schema_strategy(json.dumps(schema, sort_keys=True), odd=odd)


@functools.cache
def _schema_strategy(text: str, *, odd: bool) -> st.SearchStrategy[Any]:
    schema = _resolve(json.loads(text))
    if schema == {}:
        return json_values
    if schema == {"type": "object"}:
        return json_objects
    if (
        "properties" in schema
        and schema.get("additionalProperties") is False
        and not {"allOf", "anyOf", "oneOf", "not", "if"} & schema.keys()
    ):
        members = {
            name: schema_strategy(sub, odd=odd) for name, sub in schema["properties"].items()
        }
        required = schema.get("required", [])
        return st.fixed_dictionaries(
            {name: members[name] for name in required},
            optional={name: s for name, s in members.items() if name not in required},
        )
    leaves = from_schema({"$defs": DEFS, **schema}, custom_formats={"uuid": uuids(odd=odd)})
    if schema.get("format") == "date-time":
        if odd:
            return pick(leaves, rfc3339_edges, st.just("2024-01-01T00:00:00Z\n"))
        return pick(leaves, rfc3339_edges)
    return leaves


media_types = st.sampled_from(
    ["text/plain", "image/png", "application/json", "application/octet-stream", ""]
) | st.text(max_size=127)
filenames = st.text(min_size=1, max_size=255) | st.just("f" * 255)
padded_base64 = st.binary(min_size=1, max_size=48).map(lambda b: base64.b64encode(b).decode())
odd_raws = padded_base64.map(lambda v: v.rstrip("=") or "QQ") | st.text(min_size=1, max_size=20)
RAWS: Final = {False: padded_base64, True: pick(padded_base64, odd_raws)}
EXTRA_CONTENTS: Final = spread([("raw",), ("url",), ("raw", "url")])


@st.composite
def _parts(draw: st.DrawFn, *, odd: bool, text_or_data_only: bool) -> dict[str, Any]:
    kinds = ["text", "data"] if text_or_data_only else ["text", "raw", "url", "data"]
    kind = draw(spread(kinds))
    part: dict[str, Any] = {}
    if kind == "text":
        part["text"] = draw(short_texts)
    elif kind == "data":
        part["data"] = draw(json_values)
    elif kind == "raw":
        part["raw"] = draw(RAWS[odd])
    else:
        part["url"] = draw(short_texts)
    if kind in ("raw", "url") or draw(st.booleans()):
        part["mediaType"] = draw(media_types)
    if draw(st.booleans()):
        part["filename"] = draw(filenames)
    if draw(rarely):
        part["metadata"] = draw(json_values)
    if odd and not text_or_data_only and kind in ("text", "data") and draw(sometimes):
        # several contents: schema-valid when only one oneOf branch's `required` is met
        part.pop("mediaType", None)
        for extra in draw(EXTRA_CONTENTS):
            part[extra] = draw(RAWS[odd]) if extra == "raw" else draw(short_texts)
    return part


@functools.cache
def part_lists(*, odd: bool, text_or_data_only: bool) -> st.SearchStrategy[list[dict[str, Any]]]:
    """Schema-valid `parts` (for ContinueTask: text and data parts only): mostly short lists
    (drawing parts is what costs time here), sometimes the longest the schema allows."""
    one = _parts(odd=odd, text_or_data_only=text_or_data_only)
    longest = st.lists(st.builds(dict, text=st.text(max_size=3)), min_size=16, max_size=17)
    return st.lists(one, min_size=1, max_size=4) | longest


@st.composite
def _messages(
    draw: st.DrawFn, base: st.SearchStrategy[dict[str, Any]], *, odd: bool, create: bool
) -> dict[str, Any]:
    message = draw(base)
    if create or (len(message["parts"]) < 17 and draw(rarely)):
        data = draw(schema_strategy({"$ref": "#/$defs/realtimeSessionCreate"}, odd=odd))
        where = draw(st.integers(0, len(message["parts"])))
        message["parts"].insert(where, {"data": data, "mediaType": "application/json"})
    return message


@functools.cache
def messages(*, continuing: bool, odd: bool, create: bool) -> st.SearchStrategy[dict[str, Any]]:
    """A SendMessage message (with a session.create data part when `create`, else in one case
    out of four) or, `continuing`, a ContinueTask message without taskId."""
    base = st.fixed_dictionaries(
        {
            "messageId": st.text(min_size=1, max_size=128),
            "role": st.just("ROLE_USER"),
            "parts": part_lists(odd=odd, text_or_data_only=continuing),
        },
        optional={
            "contextId": st.none() | short_texts,
            "metadata": json_values,
            "extensions": st.lists(st.text(max_size=30), max_size=3),
            "referenceTaskIds": st.just([]),
            **({} if continuing else {"taskId": st.none()}),
        },
    )
    return base if continuing else _messages(base, odd=odd, create=create)


def send_params(*, odd: bool, create: bool) -> st.SearchStrategy[dict[str, Any]]:
    configuration = DEFS["sendParams"]["properties"]["configuration"]
    return st.fixed_dictionaries(
        {"message": messages(continuing=False, odd=odd, create=create)},
        optional={
            "configuration": schema_strategy(configuration, odd=odd),
            "metadata": json_values,
        },
    )


@st.composite
def _continue_params(
    draw: st.DrawFn, base: st.SearchStrategy[dict[str, Any]], *, odd: bool
) -> dict[str, Any]:
    params = draw(base)
    task_ids = st.sampled_from([params["id"], params["id"].upper()])
    # the message names the task (schema x-aim-crossFieldConstraints); odd ones may not
    params["message"]["taskId"] = draw(pick(task_ids, uuids(odd=odd)) if odd else task_ids)
    return params


def continue_params(*, odd: bool) -> st.SearchStrategy[dict[str, Any]]:
    digests = st.binary(min_size=32, max_size=32).map(lambda b: "sha256:" + b.hex())
    base = st.fixed_dictionaries(
        {
            "id": uuids(odd=odd),
            "requirementId": uuids(odd=odd),
            "expectedVersion": st.integers(min_value=0),
            "actionDigest": pick(digests, digests.map(lambda d: d + "\n")) if odd else digests,
            "message": messages(continuing=True, odd=odd, create=False),
        },
        optional={"historyLength": st.none() | st.integers(min_value=0)},
    )
    return _continue_params(base, odd=odd)


def respell_integers(value: Any) -> Any:
    """The same JSON with every integer written with a zero fraction (`3` → `3.0`)."""
    if isinstance(value, bool):
        return value
    if isinstance(value, int):
        return float(value) if abs(value) <= 2**53 else value
    if isinstance(value, dict):
        return {key: respell_integers(child) for key, child in value.items()}
    if isinstance(value, list):
        return [respell_integers(child) for child in value]
    return value


@functools.cache
def params_strategy(method: str, *, odd: bool, create: bool) -> st.SearchStrategy[dict[str, Any]]:
    if method in SEND_METHODS:
        return send_params(odd=odd, create=create)
    if method == "ContinueTask":
        return continue_params(odd=odd)
    return schema_strategy({"$ref": f"#/$defs/{PARAMS_DEFINITION[method]}"}, odd=odd)


request_ids = st.integers() | st.text(max_size=20)


@st.composite
def _valid_requests(draw: st.DrawFn, method: str, *, plain: bool, create: bool) -> dict[str, Any]:
    odd = not plain and draw(rarely)
    request = {
        "jsonrpc": "2.0",
        "id": draw(request_ids),
        "method": method,
        "params": draw(params_strategy(method, odd=odd, create=create)),
    }
    if draw(rarely):
        request = respell_integers(request)
    return request


@functools.cache
def valid_requests(
    method: str, *, plain: bool = False, create: bool = False
) -> st.SearchStrategy[dict[str, Any]]:
    """Schema-valid requests; one in four is `odd` unless `plain`; `create`: with a
    session.create part (SendMessage, SendStreamingMessage)."""
    return _valid_requests(method, plain=plain, create=create)


# ---------------------------------------------------------------------------------------------
# mutations: one change that makes a valid request schema-invalid

UNKNOWN_NAMES: Final = ["unknown", "x", "message_id", "task_id", "Role", "kind", "historyLength"]
WRONG_TYPED: Final = [None, True, 0, 1.5, "x", [], {}]
LENGTH_BOUNDS: Final = {
    "messageId": (1, 128),
    "raw": (1, 699052),
    "mediaType": (0, 127),
    "filename": (1, 255),
    "clientEndpointKey": (1, 128),
    "reason": (1, 128),
}
SPECIAL_VALUES: Final[dict[str, list[Any]]] = {
    "jsonrpc": ["1.0", "2", 2.0, "2.0 "],
    "id": [None, 1.5, True, {}, []],
    "role": ["ROLE_AGENT", "ROLE_UNSPECIFIED", "user", ""],
    "referenceTaskIds": [["123e4567-e89b-42d3-a456-426614174000"], ["x"], [None]],
    "taskPushNotificationConfig": [{}, {"url": "https://example.com/hook"}, ""],
    "pageSize": [0, 101, -1, 1.5, "10"],
    "historyLength": [-1, 0.5, "1"],
    "expectedVersion": [-1, 1.5],
    "sessionEpoch": [0, -1, 1.5],
    "returnImmediately": ["true", 1],
    "interactions": [["text", "text"], ["video"], ["text", "pointer", "text"]],
    "acceptedOutputModes": [["text/html"], ["image/png"], [None]],
    "status": ["TASK_STATE_UNKNOWN", "working", "TASK_STATE_UNSPECIFIED"],
    "type": ["input.voice", "INPUT_TEXT", ""],
    "taskId": ["123e4567-e89b-42d3-a456-426614174000", "not-a-uuid", 7],
    "contextId": [7, ["c"]],
    "includeArtifacts": ["yes", 0],
    "statusTimestampAfter": [
        "2024-01-01 00:00:00Z",
        "2024-01-01T00:00:00",
        "2024-01-01T00:00:00+0100",
        "2024-02-30T00:00:00Z",
        "2016-12-31T23:59:60Z",
        "2024-01-01",
        "",
    ],
    "parts": [[], [{"text": "p"}] * 18],
    # inside a session.create data part
    "mediaBinding": ["webrtc", "livekit-webrtc-v2"],
    "audio": ["inbound"],
    "recording": ["on"],
    "summary": ["on"],
    "transcript": ["maybe"],
    "requiredCapabilities": [["telepathy"]],
    "userVideoSources": [["window"]],
}
BAD_PARTS: Final[list[dict[str, Any]]] = [
    {},
    {"mediaType": "text/plain"},
    {"raw": "QUJD"},  # raw without mediaType
    {"url": "https://example.com/a.png"},  # url without mediaType
    {"text": "a", "data": 1},  # two oneOf branches
    {"raw": "QUJD", "url": "u", "mediaType": "image/png"},
    {"text": "a", "filename": ""},
    {"text": 1},
]
CONTINUE_ONLY_BAD_PARTS: Final[list[dict[str, Any]]] = [
    {"raw": "QUJD", "mediaType": "image/png"},
    {"url": "https://example.com/a.png", "mediaType": "image/png"},
]


def _expanded(schema: Any) -> Any:
    if isinstance(schema, dict):
        return {key: _expanded(value) for key, value in _resolve(schema).items()}
    if isinstance(schema, list):
        return [_expanded(value) for value in schema]
    return schema


def _properties(schema: Any) -> Iterator[tuple[str, Any]]:
    if isinstance(schema, dict):
        yield from schema.get("properties", {}).items()
        for value in schema.values():
            yield from _properties(value)
    elif isinstance(schema, list):
        for value in schema:
            yield from _properties(value)


def _declared(schema: Any, shape: tuple[str, ...], found: dict[tuple[str, ...], set[str]]) -> None:
    if not isinstance(schema, dict):
        return
    for name, member in schema.get("properties", {}).items():
        found.setdefault(shape, set()).add(name)
        _declared(member, (*shape, name), found)
    for key in ("allOf", "anyOf", "oneOf"):
        for branch in schema.get(key, []):
            _declared(branch, shape, found)
    if isinstance(schema.get("items"), dict):
        _declared(schema["items"], (*shape, "[]"), found)


@functools.cache
def declared_members(method: str) -> dict[tuple[str, ...], set[str]]:
    """Object shape (`("params", "message", "parts", "[]")`) → the members the schema declares."""
    found: dict[tuple[str, ...], set[str]] = {(): set(SCHEMA["properties"])}
    _declared(_expanded(DEFS[PARAMS_DEFINITION[method]]), ("params",), found)
    if method in SEND_METHODS:
        data = ("params", "message", "parts", "[]", "data")
        _declared(_expanded(DEFS["realtimeSessionCreate"]), data, found)
    return found


def mutation_kinds(method: str) -> list[str]:
    """The mutations that apply to `method`, from its params schema (and, for SendMessage, the
    session.create data part's)."""
    schema = _expanded(DEFS[PARAMS_DEFINITION[method]])
    if method in SEND_METHODS:
        schema = [schema, _expanded(DEFS["realtimeSessionCreate"])]
    properties = list(_properties(schema))
    names = {name for name, _ in properties}
    kinds = ["unknown_member", "wrong_type", "drop_member", "special_value"]
    if names & LENGTH_BOUNDS.keys():
        kinds.append("length")
    if any(sub.get("format") == "uuid" for _, sub in properties if isinstance(sub, dict)):
        kinds.append("break_uuid")
    if "actionDigest" in names:
        kinds.append("break_digest")
    if "parts" in names:
        kinds.append("bad_part")
    return kinds


def _node(request: Any, path: Path_) -> Any:
    for step in path:
        request = request[step]
    return request


def _candidates(request: dict[str, Any]) -> dict[str, list[Path_]]:
    """mutation → the paths it can apply to in `request`."""
    found: dict[str, list[Path_]] = {}
    for path, value, free in typed_nodes(request, request["method"]):
        last = path[-1] if path else None
        kinds = []
        if isinstance(value, dict) and not free:
            kinds.append("unknown_member")
        if path:
            kinds.append("wrong_type")
        if isinstance(last, str):
            kinds.append("drop_member")
        if not free and isinstance(last, str):
            if last in LENGTH_BOUNDS and isinstance(value, str):
                kinds.append("length")
            if last in UUID_MEMBERS and len(path) > 1 and isinstance(value, str):
                kinds.append("break_uuid")
            if last == "actionDigest":
                kinds.append("break_digest")
        if isinstance(value, dict) and not free:
            # members with telling wrong values, also where the request left them out
            shape = tuple("[]" if isinstance(step, int) else step for step in path)
            for name in sorted(declared_members(request["method"]).get(shape, set()) | set(value)):
                if name in SPECIAL_VALUES:
                    found.setdefault("special_value", []).append((*path, name))
        if isinstance(last, int) and path[:3] == ("params", "message", "parts") and len(path) == 4:
            kinds.append("bad_part")
        for kind in kinds:
            found.setdefault(kind, []).append(path)
    return found


def _broken_uuids(value: str) -> list[str]:
    return [
        value.replace("-", ""),
        "{" + value + "}",
        "urn:uuid:" + value,
        value[:-1],
        value + "0",
        value[:9] + "g" + value[10:],
        "",
        "not-a-uuid",
    ]


def _broken_digests(value: str) -> list[str]:
    digits = value.removeprefix("sha256:")[:64].ljust(64, "0")
    return [
        "sha256:" + digits.upper().replace("0", "A"),
        "sha256:" + digits[:63],
        "sha256:" + digits + "0",
        "sha512:" + digits,
        digits,
        "sha256:" + digits[:63] + "g",
        "SHA256:" + digits,
    ]


@st.composite
def _invalid_requests(
    draw: st.DrawFn, method: str, mutation: str
) -> tuple[dict[str, Any], str, str]:
    """(request, mutation, mutated path): a server-clean valid request broken in one place."""
    # SendMessage has uuids only in a session.create part
    create = mutation == "break_uuid" and method in SEND_METHODS
    request = draw(valid_requests(method, plain=True, create=create))
    assert not stricter_than_schema(request), "a plain request must be server-clean"
    candidates = _candidates(request)
    assume(mutation in candidates)
    path: Path_ = draw(spread(candidates[mutation]))
    if mutation == "unknown_member":
        target = _node(request, path)
        name = draw(spread([name for name in UNKNOWN_NAMES if name not in target]))
        target[name] = draw(json_values)
        path = (*path, name)
    elif mutation == "drop_member":
        del _node(request, path[:-1])[path[-1]]
    else:
        _node(request, path[:-1])[path[-1]] = draw(spread(replacements(request, mutation, path)))
    assume(not schema_valid(request))
    return request, mutation, json_path(path)


def replacements(request: dict[str, Any], mutation: str, path: Path_) -> list[Any]:
    """The values a value-replacing `mutation` puts at `path`."""
    name = path[-1]
    if mutation == "wrong_type":
        current = _node(request, path)
        return [value for value in WRONG_TYPED if type(value) is not type(current)]
    if mutation == "length":
        low, high = LENGTH_BOUNDS[str(name)]
        return [value for value in ("", "a" * (high + 1)) if not low <= len(value) <= high]
    if mutation == "break_uuid":
        return _broken_uuids(str(_node(request, path)))
    if mutation == "break_digest":
        return _broken_digests(str(_node(request, path)))
    if mutation == "special_value":
        return SPECIAL_VALUES[str(name)]
    assert mutation == "bad_part", mutation
    continuing = request["method"] == "ContinueTask"
    return [dict(part) for part in BAD_PARTS + (CONTINUE_ONLY_BAD_PARTS if continuing else [])]


def all_mutants(request: dict[str, Any]) -> Iterator[tuple[dict[str, Any], str, str]]:
    """Every targeted one-place mutation of `request` (the exhaustive counterpart of
    `invalid_requests`): (mutated copy, mutation, mutated path)."""
    for mutation, paths in _candidates(request).items():
        for path in paths:
            if mutation == "unknown_member":
                mutant = copy.deepcopy(request)
                _node(mutant, path)["unknown"] = 1
                yield mutant, mutation, json_path((*path, "unknown"))
            elif mutation == "drop_member":
                mutant = copy.deepcopy(request)
                del _node(mutant, path[:-1])[path[-1]]
                yield mutant, mutation, json_path(path)
            elif mutation != "wrong_type":  # covered at random: too many combinations
                for value in replacements(request, mutation, path):
                    mutant = copy.deepcopy(request)
                    _node(mutant, path[:-1])[path[-1]] = value
                    yield mutant, mutation, json_path(path)


@functools.cache
def invalid_requests(method: str, mutation: str) -> st.SearchStrategy[tuple[Any, str, str]]:
    """(request, mutation, mutated path): a plain valid request broken by `mutation`."""
    return _invalid_requests(method, mutation)


# ---------------------------------------------------------------------------------------------
# decoder level: hundreds of cases per method

MUTATIONS: Final = [(method, kind) for method in METHODS for kind in mutation_kinds(method)]
MUTATED_CASES: Final = 40  # per method and mutation: 4 to 8 mutations, so 160 to 320 a method


@pytest.mark.parametrize("method", METHODS)
@AGREEMENT
@given(data=st.data())
def test_schema_valid_requests_are_accepted(method: str, data: st.DataObject) -> None:
    request = data.draw(valid_requests(method), label="request")
    body = encode(request)
    assert schema_valid(json.loads(body)), "the strategy made a schema-invalid request"
    error = server_verdict(body)
    hits = stricter_than_schema(request)
    if hits:
        for rule, _ in hits:
            event(f"§15 {rule}")
        assert_refused(error, [path for _, path in hits], hits)
        assert error is not None
        assert code_of(error) == -32602
    else:
        event("accepted")
        assert error is None, f"schema-valid but refused: {error and error.message} {request!r}"


@pytest.mark.parametrize(("method", "mutation"), MUTATIONS)
@settings(AGREEMENT, max_examples=MUTATED_CASES)
@given(data=st.data())
def test_schema_invalid_requests_are_refused(
    method: str, mutation: str, data: st.DataObject
) -> None:
    request, mutation, path = data.draw(invalid_requests(method, mutation), label="mutated")
    assert_refused(server_verdict(encode(request)), [path], (mutation, path, request))


# ---------------------------------------------------------------------------------------------
# over the wire: fewer cases, through the real server

# Decoded fine, but refused with -32602 once the server looks at stored state or at per-type
# rules the schema leaves open (profile §15 last bullet, §7, §8): a page token it never issued,
# a SendInteraction payload, ContinueTask's {"decision"} data part and contextId.
STATEFUL_STRICTNESS: Final = {
    "ListTasks": "params.pageToken",
    "aim.realtime.SendInteraction": "params.payload",
    "ContinueTask": "params.message",
}


def collect(strategy: st.SearchStrategy[Any], count: int) -> list[Any]:
    """`count` derandomized examples of `strategy`: a plain `@given` run, callable from an async
    test (which cannot be a `@given` test itself)."""
    found: list[Any] = []

    @settings(AGREEMENT, max_examples=count, phases=[Phase.generate])
    @given(strategy)
    def gather(example: Any) -> None:
        found.append(example)

    gather()
    return found


async def post(client: httpx.AsyncClient, request: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    """(HTTP status, first JSON-RPC response object); an SSE reply is read up to its first event."""
    method = request.get("method")
    realtime = str(method).startswith("aim.realtime.") or any(
        is_session_create(part, str(method)) for _, part in message_parts(request)
    )
    async with client.stream(
        "POST",
        "/a2a",
        content=encode(request),
        headers={"Content-Type": "application/json", **headers(realtime=realtime)},
    ) as response:
        if response.headers.get("content-type", "").startswith("text/event-stream"):
            async for line in response.aiter_lines():
                if line.startswith("data:"):
                    return response.status_code, json.loads(line[5:])
            raise AssertionError("an event stream without a data line")
        return response.status_code, json.loads(await response.aread())


async def post_all(
    client: httpx.AsyncClient, requests: list[dict[str, Any]]
) -> list[tuple[int, dict[str, Any]]]:
    """`post` each request, a few at a time (each reply waits ~40 ms on this loopback)."""
    limit = asyncio.Semaphore(HTTP_CONCURRENCY)

    async def one(request: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        async with limit:
            return await post(client, request)

    return list(await asyncio.gather(*(one(request) for request in requests)))


def error_code(reply: dict[str, Any]) -> int | None:
    return reply["error"]["code"] if "error" in reply else None


def reply_fields(reply: dict[str, Any]) -> list[str]:
    return [
        violation["field"]
        for detail in reply["error"].get("data", [])
        if detail["@type"].endswith("google.rpc.BadRequest")
        for violation in detail["fieldViolations"]
    ]


def unserved_session_create_check(method: str, path: str, reply: dict[str, Any]) -> bool:
    """A known gap, to be closed when SendStreamingMessage is served: the session.create data part
    (x-aim-transport) is checked by the SendMessage handler, not by `decode_params`, and this
    release answers SendStreamingMessage with -32004 before any handler looks at the part. Only
    that exact answer is tolerated, so the gap closes itself once the method is served."""
    return (
        method == "SendStreamingMessage"
        and re.match(r"params\.message\.parts\[\d+\]\.data(?:[.\[]|$)", path) is not None
        and error_code(reply) == -32004
        and error_info_of(reply).get("metadata", {}).get("method") == method
    )


def error_info_of(reply: dict[str, Any]) -> dict[str, Any]:
    return next(
        detail
        for detail in reply["error"].get("data", [])
        if detail["@type"].endswith("google.rpc.ErrorInfo")
    )


@pytest.mark.parametrize("method", METHODS)
async def test_server_agrees_over_http(client: httpx.AsyncClient, method: str) -> None:
    valid = collect(
        valid_requests(method).filter(
            # no realtime session is started from here: that needs LiveKit
            lambda r: not any(is_session_create(p, method) for _, p in message_parts(r))
        ),
        HTTP_CASES,
    )
    invalid = collect(
        spread(mutation_kinds(method)).flatmap(lambda kind: invalid_requests(method, kind)),
        HTTP_CASES,
    )
    assert len(valid) >= HTTP_CASES // 2
    assert len(invalid) >= HTTP_CASES // 2
    for request, (status, reply) in zip(valid, await post_all(client, valid), strict=True):
        assert status == 200, (status, reply, request)
        code = error_code(reply)
        assert code != -32603, (reply, request)  # a valid request must not crash the server
        hits = stricter_than_schema(request)
        if hits:
            assert code == -32602, (reply, hits)
            assert any(related(f, path) for f in reply_fields(reply) for _, path in hits)
        elif code in INVALID_CODES:
            allowed = STATEFUL_STRICTNESS.get(method)
            assert code == -32602, (reply, request)
            assert allowed is not None, (reply, request)
            assert all(related(f, allowed) and len(f) >= len(allowed) for f in reply_fields(reply))
    replies = await post_all(client, [request for request, _, _ in invalid])
    for (request, mutation, path), (status, reply) in zip(invalid, replies, strict=True):
        assert status == 200, (status, reply, request)
        if unserved_session_create_check(method, path, reply):
            continue
        assert error_code(reply) in INVALID_CODES, (mutation, path, reply, request)
        fields = reply_fields(reply)
        assert any(related(f, path) for f in fields), (mutation, path, fields)


@pytest.mark.parametrize("method", METHODS)
def test_every_targeted_mutation_is_refused(method: str) -> None:
    """Exhaustive over the telling values (special members, broken uuids and digests, bad parts,
    lengths, unknown and missing members) on a few plain requests, absent optional members
    included: the random pass alone may miss a rare member."""
    bases = collect(valid_requests(method, plain=True), 3)
    if method in SEND_METHODS:
        bases += collect(valid_requests(method, plain=True, create=True), 1)
    checked = 0
    for base in bases:
        for mutant, mutation, path in all_mutants(base):
            if schema_valid(mutant):
                continue
            assert_refused(server_verdict(encode(mutant)), [path], (mutation, path, mutant))
            checked += 1
    assert checked >= 20 * len(bases)


def test_the_schema_copy_is_the_seed() -> None:
    seed = Path(__file__).parents[3] / "shared" / "spec" / "aim-a2a-v1.schema.json"
    if not seed.exists():
        pytest.skip("shared/spec is not beside the repository")
    assert json.loads(seed.read_text()) == SCHEMA
