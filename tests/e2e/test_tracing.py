"""One span per JSON-RPC call, joining the caller's traceparent, without secrets (profile §13)."""

from __future__ import annotations

import pytest

from tests.conftest import rpc, token

pytestmark = pytest.mark.e2e

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT_ID = "00f067aa0ba902b7"


def server_spans(exporter):
    return [span for span in exporter.get_finished_spans() if span.kind.name == "SERVER"]


async def test_each_call_has_one_span_with_the_rpc_attributes(client, span_exporter):
    # the JSON-RPC server span of semantic conventions 1.44.0
    await rpc(client, "ListTasks", {}, request_id="req-7")
    (span,) = server_spans(span_exporter)
    assert span.name == "ListTasks"
    assert span.attributes["rpc.system.name"] == "jsonrpc"
    assert span.attributes["rpc.method"] == "ListTasks"
    assert span.attributes["jsonrpc.request.id"] == "req-7"
    assert span.attributes["jsonrpc.protocol.version"] == "2.0"
    assert span.attributes["server.address"] == "127.0.0.1"
    assert isinstance(span.attributes["server.port"], int)
    assert "rpc.response.status_code" not in span.attributes
    assert "error.type" not in span.attributes
    assert span.status.status_code.name == "UNSET"
    assert span.instrumentation_scope.schema_url == "https://opentelemetry.io/schemas/1.44.0"


async def test_error_code_is_recorded_on_the_span(client, span_exporter):
    await rpc(client, "GetTask", {"id": "3c9a1f0e-7b6d-4e5c-8a2b-1d0c9e8f7a6b"})
    (span,) = server_spans(span_exporter)
    assert span.attributes["rpc.response.status_code"] == "-32001"
    assert span.attributes["error.type"] == "-32001"
    # every JSON-RPC error response is an error of the call (the JSON-RPC conventions)
    assert span.status.status_code.name == "ERROR"
    assert "not found" in span.status.description.lower()


async def test_an_unknown_method_is_other_and_keeps_its_original_name(client, span_exporter):
    await rpc(client, "NoSuchMethod", {})
    (span,) = server_spans(span_exporter)
    assert span.name == "jsonrpc"
    assert span.attributes["rpc.method"] == "_OTHER"
    assert span.attributes["rpc.method_original"] == "NoSuchMethod"
    assert span.attributes["rpc.response.status_code"] == "-32601"


async def test_span_joins_the_callers_traceparent(client, span_exporter):
    await client.post(
        "/a2a",
        content=b'{"jsonrpc":"2.0","id":1,"method":"ListTasks","params":{}}',
        headers={
            "Authorization": f"Bearer {token()}",
            "A2A-Version": "1.0",
            "traceparent": f"00-{TRACE_ID}-{PARENT_ID}-01",
        },
    )
    (span,) = server_spans(span_exporter)
    assert format(span.context.trace_id, "032x") == TRACE_ID
    assert format(span.parent.span_id, "016x") == PARENT_ID


async def test_spans_never_carry_tokens_or_message_text(client, span_exporter):
    secret_text = "my very private words"
    bearer = token()
    await rpc(
        client,
        "SendMessage",
        {"message": {"messageId": "m", "role": "ROLE_USER", "parts": [{"text": secret_text}]}},
    )
    await client.post(
        "/a2a",
        content=b'{"jsonrpc":"2.0","id":1,"method":"ListTasks","params":{}}',
        headers={"Authorization": "Bearer not.a.valid-token", "A2A-Version": "1.0"},
    )
    for span in span_exporter.get_finished_spans():
        values = " ".join(str(v) for v in span.attributes.values())
        events = " ".join(str(e.attributes) for e in span.events)
        for forbidden in (secret_text, bearer, "not.a.valid-token"):
            assert forbidden not in values
            assert forbidden not in events
            assert forbidden not in span.name


async def test_committed_transitions_are_span_events_with_session_ids(rt_client, span_exporter):
    from tests.e2e.realtime_helpers import call, create_session, new_id, register, session_of

    task = (await create_session(rt_client))["result"]["task"]
    sid = session_of(task)["sessionId"]
    endpoint = (await register(rt_client, sid, 1, "phone"))["result"]["endpoint"]["endpointId"]
    command_id = new_id()
    await call(
        rt_client,
        "JoinSession",
        sessionId=sid,
        sessionEpoch=1,
        endpointId=endpoint,
        commandId=command_id,
    )
    join = [s for s in server_spans(span_exporter) if s.name == "aim.realtime.JoinSession"][-1]
    assert join.attributes["aim.session.id"] == sid
    (event,) = [e for e in join.events if e.name == "aim.session.transition"]
    assert event.attributes["aim.session.from"] == "ready"
    assert event.attributes["aim.session.to"] == "joining"
    assert event.attributes["aim.command.id"] == command_id
    assert event.attributes["aim.session.epoch"] == 1


async def test_redis_commits_and_livekit_calls_are_child_spans(rt_client, livekit, span_exporter):
    from tests.e2e.realtime_helpers import create_session, register, session_of

    task = (await create_session(rt_client))["result"]["task"]
    sid = session_of(task)["sessionId"]
    await register(rt_client, sid, 1, "phone")
    spans = span_exporter.get_finished_spans()
    register_span = next(s for s in spans if s.name == "aim.realtime.RegisterEndpoint")
    (commit,) = [
        s
        for s in spans
        if s.name == "commit redis"
        and s.parent
        and s.parent.span_id == register_span.context.span_id
    ]
    assert commit.kind.name == "CLIENT"
    assert commit.attributes["db.system.name"] == "redis"
    assert commit.attributes["db.operation.name"] == "commit"
    assert commit.attributes["aim.session.id"] == sid
    create_span = next(s for s in spans if s.name == "SendMessage")
    livekit_calls = [
        s
        for s in spans
        if s.name.startswith("livekit.") and s.context.trace_id == create_span.context.trace_id
    ]
    # one client span per Twirp call, named by its fully qualified method
    # one call provisions the session: the room, created with the agent's dispatch in it
    assert [s.name for s in livekit_calls] == ["livekit.RoomService/CreateRoom"]
    for span in livekit_calls:
        assert span.kind.name == "CLIENT"
        assert span.attributes["rpc.system.name"] == "twirp"
        assert span.attributes["rpc.method"] == span.name
        assert span.attributes["livekit.room"] == f"aim-{sid}-e1"
        assert span.attributes["server.address"] == "127.0.0.1"
    # inside the span of the effect that made them, itself inside the creating call's trace
    by_id = {s.context.span_id: s for s in spans}
    parents = {by_id[s.parent.span_id].name for s in livekit_calls}
    assert parents == {"effect CreateRoom"}
