"""The operator API under hostile operator input (profile §19): every query string is a 400
naming its parameter or an answer, never a 5xx or a traceback; operator calls are charged to the
caller's rate limit and audited; a tenant's listing reads an index of its own."""

from __future__ import annotations

import base64
import json
import logging
import os
from typing import Any, Final

import httpx
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from tests.conftest import service
from tests.e2e.agent_operation_helpers import Live, open_session
from tests.e2e.operator_api_helpers import (
    TENANT_CLAIM,
    bearer,
    operator_get,
    start_sessions,
)

pytestmark = [pytest.mark.e2e, pytest.mark.redis, pytest.mark.timeout(600)]

EXAMPLES: Final = int(os.environ.get("AIM_FUZZ_EXAMPLES", "200"))
UUID: Final = "3c9a1f0e-7b6d-4e5c-8a2b-1d0c9e8f7a6b"


def cursor(text: str) -> str:
    return base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")


@pytest.fixture
async def live(rt_client: httpx.AsyncClient, livekit: Any) -> Live:
    return await open_session(rt_client, livekit)


# --- no 500 from operator input -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("route", "params", "named"),
    [
        ("list", {"limit": "²"}, "limit"),
        ("list", {"limit": "١٢"}, "limit"),
        ("list", {"cursor": cursor(f"²|{UUID}")}, "cursor"),
        ("list", {"cursor": cursor(f"١٢|{UUID}")}, "cursor"),
        ("timeline", {"limit": "²"}, "limit"),
        ("timeline", {"cursor": cursor("0-18446744073709551616|0-0")}, "cursor"),
        ("timeline", {"cursor": cursor("99999999999999999999-0|0-0")}, "cursor"),
        ("timeline", {"cursor": cursor("0-0|0-18446744073709551616")}, "cursor"),
        ("timeline", {"cursor": cursor("²-0|0-0")}, "cursor"),
    ],
)
async def test_what_the_review_sent_is_400_naming_the_parameter(
    rt_client, live, caplog, route, params, named
):
    path = "/ops/api/sessions" + (f"/{live.sid}/timeline" if route == "timeline" else "")
    response = await operator_get(rt_client, path, **params)

    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["code"] == -32602
    assert named in error["message"]
    assert "Traceback" not in caplog.text


async def test_the_largest_stream_ids_are_a_valid_cursor_with_nothing_after_them(rt_client, live):
    largest = "18446744073709551615-18446744073709551615"
    response = await operator_get(
        rt_client, f"/ops/api/sessions/{live.sid}/timeline", cursor=cursor(f"{largest}|{largest}")
    )

    assert response.status_code == 200, response.text
    assert response.json()["entries"] == []


queries = st.dictionaries(
    st.sampled_from(["limit", "cursor", "state", "principal"]) | st.text(max_size=6),
    st.one_of(
        st.text(max_size=30),
        st.integers(min_value=-(2**70), max_value=2**70).map(str),
        st.builds(
            lambda a, b, c, d: cursor(f"{a}-{b}|{c}-{d}"),
            *[st.integers(min_value=0, max_value=2**66) | st.text(max_size=4)] * 4,
        ),
        st.builds(lambda a, b: cursor(f"{a}|{b}"), st.text(max_size=22), st.text(max_size=36)),
    ),
    max_size=4,
)


@settings(
    max_examples=EXAMPLES,
    derandomize=True,
    database=None,
    deadline=None,
    phases=(Phase.explicit, Phase.generate),
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(data=st.data())
async def test_no_query_string_gives_a_5xx_or_a_traceback(rt_client, live, caplog, data):
    path = data.draw(
        st.sampled_from(
            ["/ops/api/sessions", f"/ops/api/sessions/{live.sid}", f"/ops/api/sessions/{UUID}",
             f"/ops/api/sessions/{live.sid}/timeline", f"/ops/api/sessions/{UUID}/timeline"]
        ),
        label="path",
    )  # fmt: skip
    query = data.draw(queries, label="query")
    caplog.clear()
    response = await rt_client.get(path, params=query, headers={"Authorization": bearer()})

    assert response.status_code in (200, 400, 404), (response.status_code, response.text)
    assert set(response.json()) <= {"sessions", "nextCursor", "session", "entries", "error"}
    assert "Traceback" not in caplog.text
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


# --- rate limit and audit -----------------------------------------------------------------------


async def test_operator_calls_are_charged_to_the_operators_rate_limit(livekit, store):
    async with service(livekit, store, rate_limit_rps=2.0) as http:
        statuses = [(await operator_get(http, "/ops/api/sessions")).status_code for _ in range(8)]
        limited = await operator_get(http, "/ops/api/sessions")
        # another operator has a budget of its own
        other = await operator_get(http, "/ops/api/sessions", authorization=bearer("someone-else"))

    assert statuses[:4] == [200] * 4  # the burst is twice the rate
    assert 429 in statuses
    assert limited.status_code == 429
    assert int(limited.headers["retry-after"]) >= 1
    assert limited.json()["error"]["code"] == -31011
    assert other.status_code == 200


async def test_each_operator_call_is_audited_with_its_principal_and_session(
    livekit, store, access_lines
):
    async with service(livekit, store, auth_tenant_claim=TENANT_CLAIM, access_log=False) as http:
        await operator_get(http, "/ops/api/sessions", authorization=bearer("ops-1", tenant="acme"))
        await operator_get(
            http, f"/ops/api/sessions/{UUID}/timeline", authorization=bearer("ops-1", tenant="acme")
        )
        await operator_get(http, f"/ops/api/sessions/{UUID}")  # no tenant claim in the token: 401

    lines = [line for line in access_lines() if line.get("path", "").startswith("/ops/")]
    assert [(line["path"], line["status"]) for line in lines] == [
        ("/ops/api/sessions", 200),
        (f"/ops/api/sessions/{UUID}/timeline", 404),
        (f"/ops/api/sessions/{UUID}", 401),
    ]
    assert lines[0]["operator"] == {"tenant": "acme", "sub": "ops-1"}
    assert lines[1]["operator"] == {"tenant": "acme", "sub": "ops-1"}
    assert lines[1]["session_id"] == UUID
    assert "operator" not in lines[2]
    assert all("Bearer" not in json.dumps(line) for line in lines)


async def test_a_tenants_listing_shows_its_own_sessions(livekit, store):
    async with service(livekit, store, auth_tenant_claim=TENANT_CLAIM) as http:
        await start_sessions(http, {"acme": 1, "globex": 3})
        acme = await operator_get(
            http, "/ops/api/sessions", authorization=bearer("o", tenant="acme")
        )
        globex = await operator_get(
            http, "/ops/api/sessions", authorization=bearer("o", tenant="globex")
        )

    assert len(acme.json()["sessions"]) == 1
    assert len(globex.json()["sessions"]) == 3
