"""The client's JSON-RPC caller and stream on a scripted transport: what it retries (with the
very same body), how long it waits, and what it raises at once."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from email.utils import formatdate

import httpx
import pytest
from hypothesis import given
from hypothesis import strategies as st

from aim_realtime_client import (
    AuthError,
    AuthMisconfiguredError,
    InvalidStateError,
    LimitExceededError,
    RedirectError,
    RetryPolicy,
    TokenExpiredError,
    UnavailableError,
)
from aim_realtime_client.rpc import RpcCaller
from aim_realtime_client.stream import TaskStream

INFO = "type.googleapis.com/google.rpc.ErrorInfo"
Answer = Callable[[httpx.Request], httpx.Response]


def error(code: int, **meta: str) -> dict:
    data = [{"@type": INFO, "reason": "R", "domain": "d", "metadata": meta}]
    return {"jsonrpc": "2.0", "id": 1, "error": {"code": code, "message": "m", "data": data}}


def ok(result: object) -> httpx.Response:
    return httpx.Response(200, json={"jsonrpc": "2.0", "id": 1, "result": result})


OPENED: list[RpcCaller] = []


@pytest.fixture(autouse=True)
async def _close_callers():
    yield
    while OPENED:
        await OPENED.pop().aclose()


class Script:
    """Answers requests in turn; records them, and the caller's waits."""

    def __init__(self, *answers: Answer | httpx.Response | Exception) -> None:
        self.answers = list(answers)
        self.requests: list[httpx.Request] = []
        self.waits: list[float] = []

    def handle(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer if isinstance(answer, httpx.Response) else answer(request)

    async def sleep(self, seconds: float) -> None:
        self.waits.append(seconds)

    def caller(self, **options) -> RpcCaller:
        caller = RpcCaller("http://aim.test/a2a", transport=httpx.MockTransport(self.handle),
                           sleep=self.sleep, random=lambda: 0.5, **options)  # fmt: skip
        OPENED.append(caller)
        return caller


async def test_what_may_have_applied_is_sent_again_byte_for_byte_until_it_answers():
    script = Script(
        httpx.ConnectError("refused"),
        httpx.ReadTimeout("slow"),
        httpx.Response(503, text="<html>bad gateway</html>"),
        httpx.Response(200, json=error(-31012, service="redis", retryable="true")),
        ok({"session": {"state": "ready"}}),
    )
    result = await script.caller(token="t").call("aim.realtime.GetSession", {"sessionId": "s"})
    assert result == {"session": {"state": "ready"}}
    assert len({r.content for r in script.requests}) == 1
    assert json.loads(script.requests[0].content)["params"] == {"sessionId": "s"}
    # full jitter (here the middle of each range): 250 ms doubling
    assert script.waits == [0.125, 0.25, 0.5, 1.0]


async def test_the_last_attempt_raises_unavailable():
    script = Script(*[httpx.ConnectError("refused")] * 3)
    with pytest.raises(UnavailableError) as failed:
        await script.caller(retry=RetryPolicy(attempts=3)).call("GetTask", {"id": "x"})
    assert (failed.value.code, failed.value.reason, failed.value.method) == (
        None, "TRANSPORT", "GetTask")  # fmt: skip
    assert len(script.requests) == 3


async def test_a_rate_limit_waits_as_advised_and_a_long_one_is_raised():
    script = Script(
        httpx.Response(200, json=error(-31011, limit="rps", retryAfterSeconds="2"),
                       headers={"Retry-After": "2"}),
        ok({}),
    )  # fmt: skip
    assert await script.caller().call("M", {}) == {}
    assert script.waits == [2.0]

    script = Script(httpx.Response(200, json=error(-31011, retryAfterSeconds="120")))
    with pytest.raises(LimitExceededError) as limited:
        await script.caller().call("M", {})
    assert limited.value.retry_after_ms == 120_000
    assert len(script.requests) == 1


async def test_a_rate_limit_whose_retry_after_is_a_date_waits_until_then():
    """`Retry-After` as an HTTP-date (as a proxy in front of the service may send it): waited
    until that date, not a backoff; a date past `max_retry_after_ms` is raised."""
    soon = formatdate(time.time() + 30, usegmt=True)
    script = Script(
        httpx.Response(429, json=error(-31011, limit="rps"), headers={"Retry-After": soon}),
        ok({}),
    )
    assert await script.caller().call("M", {}) == {}
    [wait] = script.waits
    assert 28 <= wait <= 31  # the date has whole seconds, and the clock moved meanwhile

    late = formatdate(time.time() + 600, usegmt=True)
    script = Script(
        httpx.Response(429, json=error(-31011, limit="rps"), headers={"Retry-After": late}),
    )
    with pytest.raises(LimitExceededError) as limited:
        await script.caller().call("M", {})
    assert 590_000 <= (limited.value.retry_after_ms or 0) <= 600_000
    assert script.waits == []


@pytest.mark.parametrize(
    ("answer", "raised"),
    [
        (httpx.Response(200, json=error(-31003, state="ready")), InvalidStateError),
        (httpx.Response(200, json=error(-31011, limit="endpoints")), LimitExceededError),
        (httpx.Response(401, json=error(-31401)), AuthError),
        (httpx.Response(403, text="forbidden"), AuthError),
    ],
)
async def test_other_errors_are_raised_at_once(answer, raised):
    script = Script(answer)
    with pytest.raises(raised):
        await script.caller().call("M", {})
    assert len(script.requests) == 1


async def test_the_token_is_asked_for_every_attempt_sync_or_async():
    tokens = iter(["one", "two"])

    async def fresh() -> str:
        return next(tokens)

    script = Script(httpx.ReadError("cut"), ok(1))
    await script.caller(token=fresh, headers={"A2A-Version": "1.0"}).call("M", {})
    assert [r.headers["authorization"] for r in script.requests] == ["Bearer one", "Bearer two"]
    assert {r.headers["a2a-version"] for r in script.requests} == {"1.0"}
    script = Script(ok(1))
    await script.caller(token=lambda: "plain").call("M", {})
    assert script.requests[0].headers["authorization"] == "Bearer plain"


@given(st.integers(1, 40), st.floats(0, 1, exclude_max=True))
def test_full_jitter_stays_under_the_doubling_ceiling(retry, fraction):
    policy = RetryPolicy()
    delay = policy.backoff_ms(retry, fraction)
    assert 0 <= delay <= min(5000, 250 * 2 ** (retry - 1))
    assert delay == pytest.approx(fraction * min(5000, 250 * 2 ** (retry - 1)))


def sse(*events: str) -> httpx.Response:
    body = "".join(events).encode()
    return httpx.Response(200, content=body, headers={"Content-Type": "text/event-stream"})


def frame(event_id: str, state: str) -> str:
    update = {"statusUpdate": {"taskId": "t", "status": {"state": state}}}
    return f"id: {event_id}\ndata: {json.dumps({'jsonrpc': '2.0', 'id': 1, 'result': update})}\n\n"


async def test_the_stream_resumes_after_its_last_id_until_the_task_ends():
    script = Script(
        sse(frame("1-0", "TASK_STATE_WORKING"), ": keepalive\n\n"),
        httpx.ConnectError("refused"),
        sse(frame("2-0", "TASK_STATE_WORKING"), frame("3-0", "TASK_STATE_COMPLETED")),
    )
    stream = TaskStream(script.caller(), "t")
    got = [f.event_id async for f in stream.frames()]
    assert got == ["1-0", "2-0", "3-0"]
    assert [r.headers.get("last-event-id") for r in script.requests] == [None, "1-0", "1-0"]
    assert len({r.content for r in script.requests}) == 1
    assert script.waits == [0.125, 0.25]  # the count restarts only once a frame arrives


async def test_a_terminal_task_ends_the_stream_and_failures_are_bounded():
    script = Script(httpx.Response(200, json=error(-32004)))
    stream = TaskStream(script.caller(), "t")
    assert [f async for f in stream.frames()] == []
    assert stream.refused_terminal

    script = Script(*[httpx.ConnectError("refused")] * 10)
    with pytest.raises(UnavailableError):
        [f async for f in TaskStream(script.caller(), "t").frames()]
    assert len(script.requests) == 10

    script = Script(httpx.Response(200, json=error(-32001)))
    with pytest.raises(Exception, match="m") as gone:
        [f async for f in TaskStream(script.caller(), "t").frames()]
    assert getattr(gone.value, "code", None) == -32001
    assert len(script.requests) == 1


def error_frame(code: int) -> str:
    return f"data: {json.dumps(error(code))}\n\n"


async def test_an_error_frame_breaks_the_connection_and_a_frame_that_is_not_json_is_skipped():
    script = Script(
        sse("data: not json\n\n", frame("1-0", "TASK_STATE_WORKING"), error_frame(-32603),
            frame("9-0", "TASK_STATE_WORKING")),
        sse(frame("2-0", "TASK_STATE_WORKING"), error_frame(-32004)),
    )  # fmt: skip
    stream = TaskStream(script.caller(), "t")
    got = [f.event_id async for f in stream.frames()]
    assert got == ["1-0", "2-0"]  # nothing after an error frame is read
    assert [r.headers.get("last-event-id") for r in script.requests] == [None, "1-0"]
    assert stream.refused_terminal  # -32004: the task is terminal


async def test_a_service_not_configured_for_livekit_is_raised_at_once():
    unset = "AIM_LIVEKIT_URL,AIM_LIVEKIT_API_KEY"
    script = Script(
        httpx.Response(200, json=error(-31012, service="livekit", retryable="false", unset=unset)),
        ok({}),
    )
    with pytest.raises(UnavailableError) as refused:
        await script.caller().call("SendMessage", {})
    assert (refused.value.retryable, refused.value.metadata["unset"]) == (False, unset)
    assert len(script.requests) == 1
    assert script.waits == []


async def test_a_redirect_is_raised_and_never_followed_not_even_by_a_following_client():
    moved = httpx.Response(307, headers={"Location": "http://elsewhere.test/a2a"})

    async def call(caller: RpcCaller) -> None:
        await caller.call("M", {})

    async def follow(caller: RpcCaller) -> None:
        [f async for f in TaskStream(caller, "t").frames()]

    for attempt in (call, follow):
        script = Script(moved, ok({}))
        http = httpx.AsyncClient(transport=httpx.MockTransport(script.handle),
                                 follow_redirects=True)  # fmt: skip
        caller = RpcCaller("http://aim.test/a2a", token="secret", http=http, sleep=script.sleep)
        with pytest.raises(RedirectError) as redirected:
            await attempt(caller)
        await http.aclose()
        assert (redirected.value.http_status, redirected.value.reason) == (307, "REDIRECT")
        assert not redirected.value.retryable
        assert [r.url.host for r in script.requests] == ["aim.test"]
        assert script.waits == []


def refused(reason: str) -> httpx.Response:
    return httpx.Response(401, json=error(-31401, reason=reason))


class Tokens:
    """A token function: hands out "t1", "t2", … and counts how often it was asked."""

    def __init__(self) -> None:
        self.asked = 0

    def __call__(self) -> str:
        self.asked += 1
        return f"t{self.asked}"


async def test_an_expired_token_is_asked_again_once_and_the_call_sent_again_at_once():
    tokens = Tokens()
    script = Script(refused("token_expired"), ok({"tasks": []}))
    assert await script.caller(token=tokens).call("ListTasks", {}) == {"tasks": []}
    assert [r.headers["authorization"] for r in script.requests] == ["Bearer t1", "Bearer t2"]
    assert script.requests[0].content == script.requests[1].content
    assert script.waits == []

    # a token that is expired again: raised after that one new attempt
    script = Script(refused("token_expired"), refused("token_expired"))
    with pytest.raises(TokenExpiredError):
        await script.caller(token=Tokens()).call("ListTasks", {})
    assert len(script.requests) == 2


async def test_an_expired_fixed_token_is_raised_at_once():
    script = Script(refused("token_expired"))
    with pytest.raises(TokenExpiredError) as expired:
        await script.caller(token="fixed").call("ListTasks", {})
    assert expired.value.auth_reason == "token_expired"
    assert len(script.requests) == 1


@pytest.mark.parametrize("reason", ["invalid_signature", "unknown_key", "invalid_audience"])
async def test_a_misconfigured_token_is_raised_at_once_without_asking_for_another(reason):
    tokens = Tokens()
    script = Script(refused(reason))
    with pytest.raises(AuthMisconfiguredError) as wrong:
        await script.caller(token=tokens).call("ListTasks", {})
    assert wrong.value.auth_reason == reason
    assert (len(script.requests), tokens.asked) == (1, 1)


async def test_a_stream_whose_token_expired_reconnects_with_a_new_one():
    tokens = Tokens()
    script = Script(
        sse(frame("1-0", "TASK_STATE_WORKING")),
        refused("token_expired"),
        sse(frame("2-0", "TASK_STATE_COMPLETED")),
    )
    got = [f.event_id async for f in TaskStream(script.caller(token=tokens), "t").frames()]
    assert got == ["1-0", "2-0"]
    assert [r.headers["authorization"] for r in script.requests] == [
        "Bearer t1", "Bearer t2", "Bearer t3"]  # fmt: skip
    assert [r.headers.get("last-event-id") for r in script.requests] == [None, "1-0", "1-0"]

    script = Script(sse(frame("1-0", "TASK_STATE_WORKING")), refused("invalid_signature"))
    with pytest.raises(AuthMisconfiguredError):
        [f async for f in TaskStream(script.caller(token=Tokens()), "t").frames()]
    assert len(script.requests) == 2
