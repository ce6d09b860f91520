"""Methods A2A defines that this agent does not offer: the push notification config methods
(-32003, the card says pushNotifications: false) and the extended Agent Card (-32004, the card
says extendedAgentCard: false), in 1.0 and under their 0.3 names; authenticated and authorized
like every method first. Truly unknown names stay -32601."""

from __future__ import annotations

from typing import Any, Final

import httpx
import msgspec
import pytest

from tests.conftest import error_info, headers

pytestmark = pytest.mark.e2e

TASK_ID: Final = "3f0c8f5e-9a1b-4c2d-8e3f-4a5b6c7d8e9f"
PUSH_CONFIG: Final = {"taskId": TASK_ID, "url": "https://hooks.example/a2a", "token": "t"}
# (1.0 name, its 0.3 name, the scope it needs, params a real client would send)
PUSH: Final = [
    ("CreateTaskPushNotificationConfig", "tasks/pushNotificationConfig/set", "a2a.invoke",
     PUSH_CONFIG, {"taskId": TASK_ID, "pushNotificationConfig": {"url": PUSH_CONFIG["url"]}}),
    ("GetTaskPushNotificationConfig", "tasks/pushNotificationConfig/get", "a2a.tasks.read",
     {"taskId": TASK_ID, "id": "c1"}, {"id": TASK_ID, "pushNotificationConfigId": "c1"}),
    ("ListTaskPushNotificationConfigs", "tasks/pushNotificationConfig/list", "a2a.tasks.read",
     {"taskId": TASK_ID}, {"id": TASK_ID}),
    ("DeleteTaskPushNotificationConfig", "tasks/pushNotificationConfig/delete", "a2a.invoke",
     {"taskId": TASK_ID, "id": "c1"}, {"id": TASK_ID, "pushNotificationConfigId": "c1"}),
]  # fmt: skip
CARD: Final = ("GetExtendedAgentCard", "agent/getAuthenticatedExtendedCard", "a2a.tasks.read",
               {}, {})  # fmt: skip
# (method, A2A-Version, expected code, ErrorInfo reason, capability)
CASES: Final = [
    *[(v10, "1.0", -32003, "PUSH_NOTIFICATION_NOT_SUPPORTED", "pushNotifications", p10)
      for v10, _, _, p10, _ in PUSH],
    *[(v03, None, -32003, "PUSH_NOTIFICATION_NOT_SUPPORTED", "pushNotifications", p03)
      for _, v03, _, _, p03 in PUSH],
    (CARD[0], "1.0", -32004, "UNSUPPORTED_OPERATION", "extendedAgentCard", {}),
    (CARD[1], None, -32004, "UNSUPPORTED_OPERATION", "extendedAgentCard", {}),
]  # fmt: skip
SCOPES: Final = [(v10, v03, scope) for v10, v03, scope, _, _ in [*PUSH, CARD]]


async def call(
    client: httpx.AsyncClient,
    method: str,
    params: dict[str, Any],
    *,
    version: str | None,
    sent_headers: dict[str, str] | None = None,
) -> httpx.Response:
    return await client.post(
        "/a2a",
        content=msgspec.json.encode(
            {"jsonrpc": "2.0", "id": "g1", "method": method, "params": params}
        ),
        headers={
            "Content-Type": "application/json",
            **(headers(version=version) if sent_headers is None else sent_headers),
        },
    )


@pytest.mark.parametrize(("method", "version", "code", "reason", "capability", "params"), CASES)
async def test_unoffered_methods_answer_a2a_errors_not_method_not_found(
    client, store, method, version, code, reason, capability, params
):
    response = await call(client, method, params, version=version)
    assert response.status_code == 200
    body = response.json()
    assert body["id"] == "g1"
    assert "result" not in body
    error = body["error"]
    assert error["code"] == code
    assert capability in error["message"]
    if version == "1.0":  # the ErrorInfo array of every other A2A error
        info = error_info(body)
        assert info == {
            "@type": "type.googleapis.com/google.rpc.ErrorInfo",
            "reason": reason,
            "domain": "a2a-protocol.org",
            "metadata": {"capability": capability},
        }
    else:  # the 0.3 form the adapter gives every error: `data` is one object
        assert error["data"] == {
            "reason": reason,
            "domain": "a2a-protocol.org",
            "metadata": {"capability": capability},
        }
    assert await store.client.dbsize() == 0


@pytest.mark.parametrize("params", [{}, {"nonsense": [1, {"x": None}]}, {"taskId": "not-a-uuid"}])
@pytest.mark.parametrize(("method", "version"), [(PUSH[0][0], "1.0"), (PUSH[0][1], None)])
async def test_their_params_are_not_read(client, method, version, params):
    body = (await call(client, method, params, version=version)).json()
    assert body["error"]["code"] == -32003


@pytest.mark.parametrize(("method", "version"), [(c[0], c[1]) for c in CASES])
async def test_authentication_comes_first(client, method, version):
    sent = {} if version is None else {"A2A-Version": version}
    response = await call(client, method, {}, version=version, sent_headers=sent)
    assert response.status_code == 401
    assert response.headers["www-authenticate"] == 'Bearer realm="aim-realtime"'
    assert response.json()["error"]["code"] == -31401

    sent["Authorization"] = "Bearer not-a-token"
    response = await call(client, method, {}, version=version, sent_headers=sent)
    assert response.status_code == 401
    assert 'error="invalid_token"' in response.headers["www-authenticate"]


@pytest.mark.parametrize(("v10", "v03", "scope"), SCOPES)
async def test_each_needs_its_scope_and_only_that(client, v10, v03, scope):
    other = "a2a.tasks.read" if scope == "a2a.invoke" else "a2a.invoke"
    for method, version in ((v10, "1.0"), (v03, None)):
        wrong = headers(scopes=(other, "a2a.tasks.cancel"), version=version)
        response = await call(client, method, {}, version=version, sent_headers=wrong)
        assert response.status_code == 403
        assert response.headers["www-authenticate"] == (
            f'Bearer realm="aim-realtime", error="insufficient_scope", scope="{scope}"'
        )
        assert response.json()["error"]["code"] == -31403

        right = headers(scopes=(scope,), version=version)
        response = await call(client, method, {}, version=version, sent_headers=right)
        assert response.status_code == 200
        assert response.json()["error"]["code"] in (-32003, -32004)


@pytest.mark.parametrize(
    "method",
    [
        "CreateTaskPushNotificationConfigs",
        "SetTaskPushNotificationConfig",
        "GetAuthenticatedExtendedCard",
        "tasks/pushNotificationConfig/update",
        "agent/getExtendedCard",
    ],
)
async def test_unknown_names_stay_method_not_found(client, method):
    response = await call(client, method, {}, version="1.0")
    assert response.status_code == 200
    error = response.json()["error"]
    assert error["code"] == -32601
    # the methods it lists are the ones a caller can use
    offered = error["message"].split("Methods: ", 1)[1]
    assert "SendMessage" in offered
    assert "PushNotification" not in offered
    assert "ExtendedAgentCard" not in offered
    # without A2A-Version the request is an A2A 0.3 one: an unknown name is -32601 there too
    unversioned = (await call(client, method, {}, version=None)).json()
    assert unversioned["error"]["code"] == -32601


async def test_version_rules_are_those_of_every_method(client):
    # a 1.0 name needs A2A-Version 1.0; a 0.3 name with it is pointed at the 1.0 name
    missing = (await call(client, "GetExtendedAgentCard", {}, version=None)).json()
    assert missing["error"]["code"] == -32009
    crossed = (await call(client, "tasks/pushNotificationConfig/set", {}, version="1.0")).json()
    assert crossed["error"]["code"] == -32601
    assert "CreateTaskPushNotificationConfig" in crossed["error"]["message"]


async def test_params_are_required_as_on_every_call(client):
    # A2A lets GetExtendedAgentCard go without params; the AIM envelope wants an object
    response = await client.post(
        "/a2a",
        content=b'{"jsonrpc":"2.0","id":"g1","method":"GetExtendedAgentCard"}',
        headers={"Content-Type": "application/json", **headers()},
    )
    error = response.json()["error"]
    assert error["code"] == -32600
    assert error_info(response.json())["reason"] == "INVALID_REQUEST"
