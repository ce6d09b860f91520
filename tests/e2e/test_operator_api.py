"""The operator API (profile §17): who may read it, the listing (order, paging, filters,
tenants) and one session's detail."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from realtime.store.redis_client import RedisClient
from tests.conftest import ALL_SCOPES, service
from tests.e2e.agent_operation_helpers import interact, open_session, provider_call, request_action
from tests.e2e.operator_api_helpers import (
    TENANT_CLAIM,
    bearer,
    eventually,
    operator_get,
    operator_json,
    rpc_as,
    start_session,
    timeline_of,
)
from tests.e2e.realtime_helpers import new_id

pytestmark = [pytest.mark.e2e, pytest.mark.redis]

SUMMARY_KEYS = {"sessionId", "taskId", "principal", "state", "sessionEpoch", "createdAt",
                "updatedAt", "room", "agentState"}  # fmt: skip
UNKNOWN = "3c9a1f0e-7b6d-4e5c-8a2b-1d0c9e8f7a6b"
PATHS = (
    "/ops/api/sessions",
    f"/ops/api/sessions/{UNKNOWN}",
    f"/ops/api/sessions/{UNKNOWN}/timeline",
)


@pytest.fixture
async def http(livekit: Any, store: RedisClient) -> AsyncIterator[httpx.AsyncClient]:
    async with service(livekit, store) as client:
        yield client


# --- who may read ------------------------------------------------------------------------------


@pytest.mark.parametrize("path", PATHS)
async def test_without_credentials_the_api_answers_401_with_a_bearer_challenge(http, path):
    response = await http.get(path)
    assert response.status_code == 401
    assert response.headers["www-authenticate"] == 'Bearer realm="aim-realtime"'
    assert response.json()["error"]["code"] == -31401
    assert response.headers["content-type"].startswith("application/json")


@pytest.mark.parametrize("path", PATHS)
async def test_a_bad_token_is_401_invalid_token(http, path):
    response = await operator_get(http, path, authorization="Bearer not.a.jwt")
    assert response.status_code == 401
    assert 'error="invalid_token"' in response.headers["www-authenticate"]


@pytest.mark.parametrize("path", PATHS)
async def test_a_client_token_without_the_operator_scope_is_403(http, path):
    response = await operator_get(http, path, authorization=bearer("alice", ALL_SCOPES))
    assert response.status_code == 403
    challenge = response.headers["www-authenticate"]
    assert 'error="insufficient_scope"' in challenge
    assert 'scope="aim.operator"' in challenge
    assert response.json()["error"]["code"] == -31403


async def test_two_authorization_headers_are_401_invalid_request(http):
    response = await http.get(
        "/ops/api/sessions", headers=[("Authorization", bearer()), ("Authorization", bearer())]
    )
    assert response.status_code == 401
    assert 'error="invalid_request"' in response.headers["www-authenticate"]


async def test_the_api_is_read_only(http):
    session_id = await start_session(http)
    for path in (*PATHS, f"/ops/api/sessions/{session_id}"):
        for method in ("POST", "PUT", "DELETE", "PATCH"):
            response = await http.request(method, path, headers={"Authorization": bearer()})
            assert response.status_code == 405, (method, path)


# --- the listing -------------------------------------------------------------------------------


async def test_sessions_are_listed_newest_first_with_their_principal(http):
    first = await start_session(http, subject="alice")
    second = await start_session(http, subject="bob")
    third = await start_session(http, subject="alice")

    body = await operator_json(http, "/ops/api/sessions")

    assert [s["sessionId"] for s in body["sessions"]] == [third, second, first]
    assert body["nextCursor"] is None
    newest = body["sessions"][0]
    assert SUMMARY_KEYS <= set(newest) <= SUMMARY_KEYS | {"endReason", "activeEndpointId"}
    assert (newest["principal"], newest["state"], newest["sessionEpoch"]) == ("alice", "ready", 1)
    assert newest["room"] == f"aim-{third}-e1"
    assert newest["agentState"] == "dispatched"  # until the agent joins
    assert body["sessions"][1]["principal"] == "bob"


async def test_a_session_that_changes_moves_to_the_front(http):
    older = await start_session(http)
    await start_session(http)
    await rpc_as(
        http, "aim.realtime.EndSession", {"sessionId": older, "commandId": new_id(),
                                          "reason": "moving on"},
    )  # fmt: skip
    body = await operator_json(http, "/ops/api/sessions")
    assert body["sessions"][0]["sessionId"] == older
    assert body["sessions"][0]["endReason"] == "moving on"


async def test_pages_follow_each_other_with_nothing_lost_or_repeated(http):
    made = [await start_session(http) for _ in range(5)]
    seen: list[str] = []
    cursor = None
    pages = 0
    while True:
        page = await operator_json(http, "/ops/api/sessions", limit=2, cursor=cursor)
        assert len(page["sessions"]) <= 2
        seen += [s["sessionId"] for s in page["sessions"]]
        pages += 1
        cursor = page["nextCursor"]
        if cursor is None:
            break
        assert pages < 10
    assert seen == list(reversed(made))
    assert pages == 3


async def test_the_listing_filters_by_state_and_by_principal(http):
    ended = await start_session(http, subject="alice")
    await rpc_as(
        http, "aim.realtime.EndSession", {"sessionId": ended, "commandId": new_id(),
                                          "reason": "done"},
    )  # fmt: skip
    await eventually(lambda: _state_is(http, ended, "ended"))
    alices = await start_session(http, subject="alice")
    bobs = await start_session(http, subject="bob")

    by_state = await operator_json(http, "/ops/api/sessions", state="ended")
    assert [s["sessionId"] for s in by_state["sessions"]] == [ended]
    ready = await operator_json(http, "/ops/api/sessions", state="ready")
    assert [s["sessionId"] for s in ready["sessions"]] == [bobs, alices]
    by_principal = await operator_json(http, "/ops/api/sessions", principal="alice")
    assert [s["sessionId"] for s in by_principal["sessions"]] == [alices, ended]
    both = await operator_json(http, "/ops/api/sessions", principal="alice", state="ready")
    assert [s["sessionId"] for s in both["sessions"]] == [alices]
    nobody = await operator_json(http, "/ops/api/sessions", principal="carol")
    assert nobody == {"sessions": [], "nextCursor": None}
    filtered_pages = await operator_json(http, "/ops/api/sessions", principal="alice", limit=1)
    assert [s["sessionId"] for s in filtered_pages["sessions"]] == [alices]
    rest = await operator_json(
        http, "/ops/api/sessions", principal="alice", limit=1, cursor=filtered_pages["nextCursor"]
    )
    assert [s["sessionId"] for s in rest["sessions"]] == [ended]


async def _state_is(http: httpx.AsyncClient, session_id: str, state: str) -> bool:
    detail = await operator_json(http, f"/ops/api/sessions/{session_id}")
    return bool(detail["session"]["state"] == state)


@pytest.mark.parametrize(
    "params",
    [{"state": "sleeping"}, {"limit": "0"}, {"limit": "201"}, {"limit": "ten"},
     {"cursor": "%%%"}, {"cursor": "bm90IGEgY3Vyc29y"}],
)  # fmt: skip
async def test_bad_listing_params_are_400_naming_the_param(http, params):
    response = await operator_get(http, "/ops/api/sessions", **params)
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["code"] == -32602
    assert next(iter(params)) in error["message"]


# --- tenants -----------------------------------------------------------------------------------


async def test_with_a_tenant_claim_an_operator_sees_its_tenant_only(livekit, store):
    async with service(livekit, store, auth_tenant_claim=TENANT_CLAIM) as http:
        ours = await start_session(http, subject="alice", tenant="acme")
        also_ours = await start_session(http, subject="bob", tenant="acme")
        theirs = await start_session(http, subject="alice", tenant="globex")
        acme = bearer("ops", tenant="acme")
        globex = bearer("ops", tenant="globex")

        listed = (await operator_get(http, "/ops/api/sessions", authorization=acme)).json()
        alice = (
            await operator_get(http, "/ops/api/sessions", authorization=acme, principal="alice")
        ).json()
        other_side = (await operator_get(http, "/ops/api/sessions", authorization=globex)).json()
        mine = await operator_get(http, f"/ops/api/sessions/{ours}", authorization=acme)
        foreign = await operator_get(http, f"/ops/api/sessions/{theirs}", authorization=acme)
        unknown = await operator_get(http, f"/ops/api/sessions/{UNKNOWN}", authorization=acme)
        foreign_timeline = await operator_get(
            http, f"/ops/api/sessions/{theirs}/timeline", authorization=acme
        )
        unknown_timeline = await operator_get(
            http, f"/ops/api/sessions/{UNKNOWN}/timeline", authorization=acme
        )

    assert [s["sessionId"] for s in listed["sessions"]] == [also_ours, ours]
    assert [s["sessionId"] for s in alice["sessions"]] == [ours]
    assert [s["sessionId"] for s in other_side["sessions"]] == [theirs]
    assert mine.status_code == 200
    assert mine.json()["session"]["principal"] == "alice"
    for refused, missing in ((foreign, unknown), (foreign_timeline, unknown_timeline)):
        assert refused.status_code == missing.status_code == 404
        assert refused.json()["error"]["code"] == missing.json()["error"]["code"] == -31001
        assert (
            refused.json()["error"]["message"].replace(theirs, UNKNOWN)
            == (missing.json()["error"]["message"])
        )


# --- one session -------------------------------------------------------------------------------


async def test_an_unknown_or_malformed_session_id_is_404_with_a_json_body(http):
    for session_id in (UNKNOWN, "not-a-uuid", UNKNOWN.upper()):
        for suffix in ("", "/timeline"):
            response = await operator_get(http, f"/ops/api/sessions/{session_id}{suffix}")
            assert response.status_code == 404
            assert response.json()["error"]["code"] == -31001


async def test_a_sessions_detail_is_its_session_with_principal_outbox_timers_and_operations(
    http,
):
    session_id = await start_session(http, subject="alice")
    body = await operator_json(http, f"/ops/api/sessions/{session_id}")
    got = (await rpc_as(http, "aim.realtime.GetSession", {"sessionId": session_id}))["result"]

    session = body["session"]
    for key, value in got["session"].items():
        if key != "effects":
            assert session[key] == value, key
    assert session["principal"] == "alice"
    assert session["outbox"] == []
    kinds = {timer["kind"] for timer in session["timers"]}
    assert {"max", "idle"} <= kinds
    for timer in session["timers"]:
        assert set(timer) == {"kind", "dueAt", "epoch", "stale"}
    dues = [timer["dueAt"] for timer in session["timers"]]
    assert dues == sorted(dues)
    assert session["pendingOperations"] == []


async def test_operations_show_by_kind_and_state_never_by_their_action(http, livekit):
    title = f"Transfer the savings {new_id()}"
    live = await open_session(http, livekit)
    operation = await request_action(http, live, title=title)
    detail = await operator_json(http, f"/ops/api/sessions/{live.sid}")
    pending = detail["session"]["pendingOperations"]
    assert [(op["operationId"], op["kind"], op["state"]) for op in pending] == [
        (operation["operationId"], "action", "awaiting_confirmation")
    ]
    requirement = operation["requirement"]
    assert pending[0]["requirement"] == {
        "requirementId": requirement["requirementId"],
        "expiresAt": requirement["expiresAt"],
    }
    assert {timer["kind"] for timer in detail["session"]["timers"]} >= {"requirement"}
    confirmed = await interact(
        http, live.sid, "operation.confirm", {"operationId": operation["operationId"],
        "requirementId": requirement["requirementId"], "actionDigest": requirement["actionDigest"]},
    )  # fmt: skip
    assert "result" in confirmed, confirmed
    status, body, _ = await provider_call(
        http, live.provider_token, "UpdateOperation", sessionId=live.sid, requestId=new_id(),
        operationId=operation["operationId"], state="succeeded", result={"note": title},
    )  # fmt: skip
    assert status == 200, body

    entries = await timeline_of(http, live.sid)
    states = [
        e["state"]
        for e in entries
        if e["kind"] == "operation" and e["operationId"] == operation["operationId"]
    ]
    assert states == ["awaiting_confirmation", "running", "succeeded"]
    assert all(e["operationKind"] == "action" for e in entries if e["kind"] == "operation")
    asked = [e for e in entries if e.get("method") == "aim.provider.RequestOperation"]
    assert [e["outcome"] for e in asked] == ["applied"]
    assert asked[0]["commandId"].startswith("provider:")
    for path in (
        f"/ops/api/sessions/{live.sid}",
        f"/ops/api/sessions/{live.sid}/timeline",
        "/ops/api/sessions",
    ):
        assert title not in (await operator_get(http, path)).text


# --- the console page ----------------------------------------------------------------------------


async def test_the_console_is_one_page_whose_script_runs_only_by_its_nonce(http):
    first = await http.get("/ops")
    second = await http.get("/ops")
    assert first.status_code == 200
    assert first.headers["content-type"].startswith("text/html")
    policy = first.headers["content-security-policy"]
    nonce = re.search(r"script-src 'nonce-([A-Za-z0-9_-]+)'", policy)
    assert nonce is not None, policy
    assert "default-src 'none'" in policy
    assert "connect-src 'self'" in policy
    assert "unsafe-inline" not in policy
    assert "frame-ancestors 'none'" in policy
    page = first.text
    assert f'<script nonce="{nonce.group(1)}">' in page
    assert f'<style nonce="{nonce.group(1)}">' in page
    assert page.count("<script") == 1  # no other script, no external one
    assert "http://" not in page
    assert "https://" not in page
    assert 'type="password"' in page
    assert "localStorage" not in page
    assert "sessionStorage" not in page
    assert second.headers["content-security-policy"] != policy  # a new nonce each time
    assert first.headers["cache-control"] == "no-store"
