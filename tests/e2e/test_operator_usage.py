"""Usage an operator can bill (profile §24): each ended session's seconds, connected and agent
seconds, handoffs and rotations, in `session.ended`, and summed per tenant and UTC day by the
operator API, as JSON and as CSV, each tenant's operator seeing its own. The service runs on a
clock the test moves, so the seconds are exact."""

from __future__ import annotations

import asyncio
import csv
import io
from datetime import UTC, datetime, timedelta

import httpx
import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from realtime.app import create_app
from tests.clocks import Clock
from tests.conftest import livekit_settings, service, serving
from tests.e2e.metrics_helpers import points
from tests.e2e.operator_api_helpers import (
    TENANT_CLAIM,
    bearer,
    operator_get,
    rpc_as,
    start_session,
)
from tests.e2e.realtime_helpers import CAPS, new_id
from tests.e2e.webhook_helpers import deliver, room, webhook_event
from tests.event_receivers import events_settings, receiver

pytestmark = pytest.mark.e2e

AGENT = "agent-AJ_worker-1"


def approx(seconds: float) -> object:
    """`seconds` the test moved the clock on by, and the real time its calls took meanwhile:
    milliseconds, but up to a second or two on a loaded machine (the nearest other value a
    test here expects is 5 s away)."""
    return pytest.approx(seconds, abs=2.0)


async def used_session(http, clock: Clock, tenant: str, *, connected_s: float, agent_s: float):
    """A session of `tenant`: its phone in the room for `connected_s`, the agent in for
    `agent_s` of that time, then ended and its room deleted. Its id."""
    sid = await start_session(http, subject=f"{tenant}-user", tenant=tenant)
    registered = await rpc_as(
        http, "aim.realtime.RegisterEndpoint", {"sessionId": sid, "sessionEpoch": 1,
        "commandId": new_id(), "clientEndpointKey": "phone", "capabilities": CAPS},
        subject=f"{tenant}-user", tenant=tenant,
    )  # fmt: skip
    phone = registered["result"]["endpoint"]["endpointId"]
    joined = await rpc_as(
        http, "aim.realtime.JoinSession", {"sessionId": sid, "sessionEpoch": 1,
        "endpointId": phone, "commandId": new_id()}, subject=f"{tenant}-user", tenant=tenant,
    )  # fmt: skip
    assert "result" in joined, joined
    assert await deliver(http, webhook_event("participant_joined", room(sid), identity=phone)) == (
        "applied"
    )
    agent = webhook_event("participant_joined", room(sid), identity=AGENT, agent=True)
    assert await deliver(http, agent) == "applied"
    clock.advance(agent_s)
    left = webhook_event("participant_left", room(sid), identity=AGENT, agent=True)
    assert await deliver(http, left) == "applied"
    clock.advance(connected_s - agent_s)
    ended = await rpc_as(
        http, "aim.realtime.EndSession", {"sessionId": sid, "commandId": new_id(),
        "reason": "done"}, subject=f"{tenant}-user", tenant=tenant,
    )  # fmt: skip
    assert "result" in ended, ended
    return sid


async def usage_once_written(
    http: httpx.AsyncClient, authorization: str, *, sessions: int
) -> httpx.Response:
    """GET /ops/api/usage once the operator's tenant has `sessions` ended today (5 s at most)."""
    for _ in range(200):
        answer = await operator_get(http, "/ops/api/usage", authorization=authorization)
        if sum(day["sessions"] for day in answer.json().get("days", [])) >= sessions:
            break
        await asyncio.sleep(0.025)
    return answer


async def test_usage_is_told_at_the_end_and_summed_per_tenant_and_day(livekit, store, tmp_path):
    clock = Clock()
    today = datetime.fromtimestamp(clock(), tz=UTC).date().isoformat()
    async with (
        receiver(tmp_path) as backend,
        service(
            livekit, store, clock=clock, auth_tenant_claim=TENANT_CLAIM,
            **events_settings(backend.url),
        ) as http,
    ):  # fmt: skip
        first = await used_session(http, clock, "acme", connected_s=30, agent_s=20)
        await used_session(http, clock, "acme", connected_s=10, agent_s=5)
        await used_session(http, clock, "globex", connected_s=7, agent_s=7)

        # the app's backend: what the session used, in its session.ended
        await backend.wait_for(
            lambda: any(e["type"] == "session.ended" for e in backend.delivered(first))
        )
        [ended] = [e for e in backend.delivered(first) if e["type"] == "session.ended"]
        used = ended["data"]["usage"]
        # the test's clock moves on by the seconds it advances, and a few ms of real time
        assert (used["connectedSeconds"], used["agentSeconds"]) == (approx(30), approx(20))
        assert used["sessionSeconds"] >= 30.0
        assert (used["handoffs"], used["rotations"]) == (0, 0)

        # the operator of acme: its two sessions, summed, today; nothing of globex (each usage
        # is written by the release that follows the commit that ended its session)
        acme = bearer(tenant="acme")
        answer = await usage_once_written(http, acme, sessions=2)
        assert answer.status_code == 200, answer.text
        body = answer.json()
        assert (body["tenant"], body["to"]) == ("acme", today)
        [day] = body["days"]
        assert (day["day"], day["sessions"]) == (today, 2)
        assert (day["connectedSeconds"], day["agentSeconds"]) == (approx(40), approx(25))
        globex = await usage_once_written(http, bearer(tenant="globex"), sessions=1)
        assert [(d["sessions"], d["agentSeconds"]) for d in globex.json()["days"]] == [
            (1, approx(7))
        ]

        # the same as CSV, for a spreadsheet
        as_csv = await operator_get(http, "/ops/api/usage", authorization=acme, format="csv")
        assert as_csv.status_code == 200
        assert as_csv.headers["content-type"].startswith("text/csv")
        rows = list(csv.DictReader(io.StringIO(as_csv.text)))
        assert [(r["day"], r["sessions"]) for r in rows] == [(today, "2")]
        assert float(rows[0]["connectedSeconds"]) == approx(40)

        # a range without sessions has no rows; a range ending tomorrow has today's
        earlier = (datetime.fromisoformat(today) - timedelta(days=10)).date().isoformat()
        empty = await operator_get(
            http, "/ops/api/usage", authorization=acme, **{"from": earlier, "to": earlier}
        )
        assert empty.json()["days"] == []


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"from": "2026-13-01"}, "from"),
        ({"to": "yesterday"}, "to"),
        ({"from": "2026-03-02", "to": "2026-03-01"}, "from"),
        ({"from": "2026-01-01", "to": "2026-06-30"}, "from"),
        ({"format": "xml"}, "format"),
    ],
)
async def test_a_bad_usage_query_is_refused_naming_the_parameter(livekit, store, params, field):
    async with service(livekit, store) as http:
        answer = await operator_get(http, "/ops/api/usage", **params)
        assert answer.status_code == 400, answer.text
        assert field in answer.text


async def test_usage_needs_the_operator_scope(livekit, store):
    async with service(livekit, store) as http:
        answer = await operator_get(http, "/ops/api/usage", authorization=bearer("alice", ("a2a",)))
        assert answer.status_code == 403


async def test_usage_is_counted_per_tenant_for_prometheus(livekit, store):
    clock, reader = Clock(), InMemoryMetricReader()
    settings = livekit_settings(livekit, auth_tenant_claim=TENANT_CLAIM)
    app = create_app(
        settings, store=store, clock=clock, meter_provider=MeterProvider(metric_readers=[reader])
    )
    async with serving(app) as base_url, httpx.AsyncClient(base_url=base_url, timeout=30) as http:
        await used_session(http, clock, "acme", connected_s=30, agent_s=20)
        await used_session(http, clock, "acme", connected_s=10, agent_s=5)
        await used_session(http, clock, "globex", connected_s=7, agent_s=7)

        async def counted() -> dict[str, float]:
            return {attrs["tenant"]: value for attrs, value in points(reader, "aim.usage.sessions")}

        for _ in range(200):  # each session counts once its room is deleted (it is over)
            if await counted() == {"acme": 2, "globex": 1}:
                break
            await asyncio.sleep(0.025)
        assert await counted() == {"acme": 2, "globex": 1}
        connected = {a["tenant"]: v for a, v in points(reader, "aim.usage.connected")}
        agent = {a["tenant"]: v for a, v in points(reader, "aim.usage.agent")}
        assert connected == {"acme": approx(40), "globex": approx(7)}
        assert agent == {"acme": approx(25), "globex": approx(7)}
