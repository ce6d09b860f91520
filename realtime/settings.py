"""Configuration: one frozen value built from the environment (profile §14).

`Settings.from_env(environ)` validates every variable and raises `SettingsError` naming each bad
or missing one. Nothing reads the environment at import time; `create_app` receives the value.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from collections.abc import Mapping
from pathlib import Path

import msgspec

from realtime.environment import MIN_HS256_SECRET_BYTES, EnvironmentReader, without_credentials

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
)
# signs provider tokens when neither AIM_PROVIDER_TOKEN_SECRET nor a LiveKit secret is set
# (one process, development only: other processes could not verify them)
_PROCESS_PROVIDER_SECRET = secrets.token_urlsafe(48)


class SettingsError(ValueError):
    """One or more configuration variables are missing or malformed."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("invalid configuration:\n  " + "\n  ".join(problems))
        self.problems = problems


class Settings(msgspec.Struct, frozen=True, kw_only=True):
    """Every knob of the service. Defaults are the development defaults of profile §14."""

    redis_url: str | None = None
    redis_cluster: bool = False
    require_redis: bool = False
    data_dir: str = ".aim-data"
    public_base_url: str = "http://127.0.0.1:8080"
    provider_base_url: str | None = None  # where agents reach /provider; None: public_base_url

    auth_hs256_secret: str | None = None
    auth_hs256_secret_generated: bool = False
    auth_jwks_url: str | None = None
    auth_issuer: str | None = None
    auth_audience: str | None = None
    auth_tenant_claim: str | None = None
    auth_leeway_s: int = 30
    # a client token's exp - iat (a token without iat: exp - the time it is first presented)
    auth_max_token_lifetime_s: int = 24 * 3600

    livekit_url: str | None = None
    livekit_public_url: str | None = None
    livekit_api_key: str | None = None
    livekit_api_secret: str | None = None
    livekit_webhook_keys: tuple[tuple[str, str], ...] = ()
    agent_name: str = "aim-realtime-agent"
    provider_capabilities: frozenset[str] = frozenset(PROVIDER_CAPABILITIES)
    provider_token_secret: str | None = None

    join_token_ttl_s: int = 300
    provisioning_timeout_s: int = 15
    idle_timeout_s: int = 300
    reconnect_grace_s: int = 60
    max_session_s: int = 3600
    requirement_ttl_s: int = 120
    # a dispatch whose job has not started this long after it was made is replaced (profile §22);
    # doubled for each dispatch in a row that started nothing
    agent_start_timeout_s: int = 10

    max_sessions_per_principal: int = 5
    # tasks one principal holds at once, live and kept (session tasks and refused messages)
    max_tasks_per_principal: int = 1000
    max_endpoints_per_session: int = 8
    rate_limit_rps: float = 100.0

    worker_lease_s: int = 30
    reconcile_interval_s: int = 60  # 0: no reconciler
    reconcile_grace_s: int = 120
    task_ttl_s: int = 7 * 24 * 3600
    # a REJECTED task (a message the service does not serve) is kept this long
    rejected_task_ttl_s: int = 3600
    # a command's stored outcome, a session's event stream and timeline: kept for the session's
    # life plus this replay window (profile §20)
    command_ttl_s: int = 24 * 3600
    # an ended session is compacted to its task and final summary this long after it ended
    compact_after_s: int = 3600
    session_cache_entries: int = 4096
    max_body_bytes: int = 1024 * 1024

    sse_heartbeat_s: float = 15.0
    sse_buffer_events: int = 256
    # open SSE streams one principal, and one task, may hold in this process
    sse_max_streams_per_principal: int = 16
    sse_max_streams_per_task: int = 8
    # a stream is closed this long after it opened (its client resumes with Last-Event-ID)
    sse_max_lifetime_s: float = 3600.0

    # longer than common load balancers' 60 s, so that they close idle connections first
    http_idle_timeout_s: int = 75
    http_request_timeout_s: int = 30
    http_max_connections: int = 2048
    # one address may hold this many of them (0: no bound); behind a proxy, the proxy's address
    http_max_connections_per_peer: int = 256
    http_max_header_bytes: int = 64 * 1024  # a request head: request line and header lines
    http_max_headers: int = 100
    # a response none of whose bytes the client takes for this long is cut (a stalled reader)
    http_write_timeout_s: float = 30.0

    metrics: bool = True  # GET /metrics (Prometheus text format)
    metrics_refresh_s: float = 15.0  # the gauges read from Redis are at most this old
    access_log: bool = True  # one JSON line per JSON-RPC call
    # browser origins other than the service's own allowed to call it (CORS); () = none
    cors_origins: tuple[str, ...] = ()

    # session events for the app's backend (profile §21): none unless both are set
    events_url: str | None = None
    events_secret: str | None = None  # a Standard Webhooks secret, whsec_…
    # a tenant's own receiver instead of events_url (the principal's tenant claim)
    events_tenant_urls: tuple[tuple[str, str], ...] = ()
    events_types: frozenset[str] = frozenset(SESSION_EVENT_TYPES)
    events_retry_s: int = 24 * 3600  # an event is retried this long, then given up
    events_timeout_s: float = 10.0  # one delivery attempt
    # kept per session; past it the oldest waiting go, never a lifecycle event (decision 162)
    events_max_per_session: int = 1000
    # attempts under way at once to one receiver URL, of the worker's 32 (decision 161)
    events_max_per_destination: int = 8
    # connecting to a receiver; at most events_timeout_s, which bounds the whole attempt
    events_connect_timeout_s: float = 2.0
    # JoinSessions that hand one session to another device, per minute; 0: no bound
    max_handoffs_per_minute: int = 30
    # what from_env found acceptable but worth saying (a short LiveKit secret): one line each,
    # naming the variable and never its value; the CLI logs them at start-up
    warnings: tuple[str, ...] = ()

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
        """Build settings from environment variables; raise SettingsError naming each bad one."""
        reader = EnvironmentReader(environ)
        defaults = cls()  # every default is written once, on its field
        secret = reader.text("AIM_AUTH_HS256_SECRET")
        generated = False
        require_redis = reader.flag("AIM_REQUIRE_REDIS")
        if secret is not None and reader.text("AIM_AUTH_JWKS_URL") is not None:
            # one key source: a locally minted HS256 token must never open a JWKS deployment
            reader.problems.append(
                "AIM_AUTH_HS256_SECRET and AIM_AUTH_JWKS_URL are both set: configure one key "
                "source for client tokens, not both"
            )
        elif secret is None and reader.text("AIM_AUTH_JWKS_URL") is None:
            if require_redis:
                # AIM_REQUIRE_REDIS is the production switch: no made-up keys there
                reader.problems.append(
                    "AIM_REQUIRE_REDIS is set (production) but neither AIM_AUTH_HS256_SECRET nor "
                    "AIM_AUTH_JWKS_URL is: configure the key that verifies client tokens"
                    + (
                        ""
                        if reader.text("AIM_AUTH_AUDIENCE")
                        else ", and AIM_AUTH_AUDIENCE, the audience (aud) they must carry"
                    )
                )
            else:
                secret = secrets.token_urlsafe(48)
                generated = True
        if secret is not None and len(secret.encode()) < MIN_HS256_SECRET_BYTES:
            reader.problems.append(
                f"AIM_AUTH_HS256_SECRET must be at least {MIN_HS256_SECRET_BYTES} bytes long"
            )
        # whoever can change the key set in transit can mint any token: https only (http to
        # this machine, for development), and the fetch never follows a redirect (jwks.py)
        jwks = reader.https_url("AIM_AUTH_JWKS_URL", allow_http=False, http_switch=None)
        issuer = reader.text("AIM_AUTH_ISSUER")
        audience = reader.text("AIM_AUTH_AUDIENCE")
        if jwks is not None and (issuer is None or audience is None):
            reader.problems.append(
                "AIM_AUTH_JWKS_URL needs AIM_AUTH_ISSUER and AIM_AUTH_AUDIENCE to be set as well"
            )
        elif require_redis and secret is not None and audience is None:
            # production: a token minted for another service (another aud, or none) is refused
            reader.problems.append(
                "AIM_REQUIRE_REDIS is set (production) but AIM_AUTH_AUDIENCE is not: set the "
                "audience (aud) client tokens must carry, so that a token minted for another "
                "service is refused"
            )
        livekit_url = reader.url("AIM_LIVEKIT_URL", ("http", "https", "ws", "wss"))
        api_key = reader.text("AIM_LIVEKIT_API_KEY")
        api_secret = reader.text("AIM_LIVEKIT_API_SECRET")
        if (api_key is None) != (api_secret is None):
            reader.problems.append(
                "AIM_LIVEKIT_API_KEY and AIM_LIVEKIT_API_SECRET must be set together"
            )
        elif livekit_url is not None and api_key is None:
            reader.problems.append(
                "AIM_LIVEKIT_URL needs AIM_LIVEKIT_API_KEY and AIM_LIVEKIT_API_SECRET: the "
                "service creates rooms and signs join tokens with them"
            )
        reader.short_livekit_secret("AIM_LIVEKIT_API_SECRET", api_secret)
        webhook_keys = reader.key_pairs("AIM_LIVEKIT_WEBHOOK_KEYS")
        if reader.environ.get("AIM_LIVEKIT_WEBHOOK_KEYS", "").strip():
            for _, webhook_secret in webhook_keys:
                if reader.short_livekit_secret("AIM_LIVEKIT_WEBHOOK_KEYS", webhook_secret):
                    break
        if not webhook_keys and api_key is not None and api_secret is not None:
            webhook_keys = ((api_key, api_secret),)
        allow_http = reader.flag("AIM_EVENTS_ALLOW_HTTP")
        events_url = reader.https_url("AIM_EVENTS_URL", allow_http=allow_http)
        tenant_urls = reader.tenant_urls("AIM_EVENTS_TENANT_URLS", allow_http=allow_http)
        if tenant_urls and reader.text("AIM_EVENTS_URL") is None:
            reader.problems.append(
                "AIM_EVENTS_TENANT_URLS needs AIM_EVENTS_URL (and AIM_EVENTS_SECRET): the events "
                "of every other tenant go there"
            )
        if tenant_urls and reader.text("AIM_AUTH_TENANT_CLAIM") is None:
            # no principal would have a tenant: every tenant's events would go to the default
            reader.problems.append(
                "AIM_EVENTS_TENANT_URLS needs AIM_AUTH_TENANT_CLAIM, the token claim naming a "
                "principal's tenant: without it no session has a tenant and every event would go "
                "to AIM_EVENTS_URL"
            )
        events_secret = reader.webhook_secret("AIM_EVENTS_SECRET")
        if (reader.text("AIM_EVENTS_URL") is None) != (reader.text("AIM_EVENTS_SECRET") is None):
            reader.problems.append(
                "AIM_EVENTS_URL and AIM_EVENTS_SECRET must be set together: events are sent "
                "only signed, and only where they are asked for"
            )
        settings = cls(
            redis_url=reader.url("AIM_REDIS_URL", ("redis", "rediss", "unix")),
            redis_cluster=reader.flag("AIM_REDIS_CLUSTER"),
            require_redis=require_redis,
            data_dir=reader.text("AIM_DATA_DIR") or ".aim-data",
            public_base_url=(
                reader.url("AIM_PUBLIC_BASE_URL", ("http", "https")) or "http://127.0.0.1:8080"
            ).rstrip("/"),
            provider_base_url=(
                (reader.url("AIM_PROVIDER_BASE_URL", ("http", "https")) or "").rstrip("/") or None
            ),
            auth_hs256_secret=secret,
            auth_hs256_secret_generated=generated,
            auth_jwks_url=jwks,
            auth_issuer=issuer,
            auth_audience=audience,
            auth_tenant_claim=reader.text("AIM_AUTH_TENANT_CLAIM"),
            auth_leeway_s=reader.integer(
                "AIM_AUTH_LEEWAY_S", defaults.auth_leeway_s, low=0, high=30
            ),
            auth_max_token_lifetime_s=reader.integer(
                "AIM_AUTH_MAX_TOKEN_LIFETIME_S",
                defaults.auth_max_token_lifetime_s,
                low=60,
                high=365 * 86400,
            ),
            livekit_url=livekit_url,
            livekit_public_url=(
                reader.url("AIM_LIVEKIT_PUBLIC_URL", ("http", "https", "ws", "wss")) or livekit_url
            ),
            livekit_api_key=api_key,
            livekit_api_secret=api_secret,
            livekit_webhook_keys=webhook_keys,
            agent_name=reader.text("AIM_AGENT_NAME") or "aim-realtime-agent",
            provider_capabilities=reader.capabilities(
                "AIM_PROVIDER_CAPABILITIES", PROVIDER_CAPABILITIES
            ),
            provider_token_secret=reader.secret("AIM_PROVIDER_TOKEN_SECRET"),
            join_token_ttl_s=reader.integer(
                "AIM_JOIN_TOKEN_TTL_S", defaults.join_token_ttl_s, low=10, high=86400
            ),
            provisioning_timeout_s=reader.integer(
                "AIM_PROVISIONING_TIMEOUT_S", defaults.provisioning_timeout_s, low=1, high=3600
            ),
            idle_timeout_s=reader.integer(
                "AIM_IDLE_TIMEOUT_S", defaults.idle_timeout_s, low=1, high=86400
            ),
            reconnect_grace_s=reader.integer(
                "AIM_RECONNECT_GRACE_S", defaults.reconnect_grace_s, low=1, high=3600
            ),
            max_session_s=reader.integer(
                "AIM_MAX_SESSION_S", defaults.max_session_s, low=1, high=7 * 86400
            ),
            requirement_ttl_s=reader.integer(
                "AIM_REQUIREMENT_TTL_S", defaults.requirement_ttl_s, low=1, high=86400
            ),
            agent_start_timeout_s=reader.integer(
                "AIM_AGENT_START_TIMEOUT_S", defaults.agent_start_timeout_s, low=1, high=600
            ),
            max_sessions_per_principal=reader.integer(
                "AIM_MAX_SESSIONS_PER_PRINCIPAL",
                defaults.max_sessions_per_principal,
                low=1,
                high=10000,
            ),
            max_tasks_per_principal=reader.integer(
                "AIM_MAX_TASKS_PER_PRINCIPAL",
                defaults.max_tasks_per_principal,
                low=1,
                high=100_000,
            ),
            max_endpoints_per_session=reader.integer(
                "AIM_MAX_ENDPOINTS_PER_SESSION", defaults.max_endpoints_per_session, low=1, high=64
            ),
            rate_limit_rps=reader.number(
                "AIM_RATE_LIMIT_RPS", defaults.rate_limit_rps, low=0.0, high=1e6
            ),
            worker_lease_s=reader.integer(
                "AIM_WORKER_LEASE_S", defaults.worker_lease_s, low=1, high=3600
            ),
            reconcile_interval_s=reader.integer(
                "AIM_RECONCILE_INTERVAL_S", defaults.reconcile_interval_s, low=0, high=86400
            ),
            # at least 10 s: LiveKit's clock and ours may differ by a little
            reconcile_grace_s=reader.integer(
                "AIM_RECONCILE_GRACE_S", defaults.reconcile_grace_s, low=10, high=86400
            ),
            session_cache_entries=reader.integer(
                "AIM_SESSION_CACHE_ENTRIES", defaults.session_cache_entries, low=0, high=1_000_000
            ),
            task_ttl_s=reader.integer(
                "AIM_TASK_TTL_S", defaults.task_ttl_s, low=60, high=365 * 86400
            ),
            rejected_task_ttl_s=reader.integer(
                "AIM_REJECTED_TASK_TTL_S", defaults.rejected_task_ttl_s, low=60, high=365 * 86400
            ),
            command_ttl_s=reader.integer(
                "AIM_COMMAND_TTL_S", defaults.command_ttl_s, low=1, high=365 * 86400
            ),
            compact_after_s=reader.integer(
                "AIM_COMPACT_AFTER_S", defaults.compact_after_s, low=1, high=365 * 86400
            ),
            sse_heartbeat_s=reader.number(
                "AIM_SSE_HEARTBEAT_S", defaults.sse_heartbeat_s, low=0.01, high=3600.0
            ),
            sse_buffer_events=reader.integer(
                "AIM_SSE_BUFFER_EVENTS", defaults.sse_buffer_events, low=1, high=100_000
            ),
            sse_max_streams_per_principal=reader.integer(
                "AIM_SSE_MAX_STREAMS_PER_PRINCIPAL",
                defaults.sse_max_streams_per_principal,
                low=1,
                high=100_000,
            ),
            sse_max_streams_per_task=reader.integer(
                "AIM_SSE_MAX_STREAMS_PER_TASK",
                defaults.sse_max_streams_per_task,
                low=1,
                high=100_000,
            ),
            sse_max_lifetime_s=reader.number(
                "AIM_SSE_MAX_LIFETIME_S", defaults.sse_max_lifetime_s, low=1.0, high=86400.0
            ),
            http_idle_timeout_s=reader.integer(
                "AIM_HTTP_IDLE_TIMEOUT_S", defaults.http_idle_timeout_s, low=1, high=3600
            ),
            http_request_timeout_s=reader.integer(
                "AIM_HTTP_REQUEST_TIMEOUT_S", defaults.http_request_timeout_s, low=1, high=3600
            ),
            http_max_connections=reader.integer(
                "AIM_HTTP_MAX_CONNECTIONS", defaults.http_max_connections, low=1, high=1_000_000
            ),
            http_max_connections_per_peer=reader.integer(
                "AIM_HTTP_MAX_CONNECTIONS_PER_PEER",
                defaults.http_max_connections_per_peer,
                low=0,
                high=1_000_000,
            ),
            # at least what a bearer token of the largest accepted size needs, with its request
            http_max_header_bytes=reader.integer(
                "AIM_HTTP_MAX_HEADER_BYTES", defaults.http_max_header_bytes, low=16384, high=1 << 24
            ),
            http_max_headers=reader.integer(
                "AIM_HTTP_MAX_HEADERS", defaults.http_max_headers, low=16, high=10_000
            ),
            http_write_timeout_s=reader.number(
                "AIM_HTTP_WRITE_TIMEOUT_S", defaults.http_write_timeout_s, low=1.0, high=3600.0
            ),
            metrics=reader.flag("AIM_METRICS", default=defaults.metrics),
            # 0: read on every scrape (one scraper, small deployments)
            metrics_refresh_s=reader.number(
                "AIM_METRICS_REFRESH_S", defaults.metrics_refresh_s, low=0.0, high=3600.0
            ),
            access_log=reader.flag("AIM_ACCESS_LOG", default=defaults.access_log),
            cors_origins=reader.origins("AIM_CORS_ORIGINS"),
            events_url=events_url,
            events_secret=events_secret,
            events_tenant_urls=tenant_urls,
            events_types=reader.capabilities(
                "AIM_EVENTS_TYPES", SESSION_EVENT_TYPES, what="event types"
            ),
            events_retry_s=reader.integer(
                "AIM_EVENTS_RETRY_S", defaults.events_retry_s, low=1, high=30 * 86400
            ),
            events_timeout_s=reader.number(
                "AIM_EVENTS_TIMEOUT_S", defaults.events_timeout_s, low=0.1, high=300.0
            ),
            events_max_per_session=reader.integer(
                "AIM_EVENTS_MAX_PER_SESSION", defaults.events_max_per_session, low=1, high=100_000
            ),
            events_max_per_destination=reader.integer(
                "AIM_EVENTS_MAX_PER_DESTINATION",
                defaults.events_max_per_destination,
                low=1,
                high=32,
            ),
            events_connect_timeout_s=reader.number(
                "AIM_EVENTS_CONNECT_TIMEOUT_S",
                defaults.events_connect_timeout_s,
                low=0.05,
                high=60.0,
            ),
            max_handoffs_per_minute=reader.integer(
                "AIM_MAX_HANDOFFS_PER_MINUTE", defaults.max_handoffs_per_minute, low=0, high=10_000
            ),
            warnings=tuple(reader.warnings),
        )
        if reader.problems:
            raise SettingsError(reader.problems)
        return settings

    @property
    def data_path(self) -> Path:
        return Path(self.data_dir)
