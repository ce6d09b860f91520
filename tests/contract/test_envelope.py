"""JSON-RPC 2.0 envelope errors (profile §1, §12), at the decoder: `decode_envelope(body)`."""

from __future__ import annotations

import pytest

from realtime.errors import ServiceError
from realtime.rpc.envelope import decode_envelope
from realtime.rpc.errors import code_of

PARAMS = b'{"id":"123e4567-e89b-42d3-a456-426614174000"}'


def refused(body: bytes) -> tuple[ServiceError, object]:
    envelope, error, request_id = decode_envelope(body)
    assert envelope is None
    assert error is not None
    return error, request_id


def fields(error: ServiceError) -> list[str]:
    return [field for field, _ in error.violations]


NOT_JSON = [
    b"",
    b"{",
    b'{"jsonrpc": "2.0",}',
    b"nul",
    b'{"id": 1',
    b"\xff\xfe",
    b'{"a" 1}',
    b"[1,",
    b"1 x",
    b"{} {}",
]
BATCHES = [
    b"[]",
    b'[{"jsonrpc":"2.0","id":1,"method":"GetTask","params":{}}]',
    b'  [{"jsonrpc":"2.0","id":1,"method":"GetTask","params":{}}, {}]',
]


@pytest.mark.parametrize("body", NOT_JSON)
def test_invalid_json_is_a_parse_error_with_a_null_id(body: bytes) -> None:
    error, request_id = refused(body)
    assert code_of(error) == -32700
    assert request_id is None


@pytest.mark.parametrize("body", BATCHES)
def test_a_batch_is_an_invalid_request(body: bytes) -> None:
    error, request_id = refused(body)
    assert code_of(error) == -32600
    assert "batch" in error.message
    assert request_id is None


@pytest.mark.parametrize("body", [b"1", b"1.5", b'"request"', b"true", b"null"])
def test_a_scalar_is_an_invalid_request(body: bytes) -> None:
    error, request_id = refused(body)
    assert code_of(error) == -32600
    assert request_id is None


@pytest.mark.parametrize("version", [None, b'"1.0"', b'"2"', b"2.0", b"2", b"null", b'"2.0 "'])
def test_jsonrpc_must_be_the_string_2_0(version: bytes | None) -> None:
    member = b"" if version is None else b'"jsonrpc":' + version + b","
    error, request_id = refused(
        b"{" + member + b'"id":7,"method":"GetTask","params":' + PARAMS + b"}"
    )
    assert code_of(error) == -32600
    assert fields(error) == ["jsonrpc"]
    assert request_id == 7  # the id could be read, so the error names it


def test_jsonrpc_may_be_written_with_an_escape() -> None:
    body = b'{"jsonrpc":"\\u0032.0","id":7,"method":"GetTask","params":' + PARAMS + b"}"
    envelope, error, _ = decode_envelope(body)
    assert error is None
    assert envelope is not None


def test_a_notification_is_an_invalid_request() -> None:
    error, request_id = refused(b'{"jsonrpc":"2.0","method":"GetTask","params":' + PARAMS + b"}")
    assert code_of(error) == -32600
    assert "notification" in error.message
    assert fields(error) == ["id"]
    assert request_id is None


@pytest.mark.parametrize(
    "request_id", [b"null", b"1.5", b"true", b"false", b"{}", b'{"a":1}', b"[]", b"[1]"]
)
def test_an_id_that_is_neither_a_string_nor_an_integer_is_refused(request_id: bytes) -> None:
    body = b'{"jsonrpc":"2.0","id":' + request_id + b',"method":"GetTask","params":' + PARAMS + b"}"
    error, echoed = refused(body)
    assert code_of(error) == -32600
    assert fields(error) == ["id"]
    assert echoed is None


@pytest.mark.parametrize(
    ("written", "read"),
    [
        (b"0", 0),
        (b"-3", -3),
        (b"9007199254740993", 9007199254740993),
        (b'""', ""),
        (b'"a"', "a"),
        # the schema's `integer` includes numbers with a zero fraction: the same id
        (b"1.0", 1),
        (b"1e2", 100),
        (b"-0.0", 0),
    ],
)
def test_an_id_is_a_string_or_an_integer(written: bytes, read: int | str) -> None:
    body = b'{"jsonrpc":"2.0","id":' + written + b',"method":"GetTask","params":' + PARAMS + b"}"
    envelope, error, request_id = decode_envelope(body)
    assert error is None
    assert envelope is not None
    assert envelope.id == read
    assert request_id == read
    assert type(request_id) is type(read)


@pytest.mark.parametrize("method", [None, b"null", b"7", b"[]", b'{"name":"GetTask"}', b"true"])
def test_method_must_be_a_string(method: bytes | None) -> None:
    member = b"" if method is None else b',"method":' + method
    error, request_id = refused(
        b'{"jsonrpc":"2.0","id":"r1"' + member + b',"params":' + PARAMS + b"}"
    )
    assert code_of(error) == -32600
    assert fields(error) == ["method"]
    assert request_id == "r1"


@pytest.mark.parametrize("params", [None, b"null", b"[]", b'["123e4567"]', b'"x"', b"1", b"true"])
def test_params_must_be_an_object(params: bytes | None) -> None:
    member = b"" if params is None else b',"params":' + params
    error, request_id = refused(b'{"jsonrpc":"2.0","id":3,"method":"GetTask"' + member + b"}")
    assert code_of(error) == -32600
    assert fields(error) == ["params"]
    assert request_id == 3


@pytest.mark.parametrize("member", [b'"extra":1', b'"Params":{}', b'"error":null', b'"result":{}'])
def test_an_unknown_envelope_member_is_an_invalid_request(member: bytes) -> None:
    body = b'{"jsonrpc":"2.0","id":3,"method":"GetTask","params":' + PARAMS + b"," + member + b"}"
    error, request_id = refused(body)
    assert code_of(error) == -32600
    name = member.split(b'"')[1].decode()
    assert fields(error) == [name]
    assert request_id == 3


@pytest.mark.parametrize(
    "body",
    [
        b'{"jsonrpc":"2.0","id":1,"method":"GetTask","params":' + PARAMS + b"}",
        b' \n{ "params" : ' + PARAMS + b', "method" : "GetTask", "id" : "x", "jsonrpc" : "2.0" }\n',
        # the method name is checked by the dispatcher (-32601), not by the envelope
        b'{"jsonrpc":"2.0","id":1,"method":"no.such.Method","params":{}}',
    ],
)
def test_a_valid_envelope_is_decoded_with_raw_params(body: bytes) -> None:
    envelope, error, request_id = decode_envelope(body)
    assert error is None
    assert envelope is not None
    assert request_id == envelope.id
    assert bytes(envelope.params).lstrip().startswith(b"{")
    assert envelope.method in {"GetTask", "no.such.Method"}


def test_params_are_kept_raw_for_the_method_decoder() -> None:
    params = b'{ "id" : "123e4567-e89b-42d3-a456-426614174000", "historyLength": 1.0 }'
    body = b'{"jsonrpc":"2.0","id":1,"method":"GetTask","params":' + params + b"}"
    envelope, _, _ = decode_envelope(body)
    assert envelope is not None
    assert bytes(envelope.params) == params
