"""The JSON-RPC caller: one POST per attempt, the same body on every attempt of one call.

A call's body (its JSON-RPC id and params, so its commandId / messageId / requestId) is encoded
once, when the call is made; retries send those bytes again. What is retried, up to
`RetryPolicy.attempts` attempts in all:

- no answer (connection refused or cut, a timeout): the call may have applied, and the same
  ids make the retry answer its stored outcome;
- HTTP 502/503/504 without a JSON-RPC body (a proxy in between);
- -31012 UPSTREAM_UNAVAILABLE, unless its metadata says `retryable: "false"` (the service is
  not configured for LiveKit: the same request fails the same way);
- -31011 LIMIT_EXCEEDED with retry advice (`Retry-After` in seconds or as an HTTP-date,
  `retryAfterSeconds`): waited out as advised (until that date) instead of backing off;
- a 401 `token_expired`, once per call and at once, when the token comes from a function: the
  next attempt asks it for a new token (no other 401 asks it again).

The others wait an exponential backoff with full jitter: a random delay between 0 and
`min(max_delay_ms, base_delay_ms * 2**(n-1))` before the n-th retry. Anything else is raised at
once as a typed error (`aim_realtime_client.errors`); a redirect is never followed (it would send
the body and the token to another URL) but raised, as `RedirectError`.

A call is cancelled as any coroutine is (`asyncio.timeout()`, `Task.cancel()`): the attempt or
the wait under way ends, and no retry follows.
"""

from __future__ import annotations

import asyncio
import inspect
import itertools
import json
import random as _random
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

import httpx

from aim_realtime_client.errors import (
    LIMIT_EXCEEDED,
    AimError,
    TokenExpiredError,
    error_from_rpc,
    http_error,
    transport_error,
)

# the AIM realtime extension: announced in A2A-Extensions, and the key of its task metadata
REALTIME: Final = "urn:aim:a2a:realtime:v1"
A2A_HEADERS: Final = {
    "A2A-Version": "1.0",
    "A2A-Extensions": REALTIME,
}
TokenSource = str | Callable[[], str | Awaitable[str]] | None
Sleep = Callable[[float], Awaitable[None]]


@dataclass(frozen=True)
class RetryPolicy:
    """How often and how long a call is retried (see the module's docstring).

    `max_retry_after_ms`: a `Retry-After` longer than this is not waited out (the error is
    raised with its `retry_after_ms`, for the app to decide)."""

    attempts: int = 5
    base_delay_ms: int = 250
    max_delay_ms: int = 5000
    max_retry_after_ms: int = 60_000

    def __post_init__(self) -> None:
        if self.attempts < 1:
            raise ValueError("RetryPolicy.attempts must be at least 1")
        if self.base_delay_ms < 0 or self.max_delay_ms < 0:
            raise ValueError("RetryPolicy delays must not be negative")

    def backoff_ms(self, retry: int, fraction: float) -> float:
        """Full jitter: the delay before the `retry`-th retry (1, 2, …) for `fraction` in
        [0, 1) drawn at random."""
        ceiling = min(self.max_delay_ms, self.base_delay_ms * 2 ** min(retry - 1, 30))
        return float(fraction * ceiling)

    @classmethod
    def of(cls, value: RetryPolicy | Mapping[str, int] | None) -> RetryPolicy:
        if value is None:
            return cls()
        if isinstance(value, RetryPolicy):
            return value
        return cls(**dict(value))


def encode(request_id: int, method: str, params: Mapping[str, Any]) -> bytes:
    body = {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}
    return json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode()


class Link:
    """What a session needs of its client (built by `AimClient`, handed down): the caller of
    its calls, how long `wait_ready` waits by default, and how its stream reconnects."""

    __slots__ = ("ready_timeout_ms", "rpc", "stream_backoff", "stream_idle_timeout_s")

    def __init__(
        self,
        rpc: RpcCaller,
        *,
        ready_timeout_ms: int,
        stream_backoff: RetryPolicy,
        stream_idle_timeout_s: float,
    ) -> None:
        self.rpc = rpc
        self.ready_timeout_ms = ready_timeout_ms
        self.stream_backoff = stream_backoff
        self.stream_idle_timeout_s = stream_idle_timeout_s


class RpcCaller:
    """POSTs JSON-RPC 2.0 calls to one URL (`…/a2a` or an agent's `…/provider`).

    `token` is a string or a function (sync or async) returning one, called for every attempt,
    so a refreshed token is used. `headers` are added to every request (the A2A headers for
    /a2a). `http`: an `httpx.AsyncClient` of the caller's (kept open by `aclose`); else one is
    made, on `transport` when given. `sleep` and `random` are the waits and the jitter."""

    def __init__(
        self,
        url: str,
        *,
        token: TokenSource = None,
        headers: Mapping[str, str] | None = None,
        retry: RetryPolicy | Mapping[str, int] | None = None,
        request_timeout_ms: int = 30_000,
        http: httpx.AsyncClient | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
        sleep: Sleep = asyncio.sleep,
        random: Callable[[], float] = _random.random,
    ) -> None:
        self.url = url
        self.token = token
        self.extra_headers = dict(headers or {})
        self.retry = RetryPolicy.of(retry)
        self.timeout = httpx.Timeout(request_timeout_ms / 1000)
        self._own_http = http is None
        self.http = http if http is not None else httpx.AsyncClient(transport=transport)
        self.sleep = sleep
        self.random = random
        self._ids = itertools.count(1)

    async def aclose(self) -> None:
        if self._own_http:
            await self.http.aclose()

    def next_id(self) -> int:
        return next(self._ids)

    async def headers(self, **extra: str) -> dict[str, str]:
        """The headers of one attempt: content type, the current token, the fixed ones."""
        headers = {"Content-Type": "application/json", **self.extra_headers, **extra}
        token = self.token
        if callable(token):
            got = token()
            token = await got if inspect.isawaitable(got) else got
        if token:
            headers["Authorization"] = f"Bearer {token}"
        return headers

    async def call(self, method: str, params: Mapping[str, Any]) -> Any:
        """The call's `result`, retried as the module says; else its typed error."""
        body = encode(self.next_id(), method, params)
        retry = 0
        refreshed = False
        while True:
            try:
                return await self.attempt(method, body)
            except AimError as error:
                if self.refreshes(error) and not refreshed:
                    refreshed = True
                    continue
                retry += 1
                delay_ms = self.delay_ms(error, retry)
                if delay_ms is None:
                    raise
            await self.sleep(delay_ms / 1000)

    def refreshes(self, error: AimError) -> bool:
        """Whether a new token may cure `error`: it expired, and the token comes from a function
        (which the next attempt asks again)."""
        return isinstance(error, TokenExpiredError) and callable(self.token)

    def delay_ms(self, error: AimError, retry: int) -> float | None:
        """How long to wait before the `retry`-th retry after `error`; None: raise it."""
        if not error.retryable or retry >= self.retry.attempts:
            return None
        if error.code == LIMIT_EXCEEDED and error.retry_after_ms is not None:
            if error.retry_after_ms > self.retry.max_retry_after_ms:
                return None
            return float(error.retry_after_ms)
        return self.retry.backoff_ms(retry, self.random())

    async def attempt(self, method: str, body: bytes) -> Any:
        """One POST of `body`: its result, or the error it answered (or its lack of one)."""
        try:
            response = await self.http.post(
                self.url,
                content=body,
                headers=await self.headers(),
                timeout=self.timeout,
                follow_redirects=False,  # a redirect is raised (RedirectError), never followed
            )
        except httpx.TransportError as exc:
            raise transport_error(method, exc) from exc
        return answer_of(
            method, response.status_code, response.content, response.headers.get("retry-after")
        )


def answer_of(method: str, status: int, content: bytes, retry_after: str | None) -> Any:
    """The result in a JSON-RPC answer, or the typed error it carries."""
    try:
        answer = json.loads(content)
    except ValueError:
        answer = None
    if not isinstance(answer, dict) or not ("result" in answer or "error" in answer):
        raise http_error(method, status, retry_after)
    error = answer.get("error")
    if isinstance(error, dict):
        raise error_from_rpc(error, http_status=status, retry_after=retry_after, method=method)
    if "result" not in answer:
        raise http_error(method, status, retry_after)
    return answer["result"]
