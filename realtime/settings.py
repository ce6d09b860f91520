"""Configuration: one frozen value built from the environment (profile §14).

Each setting is said once, on its field of `Settings`: its variable, how it is read (type and
bounds), its default and its line of the table in docs/configuration.md, which
`python -m realtime.settings_doc` writes from these declarations. `Settings.from_env(environ)`
reads every declared variable, then applies the rules that tie settings together, and raises
`SettingsError` naming each bad or missing one. Nothing reads the environment at import time;
`create_app` receives the value.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, TypeAlias, get_args

import msgspec

from realtime.environment import (
    Choices,
    EnvironmentReader,
    Flag,
    HttpsUrl,
    LiveKitKeys,
    LiveKitSecret,
    Number,
    Origins,
    Reading,
    Secret,
    TenantUrls,
    Text,
    Url,
    WebhookSecret,
    Whole,
    without_credentials,
)

PROVIDER_CAPABILITIES = ("audio_input", "audio_output", "vision_input", "transcript_history")
# the session events an app backend may receive (profile §21; AIM_EVENTS_TYPES picks among them)
SESSION_EVENT_TYPES = (
    "session.created",
    "session.ready",
    "session.active",
    "session.handoff",
    "session.rebound",
    "session.ended",
    "session.failed",
    "operation.requested",
    "operation.confirmed",
    "operation.canceled",
    "operation.expired",
    "agent.joined",
    "agent.replaced",
    "agent.rotated",
)
# signs provider tokens when neither AIM_PROVIDER_TOKEN_SECRET nor a LiveKit secret is set
# (one process, development only: other processes could not verify them)
_PROCESS_PROVIDER_SECRET = secrets.token_urlsafe(48)
DAY = 86400
YEAR = 365 * DAY
# (key, secret) or (tenant, URL), in the order the variable gives them
Pairs: TypeAlias = tuple[tuple[str, str], ...]


class SettingsError(ValueError):
    """One or more configuration variables are missing or malformed."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("invalid configuration:\n  " + "\n  ".join(problems))
        self.problems = problems


@dataclass(frozen=True)
class Setting:
    """What a field of `Settings` is configured by: its environment variable, how the value is
    read (its type and bounds), and its line in docs/configuration.md."""

    env: str
    reading: Reading
    doc: str  # what the setting does, one line of the table
    default_doc: str | None = None  # the table's default, when it is not the field's value


class Settings(msgspec.Struct, frozen=True, kw_only=True):
    """Every knob of the service. Defaults are the development defaults of profile §14; the
    fields with a `Setting` are read from the environment, in this order."""

    redis_url: Annotated[
        str | None,
        Setting(
            "AIM_REDIS_URL",
            Url(("redis", "rediss", "unix")),
            "the Redis that holds the service's state",
            default_doc='unset: see "Which Redis" below',
        ),
    ] = None
    redis_cluster: Annotated[
        bool,
        Setting(
            "AIM_REDIS_CLUSTER",
            Flag(),
            "`1` when `AIM_REDIS_URL` is a Redis Cluster",
        ),
    ] = False
    require_redis: Annotated[
        bool,
        Setting(
            "AIM_REQUIRE_REDIS",
            Flag(),
            "`1` forbids the embedded store (start-up fails instead), and is the production "
            "switch: with it, `serve`, `worker`, `check` and `token` refuse to start (exit 2) "
            "unless `AIM_AUTH_HS256_SECRET` or `AIM_AUTH_JWKS_URL` is set, and "
            "`AIM_AUTH_AUDIENCE`; `dev-secret` (and so `scripts/serve`, `scripts/token` without "
            "a key) refuses; CI and production set it",
        ),
    ] = False
    data_dir: Annotated[
        str,
        Setting(
            "AIM_DATA_DIR",
            Text(),
            "where the private redis-server keeps its AOF, socket and lock files "
            "(`<dir>/redis`); processes with the same data directory share that server",
        ),
    ] = ".aim-data"
    public_base_url: Annotated[
        str,
        Setting(
            "AIM_PUBLIC_BASE_URL",
            Url(("http", "https"), base=True),
            "base URL written into the Agent Cards (`<base>/a2a`; `<base>/a2a/v0.1` in the A2A "
            "0.1 card) and into the messages that point A2A 0.1 and 1.0 clients to each other's "
            "endpoint; a trailing `/` is dropped",
        ),
    ] = "http://127.0.0.1:8080"
    provider_base_url: Annotated[
        str | None,
        Setting(
            "AIM_PROVIDER_BASE_URL",
            Url(("http", "https"), base=True),
            "base URL the agent is told to call the provider API at (`providerUrl` = "
            "`<base>/provider` in the dispatch metadata); set it to the in-cluster Service URL "
            "when `/provider` is not on the public Ingress",
            default_doc="`AIM_PUBLIC_BASE_URL`",
        ),
    ] = None

    auth_hs256_secret: Annotated[
        str | None,
        Setting(
            "AIM_AUTH_HS256_SECRET",
            Secret(),
            "development token secret; never together with `AIM_AUTH_JWKS_URL` (exit 2)",
            default_doc=(
                "`aim-realtime serve`: random per process, printed as a development token only "
                "on the embedded store or the private redis-server (never with "
                "`AIM_REQUIRE_REDIS=1`, where it is refused instead); `scripts/serve` and "
                "`scripts/token`, when neither key variable is set: the secret kept in "
                "`$AIM_DATA_DIR/dev-secret` — never with `AIM_REQUIRE_REDIS=1`, where they (and "
                "`scripts/dev-secret`) refuse in one line instead, making and reading no file"
            ),
        ),
    ] = None
    auth_hs256_secret_generated: bool = False
    # whoever can change the key set in transit can mint any token: https only (http to this
    # machine, for development), and the fetch never follows a redirect (jwks.py)
    auth_jwks_url: Annotated[
        str | None,
        Setting(
            "AIM_AUTH_JWKS_URL",
            HttpsUrl(switch=None),
            "production: JWKS with the RS256/ES256 signing keys (another `http://` URL is "
            "refused at start-up, exit 2); the fetch never follows a redirect (a redirect is a "
            "failed fetch: give the URL that serves the key set) and reads at most 512 KiB; "
            "never together with `AIM_AUTH_HS256_SECRET` (exit 2). The keys are refetched once "
            "the set held is 5 minutes old (at most one fetch per 30 s), so a key removed from "
            "the JWKS is refused within 5 minutes; while the URL cannot be reached, the keys "
            "already held keep working",
        ),
    ] = None
    auth_issuer: Annotated[
        str | None,
        Setting(
            "AIM_AUTH_ISSUER",
            Text(),
            "required `iss` (mandatory with a JWKS URL); `aim-realtime token` (and "
            "`scripts/token`) writes it into the tokens it mints",
        ),
    ] = None
    auth_audience: Annotated[
        str | None,
        Setting(
            "AIM_AUTH_AUDIENCE",
            Text(),
            "required `aud` (mandatory with a JWKS URL, and with `AIM_REQUIRE_REDIS=1` for "
            "HS256 too: exit 2 otherwise): a token without that `aud`, or minted for another "
            "audience, is refused 401; `aim-realtime token` (and `scripts/token`) writes it into "
            "the tokens it mints",
        ),
    ] = None
    auth_tenant_claim: Annotated[
        str | None,
        Setting(
            "AIM_AUTH_TENANT_CLAIM",
            Text(),
            "claim holding the tenant; principals are (tenant, sub); a `sub` or tenant holding a "
            "control or format character (Unicode Cc, Cf, Zl, Zp: C0, C1, bidi controls, "
            "zero-width characters, U+2028/2029) is refused 401",
        ),
    ] = None
    auth_leeway_s: Annotated[
        int,
        Setting(
            "AIM_AUTH_LEEWAY_S",
            Whole(0, 30),
            "clock leeway for `exp`/`nbf`",
        ),
    ] = 30
    # a client token's exp - iat (a token without iat: exp - the time it is first presented)
    auth_max_token_lifetime_s: Annotated[
        int,
        Setting(
            "AIM_AUTH_MAX_TOKEN_LIFETIME_S",
            Whole(60, YEAR),
            "the longest a client token may be valid: `exp − iat` at most this; a token without "
            "`iat` counts from when it is presented (`exp` at most this far ahead, plus the "
            "leeway); longer → 401 (`metadata.reason: invalid_claims`); `aim-realtime token "
            "--ttl` refuses more",
        ),
    ] = DAY

    livekit_url: Annotated[
        str | None,
        Setting(
            "AIM_LIVEKIT_URL",
            Url(("http", "https", "ws", "wss")),
            "LiveKit server API URL; needs `AIM_LIVEKIT_API_KEY` and `AIM_LIVEKIT_API_SECRET`",
        ),
    ] = None
    livekit_api_key: Annotated[
        str | None,
        Setting(
            "AIM_LIVEKIT_API_KEY",
            Text(),
            "LiveKit API key; set together with `AIM_LIVEKIT_API_SECRET` (both or neither)",
        ),
    ] = None
    livekit_api_secret: Annotated[
        str | None,
        Setting(
            "AIM_LIVEKIT_API_SECRET",
            LiveKitSecret(),
            "LiveKit API secret; set together with `AIM_LIVEKIT_API_KEY` (both or neither)",
        ),
    ] = None
    livekit_webhook_keys: Annotated[
        Pairs,
        Setting(
            "AIM_LIVEKIT_WEBHOOK_KEYS",
            LiveKitKeys(),
            "accepted webhook signers",
            default_doc="the API key/secret",
        ),
    ] = ()
    livekit_public_url: Annotated[
        str | None,
        Setting(
            "AIM_LIVEKIT_PUBLIC_URL",
            Url(("http", "https", "ws", "wss")),
            "URL handed to clients for WebRTC",
            default_doc="`AIM_LIVEKIT_URL`",
        ),
    ] = None
    agent_name: Annotated[str, Setting("AIM_AGENT_NAME", Text(), "LiveKit agent to dispatch")] = (
        "aim-realtime-agent"
    )
    provider_token_secret: Annotated[
        str | None,
        Setting(
            "AIM_PROVIDER_TOKEN_SECRET",
            Secret(),
            "HS256 key of the provider tokens handed to the agent in dispatch metadata; every "
            "replica needs the same one",
            default_doc=(
                "derived from `AIM_LIVEKIT_API_SECRET` (random per process when neither is set)"
            ),
        ),
    ] = None
    provider_capabilities: Annotated[
        frozenset[str],
        Setting(
            "AIM_PROVIDER_CAPABILITIES",
            Choices(PROVIDER_CAPABILITIES, "capabilities"),
            "what the provider offers: a session that requires another is refused "
            "(`capability_unavailable`)",
        ),
    ] = frozenset(PROVIDER_CAPABILITIES)

    join_token_ttl_s: Annotated[
        int,
        Setting(
            "AIM_JOIN_TOKEN_TTL_S",
            Whole(10, DAY),
            "join token lifetime",
        ),
    ] = 300
    provisioning_timeout_s: Annotated[
        int,
        Setting(
            "AIM_PROVISIONING_TIMEOUT_S",
            Whole(1, 3600),
            "a session whose room and agent dispatch are not done this many seconds after it "
            "entered `provisioning` (creation or rebind) fails with `provisioning_timeout` "
            "(provisioning is three LiveKit calls, each timing out after 4 s: keep it above "
            "that)",
        ),
    ] = 15
    idle_timeout_s: Annotated[
        int,
        Setting(
            "AIM_IDLE_TIMEOUT_S", Whole(1, DAY), "session without an active endpoint ends after"
        ),
    ] = 300
    reconnect_grace_s: Annotated[
        int,
        Setting(
            "AIM_RECONNECT_GRACE_S",
            Whole(1, 3600),
            "a dropped endpoint may come back within",
        ),
    ] = 60
    max_session_s: Annotated[
        int,
        Setting(
            "AIM_MAX_SESSION_S",
            Whole(1, 7 * DAY),
            "hard cap on a session's length",
        ),
    ] = 3600
    requirement_ttl_s: Annotated[
        int,
        Setting(
            "AIM_REQUIREMENT_TTL_S",
            Whole(1, DAY),
            "unanswered confirmations expire after",
        ),
    ] = 120
    # doubled for each dispatch in a row that started nothing (profile §22)
    agent_start_timeout_s: Annotated[
        int,
        Setting(
            "AIM_AGENT_START_TIMEOUT_S",
            Whole(1, 600),
            "a dispatch of the agent whose job has not started (no `agent_job_started` webhook, "
            "the agent has not joined) this many seconds after it was made is replaced in the "
            "same room: the stale dispatch deleted, a new one made; the wait doubles for each "
            "dispatch in a row that started nothing, and after the third the session fails "
            "with `agent_unavailable`",
        ),
    ] = 10
    # agent rotation across provider caps (profile §23)
    agent_rotate_after_s: Annotated[
        int,
        Setting(
            "AIM_AGENT_ROTATE_AFTER_S",
            Whole(0, DAY),
            "the agent's connection to its model lasts at most this long (a provider's cap "
            "known in advance): each agent gets this deadline when it joins, and a successor "
            "is dispatched into the same room before it; 0: off (agents report their own "
            "deadlines with aim.provider.ReportDeadline)",
        ),
    ] = 0
    agent_rotate_margin_s: Annotated[
        int,
        Setting(
            "AIM_AGENT_ROTATE_MARGIN_S",
            Whole(1, 3600),
            "a rotation starts this long before the serving agent's deadline (at once when "
            "the deadline is nearer; half the interval at most with AIM_AGENT_ROTATE_AFTER_S)",
        ),
    ] = 30
    agent_leave_grace_s: Annotated[
        int,
        Setting(
            "AIM_AGENT_LEAVE_GRACE_S",
            Whole(1, 600),
            "after a rotation's handover, the predecessor told to leave is removed from the "
            "room if it is still there this many seconds later",
        ),
    ] = 10

    max_sessions_per_principal: Annotated[
        int,
        Setting(
            "AIM_MAX_SESSIONS_PER_PRINCIPAL",
            Whole(1, 10000),
            "live sessions per principal",
        ),
    ] = 5
    max_tasks_per_principal: Annotated[
        int,
        Setting(
            "AIM_MAX_TASKS_PER_PRINCIPAL",
            Whole(1, 100_000),
            "tasks one principal holds at once, live and kept (session tasks and REJECTED "
            "tasks); past it SendMessage answers `-31011`",
        ),
    ] = 1000
    max_endpoints_per_session: Annotated[
        int,
        Setting(
            "AIM_MAX_ENDPOINTS_PER_SESSION",
            Whole(1, 64),
            "registered devices per session",
        ),
    ] = 8
    max_handoffs_per_minute: Annotated[
        int,
        Setting(
            "AIM_MAX_HANDOFFS_PER_MINUTE",
            Whole(0, 10_000),
            "handoffs of one session (a JoinSession by another device) in any minute; past it "
            "`-31011` with `Retry-After` (decision 163); `0`: no bound",
        ),
    ] = 30
    rate_limit_rps: Annotated[
        float,
        Setting(
            "AIM_RATE_LIMIT_RPS",
            Number(0.0, 1e6),
            "requests per second per principal (token bucket, burst 2×, per process); `0` = off",
        ),
    ] = 100.0

    worker_lease_s: Annotated[
        int,
        Setting(
            "AIM_WORKER_LEASE_S",
            Whole(1, 3600),
            "how long a worker holds a claimed outbox or timer before another may take it over "
            "(renewed between LiveKit calls; keep it above 3× the 4 s LiveKit call timeout)",
        ),
    ] = 30
    reconcile_interval_s: Annotated[
        int,
        Setting(
            "AIM_RECONCILE_INTERVAL_S",
            Whole(0, DAY),
            "how often the reconciler compares LiveKit's rooms and participants with the "
            "sessions and corrects the drift (one worker of all replicas at a time; the first "
            "sweep one interval after start-up); `0` turns it off",
        ),
    ] = 60
    # at least 10 s: LiveKit's clock and ours may differ by a little
    reconcile_grace_s: Annotated[
        int,
        Setting(
            "AIM_RECONCILE_GRACE_S",
            Whole(10, DAY),
            "a room that belongs to no live session is deleted only once it is this old (by "
            "LiveKit's `creation_time`), so a room being created is never raced",
        ),
    ] = 120
    task_ttl_s: Annotated[
        int,
        Setting(
            "AIM_TASK_TTL_S",
            Whole(60, YEAR),
            "how long a task is kept after its last change (with a compacted session's final "
            "summary)",
        ),
    ] = 7 * DAY
    rejected_task_ttl_s: Annotated[
        int,
        Setting(
            "AIM_REJECTED_TASK_TTL_S",
            Whole(60, YEAR),
            "how long a REJECTED task (a message without a session.create part, or one the "
            "agent cannot serve) is kept (when `AIM_TASK_TTL_S` is shorter, that applies)",
        ),
    ] = 3600
    command_ttl_s: Annotated[
        int,
        Setting(
            "AIM_COMMAND_TTL_S",
            Whole(1, YEAR),
            "the replay window: a command's stored outcome, a session's event stream and its "
            "operations timeline are kept for the session's life plus this many seconds (a "
            "retry within it replays; GetCommand after it answers -31005)",
        ),
    ] = DAY
    # profile §24: each tenant's limits (docs/operations.md), and its usage kept for billing
    tenant_policy_file: Annotated[
        str | None,
        Setting(
            "AIM_TENANT_POLICY_FILE",
            Text(),
            "a TOML file of limits per tenant (live sessions, starts per minute, session minutes "
            "per UTC day and month, maximum duration, live sessions per principal) with a "
            "`[default]` for the others; checked at start-up (exit 2, one line per problem), "
            "reloaded within seconds when it changes (a changed file that is refused is logged "
            "and the last good one stays); it must be writable by its owner alone (this user or "
            "root). Unset: no tenant limits",
        ),
    ] = None
    usage_retention_days: Annotated[
        int,
        Setting(
            "AIM_USAGE_RETENTION_DAYS",
            Whole(1, 3660),
            "each ended session's usage (seconds, connected and agent seconds, handoffs, "
            "rotations) is kept per tenant and UTC day this many days, for the operator API's "
            "usage listing",
        ),
    ] = 400
    compact_after_s: Annotated[
        int,
        Setting(
            "AIM_COMPACT_AFTER_S",
            Whole(1, YEAR),
            "this many seconds after a session ended it is compacted to what GetTask, "
            'GetSession and the operations listing need (docs/operations.md, "What is kept how '
            'long")',
        ),
    ] = 3600
    session_cache_entries: Annotated[
        int,
        Setting(
            "AIM_SESSION_CACHE_ENTRIES",
            Whole(0, 1_000_000),
            "sessions each process keeps as it last read or committed them, so that a command "
            "on one costs one Redis round trip (its commit); a stale entry costs a retry, never "
            "a wrong answer: the commit checks the version, and anything that writes nothing is "
            "decided again on a fresh read; least recently used first out (`0`: none kept)",
        ),
    ] = 4096
    max_body_bytes: int = 1024 * 1024

    sse_heartbeat_s: Annotated[
        float,
        Setting(
            "AIM_SSE_HEARTBEAT_S",
            Number(0.01, 3600.0),
            "an idle SSE stream sends a `: keepalive` comment this often (seconds)",
        ),
    ] = 15.0
    sse_buffer_events: Annotated[
        int,
        Setting(
            "AIM_SSE_BUFFER_EVENTS",
            Whole(1, 100_000),
            "events queued per SSE subscriber before a subscriber that does not keep up is "
            "dropped (its stream ends; it resumes with `Last-Event-ID`)",
        ),
    ] = 256
    sse_max_streams_per_principal: Annotated[
        int,
        Setting(
            "AIM_SSE_MAX_STREAMS_PER_PRINCIPAL",
            Whole(1, 100_000),
            "open SSE streams (SendStreamingMessage, SubscribeToTask) one principal may hold "
            "per process; one more is answered `-31011` (`limit: streams_per_principal`) with "
            "`Retry-After` before any stream starts, and SendStreamingMessage then creates "
            "nothing; a slot is free again as soon as a stream ends, however it ends",
        ),
    ] = 16
    sse_max_streams_per_task: Annotated[
        int,
        Setting(
            "AIM_SSE_MAX_STREAMS_PER_TASK",
            Whole(1, 100_000),
            "open SSE streams on one task per process; one more is `-31011` (`limit: "
            "streams_per_task`) with `Retry-After`",
        ),
    ] = 8
    sse_max_lifetime_s: Annotated[
        float,
        Setting(
            "AIM_SSE_MAX_LIFETIME_S",
            Number(1.0, float(DAY)),
            "an SSE stream is closed this many seconds after it opened, after a whole event, "
            "with the comment `: reconnect`; the client resumes with `Last-Event-ID` (both "
            "client libraries do so at once, unnoticed by the app)",
        ),
    ] = 3600.0

    # longer than common load balancers' 60 s, so that they close idle connections first
    http_idle_timeout_s: Annotated[
        int,
        Setting(
            "AIM_HTTP_IDLE_TIMEOUT_S",
            Whole(1, 3600),
            "a keep-alive connection with no request in progress (also a new one that has sent "
            "nothing) is closed after this many seconds; SSE streams are requests in progress, "
            "so never idle",
        ),
    ] = 75
    http_request_timeout_s: Annotated[
        int,
        Setting(
            "AIM_HTTP_REQUEST_TIMEOUT_S",
            Whole(1, 3600),
            "a request's headers and body must all arrive within this many seconds of its first "
            "byte, else it is answered 408 and the connection closed",
        ),
    ] = 30
    http_max_connections: Annotated[
        int,
        Setting(
            "AIM_HTTP_MAX_CONNECTIONS",
            Whole(1, 1_000_000),
            "open connections per process; a connection opened while this many are open is "
            "over the limit: a few (8) may still ask for `GET /healthz` within 2 s and get "
            "every other request answered 503; beyond those, it is answered 503 with "
            "`Retry-After` and closed the moment it opens",
        ),
    ] = 2048
    http_max_connections_per_peer: Annotated[
        int,
        Setting(
            "AIM_HTTP_MAX_CONNECTIONS_PER_PEER",
            Whole(0, 1_000_000),
            "open connections from one client address per process; one more is answered 503 "
            "with `Retry-After` and closed when it opens; behind a proxy or load balancer this "
            "is the proxy's address, so raise it (or `0`) there (`0`: no bound)",
        ),
    ] = 256
    # at least what a bearer token of the largest accepted size needs, with its request
    http_max_header_bytes: Annotated[
        int,
        Setting(
            "AIM_HTTP_MAX_HEADER_BYTES",
            Whole(16384, 1 << 24),
            "a request head (request line and header lines) longer than this is answered 431 "
            "and its connection closed, counted as the bytes arrive",
        ),
    ] = 64 * 1024
    http_max_headers: Annotated[
        int,
        Setting(
            "AIM_HTTP_MAX_HEADERS",
            Whole(16, 10_000),
            "a request with more header lines than this is answered 431 and its connection closed",
        ),
    ] = 100
    http_write_timeout_s: Annotated[
        float,
        Setting(
            "AIM_HTTP_WRITE_TIMEOUT_S",
            Number(1.0, 3600.0),
            "a response whose client takes none of the bytes waiting for it for this many "
            "seconds (a reader that stopped reading; an SSE stream above all) has its "
            "connection aborted, and the stream's slot is freed",
        ),
    ] = 30.0

    metrics: Annotated[
        bool,
        Setting(
            "AIM_METRICS",
            Flag(),
            "`off` turns `GET /metrics` off (404); the Prometheus text format of every metric, "
            'unauthenticated (see "Traces and metrics" in `docs/operations.md`)',
        ),
    ] = True
    metrics_refresh_s: Annotated[
        float,
        Setting(
            "AIM_METRICS_REFRESH_S",
            Number(0.0, 3600.0),
            "the gauges read from Redis (live sessions by state, outbox depth, timer lag) are "
            "read again at most this often per process, when scraped or pushed (`0`: on every "
            "scrape, for one scraper and small deployments); each read is given 2 s",
        ),
    ] = 15.0
    access_log: Annotated[
        bool,
        Setting(
            "AIM_ACCESS_LOG",
            Flag(),
            "`off` turns off the access log: one JSON line per JSON-RPC call (method, code, HTTP "
            "status, duration, trace id)",
        ),
    ] = True
    cors_origins: Annotated[
        tuple[str, ...],
        Setting(
            "AIM_CORS_ORIGINS",
            Origins(),
            "browser origins other than the service's own that may call it, such as "
            "`https://app.example.com,http://localhost:5173`. Their preflights are answered "
            "and every route answers them with `Access-Control-Allow-Origin`, allowing "
            "`Authorization`, `Content-Type`, `A2A-Version`, `A2A-Extensions`, `Last-Event-ID` "
            "and trace context, exposing `A2A-Extensions`, `Retry-After`, `WWW-Authenticate`, "
            "`ETag`, `Last-Modified`; no cookies (bearer tokens only)",
            default_doc="unset: same-origin only",
        ),
    ] = ()

    events_url: Annotated[
        str | None,
        Setting(
            "AIM_EVENTS_URL",
            HttpsUrl(switch="AIM_EVENTS_ALLOW_HTTP"),
            'where session events for the app\'s backend are POSTed ("Session events" in '
            "`docs/client-guide.md`). Set together with `AIM_EVENTS_SECRET`, or neither",
            default_doc="unset: no events are written or sent",
        ),
    ] = None
    events_secret: Annotated[
        str | None,
        Setting(
            "AIM_EVENTS_SECRET",
            WebhookSecret(),
            "the Standard Webhooks signing secret (e.g. `whsec_$(openssl rand -base64 32)`); "
            "never logged",
        ),
    ] = None
    events_tenant_urls: Annotated[
        Pairs,
        Setting(
            "AIM_EVENTS_TENANT_URLS",
            TenantUrls(switch="AIM_EVENTS_ALLOW_HTTP"),
            'tenant → URL (`{"acme": "https://events.acme.example/aim"}`): the sessions of a '
            "principal with that tenant claim (`AIM_AUTH_TENANT_CLAIM`) send their events "
            "there instead of `AIM_EVENTS_URL`, signed with the same secret. Needs "
            "`AIM_EVENTS_URL` and `AIM_AUTH_TENANT_CLAIM` (without a tenant claim no session "
            "has a tenant: refused at start-up, exit 2). `aim-realtime check` and the worker's "
            "start-up log list every route, tenant by tenant, then the default, each URL "
            "without credentials",
        ),
    ] = ()
    events_allow_http: Annotated[
        bool,
        Setting(
            "AIM_EVENTS_ALLOW_HTTP",
            Flag(),
            "`on` lets `AIM_EVENTS_URL` and `AIM_EVENTS_TENANT_URLS` be `http://` to another "
            "host (a network you trust)",
        ),
    ] = False
    events_types: Annotated[
        frozenset[str],
        Setting(
            "AIM_EVENTS_TYPES",
            Choices(SESSION_EVENT_TYPES, "event types"),
            "the event types to send (`seq` counts only the events sent)",
        ),
    ] = frozenset(SESSION_EVENT_TYPES)
    events_retry_s: Annotated[
        int,
        Setting(
            "AIM_EVENTS_RETRY_S",
            Whole(1, 30 * DAY),
            "an event a receiver does not answer with a 2xx is retried with backoff for this "
            "long after it happened, then given up (the session's next event goes)",
        ),
    ] = DAY
    events_timeout_s: Annotated[
        float,
        Setting(
            "AIM_EVENTS_TIMEOUT_S",
            Number(0.1, 300.0),
            "one delivery attempt waits this long for the receiver's answer",
        ),
    ] = 10.0
    events_max_per_session: Annotated[
        int,
        Setting(
            "AIM_EVENTS_MAX_PER_SESSION",
            Whole(1, 100_000),
            "a session keeps at most this many events waiting; past it the oldest waiting one "
            "is dropped (the next kept one says `droppedBefore`), but `session.created`, "
            "`.ready`, `.ended` and `.failed` are always kept (decision 162)",
        ),
    ] = 1000
    events_max_per_destination: Annotated[
        int,
        Setting(
            "AIM_EVENTS_MAX_PER_DESTINATION",
            Whole(1, 32),
            "a worker sends to at most this many sessions of one receiver URL at once (of its "
            "32); the others' receivers keep the rest (decision 161)",
        ),
    ] = 8
    events_connect_timeout_s: Annotated[
        float,
        Setting(
            "AIM_EVENTS_CONNECT_TIMEOUT_S",
            Number(0.05, 60.0),
            "connecting to a receiver waits at most this long (at most `AIM_EVENTS_TIMEOUT_S`, "
            "which bounds the whole attempt)",
        ),
    ] = 2.0
    # what from_env found acceptable but worth saying (a short LiveKit secret): one line each,
    # naming the variable and never its value; the CLI logs them at start-up
    warnings: tuple[str, ...] = ()

    @property
    def usage_ttl_s(self) -> int:
        """How long a day's usage of a tenant is kept after its last write."""
        return (self.usage_retention_days + 1) * DAY

    @property
    def live_window_s(self) -> int:
        """How long a live session's command outcomes, event stream and timeline are kept from
        their last write: the longest it may still live, then the replay window (profile §20)."""
        return self.max_session_s + self.command_ttl_s

    @property
    def rejected_ttl_s(self) -> int:
        """How long a REJECTED task is kept: never longer than any other task."""
        return min(self.rejected_task_ttl_s, self.task_ttl_s)

    @property
    def events_enabled(self) -> bool:
        """Whether session events are written and sent (AIM_EVENTS_URL and its secret set)."""
        return self.events_url is not None and self.events_secret is not None

    @property
    def events_routes(self) -> tuple[str, ...]:
        """Where session events go, one line per route (each tenant's, then the default), as
        the log and `check` say it: never a credential."""
        if self.events_url is None:
            return ("not configured (AIM_EVENTS_URL unset); none are written",)
        default = f"sent to {without_credentials(self.events_url)} (AIM_EVENTS_URL)"
        if not self.events_tenant_urls:
            return (default,)
        claim = self.auth_tenant_claim
        return (
            *(
                f"tenant {tenant!r} ({claim} claim): sent to {without_credentials(url)} "
                "(AIM_EVENTS_TENANT_URLS)"
                for tenant, url in self.events_tenant_urls
            ),
            f"every other tenant: {default}",
        )

    def events_url_for(self, tenant: str | None) -> str | None:
        """Where a session of `tenant` sends its events: the tenant's own URL, or AIM_EVENTS_URL."""
        return dict(self.events_tenant_urls).get(tenant or "", self.events_url)

    @property
    def livekit_configured(self) -> bool:
        """Whether LiveKit's server API can be called (its URL and credentials are set)."""
        return not self.livekit_unset

    @property
    def livekit_unset(self) -> tuple[str, ...]:
        """The variables LiveKit's server API still needs (none once it is configured)."""
        values = (
            ("AIM_LIVEKIT_URL", self.livekit_url),
            ("AIM_LIVEKIT_API_KEY", self.livekit_api_key),
            ("AIM_LIVEKIT_API_SECRET", self.livekit_api_secret),
        )
        return tuple(name for name, value in values if not value)

    @property
    def provider_url(self) -> str:
        """The provider API's URL an agent is told (`providerUrl` of the dispatch metadata)."""
        return f"{self.provider_base_url or self.public_base_url}/provider"

    @property
    def provider_secret(self) -> str:
        """The HS256 key of provider tokens: configured, else derived from the LiveKit API
        secret (every replica shares it), never equal to the client token secret."""
        if self.provider_token_secret is not None:
            return self.provider_token_secret
        if self.livekit_api_secret is not None:
            return hmac.new(
                self.livekit_api_secret.encode(), b"aim-realtime provider token v1", hashlib.sha256
            ).hexdigest()
        return _PROCESS_PROVIDER_SECRET

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> Settings:
        """Build settings from environment variables; raise SettingsError naming each bad one:
        first each variable's own problem, in the order of the fields, then the combinations
        that cannot work."""
        reader = EnvironmentReader(environ)
        read = cls(
            **{
                declared.field: declared.setting.reading.read(
                    reader, declared.setting.env, declared.default
                )
                for declared in DECLARED
            }
        )
        settings = msgspec.structs.replace(
            read, **_combined(reader, read), warnings=tuple(reader.warnings)
        )
        if reader.problems:
            raise SettingsError(reader.problems)
        return settings

    @property
    def data_path(self) -> Path:
        return Path(self.data_dir)


def _combined(reader: EnvironmentReader, read: Settings) -> dict[str, Any]:
    """The rules that tie the settings `read` together (a problem each in `reader`), and the
    values one setting gives another: the development secret, LiveKit's public URL and webhook
    signers. A rule asks whether a variable is set, valid or not, where its value is not read."""

    def given(name: str) -> bool:
        return reader.text(name) is not None

    secret_given, jwks_given = given("AIM_AUTH_HS256_SECRET"), given("AIM_AUTH_JWKS_URL")
    derived: dict[str, Any] = {}
    if secret_given and jwks_given:
        # one key source: a locally minted HS256 token must never open a JWKS deployment
        reader.problems.append(
            "AIM_AUTH_HS256_SECRET and AIM_AUTH_JWKS_URL are both set: configure one key "
            "source for client tokens, not both"
        )
    elif not secret_given and not jwks_given:
        if read.require_redis:
            # AIM_REQUIRE_REDIS is the production switch: no made-up keys there
            reader.problems.append(
                "AIM_REQUIRE_REDIS is set (production) but neither AIM_AUTH_HS256_SECRET nor "
                "AIM_AUTH_JWKS_URL is: configure the key that verifies client tokens"
                + (
                    ""
                    if given("AIM_AUTH_AUDIENCE")
                    else ", and AIM_AUTH_AUDIENCE, the audience (aud) they must carry"
                )
            )
        else:
            derived["auth_hs256_secret"] = secrets.token_urlsafe(48)
            derived["auth_hs256_secret_generated"] = True
    if read.auth_jwks_url is not None and (read.auth_issuer is None or read.auth_audience is None):
        reader.problems.append(
            "AIM_AUTH_JWKS_URL needs AIM_AUTH_ISSUER and AIM_AUTH_AUDIENCE to be set as well"
        )
    elif read.require_redis and secret_given and read.auth_audience is None:
        # production: a token minted for another service (another aud, or none) is refused
        reader.problems.append(
            "AIM_REQUIRE_REDIS is set (production) but AIM_AUTH_AUDIENCE is not: set the "
            "audience (aud) client tokens must carry, so that a token minted for another "
            "service is refused"
        )

    api_key, api_secret = read.livekit_api_key, read.livekit_api_secret
    if (api_key is None) != (api_secret is None):
        reader.problems.append(
            "AIM_LIVEKIT_API_KEY and AIM_LIVEKIT_API_SECRET must be set together"
        )
    elif read.livekit_url is not None and api_key is None:
        reader.problems.append(
            "AIM_LIVEKIT_URL needs AIM_LIVEKIT_API_KEY and AIM_LIVEKIT_API_SECRET: the "
            "service creates rooms and signs join tokens with them"
        )
    derived["livekit_public_url"] = read.livekit_public_url or read.livekit_url
    if not read.livekit_webhook_keys and api_key is not None and api_secret is not None:
        derived["livekit_webhook_keys"] = ((api_key, api_secret),)

    if read.events_tenant_urls and not given("AIM_EVENTS_URL"):
        reader.problems.append(
            "AIM_EVENTS_TENANT_URLS needs AIM_EVENTS_URL (and AIM_EVENTS_SECRET): the events "
            "of every other tenant go there"
        )
    if read.events_tenant_urls and not given("AIM_AUTH_TENANT_CLAIM"):
        # no principal would have a tenant: every tenant's events would go to the default
        reader.problems.append(
            "AIM_EVENTS_TENANT_URLS needs AIM_AUTH_TENANT_CLAIM, the token claim naming a "
            "principal's tenant: without it no session has a tenant and every event would go "
            "to AIM_EVENTS_URL"
        )
    if given("AIM_EVENTS_URL") != given("AIM_EVENTS_SECRET"):
        reader.problems.append(
            "AIM_EVENTS_URL and AIM_EVENTS_SECRET must be set together: events are sent "
            "only signed, and only where they are asked for"
        )
    return derived


class Declared(msgspec.Struct, frozen=True):
    """A field of `Settings` read from the environment, with its declaration and default."""

    field: str
    setting: Setting
    default: Any


def _declared() -> tuple[Declared, ...]:
    found = []
    for info in msgspec.structs.fields(Settings):
        setting = next((a for a in get_args(info.type)[1:] if isinstance(a, Setting)), None)
        if setting is not None:
            default = info.default_factory() if info.default is msgspec.NODEFAULT else info.default
            found.append(Declared(info.name, setting, default))
    return tuple(found)


# every declared setting, in the order of the fields (and of docs/configuration.md)
DECLARED = _declared()
