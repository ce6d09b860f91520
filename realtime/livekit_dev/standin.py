"""A local stand-in for LiveKit's server API (realtime-profile §9, livekit-notes §3): the tests'
LiveKit, and the local LiveKit for development (`aim-realtime livekit-dev`, command.py).

No LiveKit server runs in the tests, so this aiohttp app answers the Twirp routes ``livekit-api``
calls the way the Go server does (livekit/livekit ``pkg/service``):

* Auth middleware first: a bad, expired or unknown-key Bearer token gets HTTP 401 with a
  plain-text body (the client raises ``ServerError(code="unknown", status=401)``); a request
  without a token passes on with no grants.
* Twirp: ``POST /twirp/livekit.RoomService/<M>`` and ``/twirp/livekit.AgentDispatchService/<M>``,
  ``application/protobuf`` or ``application/json``; unknown method (``GetDispatch`` is none: the
  client's ``get_dispatch`` calls ``ListDispatch``), other HTTP method or content type ->
  ``bad_route`` 404; undecodable body -> ``malformed`` 400.
* Grants: ``roomCreate`` (CreateRoom, DeleteRoom), ``roomList`` (ListRooms), else ``roomAdmin``
  with ``room`` == the request's room; missing -> ``unauthenticated`` 401 "permissions denied".
* ListRooms lists every room (no paging; ``names`` filters), each with ``creation_time`` in
  seconds and ``creation_time_ms``; ListParticipants of a room that does not exist lists nobody.
* CreateRoom upserts; a new room gets one dispatch per ``agents`` entry, or an empty-name one if
  there are none (``createAgentDispatchesFromRoomAgent``). Dispatches are never de-duplicated.
* Missing things answer as on the server: DeleteRoom/UpdateRoomMetadata -> not_found "requested
  room does not exist"; Get/UpdateParticipant -> not_found "participant does not exist";
  RemoveParticipant -> not_found "participant not found"; calls the server relays over psrpc to
  the room's or participant's topic (SendData, MutePublishedTrack, UpdateSubscriptions,
  Create/List/DeleteDispatch) -> ``unavailable`` 503 "no response from servers" (after ~3 s on
  a real server: ``no_response_wait``). With ``auto_create``, CreateDispatch creates the room.

Given a webhook target (``webhook_url=`` or ``set_webhook_target``), it sends LiveKit's webhooks
there, signed as LiveKit signs them (``sign_webhook``), one after another, each tried up to
``WEBHOOK_ATTEMPTS`` times: ``room_started`` / ``room_finished``, ``participant_joined`` /
``participant_left`` (every simulated join and leave) and the agent jobs' ``agent_job_started`` /
``agent_job_ended`` (member ``job``, with ``room``: livekit/protocol#1711). Without a target it
sends nothing.

A simulated agent worker (``auto_jobs=True``; off by default, as a LiveKit where no worker is
registered: dispatches wait) takes every dispatch that names an agent: ``job_start_delay`` seconds
later the job starts (``agent_job_started``, the job listed in its dispatch's state) and its agent
participant (kind AGENT, identity ``agent-<job id>``, as livekit-agents names it) joins the room.
A job ends (``end_job``, ``kill_worker``, DeleteDispatch of its dispatch, or its room closing) with
``agent_job_ended`` and its agent leaving. ``drop_next_dispatches(n)`` makes the next ``n`` named
dispatches silent drops: created, id returned, no job ever (livekit/livekit#4374). With auto jobs
off, ``start_job(dispatch_id)`` starts one by hand.

A client's connect with its join token is also served over HTTP, for a client that cannot speak
LiveKit's signal protocol: ``POST /dev/connect`` and ``/dev/disconnect`` with ``{"token": …}``
(``connect``, ``disconnect``). ``aim-realtime livekit-dev`` runs it on its own
(docs/local-livekit.md). Still no media: agents join only as the simulated worker's.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import json
import re
import secrets
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, cast

import aiohttp
import jwt
from aiohttp import web
from google.protobuf import json_format, message_factory
from google.protobuf.message import DecodeError, Message
from livekit import api
from livekit.api.access_token import Claims
from livekit.protocol import agent_dispatch as _dispatch_proto
from livekit.protocol import room as _room_proto

from realtime.livekit_dev.agent import SimulatedAgent

TWIRP_STATUS = {
    "invalid_argument": 400, "malformed": 400, "out_of_range": 400, "unauthenticated": 401,
    "permission_denied": 403, "not_found": 404, "bad_route": 404, "canceled": 408,
    "deadline_exceeded": 408, "aborted": 409, "already_exists": 409, "failed_precondition": 412,
    "resource_exhausted": 429, "internal": 500, "unknown": 500, "dataloss": 500,
    "unimplemented": 501, "unavailable": 503,
}  # fmt: skip
_CODE_FOR_STATUS = {status: code for code, status in reversed(TWIRP_STATUS.items())}
SERVICES = {
    s.full_name: s
    for s in (
        _room_proto.DESCRIPTOR.services_by_name["RoomService"],
        _dispatch_proto.DESCRIPTOR.services_by_name["AgentDispatchService"],
    )
}
_GLOBAL_GRANTS = {
    "CreateRoom": "room_create",
    "DeleteRoom": "room_create",
    "ListRooms": "room_list",
}
MAX_NAME_LENGTH = 256
# a join token's canPublishSources names, as LiveKit reads them
_SOURCE_VALUES = {
    "microphone": api.TrackSource.MICROPHONE,
    "camera": api.TrackSource.CAMERA,
    "screen_share": api.TrackSource.SCREEN_SHARE,
    "screen_share_audio": api.TrackSource.SCREEN_SHARE_AUDIO,
}
DEFAULT_EMPTY_TIMEOUT, DEFAULT_DEPARTURE_TIMEOUT = 300, 20  # livekit pkg/config defaults
WEBHOOK_ATTEMPTS, WEBHOOK_RETRY_PAUSE_S, WEBHOOK_TIMEOUT_S = 3, 0.1, 5.0
AGENT_NAME_ATTRIBUTE = "lk.agent.name"  # set on an agent participant by LiveKit (pkg/agent)
WORKER_ID = "AW_standin"
# what a browser page needs to call /dev/connect and /dev/disconnect from another origin
DEV_CORS = {
    "Access-Control-Allow-Origin": "*",
    "Access-Control-Allow-Methods": "POST",
    "Access-Control-Allow-Headers": "Content-Type",
    "Access-Control-Max-Age": "600",
}


class TwirpError(Exception):
    def __init__(self, code: str, msg: str, meta: dict[str, str] | None = None) -> None:
        super().__init__(f"{code}: {msg}")
        self.code, self.msg, self.meta = code, msg, meta or {}


class _NoResponseError(TwirpError):
    """Nothing hosts the room's/participant's psrpc topic (psrpc.ErrNoResponse)."""

    def __init__(self) -> None:
        super().__init__("unavailable", "no response from servers")


class ConnectRefused(Exception):  # noqa: N818 - reads as what LiveKit answers the client
    """A client's connect that LiveKit refuses (its signal connection's 401 / 404)."""


class _AuthError(Exception):
    """Rejected by the HTTP auth middleware: plain-text 401, before Twirp."""


def _handler_name(method: str) -> str:
    return "_rpc_" + re.sub(r"(?<!^)(?=[A-Z])", "_", method).lower()  # CreateRoom: _rpc_create_room


def _guid(prefix: str) -> str:
    return prefix + secrets.token_hex(6)


@dataclass
class Call:
    """A request as the stand-in saw it. ``code``: "ok", the Twirp error code, or
    "invalid_token" for the middleware's plain-text 401. ``request`` is the decoded message."""

    service: str
    method: str
    request: Message | None
    time: float
    status: int = 0
    code: str = ""
    msg: str = ""
    claims: Claims | None = None
    request_id: str = ""
    answered: bool = False


@dataclass
class _Rule:
    remaining: int | None  # None: until clear_faults()
    method: str | None
    delay: float = 0.0
    status: int = 0  # 0 for a delay or lose rule
    code: str = ""
    msg: str = ""
    effect_first: bool = False
    lose: bool = False  # answer success without carrying the call out

    @property
    def kind(self) -> str:
        return "fail" if self.status else "lose" if self.lose else "delay"


@dataclass
class SentWebhook:
    """A webhook the stand-in sent (or is sending): ``status`` is the last attempt's HTTP
    status (0: no answer, or not tried yet), ``attempts`` how many were made."""

    event: api.WebhookEvent
    status: int = 0
    attempts: int = 0

    @property
    def delivered(self) -> bool:
        return 200 <= self.status < 300


def sign_webhook(event: api.WebhookEvent, api_key: str, api_secret: str) -> tuple[str, str]:
    """``(body, Authorization value)`` exactly as LiveKit signs a webhook (livekit-notes §2)."""
    body = json_format.MessageToJson(event, indent=None)
    digest = base64.b64encode(hashlib.sha256(body.encode()).digest()).decode()
    token = api.AccessToken(api_key, api_secret).with_sha256(digest)
    return body, token.with_ttl(timedelta(minutes=5)).to_jwt()


def webhook_headers(authorization: str) -> dict[str, str]:
    """The headers LiveKit sends with a webhook (the raw JWT, no Bearer prefix)."""
    return {
        "Authorization": authorization,
        "Content-Type": "application/webhook+json",
        "User-Agent": "LiveKit",
    }


class LiveKitStandin:
    """In-process LiveKit Twirp server on 127.0.0.1 with an ephemeral port.

    ``async with LiveKitStandin(key, secret) as lk:`` (or ``await start()`` / ``await stop()``).
    State is public protobuf messages: ``rooms[name]``, ``participants[room][identity]``,
    ``dispatches[room][id]``, ``data_messages`` (SendData requests), ``calls``; the agent jobs
    ``jobs[id]`` (pending, running and ended) and the webhooks sent, ``webhooks``.
    """

    def __init__(
        self,
        api_key: str,
        api_secret: str,
        *,
        auto_create: bool = False,
        default_dispatch: bool = True,
        enable_remote_unmute: bool = False,
        no_response_wait: float = 0.0,
        webhook_url: str | None = None,
        auto_jobs: bool = False,
        job_start_delay: float = 0.0,
        agents_speak: bool = False,
    ) -> None:
        self.api_key, self.api_secret = api_key, api_secret
        self.keys = {api_key: api_secret}
        self.auto_create = auto_create
        self.default_dispatch = default_dispatch
        self.enable_remote_unmute = enable_remote_unmute
        self.no_response_wait = no_response_wait
        self.host, self.port = "127.0.0.1", 0
        self.calls: list[Call] = []
        self.rooms: dict[str, api.Room] = {}
        self.participants: dict[str, dict[str, api.ParticipantInfo]] = {}
        self.dispatches: dict[str, dict[str, api.AgentDispatch]] = {}
        self.data_messages: list[api.SendDataRequest] = []
        # (room, identity) → RemoveParticipant's revoke_token_ts: tokens with an earlier nbf
        # are refused at connect from then on (protocol #1576)
        self.revoked: dict[tuple[str, str], int] = {}
        # agent jobs and webhooks (module docstring)
        self.webhook_url = webhook_url
        self.webhooks: list[SentWebhook] = []
        self.auto_jobs = auto_jobs
        self.job_start_delay = job_start_delay
        self.jobs: dict[str, api.Job] = {}
        # with `agents_speak`, each joined agent of a job is a `SimulatedAgent` that talks to
        # the service through its provider API (agent.py), by identity
        self.agents_speak = agents_speak
        self.agents: dict[str, SimulatedAgent] = {}
        self.dropped: list[str] = []  # ids of the dispatches dropped silently
        self._drops = 0
        self._starts: dict[str, asyncio.TimerHandle] = {}  # pending job id -> its start
        self._outgoing: asyncio.Queue[SentWebhook] = asyncio.Queue()
        self._sender: asyncio.Task[None] | None = None
        self._rules: list[_Rule] = []
        self._answered = asyncio.Event()
        self._runner: web.AppRunner | None = None
        self._site: web.TCPSite | None = None

    # ---- lifecycle -------------------------------------------------------------------------
    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def ws_url(self) -> str:
        return f"ws://{self.host}:{self.port}"

    async def start(self) -> LiveKitStandin:
        app = web.Application()  # bodies of 1 MiB at most (aiohttp's bound)
        app.router.add_route("*", "/twirp/{service}/{method}", self._handle)
        app.router.add_post("/dev/connect", self._dev_connect)
        app.router.add_post("/dev/disconnect", self._dev_disconnect)
        app.router.add_route("OPTIONS", "/dev/{action}", self._dev_preflight)
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=1.0)
        await self._runner.setup()
        self._site = web.TCPSite(self._runner, self.host, self.port)
        await self._site.start()
        self.port = self._runner.addresses[0][1]
        self._sender = asyncio.create_task(self._send_webhooks())
        return self

    async def stop(self) -> None:
        for handle in self._starts.values():
            handle.cancel()
        self._starts.clear()
        for agent in list(self.agents.values()):
            await agent.close()
        self.agents.clear()
        if self._sender is not None:
            self._sender.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._sender
            self._sender = None
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = self._site = None

    async def __aenter__(self) -> LiveKitStandin:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    def client(self, **kwargs: Any) -> api.LiveKitAPI:
        """A ``LiveKitAPI`` on this stand-in with its key; the caller must ``aclose()`` it."""
        return api.LiveKitAPI(self.ws_url, self.api_key, self.api_secret, **kwargs)

    # ---- failure controls ------------------------------------------------------------------
    @property
    def down(self) -> bool:
        return self._runner is not None and self._site is None

    async def set_down(self, down: bool = True) -> None:
        """Down: stop listening and drop open connections, so clients get "connection refused"
        like an unreachable LiveKit. ``set_down(False)``: listen on the same port again."""
        if self._runner is None:
            raise RuntimeError("the stand-in is not running")
        if down and self._site is not None:
            await self._site.stop()
            self._site = None
            for conn in self._runner.server.connections if self._runner.server else []:
                conn.force_close()
        elif not down and self._site is None:
            self._site = web.TCPSite(self._runner, self.host, self.port)
            await self._site.start()

    def fail_next(
        self,
        n: int = 1,
        *,
        status: int = 503,
        code: str | None = None,
        msg: str = "injected failure",
        method: str | None = None,
        effect_first: bool = False,
    ) -> None:
        """Answer the next ``n`` calls (to ``method``, if given) with a Twirp error, ahead of
        auth. ``effect_first``: carry the call out, then answer the error (a lost reply)."""
        code = code or _CODE_FOR_STATUS.get(status, "internal" if status >= 500 else "unknown")
        rule = _Rule(n, method, status=status, code=code, msg=msg, effect_first=effect_first)
        self._rules.append(rule)

    def delay(
        self,
        seconds: float,
        *,
        n: int | None = None,
        method: str | None = None,
        effect_first: bool = False,
    ) -> None:
        """Hold the answers to the next ``n`` calls (all calls if ``n`` is None, until
        ``clear_faults``). ``effect_first``: carry the call out before waiting, so a client
        timeout hides a success."""
        self._rules.append(_Rule(n, method, delay=seconds, effect_first=effect_first))

    def lose_next(self, n: int = 1, *, method: str) -> None:
        """Answer the next ``n`` calls to ``method`` as if they were carried out, without
        carrying them out: a write LiveKit acknowledged and then lost (the node that hosts the
        room missed it, or restarted from an older state). Auth and grants are still checked."""
        self._rules.append(_Rule(n, method, lose=True))

    def clear_faults(self) -> None:
        self._rules.clear()

    def _take_rule(self, method: str, kind: str) -> _Rule | None:
        for rule in self._rules:
            if rule.kind == kind and rule.method in (None, method):
                if rule.remaining is not None:
                    rule.remaining -= 1
                    if rule.remaining <= 0:
                        self._rules.remove(rule)
                return rule
        return None

    # ---- inspection ------------------------------------------------------------------------
    def calls_to(self, method: str, *, code: str | None = None) -> list[Call]:
        return [c for c in self.calls if c.method == method and code in (None, c.code)]

    async def wait_for_call(self, method: str, count: int = 1, within: float = 5.0) -> Call:
        """Wait until ``count`` calls to ``method`` have been answered; return the last one."""
        async with asyncio.timeout(within):
            while len(done := [c for c in self.calls_to(method) if c.answered]) < count:
                await self._answered.wait()
        return done[-1]

    def participant(self, room: str, identity: str) -> api.ParticipantInfo | None:
        return self.participants.get(room, {}).get(identity)

    def permission(self, room: str, identity: str) -> api.ParticipantPermission | None:
        p = self.participant(room, identity)
        return p.permission if p is not None else None

    def dispatches_in(self, room: str, agent_name: str | None = None) -> list[api.AgentDispatch]:
        found = self.dispatches.get(room, {}).values()
        return [d for d in found if agent_name in (None, d.agent_name)]

    # ---- webhooks --------------------------------------------------------------------------
    def set_webhook_target(self, url: str | None) -> None:
        """Send webhooks to ``url`` (the service's ``/livekit/webhook``) from now on; None
        stops sending (a webhook being tried is given up)."""
        self.webhook_url = url

    def webhooks_of(self, event: str) -> list[api.WebhookEvent]:
        """The webhooks of type ``event`` sent so far (queued or tried), oldest first."""
        return [sent.event for sent in self.webhooks if sent.event.event == event]

    async def webhooks_sent(self, within: float = 5.0) -> list[SentWebhook]:
        """Wait until every webhook queued so far has been tried; all webhooks sent."""
        async with asyncio.timeout(within):
            await self._outgoing.join()
        return self.webhooks

    def _notify(self, event: str, room: api.Room | None, **members: Any) -> None:
        """Queue webhook ``event`` (LiveKit's telemetry NotifyEvent: a new ``EV_`` id and
        ``created_at`` in seconds), when there is a target."""
        if self.webhook_url is None:
            return
        webhook = api.WebhookEvent(
            event=event, id=_guid("EV_"), created_at=int(time.time()), **members
        )
        if room is not None:
            webhook.room.CopyFrom(room)
        sent = SentWebhook(webhook)
        self.webhooks.append(sent)
        self._outgoing.put_nowait(sent)

    async def _send_webhooks(self) -> None:
        """One sender, in the order the events happened (LiveKit's pool keeps no order: a test
        that needs another order posts the webhooks itself)."""
        async with aiohttp.ClientSession(
            timeout=aiohttp.ClientTimeout(total=WEBHOOK_TIMEOUT_S)
        ) as http:
            while True:
                sent = await self._outgoing.get()
                try:
                    await self._send_webhook(http, sent)
                finally:
                    self._outgoing.task_done()

    async def _send_webhook(self, http: aiohttp.ClientSession, sent: SentWebhook) -> None:
        """POST it signed, tried again (same body and id) after an error or a non-2xx answer."""
        for attempt in range(1, WEBHOOK_ATTEMPTS + 1):
            if (url := self.webhook_url) is None:
                return
            body, authorization = self.sign_webhook(sent.event)
            sent.attempts = attempt
            try:
                async with http.post(
                    url, data=body.encode(), headers=webhook_headers(authorization)
                ) as response:
                    sent.status = response.status
                    await response.read()
            except (aiohttp.ClientError, OSError, TimeoutError):
                sent.status = 0
            if sent.delivered:
                return
            if attempt < WEBHOOK_ATTEMPTS:
                await asyncio.sleep(WEBHOOK_RETRY_PAUSE_S * attempt)

    # ---- the simulated agent worker --------------------------------------------------------
    def drop_next_dispatches(self, n: int = 1) -> None:
        """The next ``n`` dispatches the worker would take (they name an agent; ``auto_jobs``)
        are created, their id answered, and no job ever starts (livekit/livekit#4374)."""
        self._drops += n

    def jobs_of(self, dispatch_id: str) -> list[api.Job]:
        """The jobs of a dispatch (pending, running or ended), oldest first."""
        return [job for job in self.jobs.values() if job.dispatch_id == dispatch_id]

    def jobs_in(self, room: str, *, running: bool = False) -> list[api.Job]:
        """The jobs in ``room`` (only the running ones with ``running``), oldest first."""
        return [
            job
            for job in self.jobs.values()
            if job.room.name == room and (not running or job.state.status == api.JS_RUNNING)
        ]

    def start_job(self, dispatch_id: str) -> api.Job:
        """The worker takes the dispatch now (its pending job, or a new one): the job starts
        and its agent joins. For a test that drives the worker by hand (``auto_jobs=False``)."""
        dispatch = next(
            (found[dispatch_id] for found in self.dispatches.values() if dispatch_id in found),
            None,
        )
        if dispatch is None:
            raise LookupError(f"no dispatch {dispatch_id!r}")
        pending = [j for j in self.jobs_of(dispatch_id) if j.state.status == api.JS_PENDING]
        job = pending[0] if pending else self._new_job(dispatch)
        self._begin_job(job.id)
        return job

    def end_job(
        self,
        job_id: str,
        *,
        status: api.JobStatus = api.JS_SUCCESS,
        reason: api.JobStateReason = api.JSR_UNSPECIFIED,
        error: str = "",
        agent_leaves_first: bool = False,
    ) -> api.Job:
        """The job ends with ``status``: ``agent_job_ended``, and its agent leaves the room
        (``participant_left``; before the job's end with ``agent_leaves_first``). A job not
        started yet is cancelled without a webhook; an ended one stays as it is."""
        job = self.jobs[job_id]
        now = time.time_ns()
        if job.state.status == api.JS_PENDING:
            if (handle := self._starts.pop(job_id, None)) is not None:
                handle.cancel()
            job.state.status, job.state.ended_at, job.state.updated_at = api.JS_CANCELLED, now, now
            return job
        if job.state.status != api.JS_RUNNING:
            return job
        job.state.status, job.state.reason, job.state.error = status, reason, error
        job.state.ended_at = job.state.updated_at = now
        self._job_changed(job)
        room, identity = job.room.name, job.state.participant_identity
        if agent_leaves_first:
            self.leave(room, identity)
        self._notify("agent_job_ended", job.room, job=job)
        if not agent_leaves_first:
            self.leave(room, identity)
        return job

    def kill_worker(self) -> list[api.Job]:
        """The worker process dies: its agents' connections drop (``participant_left``) and
        each running job ends failed; none is dispatched again (livekit/agents#1472). New
        dispatches are still taken, by the pool's other workers."""
        return [
            self.end_job(job.id, status=api.JS_FAILED, error="worker died", agent_leaves_first=True)
            for job in list(self.jobs.values())
            if job.state.status == api.JS_RUNNING
        ]

    def _new_job(self, dispatch: api.AgentDispatch) -> api.Job:
        job = api.Job(
            id=_guid("AJ_"),
            dispatch_id=dispatch.id,
            type=api.JT_ROOM,
            metadata=dispatch.metadata,
            agent_name=dispatch.agent_name,
            attributes=dispatch.attributes,
            state=api.JobState(status=api.JS_PENDING, updated_at=time.time_ns()),
        )
        job.room.CopyFrom(self.rooms[dispatch.room])
        self.jobs[job.id] = job
        return job

    def _take(self, dispatch: api.AgentDispatch) -> None:
        """A new dispatch: the worker takes it (a job, started after ``job_start_delay``) when
        it names an agent and jobs are automatic, unless it is to be dropped."""
        if not (self.auto_jobs and dispatch.agent_name):
            return
        if self._drops > 0:
            self._drops -= 1
            self.dropped.append(dispatch.id)
            return
        job = self._new_job(dispatch)
        loop = asyncio.get_running_loop()
        self._starts[job.id] = loop.call_later(self.job_start_delay, self._begin_job, job.id)

    def _begin_job(self, job_id: str) -> None:
        """The job starts: RUNNING, listed in its dispatch's state, ``agent_job_started``, then
        its agent participant joins. Cancelled instead when its dispatch (or room) is gone."""
        self._starts.pop(job_id, None)
        job = self.jobs[job_id]
        if job.state.status != api.JS_PENDING:
            return
        now = time.time_ns()
        dispatch = self.dispatches.get(job.room.name, {}).get(job.dispatch_id)
        if dispatch is None:
            job.state.status, job.state.ended_at, job.state.updated_at = api.JS_CANCELLED, now, now
            return
        identity = f"agent-{job.id}"  # livekit-agents' default identity for its participant
        job.state.status, job.state.started_at, job.state.updated_at = api.JS_RUNNING, now, now
        job.state.participant_identity, job.state.worker_id = identity, WORKER_ID
        dispatch.state.jobs.append(job)
        self._notify("agent_job_started", job.room, job=job)
        self.add_participant(
            job.room.name,
            identity,
            kind="agent",
            attributes={AGENT_NAME_ATTRIBUTE: job.agent_name},
        )
        if self.agents_speak:
            agent = self.agents[identity] = SimulatedAgent(identity, job.metadata)
            agent.joined()

    def _job_changed(self, job: api.Job) -> None:
        """Its dispatch's state lists the job as it is now."""
        dispatch = self.dispatches.get(job.room.name, {}).get(job.dispatch_id)
        for listed in dispatch.state.jobs if dispatch is not None else ():
            if listed.id == job.id:
                listed.CopyFrom(job)

    def _end_dispatch_jobs(self, dispatch_id: str) -> None:
        for job in self.jobs_of(dispatch_id):
            self.end_job(job.id, reason=api.JSR_DISPATCH_DELETED)

    # ---- simulating the media side ---------------------------------------------------------
    def add_participant(
        self,
        room: str,
        identity: str,
        *,
        kind: int | str = "standard",
        name: str = "",
        metadata: str = "",
        permission: api.ParticipantPermission | None = None,
        attributes: dict[str, str] | None = None,
    ) -> api.ParticipantInfo:
        """Simulate a join (state ACTIVE; ``participant_joined``). The room must exist unless
        ``auto_create``; joining again with the same identity replaces the older participant
        (DUPLICATE_IDENTITY)."""
        if room not in self.rooms:
            if not self.auto_create:
                raise LookupError(f"room {room!r} does not exist; LiveKit would refuse the join")
            self._ensure_room(room)
        if isinstance(kind, str):
            kind = api.ParticipantInfo.Kind.Value(kind.upper())
        now = time.time()
        info = api.ParticipantInfo(
            sid=_guid("PA_"),
            identity=identity,
            name=name,
            metadata=metadata,
            kind=cast(api.ParticipantInfo.Kind, kind),
            state=api.ParticipantInfo.ACTIVE,
            joined_at=int(now),
            joined_at_ms=int(now * 1000),
            attributes=attributes or {},
        )
        grants = api.ParticipantPermission(
            can_subscribe=True, can_publish=True, can_publish_data=True
        )
        info.permission.CopyFrom(permission or grants)  # a token's defaults
        self.participants[room][identity] = info
        self._count(room)
        self._notify("participant_joined", self.rooms[room], participant=info)
        return info

    def connect(self, token: str) -> api.ParticipantInfo:
        """A client connecting with a join token, checked as LiveKit checks it at connect: the
        signature and key, `exp` required and `nbf`, with LiveKit's 60 s leeway; `roomJoin`, a
        room and an identity; a token issued (`nbf`) before a RemoveParticipant's
        `revoke_token_ts` for that identity is refused. Then the participant joins as
        `add_participant` has it. Raises `ConnectRefused` saying why."""
        claims, nbf = self._verified(token)
        video = claims.video
        assert video is not None  # noqa: S101 - _verified checked the room join grant
        room, identity = video.room, claims.identity
        if nbf < self.revoked.get((room, identity), 0):
            raise ConnectRefused("token revoked: issued before the participant's revocation")
        try:
            return self.add_participant(
                room,
                identity,
                name=claims.name or "",
                metadata=claims.metadata or "",
                kind=(claims.kind or "standard"),
                permission=api.ParticipantPermission(
                    can_subscribe=bool(video.can_subscribe),
                    can_publish=bool(video.can_publish),
                    can_publish_data=bool(video.can_publish_data),
                    can_publish_sources=[
                        _SOURCE_VALUES[source] for source in video.can_publish_sources or ()
                    ],
                ),
            )
        except LookupError as exc:
            raise ConnectRefused(str(exc)) from exc

    def disconnect(self, token: str) -> bool:
        """The client of `token` leaving its room (``participant_left``): the token checked as
        `connect` checks it; False when it was not in the room."""
        claims, _ = self._verified(token)
        assert claims.video is not None  # noqa: S101 - _verified checked the room join grant
        room, identity = claims.video.room, claims.identity
        there = identity in self.participants.get(room, {})
        self.leave(room, identity)
        return there

    def _verified(self, token: str) -> tuple[Claims, int]:
        """A join token's claims and `nbf`, once LiveKit would accept it at connect: the
        signature and key, `exp` required and `nbf`, with LiveKit's 60 s leeway; `roomJoin`, a
        room and an identity. Raises `ConnectRefused` saying why."""
        try:
            unverified = jwt.decode(token, options={"verify_signature": False})
            key = str(unverified.get("iss", ""))
            if key not in self.keys:
                raise ConnectRefused(f"invalid API key: {key}")
            claims = api.TokenVerifier(key, self.keys[key]).verify(token)
            nbf = int(unverified.get("nbf", 0))
        except (jwt.PyJWTError, ValueError, TypeError) as exc:
            raise ConnectRefused(f"invalid token: {exc}") from exc
        video = claims.video
        if video is None or not video.room_join or not video.room or not claims.identity:
            raise ConnectRefused("the token grants no room join (roomJoin, room and sub needed)")
        return claims, nbf

    async def _dev_connect(self, request: web.Request) -> web.Response:
        """`POST /dev/connect {"token": …}`: what a client's connect with its join token does
        (the participant joins; 401 with the reason when LiveKit would refuse it)."""

        def joined(token: str) -> dict[str, object]:
            participant = self.connect(token)
            claims, _ = self._verified(token)
            assert claims.video is not None  # noqa: S101 - _verified checked the grant
            return {
                "room": claims.video.room,
                "identity": participant.identity,
                "sid": participant.sid,
            }

        return await self._dev_call(request, joined)

    async def _dev_disconnect(self, request: web.Request) -> web.Response:
        """`POST /dev/disconnect {"token": …}`: the client of that token leaves its room."""
        return await self._dev_call(request, lambda token: {"left": self.disconnect(token)})

    async def _dev_call(
        self, request: web.Request, act: Callable[[str], dict[str, object]]
    ) -> web.Response:
        """`act` on the posted token: its answer, 400 without a token, 401 when refused."""
        token = await self._posted_token(request)
        if isinstance(token, web.Response):
            return token
        try:
            answer = act(token)
        except ConnectRefused as exc:
            return web.json_response({"error": str(exc)}, status=401, headers=DEV_CORS)
        return web.json_response(answer, headers=DEV_CORS)

    @staticmethod
    async def _dev_preflight(request: web.Request) -> web.Response:
        """A browser page's preflight of a connect (CORS): any origin may POST JSON, as any
        page may reach a LiveKit server with a token it holds (the token is the credential)."""
        return web.Response(status=204, headers=DEV_CORS)

    @staticmethod
    async def _posted_token(request: web.Request) -> str | web.Response:
        try:
            body = await request.json()
        except (ValueError, web.HTTPRequestEntityTooLarge):
            body = None
        token = body.get("token") if isinstance(body, dict) else None
        if not isinstance(token, str) or not token:
            said = {"error": 'send {"token": "<join token>"}'}
            return web.json_response(said, status=400, headers=DEV_CORS)
        return token

    def add_track(
        self,
        room: str,
        identity: str,
        source: int = api.TrackSource.MICROPHONE,
    ) -> api.TrackInfo:
        """Simulate the participant publishing a track; returns it (``sid`` for muting)."""
        audio = source in (api.TrackSource.MICROPHONE, api.TrackSource.SCREEN_SHARE_AUDIO)
        kind = api.TrackType.AUDIO if audio else api.TrackType.VIDEO
        p = self.participants[room][identity]
        p.tracks.append(
            api.TrackInfo(sid=_guid("TR_"), source=cast(api.TrackSource, source), type=kind)
        )
        p.is_publisher = True
        self._count(room)
        return p.tracks[-1]

    def leave(self, room: str, identity: str) -> None:
        """Simulate the participant leaving (``participant_left`` if it was there)."""
        gone = self.participants.get(room, {}).pop(identity, None)
        if (agent := self.agents.pop(identity, None)) is not None:
            agent.cancel()
        self._count(room)
        if gone is not None:
            gone.state = api.ParticipantInfo.DISCONNECTED
            self._notify("participant_left", self.rooms.get(room), participant=gone)

    def close_room(self, name: str) -> None:
        """Simulate the room closing (DeleteRoom, or e.g. the empty timeout): its jobs end
        (reason ROOM_CLOSED), its participants leave, its dispatches go, then
        ``room_finished``. Without a webhook target this is a room lost silently: a test that
        wants the service to hear of it posts ``room_finished`` itself."""
        for job in self.jobs_in(name):
            self.end_job(job.id, reason=api.JSR_ROOM_CLOSED)
        for identity in list(self.participants.get(name, {})):
            self.leave(name, identity)
        room = self.rooms.pop(name, None)
        self.participants.pop(name, None)
        self.dispatches.pop(name, None)
        if room is not None:
            self._notify("room_finished", room)

    def add_room(self, name: str, *, age_s: float = 0.0, metadata: str = "") -> api.Room:
        """Create a room by hand, as someone with an admin key (or a join with ``auto_create``)
        would, outside the service; ``age_s`` makes it that old at once. An existing room is
        returned as it is."""
        room = self._ensure_room(name)
        room.metadata = metadata or room.metadata
        if age_s:
            self.age_room(name, age_s)
        return room

    def age_room(self, name: str, seconds: float) -> api.Room:
        """Make the room ``seconds`` old: its ``creation_time`` (s) and ``creation_time_ms``
        (newer servers send both) move to that long before now."""
        created = time.time() - seconds
        room = self.rooms[name]
        room.creation_time, room.creation_time_ms = int(created), int(created * 1000)
        return room

    def sign_webhook(self, event: api.WebhookEvent) -> tuple[str, str]:
        return sign_webhook(event, self.api_key, self.api_secret)

    # ---- HTTP, auth middleware, Twirp ------------------------------------------------------
    async def _handle(self, request: web.Request) -> web.StreamResponse:
        headers = request.headers
        call = Call(request.match_info["service"], request.match_info["method"], None, time.time())
        call.request_id = headers.get("X-Livekit-Request-Id", "")
        self.calls.append(call)
        body = await request.read()
        fault, pause = self._take_rule(call.method, "fail"), self._take_rule(call.method, "delay")
        if pause and not pause.effect_first:
            await asyncio.sleep(pause.delay)
        if fault and not fault.effect_first:
            response = self._twirp_error(call, TwirpError(fault.code, fault.msg), fault.status)
        else:
            response = await self._serve(request, call, body)
            if fault:
                response = self._twirp_error(call, TwirpError(fault.code, fault.msg), fault.status)
        if pause and pause.effect_first:
            await asyncio.sleep(pause.delay)
        call.answered = True
        self._answered.set()
        self._answered = asyncio.Event()
        return response

    async def _serve(self, request: web.Request, call: Call, body: bytes) -> web.Response:
        try:
            call.claims = self._authenticate(request)
        except _AuthError as exc:
            call.status, call.code, call.msg = 401, "invalid_token", str(exc)
            return web.Response(status=401, text=str(exc), content_type="text/plain")
        content_type = request.headers.get("Content-Type", "")
        as_json = content_type.split(";")[0].strip().lower() == "application/json"
        try:
            req = self._route(request, call, body, content_type)
            handler = getattr(self, _handler_name(call.method))
            self._authorize(call, req)
            try:
                lost = self._take_rule(call.method, "lose")
                reply = self._output_of(call)() if lost else handler(req)
            except _NoResponseError:
                await asyncio.sleep(self.no_response_wait)
                raise
        except TwirpError as exc:
            return self._twirp_error(call, exc)
        call.status, call.code = 200, "ok"
        if as_json:
            text = json_format.MessageToJson(
                reply, preserving_proto_field_name=True, always_print_fields_with_no_presence=True
            )
            return web.Response(body=text.encode(), content_type="application/json")
        return web.Response(body=reply.SerializeToString(), content_type="application/protobuf")

    def _route(self, request: web.Request, call: Call, body: bytes, content_type: str) -> Message:
        """Twirp's generated server: route, check method and content type, decode."""
        route = {"twirp_invalid_route": f"{request.method} {request.path}"}
        if request.method != "POST":
            msg = f'unsupported method "{request.method}" (only POST is allowed)'
            raise TwirpError("bad_route", msg, route)
        svc = SERVICES.get(call.service)
        if svc is None or call.method not in svc.methods_by_name:
            raise TwirpError("bad_route", f'no handler for path "{request.path}"', route)
        kind = content_type.split(";")[0].strip().lower()
        if kind not in ("application/protobuf", "application/json"):
            raise TwirpError("bad_route", f'unexpected Content-Type: "{content_type}"', route)
        if not hasattr(self, _handler_name(call.method)):
            raise TwirpError("unimplemented", f"{call.method} is not modelled by the stand-in")
        req_cls = message_factory.GetMessageClass(svc.methods_by_name[call.method].input_type)
        try:
            if kind == "application/json":
                call.request = json_format.Parse(body, req_cls(), ignore_unknown_fields=True)
            else:
                call.request = req_cls.FromString(body)
        except (DecodeError, json_format.ParseError, UnicodeDecodeError) as exc:
            what = "json" if kind == "application/json" else "protobuf"
            raise TwirpError("malformed", f"the {what} request could not be decoded") from exc
        return call.request

    @staticmethod
    def _output_of(call: Call) -> type[Message]:
        method = SERVICES[call.service].methods_by_name[call.method]
        return message_factory.GetMessageClass(method.output_type)

    @staticmethod
    def _twirp_error(call: Call, err: TwirpError, status: int | None = None) -> web.Response:
        call.status, call.code, call.msg = status or TWIRP_STATUS[err.code], err.code, err.msg
        payload: dict[str, Any] = {"code": err.code, "msg": err.msg}
        if err.meta:  # Twirp leaves out an empty meta
            payload["meta"] = err.meta
        body = json.dumps(payload).encode()  # bytes: Twirp sends no charset parameter
        return web.Response(body=body, status=call.status, content_type="application/json")

    def _authenticate(self, request: web.Request) -> Claims | None:
        """LiveKit's APIKeyAuthMiddleware (pkg/service/auth.go)."""
        header = request.headers.get("Authorization", "")
        if header and not header.startswith("Bearer "):
            raise _AuthError("invalid authorization header. Must start with Bearer ")
        token = header.removeprefix("Bearer ") or request.query.get("access_token", "")
        if not token:
            return None
        try:
            key = str(jwt.decode(token, options={"verify_signature": False}).get("iss", ""))
        except jwt.PyJWTError as exc:
            raise _AuthError("invalid authorization token") from exc
        if key not in self.keys:
            raise _AuthError(f"invalid API key: {key}")
        try:
            return api.TokenVerifier(key, self.keys[key]).verify(token)
        except (jwt.PyJWTError, ValueError, TypeError) as exc:
            raise _AuthError(f"invalid token: {token}, error: {exc}") from exc

    @staticmethod
    def _authorize(call: Call, req: Any) -> None:
        """EnsureCreatePermission / EnsureListPermission / EnsureAdminPermission."""
        video = call.claims.video if call.claims is not None else None
        grant = _GLOBAL_GRANTS.get(call.method)
        if grant is not None:
            allowed = video is not None and bool(getattr(video, grant))
        else:
            allowed = video is not None and bool(video.room_admin) and video.room == req.room
        if not allowed:
            raise TwirpError("unauthenticated", "permissions denied")

    # ---- state helpers ---------------------------------------------------------------------
    def _ensure_room(self, name: str, agents: list[Any] | None = None) -> api.Room:
        if name in self.rooms:
            return self.rooms[name]
        now = time.time()
        self.rooms[name] = api.Room(
            sid=_guid("RM_"),
            name=name,
            creation_time=int(now),
            creation_time_ms=int(now * 1000),
            empty_timeout=DEFAULT_EMPTY_TIMEOUT,
            departure_timeout=DEFAULT_DEPARTURE_TIMEOUT,
        )
        self.participants[name], self.dispatches[name] = {}, {}
        self._notify("room_started", self.rooms[name])
        for agent in agents or ([api.RoomAgentDispatch()] if self.default_dispatch else []):
            dispatch = api.AgentDispatch(agent_name=agent.agent_name, metadata=agent.metadata)
            self._add_dispatch(name, dispatch)
        return self.rooms[name]

    def _add_dispatch(self, room: str, dispatch: api.AgentDispatch) -> api.AgentDispatch:
        dispatch.id, dispatch.room = _guid("AD_"), room
        dispatch.state.created_at = time.time_ns()
        self.dispatches[room][dispatch.id] = dispatch
        self._take(dispatch)
        return dispatch

    def _count(self, room: str) -> None:
        if room in self.rooms:
            people = self.participants[room].values()
            self.rooms[room].num_participants = len(people)
            self.rooms[room].num_publishers = sum(p.is_publisher for p in people)

    def _hosted(self, room: str, identity: str | None = None) -> api.ParticipantInfo | None:
        """The room's (participant's) psrpc topic has a server, else no response."""
        p = self.participant(room, identity) if identity is not None else None
        if room not in self.rooms or (identity is not None and p is None):
            raise _NoResponseError()
        return p

    def _participant_or_404(self, room: str, identity: str, msg: str) -> api.ParticipantInfo:
        if (p := self.participant(room, identity)) is None:
            raise TwirpError("not_found", msg)
        return p

    # ---- RoomService -----------------------------------------------------------------------
    def _rpc_create_room(self, req: api.CreateRoomRequest) -> Message:
        if len(req.name) > MAX_NAME_LENGTH:
            msg = f"room name length exceeds limits: max length {MAX_NAME_LENGTH}"
            raise TwirpError("invalid_argument", msg)
        created = req.name not in self.rooms
        room = self._ensure_room(req.name, list(req.agents) if created else None)
        for field in ("empty_timeout", "departure_timeout", "max_participants", "metadata"):
            if getattr(req, field):  # an upsert: only non-zero fields change
                setattr(room, field, getattr(req, field))
        return room

    def _rpc_list_rooms(self, req: api.ListRoomsRequest) -> Message:
        rooms = [r for name, r in self.rooms.items() if not req.names or name in req.names]
        return api.ListRoomsResponse(rooms=rooms)

    def _rpc_delete_room(self, req: api.DeleteRoomRequest) -> Message:
        if req.room not in self.rooms:
            raise TwirpError("not_found", "requested room does not exist")
        self.close_room(req.room)
        return api.DeleteRoomResponse()

    def _rpc_list_participants(self, req: api.ListParticipantsRequest) -> Message:
        found = self.participants.get(req.room, {}).values()  # a missing room lists nobody
        return api.ListParticipantsResponse(participants=found)

    def _rpc_get_participant(self, req: api.RoomParticipantIdentity) -> Message:
        return self._participant_or_404(req.room, req.identity, "participant does not exist")

    def _rpc_remove_participant(self, req: api.RoomParticipantIdentity) -> Message:
        self._participant_or_404(req.room, req.identity, "participant not found")
        if req.revoke_token_ts:
            key = (req.room, req.identity)
            self.revoked[key] = max(self.revoked.get(key, 0), req.revoke_token_ts)
        self.leave(req.room, req.identity)
        return api.RemoveParticipantResponse()

    def _rpc_mute_published_track(self, req: api.MuteRoomTrackRequest) -> Message:
        p = self._hosted(req.room, req.identity)
        track = next((t for t in p.tracks if t.sid == req.track_sid), None) if p else None
        if track is None:
            raise TwirpError("not_found", "track is not found")
        if not req.muted and not self.enable_remote_unmute:
            raise TwirpError("failed_precondition", "remote unmute not enabled")
        track.muted = req.muted
        return api.MuteRoomTrackResponse(track=track)

    def _rpc_update_participant(self, req: api.UpdateParticipantRequest) -> Message:
        if len(req.name) > MAX_NAME_LENGTH:
            arg = "name length exceeds limits"
            raise TwirpError("invalid_argument", f"{arg} {MAX_NAME_LENGTH}", {"argument": arg})
        p = self._participant_or_404(req.room, req.identity, "participant does not exist")
        p.metadata = req.metadata or p.metadata
        p.name = req.name or p.name
        for key, value in req.attributes.items():  # an empty value deletes the attribute
            if value:
                p.attributes[key] = value
            else:
                p.attributes.pop(key, None)
        if req.HasField("permission"):  # replaces every flag (UpdateFromPermission)
            p.permission.CopyFrom(req.permission)
        return p

    def _rpc_update_subscriptions(self, req: api.UpdateSubscriptionsRequest) -> Message:
        self._hosted(req.room, req.identity)
        return api.UpdateSubscriptionsResponse()

    def _rpc_send_data(self, req: api.SendDataRequest) -> Message:
        if len(req.nonce) not in (0, 16):
            msg = f"nonce should be 16-bytes or not present, got: {len(req.nonce)} bytes"
            raise TwirpError("invalid_argument", msg)
        self._hosted(req.room)
        self.data_messages.append(req)
        present = self.participants.get(req.room, {})
        for identity in req.destination_identities or list(present):
            if identity in present and (agent := self.agents.get(identity)) is not None:
                agent.receive(req.data, req.topic)
        return api.SendDataResponse()

    def _rpc_update_room_metadata(self, req: api.UpdateRoomMetadataRequest) -> Message:
        if req.room not in self.rooms:
            raise TwirpError("not_found", "requested room does not exist")
        self.rooms[req.room].metadata = req.metadata
        return self.rooms[req.room]

    # ---- AgentDispatchService --------------------------------------------------------------
    def _rpc_create_dispatch(self, req: api.CreateAgentDispatchRequest) -> Message:
        if self.auto_create:
            self._ensure_room(req.room)
        self._hosted(req.room)
        dispatch = api.AgentDispatch(
            agent_name=req.agent_name,
            metadata=req.metadata,
            restart_policy=req.restart_policy,
            deployment=req.deployment,
            attributes=req.attributes,
        )
        return self._add_dispatch(req.room, dispatch)

    def _rpc_list_dispatch(self, req: api.ListAgentDispatchRequest) -> Message:
        self._hosted(req.room)
        found = [d for d in self.dispatches_in(req.room) if req.dispatch_id in ("", d.id)]
        return api.ListAgentDispatchResponse(agent_dispatches=found)

    def _rpc_delete_dispatch(self, req: api.DeleteAgentDispatchRequest) -> Message:
        self._hosted(req.room)
        if (dispatch := self.dispatches[req.room].pop(req.dispatch_id, None)) is None:
            raise TwirpError("not_found", "dispatch ID not found")
        # as LiveKit (Room.DeleteAgentDispatch): gone at once, answered as it was; its jobs are
        # terminated afterwards (their agents leave)
        asyncio.get_running_loop().call_soon(self._end_dispatch_jobs, dispatch.id)
        return dispatch


@contextlib.asynccontextmanager
async def running_standin(
    api_key: str, api_secret: str, **options: Any
) -> AsyncIterator[LiveKitStandin]:
    """``async with running_standin(key, secret) as lk:`` yields a started ``LiveKitStandin``."""
    async with LiveKitStandin(api_key, api_secret, **options) as standin:
        yield standin
