"""The browser client library (`/sdk/aim-realtime.js`) in real headless Chromium, against the
service and the LiveKit stand-in, as an app on another origin uses it (the service lists that
origin in AIM_CORS_ORIGINS; the library and every call cross origins for real).

The test page (`browser_client_page.html`) is one device: it loads the library from the
service, acts when its buttons are clicked and writes what the library told it into the page;
the assertions read the page. A TCP proxy sits between the browser and the service, so the
network can fail where a test says. What only LiveKit and an agent do is done as they would:
the participant_joined webhooks, signed as LiveKit signs them, and the agent's confirmation
request over the provider API with the provider token of its dispatch.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import pytest
from livekit import api

from tests.cli_processes import free_port
from tests.conftest import LIVEKIT_KEY, LIVEKIT_SECRET, token
from tests.e2e.agent_operation_helpers import (
    agent_asks_to_book,
    data_to_agent,
    get_session,
    provider_call,
    provider_token_of,
    quiet,
    wait_for_data,
)
from tests.e2e.browser_client_helpers import (
    AUTH_ERRORS,
    HOLD,
    RELEASE,
    SCRIPTED,
    TYPED_ERRORS,
    Device,
    origins,
    resumed_exactly,
    server_frames_after,
)
from tests.e2e.browser_helpers import binaries, chromium
from tests.e2e.realtime_helpers import call, new_id, register
from tests.e2e.rotation_helpers import ahead_of_now
from tests.e2e.webhook_helpers import deliver, room, webhook_event

pytestmark = [pytest.mark.e2e, pytest.mark.redis, pytest.mark.slow]

AGENT = "agent-AJ_worker-1"
run = asyncio.to_thread


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """One Chromium for the module; each test leaves one window behind."""
    with chromium(*binaries()) as driver:
        yield driver


@pytest.fixture
def window(browser: Any) -> Iterator[Any]:
    first = browser.current_window_handle
    yield browser
    for handle in browser.window_handles:
        if handle != first:
            browser.switch_to.window(handle)
            browser.close()
    browser.switch_to.window(first)


async def joined(device: Device, http: Any, livekit: Any) -> tuple[str, str, str, str]:
    """Create, join, and the device and the agent in the room: (sid, task id, endpoint, token)."""
    await run(device.click, "create")
    await run(device.until, "state", "ready")
    sid, task_id = await run(device.text, "session"), await run(device.text, "task")
    await run(device.click, "join")
    await run(device.until_true, lambda: device.text("room") != "", "no join result shown")
    endpoint, lk_token = await run(device.text, "endpoint"), await run(device.text, "livekit-token")
    livekit.add_participant(room(sid), endpoint)
    arrived = webhook_event("participant_joined", room(sid), identity=endpoint, epoch=1)
    assert await deliver(http, arrived) == "applied"
    await run(device.until, "state", "active")
    livekit.add_participant(room(sid), AGENT, kind="agent")
    agent = webhook_event("participant_joined", room(sid), identity=AGENT, agent=True)
    assert await deliver(http, agent) == "applied"
    return sid, task_id, endpoint, lk_token


async def say(device: Device, text: str, delivered: int) -> str:
    """Send `text` from the page; the commandId of its `interaction` event."""
    await run(device.type, "text", text)
    await run(device.click, "send")
    items = await run(device.until_count, "delivered", delivered)
    kind, command_id = items[delivered - 1].split(" ")
    assert kind == "input.text"
    assert await run(device.text, "sent") == f"input.text {command_id}"
    return command_id


async def same_as_the_service(device: Device, http: Any, task_id: str) -> None:
    """The page's frames are the service's event stream: none missing, none twice."""
    frames = await run(device.frames)
    server = await server_frames_after(http, task_id, frames[0][1])
    assert [(event_id, rest) for _, event_id, rest in frames[1:]] == server
    resumed_exactly(frames, await run(device.connections))


async def test_a_page_follows_a_session_from_create_to_end(livekit, store, window):
    async with origins(livekit, store) as (page_origin, service, proxy, http):
        bearer = token("alice")
        one = await run(Device, window, Device.url(page_origin, service, bearer, "device-1"),
                        new_window=False)  # fmt: skip
        sid, task_id, endpoint, lk_token = await joined(one, http, livekit)

        # the join token is the one LiveKit accepts: this room, as this endpoint
        claims = api.TokenVerifier(LIVEKIT_KEY, LIVEKIT_SECRET).verify(lk_token)
        assert (claims.video.room, claims.identity) == (room(sid), endpoint)
        assert claims.video.room_join
        assert (await get_session(http, sid))["activeEndpointId"] == endpoint
        assert await run(one.text, "epoch") == "1"

        await say(one, "hello from device 1", 1)
        [message] = await wait_for_data(livekit, room(sid), "input.text")
        assert message["payload"] == {"text": "hello from device 1"}

        # the network drops under the open stream; the agent asks for a confirmation while the
        # page is cut off; the stream comes back after the last event it got
        assert [n for n, _ in await run(one.connections)] == [1]
        proxy.refuse()  # cuts every connection, and refuses new ones until restore()
        provider_token = provider_token_of(livekit, sid)
        operation_id = await agent_asks_to_book(http, provider_token, sid)
        status, thinking, _ = await provider_call(
            http, provider_token, "ReportAgentState", sessionId=sid, sessionEpoch=1,
            state="thinking",
        )  # fmt: skip
        assert status == 200, thinking
        proxy.restore()
        await run(one.until_true, lambda: one.shown("ask"), "no confirmation asked")
        assert await run(one.text, "ask-title") == "Book a table for two"
        [requirement] = await run(one.events, "requirement")
        assert requirement["operationId"] == operation_id
        assert len(await run(one.connections)) >= 2

        await run(one.click, "approve")
        await run(one.until, "operation", f"{operation_id} running")
        got = await call(http, "GetOperation", sessionId=sid, operationId=operation_id)
        assert got["result"]["operation"]["state"] == "running"
        await run(one.until, "task-state", "TASK_STATE_WORKING")

        # device 2 takes the session over; device 1 is told, and its commands stay home
        url = Device.url(page_origin, service, bearer, "device-2", session=sid, task=task_id)
        two = await run(Device, window, url, new_window=True)
        await run(two.until, "state", "active")
        await run(two.click, "join")
        await run(two.until_true, lambda: two.text("room") != "", "device 2 did not join")
        await run(one.until, "superseded", "epoch 2")
        assert await run(one.events, "superseded") == [{"name": "superseded", "epoch": 2}]
        assert await run(two.text, "epoch") == "2"
        endpoints = (await get_session(http, sid))["endpoints"]
        states = {e["clientEndpointKey"]: e["state"] for e in endpoints}
        assert states == {"device-1": "superseded", "device-2": "joining"}

        sent_before = len(await run(one.requests, "aim.realtime.SendInteraction"))
        await run(one.type, "text", "still there?")
        await run(one.click, "send")
        await run(one.until_true, lambda: one.text("error").startswith("SupersededError -31002"),
                  "no SupersededError shown")  # fmt: skip
        assert len(await run(one.requests, "aim.realtime.SendInteraction")) == sent_before
        assert len(data_to_agent(livekit, room(sid), "input.text")) == 1

        await run(two.click, "end")
        await run(two.until, "ended", "ending TASK_STATE_COMPLETED ended on the page")
        assert await run(two.text, "end-answer") == "ending"
        await run(one.until, "ended", "ending TASK_STATE_COMPLETED ended on the page")
        assert await run(two.events, "ended") == [
            {"name": "ended", "state": "ending", "taskState": "TASK_STATE_COMPLETED",
             "endReason": "ended on the page"}
        ]  # fmt: skip
        for device in (one, two):
            await same_as_the_service(device, http, task_id)
            assert await run(device.events, "error") == []


async def test_a_command_whose_answer_is_lost_is_sent_again_and_applied_once(
    livekit, store, window, access_lines
):
    async with origins(livekit, store) as (page_origin, service, proxy, http):
        url = Device.url(page_origin, service, token("alice"), "device-1")
        one = await run(Device, window, url, new_window=False)
        sid, task_id, _, _ = await joined(one, http, livekit)
        first = (await get_session(http, sid))["version"]
        await say(one, "one", 1)
        applied = (await get_session(http, sid))["version"] - first  # what one command moves

        # the proxy passes the request on and swallows the answer: applied, answer lost
        before = (await get_session(http, sid))["version"]
        lost = proxy.arm(b"hello through a lost answer", forward=True, refuse=False)
        command_id = await say(one, "hello through a lost answer", 2)
        assert lost.is_set()

        attempts = [
            body for body in await run(one.requests, "aim.realtime.SendInteraction")
            if body["params"]["payload"] == {"text": "hello through a lost answer"}
        ]  # fmt: skip
        assert len(attempts) == 2  # the library sent it again: the same request, same commandId
        assert attempts[0] == attempts[1]
        assert attempts[0]["params"]["commandId"] == command_id
        arrived = [line for line in access_lines()
                   if line.get("method") == "aim.realtime.SendInteraction"]  # fmt: skip
        assert len(arrived) == 3  # "one", then the lost one twice: both reached the service

        await quiet()
        assert (await get_session(http, sid))["version"] - before == applied
        command = (await call(http, "GetCommand", sessionId=sid, commandId=command_id))["result"]
        assert command["command"]["status"] == "applied"
        assert command["command"]["method"] == "aim.realtime.SendInteraction"
        texts = [m["payload"]["text"] for m in data_to_agent(livekit, room(sid), "input.text")]
        assert texts == ["one", "hello through a lost answer"]  # the agent heard it once

        # the cut took the stream down too: it was resumed without a gap
        await run(one.click, "end")
        await run(one.until_true, lambda: one.text("ended") != "no", "no ended event")
        await same_as_the_service(one, http, task_id)


async def test_streams_the_service_cuts_at_their_lifetime_are_resumed_unnoticed(
    livekit, store, window
):
    """Each stream lives 0.3 s: the page's stream is cut more often than the library's ten
    failed reconnects in a row, mostly with no event in between; it is resumed at once each
    time, after the last event it got, and the page sees every event once and no error."""
    async with origins(livekit, store, sse_max_lifetime_s=0.3, sse_heartbeat_s=0.1) as opened:
        page_origin, service, _, http = opened
        url = Device.url(page_origin, service, token("alice"), "device-1")
        one = await run(Device, window, url, new_window=False)
        _, task_id, _, _ = await joined(one, http, livekit)
        await run(one.until_true, lambda: len(one.connections()) >= 12,
                  "the stream was not resumed a dozen times")  # fmt: skip
        await say(one, "still here", 1)
        await run(one.click, "end")
        await run(one.until, "ended", "ending TASK_STATE_COMPLETED ended on the page")
        await same_as_the_service(one, http, task_id)
        assert await run(one.events, "error") == []


async def test_errors_come_typed_with_what_the_service_said(livekit, store, window):
    """What the library throws (read in the page: a person would see only its message)."""
    audio_only = frozenset({"audio_input", "audio_output"})
    async with origins(livekit, store, provider_capabilities=audio_only) as opened:
        page_origin, service, _, _ = opened
        url = Device.url(page_origin, service, token("alice"), "device-1")
        one = await run(Device, window, url, new_window=False)
        dead = f"http://127.0.0.1:{free_port()}"  # nothing listens there
        seen = await run(one.script, TYPED_ERRORS, service, token("alice"), dead)

    assert "crashed" not in seen, seen
    rejected = seen["rejected"]
    assert (rejected["name"], rejected["reason"], rejected["typed"]) == ("AimError", "REJECTED",
                                                                          True)  # fmt: skip
    assert rejected["metadata"] == {"reason": "capability_unavailable", "missing": "vision_input"}
    assert "vision_input" in rejected["message"]
    invalid = seen["invalidParams"]
    assert (invalid["name"], invalid["code"]) == ("InvalidParamsError", -32602)
    assert [v["field"] for v in invalid["violations"]] == ["params.clientEndpointKey"]
    assert (seen["notFound"]["name"], seen["notFound"]["code"]) == ("NotFoundError", -31001)
    auth = seen["auth"]
    # "not-a-token" is no JWT: the service says malformed_token, which no new token from the
    # same source cures
    assert (auth["name"], auth["code"], auth["httpStatus"]) == ("AuthMisconfiguredError", -31401,
                                                                401)  # fmt: skip
    assert auth["metadata"] == {"reason": "malformed_token"}
    assert auth["retryable"] is False
    lost = seen["noAnswer"]
    assert (lost["name"], lost["code"], lost["retryable"]) == ("UnavailableError", None, True)
    assert seen["badDecision"]["name"] == "TypeError"


async def test_a_device_superseded_while_its_check_is_pending_sends_nothing_at_the_new_epoch(
    livekit, store, window
):
    async with origins(livekit, store) as (page_origin, service, _, http):
        url = Device.url(page_origin, service, token("alice"), "device-1")
        one = await run(Device, window, url, new_window=False)
        sid, _, _, _ = await joined(one, http, livekit)
        await say(one, "hello", 1)
        await run(one.script, HOLD, "aim.realtime.GetSession")  # the page's check hangs

        # device 2 takes the session over and comes into the room: active again, at epoch 2
        registered = await register(http, sid, 1, "device-2")
        two = registered["result"]["endpoint"]["endpointId"]
        taken = await call(http, "JoinSession", sessionId=sid, sessionEpoch=1,
                           commandId=new_id(), endpointId=two)  # fmt: skip
        assert taken["result"]["session"]["sessionEpoch"] == 2
        livekit.add_participant(room(sid), two)
        arrived = webhook_event("participant_joined", room(sid), identity=two, epoch=2)
        assert await deliver(http, arrived) == "applied"

        def shown() -> bool:
            return any((e["state"], e["epoch"]) == ("active", 2) for e in one.events("state"))

        await run(one.until_true, shown, "the page never showed epoch 2 active")

        # a command now waits for the check; the check says superseded: it is never sent
        version = (await get_session(http, sid))["version"]
        await run(one.type, "text", "still mine?")
        await run(one.click, "send")

        async def sent() -> list[dict[str, Any]]:
            bodies = await run(one.requests, "aim.realtime.SendInteraction")
            return [b for b in bodies if b["params"]["payload"] == {"text": "still mine?"}]

        await asyncio.sleep(0.5)
        assert await sent() == []
        await run(one.script, RELEASE, "aim.realtime.GetSession")
        await run(one.until_true, lambda: one.text("error").startswith("SupersededError -31002"),
                  "no SupersededError shown")  # fmt: skip
        assert await run(one.events, "superseded") == [{"name": "superseded", "epoch": 2}]
        assert await sent() == []
        assert (await get_session(http, sid))["version"] == version
        texts = [m["payload"]["text"] for m in data_to_agent(livekit, room(sid), "input.text")]
        assert texts == ["hello"]


async def test_the_library_against_a_scripted_service(livekit, store, window):
    """What the library sends and tells where the service answers unusually (its `fetch`
    option is a scripted service: no network)."""
    async with origins(livekit, store) as (page_origin, service, _, _):
        url = Device.url(page_origin, service, token("alice"), "device-1")
        one = await run(Device, window, url, new_window=False)
        seen = await run(one.script, SCRIPTED, service)

    assert "crashed" not in seen, seen
    # confirm via the task: the requirement shown now (version 3, not the first sighting's 2),
    # then, the stream showing none, the one GetTask reads
    assert seen["expectedVersions"] == [3, 5]
    assert seen["taskReads"] == 1
    # join() on a session still provisioning after readyTimeoutMs gives up, unregistered
    assert seen["timeout"] == {"name": "AimError", "code": None, "reason": "TIMEOUT",
                               "httpStatus": None}  # fmt: skip
    assert seen["registered"] == 0
    assert seen["auth"] == {"name": "AuthError", "code": -32603, "reason": "", "httpStatus": 403}
    # the stream skipped the frame that is not JSON, took the error frame for a break and
    # resumed after the last id; -32004 on a terminal task ended it
    assert seen["subscribes"] == [None, "1-0"]
    names = [name for name, _ in seen["streamEvents"]]
    assert "error" not in names, seen["streamEvents"]
    states = [payload["state"] for name, payload in seen["streamEvents"] if name == "state"]
    assert "failed" not in states  # the frame after the error frame was not read
    assert seen["streamEvents"][-1] == ["ended", {"name": "ended", "state": "ending",
                                                  "taskState": "TASK_STATE_COMPLETED",
                                                  "endReason": "done"}]  # fmt: skip


async def test_a_401_is_thrown_by_why_and_only_expiry_asks_for_a_new_token(livekit, store, window):
    """What the library does with each reason of a 401 (its `fetch` a scripted service)."""
    async with origins(livekit, store) as (page_origin, service, _, _):
        url = Device.url(page_origin, service, token("alice"), "device-1")
        one = await run(Device, window, url, new_window=False)
        seen = await run(one.script, AUTH_ERRORS, service)

    assert "crashed" not in seen, seen
    # expired, with a token function: asked again, the call sent again at once, and answered
    assert seen["refreshed"] == {"result": {"tasks": []}, "sent": ["Bearer t1", "Bearer t2"],
                                 "asked": 2}  # fmt: skip
    # expired again: thrown after that one new attempt, as TokenExpiredError
    again = seen["expiredAgain"]
    assert again["error"] == {"name": "TokenExpiredError", "authReason": "token_expired",
                              "code": -31401, "httpStatus": 401, "auth": True}  # fmt: skip
    assert (again["sent"], again["asked"]) == (["Bearer t1", "Bearer t2"], 2)
    # a fixed token cannot be renewed by the library: thrown at once
    fixed = seen["expiredFixed"]
    assert (fixed["error"]["name"], fixed["sent"]) == ("TokenExpiredError", ["Bearer fixed"])
    # misconfigured: thrown at once, the token function not asked again
    for case, reason in (("misconfigured", "invalid_signature"),
                         ("wrongAudience", "invalid_audience")):  # fmt: skip
        wrong = seen[case]
        assert (wrong["error"]["name"], wrong["error"]["authReason"]) == (
            "AuthMisconfiguredError", reason)  # fmt: skip
        assert wrong["error"]["auth"] is True
        assert (wrong["sent"], wrong["asked"]) == (["Bearer t1"], 1)
    missing = seen["missing"]["error"]
    assert (missing["name"], missing["authReason"]) == ("AuthError", "missing_token")
    assert seen["missing"]["asked"] == 1


async def test_a_page_sees_the_agent_rotate_while_the_session_stays_active(livekit, store, window):
    """The agent reports a deadline: the page's library says `agent rotating` (nothing for the
    app to do), then the successor's state once it took over; the session stays active."""
    async with origins(livekit, store) as (page_origin, service, _, http):
        one = await run(Device, window, Device.url(page_origin, service, token("alice"), "d-1"),
                        new_window=False)  # fmt: skip
        sid, _, _, _ = await joined(one, http, livekit)
        await run(one.until, "agent", "joined")
        first = provider_token_of(livekit, sid)
        status, body, _ = await provider_call(
            http, first, "ReportDeadline", sessionId=sid, sessionEpoch=1,
            deadline=ahead_of_now(20), reason="provider_goaway",
        )  # fmt: skip
        assert status == 200, body
        await run(one.until, "agent", "rotating")  # the margin is 30 s: the rotation begins now

        successor = await successor_token(livekit, sid)
        status, body, _ = await provider_call(
            http, successor, "ReportAgentState", sessionId=sid, sessionEpoch=1,
            state="listening",
        )  # fmt: skip
        assert status == 200, body
        await run(one.until, "agent", "listening")
        agent_events = await run(one.events, "agent")
        assert agent_events[-2:] == [
            {"name": "agent", "state": "rotating", "rotating": True, "generation": 1,
             "successorGeneration": 2, "rotatedFrom": None},
            {"name": "agent", "state": "listening", "rotating": False, "generation": 2,
             "successorGeneration": None, "rotatedFrom": 1},
        ]  # fmt: skip
        assert await run(one.text, "state") == "active"
        assert [e["state"] for e in await run(one.events, "state")][-1] == "active"
        assert await run(one.events, "error") == []


async def successor_token(livekit: Any, sid: str) -> str:
    """The provider token of the successor's dispatch (generation 2), once it is made."""
    for _ in range(200):
        for dispatch in livekit.dispatches_in(room(sid)):
            meta = json.loads(dispatch.metadata)
            if meta.get("agentGeneration") == 2:
                return str(meta["providerToken"])
        await asyncio.sleep(0.025)
    raise AssertionError("no successor was dispatched")
