"""A session's whole story in its traces (profile §13): every commit of a call carries its
transition event, and work that runs later (an effect, a timer, a webhook) has its own span
linked to the span of the request that caused it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
import pytest

from realtime.app import create_app
from tests.conftest import livekit_settings, serving
from tests.e2e.operator_api_helpers import eventually as within
from tests.e2e.realtime_helpers import call, create_session, new_id, register, session_of
from tests.e2e.webhook_helpers import deliver, webhook_event

pytestmark = pytest.mark.e2e


def named(exporter, name: str) -> list[Any]:
    return [s for s in exporter.get_finished_spans() if s.name == name]


def transitions(span) -> list[tuple[str, str]]:
    return [
        (e.attributes["aim.session.from"], e.attributes["aim.session.to"])
        for e in span.events
        if e.name == "aim.session.transition"
    ]


def links_to(span, target) -> bool:
    return any(
        link.context.trace_id == target.context.trace_id
        and link.context.span_id == target.context.span_id
        for link in span.links
    )


async def eventually(find: Callable[[], Any]) -> Any:
    """`find()` once it finds something (the spans of work that runs after the answer)."""

    async def check() -> Any:
        return find()

    return await within(check, within=10.0)


async def started(client) -> tuple[str, str]:
    task = (await create_session(client))["result"]["task"]
    sid = session_of(task)["sessionId"]
    endpoint = (await register(client, sid, 1, "phone"))["result"]["endpoint"]["endpointId"]
    return sid, endpoint


async def test_the_creating_commit_carries_its_transition(rt_client, span_exporter):
    await create_session(rt_client)
    (create,) = named(span_exporter, "SendMessage")
    assert ("", "provisioning") in transitions(create)


async def test_ending_to_ended_is_on_the_span_of_the_room_deletion(
    rt_client, livekit, span_exporter
):
    sid, _ = await started(rt_client)
    await call(rt_client, "EndSession", sessionId=sid, commandId=new_id(), reason="done")
    (end,) = named(span_exporter, "aim.realtime.EndSession")
    assert transitions(end) == [("ready", "ending")]
    deletion = (await eventually(lambda: named(span_exporter, "effect DeleteRoom")))[0]
    assert transitions(deletion) == [("ending", "ended")]
    # carried out inline by the EndSession call: the same trace, under its span
    assert deletion.context.trace_id == end.context.trace_id
    assert deletion.parent.span_id == end.context.span_id
    (delete_call,) = named(span_exporter, "livekit.RoomService/DeleteRoom")
    assert delete_call.parent.span_id == deletion.context.span_id


async def test_a_webhook_links_to_the_call_behind_it_and_carries_its_transitions(
    rt_client, livekit, span_exporter
):
    sid, endpoint = await started(rt_client)
    await call(rt_client, "JoinSession", sessionId=sid, sessionEpoch=1, endpointId=endpoint,
               commandId=new_id())  # fmt: skip
    (join,) = named(span_exporter, "aim.realtime.JoinSession")
    room = f"aim-{sid}-e1"
    assert await deliver(rt_client, webhook_event("participant_joined", room, identity=endpoint,
                                            epoch=1)) == "applied"  # fmt: skip
    (hook,) = named(span_exporter, "POST /livekit/webhook")
    assert hook.kind.name == "SERVER"
    assert hook.attributes["aim.webhook.event"] == "participant_joined"
    assert hook.attributes["http.route"] == "/livekit/webhook"
    assert hook.attributes["http.response.status_code"] == 200
    assert hook.attributes["aim.webhook.outcome"] == "applied"
    assert hook.attributes["aim.session.id"] == sid
    assert hook.context.trace_id != join.context.trace_id  # LiveKit sends no trace context
    assert links_to(hook, join)
    assert transitions(hook) == [("joining", "active")]
    # the permission update it caused runs in its trace, as the Twirp call it is
    update = await eventually(lambda: named(span_exporter, "livekit.RoomService/UpdateParticipant"))
    assert update[0].context.trace_id == hook.context.trace_id


async def test_an_unverified_webhook_has_a_span_and_no_session(rt_client, span_exporter):
    response = await rt_client.post("/livekit/webhook", content=b"{}", headers={})
    assert response.status_code == 401
    (hook,) = named(span_exporter, "POST /livekit/webhook")
    assert hook.attributes["http.response.status_code"] == 401
    assert hook.attributes["aim.webhook.outcome"] == "rejected"
    assert "aim.session.id" not in hook.attributes


async def test_an_effect_retried_by_the_worker_links_to_the_call_that_stored_it(
    rt_client, livekit, span_exporter
):
    livekit.fail_next(1, status=503, method="CreateRoom")
    await create_session(rt_client)
    (create,) = named(span_exporter, "SendMessage")
    retried = await eventually(
        lambda: [
            s
            for s in named(span_exporter, "effect CreateRoom")
            if s.context.trace_id != create.context.trace_id
        ]
    )
    span = retried[0]
    assert span.parent is None  # the worker's own trace
    assert links_to(span, create)
    assert span.attributes["aim.effect.attempt"] == 2
    # the follow-up it fed back (room and agent ready) is on it
    assert transitions(span) == [("provisioning", "ready")]
    failed = [
        s
        for s in named(span_exporter, "livekit.RoomService/CreateRoom")
        if s.context.trace_id == create.context.trace_id
    ]
    assert failed[0].status.status_code.name == "ERROR"
    assert failed[0].attributes["error.type"] == "unavailable"


async def test_a_timer_links_to_the_call_that_armed_it(livekit, store, tracer_provider,
                                                       span_exporter):  # fmt: skip
    # LiveKit never answers in time: the provisioning timer (1 s) fails the session
    settings = livekit_settings(livekit, provisioning_timeout_s=1)
    app = create_app(settings, store=store, tracer_provider=tracer_provider)
    async with serving(app) as base_url, httpx.AsyncClient(base_url=base_url, timeout=30) as http:
        await livekit.set_down(True)
        try:
            await create_session(http)
            (create,) = named(span_exporter, "SendMessage")
            (timer,) = await eventually(lambda: named(span_exporter, "timer provisioning"))
        finally:
            await livekit.set_down(False)
    assert timer.parent is None
    assert links_to(timer, create)
    assert timer.attributes["aim.timer"] == "provisioning"
    assert transitions(timer) == [("provisioning", "failed")]
