"""No token in what the client's objects and errors say of themselves: a repr, a str, an
error's text may end up in a log line or a traceback."""

from __future__ import annotations

import httpx
import pytest

from aim_realtime_client import (
    AgentMetadataError,
    AgentSession,
    AimClient,
    DispatchMetadata,
    JoinResult,
)
from aim_realtime_client.dispatch import parse_metadata
from aim_realtime_client.rpc import RpcCaller

JOIN_TOKEN = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJqb2luLXRva2VuIn0.c2lnbmF0dXJlLW9mLWpvaW4"
PROVIDER_TOKEN = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJwcm92aWRlciJ9.c2lnbmF0dXJlLXByb3ZpZGVy"
BEARER = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJhbGljZSJ9.c2lnbmF0dXJlLWJlYXJlcg"
METADATA = {
    "sessionId": "0b8f3f4e-7a1c-4d57-9d51-1c2f3a4b5c6d",
    "sessionEpoch": 1,
    "taskId": "7d1e2f3a-4b5c-4d6e-8f70-8192a3b4c5d6",
    "retention": {"transcript": "off", "summary": "off"},
    "requested": {},
    "providerUrl": "http://127.0.0.1:8080/provider",
    "providerToken": PROVIDER_TOKEN,
}


def said(value: object) -> str:
    return repr(value) + str(value)


async def test_nothing_that_holds_a_token_says_it():
    joined = JoinResult(url="wss://media.example", token=JOIN_TOKEN, room="aim-s-1",
                        expires_at="2030-01-01T00:00:00.000Z", epoch=1, identity="e-1",
                        endpoint_id="e-1", command_id="c-1")  # fmt: skip
    assert "aim-s-1" in repr(joined)
    metadata = parse_metadata(METADATA)
    agent = AgentSession(metadata, transport=httpx.MockTransport(lambda r: httpx.Response(500)))
    client = AimClient("http://127.0.0.1:1", token=BEARER)
    caller = RpcCaller("http://127.0.0.1:1/a2a", token=BEARER)
    try:
        shown = [said(item) for item in (joined, metadata, agent, client, caller, client.rpc)]
    finally:
        await agent.aclose()
        await client.aclose()
        await caller.aclose()
    for text in shown:
        for secret in (JOIN_TOKEN, PROVIDER_TOKEN, BEARER):
            assert secret not in text, text
    assert isinstance(metadata, DispatchMetadata)


@pytest.mark.parametrize(
    "token",
    [
        PROVIDER_TOKEN + ".and-a-fourth-part",  # five parts: an encrypted token, not a JWS
        PROVIDER_TOKEN.replace(".", "", 1),  # one dot lost on the way
    ],
)
def test_a_malformed_provider_token_is_refused_without_being_said(token):
    with pytest.raises(AgentMetadataError) as refused:
        parse_metadata({**METADATA, "providerToken": token, "sessionEpoch": 0})
    problems = refused.value.problems
    assert len(problems) == 2
    assert problems[1].startswith("providerToken: must be a JWT, got a string of ")
    assert f"{len(token)} characters" in problems[1]
    for text in (str(refused.value), repr(refused.value), *problems):
        assert token not in text
        assert PROVIDER_TOKEN.split(".")[2] not in text  # not even the signature
