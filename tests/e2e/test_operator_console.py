"""The operator console in a real browser (profile §17): Debian's chromium, headless, driven
by selenium through chromedriver. An operator logs in with a token, opens a session made
through the API, and sees what a person would look for: the states, the commands, the webhook
and its verdict, the epoch change of a handoff.

Needs `chromium` and `chromedriver` (Debian: `chromium`, `chromium-driver`; `.ci/run` installs
them). Without them the test is skipped, except in CI (`CI` set), where it fails.
`AIM_CONSOLE_SCREENSHOT=<file.png>` saves a screenshot of the page (`scripts/screenshot-console`).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import os
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest

from realtime.app import create_app
from realtime.store.redis_client import RedisClient
from tests.conftest import livekit_settings, serving
from tests.e2e.agent_operation_helpers import provider_call
from tests.e2e.browser_helpers import binaries, chromium
from tests.e2e.operator_api_helpers import bearer, operator_get, rpc_as, start_session
from tests.e2e.realtime_helpers import CAPS, new_id
from tests.e2e.rotation_helpers import ahead_of_now
from tests.e2e.webhook_helpers import deliver, room, webhook_event
from tests.event_receivers import events_settings, receiver

pytestmark = [pytest.mark.e2e, pytest.mark.redis, pytest.mark.slow]

AGENT = "agent-AJ_worker-1"
WAIT_S = 20


@contextlib.asynccontextmanager
async def service(
    livekit: Any, store: RedisClient, **overrides: Any
) -> AsyncIterator[tuple[str, httpx.AsyncClient]]:
    app = create_app(livekit_settings(livekit, **overrides), store=store, tracer_provider=None)
    async with serving(app) as base_url, httpx.AsyncClient(base_url=base_url, timeout=30) as http:
        yield base_url, http


async def endpoint(http: httpx.AsyncClient, sid: str, key: str, epoch: int) -> str:
    registered = await rpc_as(
        http, "aim.realtime.RegisterEndpoint", {"sessionId": sid, "sessionEpoch": epoch,
        "commandId": new_id(), "clientEndpointKey": key, "capabilities": CAPS},
    )  # fmt: skip
    endpoint_id: str = registered["result"]["endpoint"]["endpointId"]
    return endpoint_id


async def join(http: httpx.AsyncClient, sid: str, endpoint_id: str, epoch: int) -> dict[str, Any]:
    joined = await rpc_as(
        http, "aim.realtime.JoinSession", {"sessionId": sid, "sessionEpoch": epoch,
        "endpointId": endpoint_id, "commandId": new_id()},
    )  # fmt: skip
    session: dict[str, Any] = joined["result"]["session"]
    return session


async def phone_and_agent_in(http: httpx.AsyncClient, livekit: Any) -> tuple[str, str]:
    """alice's session joined on a phone, with the phone and the agent in the room (LiveKit's
    webhooks say so): the session id and the agent's provider token."""
    sid = await start_session(http, subject="alice")
    provider_token = json.loads(livekit.dispatches_in(room(sid))[-1].metadata)["providerToken"]
    phone = await endpoint(http, sid, "phone", 1)
    await join(http, sid, phone, 1)
    assert await deliver(http, webhook_event("participant_joined", room(sid), identity=phone)) == (
        "applied"
    )
    agent = webhook_event("participant_joined", room(sid), identity=AGENT, agent=True)
    assert await deliver(http, agent) == "applied"
    return sid, provider_token


async def handed_over_session(http: httpx.AsyncClient, livekit: Any) -> str:
    """A session joined on a phone, then handed over to a laptop (epoch 2), as a user does; the
    agent reports what it does meanwhile."""
    sid, provider_token = await phone_and_agent_in(http, livekit)
    status, body, _ = await provider_call(
        http, provider_token, "ReportAgentState", sessionId=sid, sessionEpoch=1, state="listening"
    )
    assert status == 200, body
    laptop = await endpoint(http, sid, "laptop", 1)
    handed = await join(http, sid, laptop, 1)
    assert handed["sessionEpoch"] == 2
    arrived = webhook_event("participant_joined", room(sid), identity=laptop, epoch=2)
    assert await deliver(http, arrived) == "applied"
    return sid


def look(
    driver: Any,
    base_url: str,
    token: str,
    sid: str,
    screenshot: str | None,
    until: tuple[str, str] = ("epoch 1 → 2", "live, refreshing"),
) -> str:
    """What an operator sees after logging in and opening the session, once its timeline and
    live note show `until` (blocking: selenium)."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as seen
    from selenium.webdriver.support.ui import WebDriverWait

    wait = WebDriverWait(driver, WAIT_S)
    driver.get(f"{base_url}/ops")
    assert driver.title.startswith("AIM realtime")
    field = driver.find_element(By.ID, "token")
    assert field.get_attribute("type") == "password"
    field.send_keys(token)
    driver.find_element(By.ID, "connect").click()
    row = wait.until(
        seen.element_to_be_clickable((By.CSS_SELECTOR, f'#sessions tr[data-session="{sid}"]'))
    )
    assert field.get_attribute("value") == ""  # the token is not left in the page
    row.click()
    wait.until(seen.text_to_be_present_in_element((By.ID, "timeline"), until[0]))
    wait.until(seen.text_to_be_present_in_element((By.ID, "live-note"), until[1]))
    stored = driver.execute_script(
        "return JSON.stringify(localStorage) + JSON.stringify(sessionStorage) + document.cookie"
    )
    assert stored == "{}{}", stored
    if screenshot:  # the whole page, as tall as its content (chromium's DevTools protocol)
        size = driver.execute_cdp_cmd("Page.getLayoutMetrics", {})["cssContentSize"]
        clip = {"x": 0, "y": 0, "width": size["width"], "height": size["height"], "scale": 1}
        shot = driver.execute_cdp_cmd(
            "Page.captureScreenshot",
            {"format": "png", "captureBeyondViewport": True, "clip": clip},
        )
        Path(screenshot).write_bytes(base64.b64decode(shot["data"]))
    problems = [
        entry["message"]
        for entry in driver.get_log("browser")
        if entry["level"] in ("SEVERE", "WARNING")
    ]
    assert not problems, problems  # a Content-Security-Policy refusal would show here
    text: str = driver.find_element(By.TAG_NAME, "body").text
    return text


async def test_an_operator_sees_a_sessions_states_commands_webhooks_and_handoff(livekit, store):
    browser, driver_path = binaries()
    screenshot = os.environ.get("AIM_CONSOLE_SCREENSHOT") or None
    if screenshot:
        Path(screenshot).parent.mkdir(parents=True, exist_ok=True)
    async with service(livekit, store) as (base_url, http):
        await start_session(http, subject="bob")
        over = await start_session(http, subject="carol")
        ended = await rpc_as(
            http, "aim.realtime.EndSession", {"sessionId": over, "commandId": new_id(),
                                              "reason": "user hung up"}, subject="carol",
        )  # fmt: skip
        assert "result" in ended
        sid = await handed_over_session(http, livekit)
        await asyncio.sleep(0.3)  # the recorder's entries (the second join's) are written

        def browse() -> str:
            with chromium(browser, driver_path) as driver:
                return look(driver, base_url, bearer("operator"), sid, screenshot)

        text = await asyncio.to_thread(browse)

    # the live view: sessions by state, with counts
    assert "active 1" in text
    assert "ready 1" in text
    assert "alice" in text
    assert "bob" in text
    # the session: its state and epoch now, and how it got there
    assert "Epoch\n2" in text or "Epoch 2" in text
    for seen_text in (
        "created → provisioning",
        "provisioning → ready",
        "ready → joining",
        "joining → active",
        "SendMessage applied",
        "RegisterEndpoint applied",
        "JoinSession applied",
        "ReportAgentState applied",
        "webhook participant_joined applied",
        "CreateRoom ok",
        "RemoveParticipant ok",
        "epoch 1 → 2",
    ):
        assert seen_text in text, (seen_text, text)
    # its timers: the ones it moved past (provisioning at epoch 1; idle, now that a device is
    # in) are not shown as due, but as what they are; the maximum duration is still ahead
    lines = text.splitlines()
    for stale in (
        "provisioning stale, will be ignored epoch 1",
        "idle stale, will be ignored epoch 1",
    ):
        assert stale in lines, (stale, lines)
    assert "max in 60 min epoch 1" in lines, lines
    assert not [line for line in lines if line.startswith(("provisioning in ", "idle in "))]


async def test_an_operator_sees_the_events_sent_to_the_apps_backend(livekit, store, tmp_path):
    browser, driver_path = binaries()
    async with receiver(tmp_path) as got:
        settings = livekit_settings(livekit, **events_settings(got.url, events_timeout_s=2.0))
        app = create_app(settings, store=store, tracer_provider=None)
        async with serving(app) as base_url, httpx.AsyncClient(base_url=base_url) as http:
            sid = await start_session(http, subject="alice")
            await got.wait_for(lambda: len(got.delivered(sid)) == 2)
            got.answer(503)
            ended = await rpc_as(
                http, "aim.realtime.EndSession", {"sessionId": sid, "commandId": new_id(),
                                                  "reason": "user hung up"},
            )  # fmt: skip
            assert "result" in ended
            await got.wait_for(lambda: any(r["answered"] == 503 for r in got.requests()))

            def browse() -> str:
                with chromium(browser, driver_path) as driver:
                    until = ("session.ended retrying", "ended")
                    return look(driver, base_url, bearer("operator"), sid, None, until)

            text = await asyncio.to_thread(browse)
    assert "app backend" in text
    assert "event 1 session.created delivered" in text
    assert "event 2 session.ready delivered" in text
    assert "event 3 session.ended retrying" in text
    assert "HTTP 503" in text


async def rotated_session(http: httpx.AsyncClient, livekit: Any) -> str:
    """A session whose first agent reports its model's deadline 20 s ahead (inside the 30 s
    margin: the successor is dispatched at once) and whose successor takes over."""
    sid, first = await phone_and_agent_in(http, livekit)
    status, body, _ = await provider_call(
        http, first, "ReportDeadline", sessionId=sid, sessionEpoch=1,
        deadline=ahead_of_now(20), reason="provider_cap",
    )  # fmt: skip
    assert status == 200, body
    second = None
    for _ in range(200):
        metas = [json.loads(d.metadata) for d in livekit.dispatches_in(room(sid))]
        second = next((m["providerToken"] for m in metas if m.get("agentGeneration") == 2), None)
        if second is not None:
            break
        await asyncio.sleep(0.025)
    assert second is not None, "no successor was dispatched"
    status, body, _ = await provider_call(
        http, second, "ReportAgentState", sessionId=sid, sessionEpoch=1, state="listening"
    )
    assert status == 200, body
    return sid


LANE_OF = """
const [text] = arguments;
const titles = [...document.querySelectorAll('#timeline thead th')].map((th) => th.textContent);
for (const row of document.querySelectorAll('#timeline tbody tr')) {
  const cells = [...row.cells];
  const i = cells.findIndex((cell) => cell.textContent.includes(text));
  if (i >= 0) return titles[i];
}
return null;
"""


async def test_an_operator_sees_a_rotation_with_each_agent_in_its_own_lane(livekit, store):
    browser, driver_path = binaries()
    async with service(livekit, store) as (base_url, http):
        sid = await rotated_session(http, livekit)
        await asyncio.sleep(0.3)  # the recorder's entries are written

        def browse() -> tuple[str, dict[str, str | None]]:
            with chromium(browser, driver_path) as driver:
                until = ("agent · generation 2", "live, refreshing")
                text = look(driver, base_url, bearer("operator"), sid, None, until)
                lanes = {
                    what: driver.execute_script(LANE_OF, what)
                    for what in ("ReportDeadline applied", "ReportAgentState applied", "rotated")
                }
                return text, lanes

        text, lanes = await asyncio.to_thread(browse)

    assert "agent · generation 1" in text
    assert "agent · generation 2" in text
    assert "successor generation 2 (dispatch 2)" in text
    assert "CreateDispatch ok" in text
    assert "generation 2 · dispatch 2" in text
    # each agent's calls in its own lane: the deadline from the first, the takeover by the second
    assert lanes == {
        "ReportDeadline applied": "agent · generation 1",
        "ReportAgentState applied": "agent · generation 2",
        "rotated": "agent · generation 2",
    }
    # the session's facts: the serving agent and its generation
    assert "listening · generation 2" in text


def table_rows(base_url: str, table: str, shown: str) -> list[list[str]]:
    """The cells of the console's table `table` once it shows `shown`, as an operator sees it
    in headless Chromium (blocking: run it in a thread)."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as seen
    from selenium.webdriver.support.ui import WebDriverWait

    browser, driver_path = binaries()
    with chromium(browser, driver_path) as driver:
        driver.get(f"{base_url}/ops")
        driver.find_element(By.ID, "token").send_keys(bearer("operator"))
        driver.find_element(By.ID, "connect").click()
        WebDriverWait(driver, WAIT_S).until(
            seen.text_to_be_present_in_element((By.ID, table), shown)
        )
        rows = driver.find_elements(By.CSS_SELECTOR, f"#{table} tbody tr")
        return [[cell.text for cell in row.find_elements(By.TAG_NAME, "td")] for row in rows]


async def test_an_operator_sees_the_usage_of_the_days_sessions(livekit, store):
    binaries()  # skipped without a browser, before anything starts
    async with service(livekit, store) as (base_url, http):
        sid = await start_session(http, subject="alice")
        ended = await rpc_as(
            http, "aim.realtime.EndSession", {"sessionId": sid, "commandId": new_id(),
                                              "reason": "done"},
        )  # fmt: skip
        assert "result" in ended
        for _ in range(200):  # the room deleted, the session over: its usage is written
            got = await rpc_as(http, "aim.realtime.GetSession", {"sessionId": sid})
            if got["result"]["session"]["state"] == "ended":
                break
            await asyncio.sleep(0.025)
        today = datetime.now(UTC).date().isoformat()
        for _ in range(200):  # written by the release that follows the ending commit
            got = await operator_get(http, "/ops/api/usage")
            if got.json()["days"]:
                break
            await asyncio.sleep(0.025)

        rows = await asyncio.to_thread(table_rows, base_url, "usage", today)

    [row] = rows
    assert row[:2] == [today, "1"]  # the day, one session
    assert float(row[2]) >= 0  # its seconds
    assert row[5:] == ["0", "0"]  # no handoff, no rotation


async def test_an_operator_sees_the_tenant_policys_limits_beside_its_usage(
    livekit, store, tmp_path
):
    policy = tmp_path / "policy.toml"
    policy.write_text(
        "[default]\nlive_sessions = 3\nsession_minutes_per_day = 600\n", encoding="utf-8"
    )
    policy.chmod(0o644)
    binaries()  # skipped without a browser, before anything starts
    async with service(livekit, store, tenant_policy_file=str(policy)) as (base_url, http):
        await start_session(http, subject="alice")

        rows = await asyncio.to_thread(table_rows, base_url, "limits", "Live sessions")

    shown = {row[0]: row[1:] for row in rows}
    assert shown["Live sessions"] == ["3", "1"]  # the one session started, live
    assert shown["Starts per minute"] == ["no limit", ""]
    assert shown["Session minutes per UTC day"][0] == "600"
    assert float(shown["Session minutes per UTC day"][1]) < 1  # it has just started
    assert shown["Session minutes per UTC month"][0] == "no limit"
    assert shown["Minutes per session"] == ["60", ""]  # AIM_MAX_SESSION_S
    assert shown["Live sessions per user"] == ["5", ""]
