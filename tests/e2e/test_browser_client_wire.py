"""The browser client library (`/sdk/aim-realtime.js`) in real headless Chromium where a server
answers as the AIM service does not: a redirect is never followed (the request's body and token
go nowhere else), a long `Retry-After` is thrown instead of slept through, and a service without
LiveKit configured is told at once, without retries.

The test page and the library come from the service (`origins`, as in test_browser_client.py);
the library's calls go to loopback servers of this module (`browser_wire_helpers`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest

from tests.conftest import serving, token
from tests.e2e.browser_client_helpers import Device, origins
from tests.e2e.browser_helpers import binaries, chromium
from tests.e2e.browser_wire_helpers import UNCONFIGURED, UNUSUAL, Trap, Unusual

pytestmark = [pytest.mark.e2e, pytest.mark.redis, pytest.mark.slow]

run = asyncio.to_thread


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with chromium(*binaries()) as driver:
        yield driver


async def test_a_redirect_is_never_followed_and_a_long_retry_after_is_thrown(
    livekit, store, browser
):
    trap, unusual = Trap(), Unusual()
    async with (
        origins(livekit, store) as (page_origin, service, _, _),
        serving(trap) as trap_url,
        serving(unusual) as unusual_url,
    ):
        unusual.target = f"{trap_url}/a2a"
        bearer = token("alice")
        device = await run(Device, browser, Device.url(page_origin, service, bearer, "device-1"),
                           new_window=False)  # fmt: skip
        seen = await run(device.script, UNUSUAL, service, unusual_url, bearer)

    assert "crashed" not in seen, seen
    # the redirect's target received nothing: no preflight, no body, no token
    assert trap.seen == [], [(s.method, s.path, s.headers.get("authorization")) for s in trap.seen]
    # a call: one request, answered 307, thrown at once as a RedirectError (not retried)
    call = seen["call"]
    assert (call["name"], call["reason"], call["code"], call["typed"]) == (
        "RedirectError", "REDIRECT", None, True)  # fmt: skip
    assert call["retryable"] is False
    assert "redirect" in call["message"]
    assert [s.path for s in unusual.calls("/redirect/a2a")] == ["/redirect/a2a"]
    assert unusual.calls("/redirect/a2a")[0].headers["authorization"] == f"Bearer {bearer}"
    # the stream: its subscribe answered 307, the session's `error` event is the RedirectError
    assert seen["stream"]["name"] == "RedirectError", seen["stream"]
    assert len(unusual.calls("/redirect/stream/a2a")) == 1
    # Retry-After: 120 (past the 60 s cap): thrown at once with its advice, one request
    limited = seen["limited"]
    assert (limited["name"], limited["code"], limited["retryAfterMs"]) == (
        "LimitExceededError", -31011, 120_000)  # fmt: skip
    assert seen["limitedMs"] < 5000
    # Retry-After: 1 is waited out, and the same call answered; a cap of 0 throws even that
    assert seen["brief"] == {"result": {"ok": True}}
    assert seen["briefMs"] >= 1000
    assert len(unusual.calls("/brief/")) == 2
    assert (seen["strict"]["name"], seen["strict"]["retryAfterMs"]) == ("LimitExceededError",
                                                                        120_000)  # fmt: skip
    assert len(unusual.calls("/limited/")) == 2  # one for each client: never a second attempt
    spent = seen["allowance"]
    assert (spent["name"], spent["code"], spent["httpStatus"], spent["retryable"]) == (
        "AllowanceExhaustedError", -31013, 402, False)  # fmt: skip
    assert (spent["allowance"], spent["resetsAt"], spent["limit"]) == (
        "session_minutes_per_day", "2026-12-05T00:00:00.000Z", False)  # fmt: skip
    assert len(unusual.calls("/allowance/")) == 1


async def test_a_service_without_livekit_is_told_at_once_without_retries(livekit, store, browser):
    unconfigured = {"livekit_url": None, "livekit_api_key": None, "livekit_api_secret": None}
    async with origins(livekit, store, **unconfigured) as (page_origin, service, _, _):
        bearer = token("alice")
        device = await run(Device, browser, Device.url(page_origin, service, bearer, "device-1"),
                           new_window=False)  # fmt: skip
        seen = await run(device.script, UNCONFIGURED, service, bearer)

    assert "crashed" not in seen, seen
    assert (seen["name"], seen["code"], seen["retryable"]) == ("UnavailableError", -31012, False)
    assert seen["metadata"] == {
        "service": "livekit",
        "retryable": "false",
        "unset": "AIM_LIVEKIT_URL,AIM_LIVEKIT_API_KEY,AIM_LIVEKIT_API_SECRET",
    }
    assert "LiveKit is not configured" in seen["message"]
    assert seen["sent"] == ["SendMessage"]  # once: not retried
