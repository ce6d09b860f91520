"""A2A 0.3 calls: 0.3 method names on `/a2a` and the 0.3 shape of their errors."""

from __future__ import annotations

from typing import Any

import msgspec

from tests.conftest import headers


async def rpc03(
    client: Any,
    method: str,
    params: dict[str, Any],
    *,
    subject: str = "alice",
    version: str | None = None,
    extensions: str | None = None,
) -> tuple[dict[str, Any], Any]:
    sent = {"Content-Type": "application/json", **headers(subject, version=version)}
    if extensions is not None:
        sent["X-A2A-Extensions"] = extensions
    response = await client.post(
        "/a2a",
        content=msgspec.json.encode({"jsonrpc": "2.0", "id": "r1", "method": method,
                                     "params": params}),
        headers=sent,
    )  # fmt: skip
    body: dict[str, Any] = response.json()
    return body, response


def assert_v03_error(body: dict[str, Any], code: int, reason: str) -> dict[str, Any]:
    error: dict[str, Any] = body["error"]
    assert error["code"] == code
    assert isinstance(error["message"], str)
    assert isinstance(error["data"], dict)  # 0.3: an object, not the 1.0 ErrorInfo array
    assert error["data"]["reason"] == reason
    return error
