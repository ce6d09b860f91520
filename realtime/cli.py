"""`aim-realtime serve | worker | token | check` (profile §14)."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import socket
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from realtime import supervisor
from realtime.auth import CLIENT_SCOPES, OPERATOR_SCOPE
from realtime.environment import EnvironmentReader, without_credentials
from realtime.livekit_dev.command import DESCRIPTION as LIVEKIT_DEV_DESCRIPTION
from realtime.livekit_dev.command import add_arguments as add_livekit_dev_arguments
from realtime.livekit_dev.command import run as run_livekit_dev
from realtime.logs import JsonLogFormatter
from realtime.provider_tokens import PROVIDER_SCOPE
from realtime.settings import Settings, SettingsError
from realtime.store.datadir import UnsafeDataDirError, dev_secret, unsafe_data_dir

log = logging.getLogger("realtime.cli")

ALL_SCOPES = " ".join(CLIENT_SCOPES)
KNOWN_SCOPES = (*CLIENT_SCOPES, OPERATOR_SCOPE)
TOKEN_TTL_MAX_S = 30 * 86400
STARTUP_FAILURE = supervisor.STARTUP_FAILURE
BAD_CONFIGURATION = 2  # exit code: the configuration cannot work (every command)


def _load_dotenv(path: str = ".env") -> None:
    """Variables from `.env` fill in what the environment does not already set."""
    if not os.path.isfile(path):
        return
    with open(path, encoding="utf-8") as handle:
        for line in handle:
            name, sep, value = line.strip().partition("=")
            if sep and name and not name.startswith("#"):
                os.environ.setdefault(name.strip(), value.strip().strip('"').strip("'"))


def _settings(*, quiet: bool = False) -> Settings:
    """The settings from the environment (and `.env`), or exit 2 with one line per problem;
    what is acceptable but worth saying is logged (unless `quiet`: a process of `--workers`,
    whose supervisor said it)."""
    _load_dotenv()
    try:
        settings = Settings.from_env(os.environ)
    except SettingsError as exc:
        print(exc, file=sys.stderr)
        raise SystemExit(BAD_CONFIGURATION) from None
    from realtime.store.selection import missing_redis

    problem = missing_redis(settings)
    if problem is not None:
        print(f"invalid configuration:\n  {problem}", file=sys.stderr)
        raise SystemExit(BAD_CONFIGURATION)
    _refuse_unsafe_data_dir(settings)
    _refuse_bad_policy(settings)
    if not quiet:
        for warning in settings.warnings:
            log.warning("%s", warning)
    return settings


def _refuse_bad_policy(settings: Settings) -> None:
    """Exit 2, one line per problem, when the tenant policy file cannot be used."""
    if settings.tenant_policy_file is None:
        return
    from realtime.policy import PolicyError, load_policy

    try:
        load_policy(Path(settings.tenant_policy_file))
    except PolicyError as exc:
        print(exc, file=sys.stderr)
        raise SystemExit(BAD_CONFIGURATION) from None


def _refuse_unsafe_data_dir(settings: Settings) -> None:
    """Exit 2 when the private redis-server's data directory is not this user's own."""
    if (problem := unsafe_data_dir(settings.data_path, settings.redis_url)) is not None:
        print(problem, file=sys.stderr)
        raise SystemExit(BAD_CONFIGURATION)


def _dev_secret(args: argparse.Namespace) -> int:
    """`aim-realtime dev-secret`: print the secret (to stdout only), or why not; exit code."""
    _load_dotenv()  # for a service not configured yet: only AIM_DATA_DIR and production count
    reader = EnvironmentReader(os.environ)
    production = reader.flag("AIM_REQUIRE_REDIS")
    if production or reader.problems:
        # production never makes nor hands out a development key (scripts/serve, scripts/token)
        print(
            "AIM_REQUIRE_REDIS is set (production), so no development secret is made or used: "
            "set AIM_AUTH_HS256_SECRET (at least 32 bytes) or AIM_AUTH_JWKS_URL"
            if production
            else "\n".join(reader.problems),
            file=sys.stderr,
        )
        return BAD_CONFIGURATION
    data_dir = Path(os.environ.get("AIM_DATA_DIR") or Settings().data_dir)
    try:
        secret = dev_secret(data_dir)
    except (UnsafeDataDirError, OSError) as exc:
        print(exc, file=sys.stderr)
        return BAD_CONFIGURATION
    print(secret)  # to stdout only
    return 0


def _announce_dev_secret(settings: Settings, secret: str) -> None:
    """Print a development token for the made-up secret — only in development mode (the
    embedded store or the private redis-server); with a shared Redis, say what to set."""
    from realtime.auth import mint_dev_token

    if settings.redis_url is not None:
        log.warning(
            "AIM_AUTH_HS256_SECRET is not set: tokens are verified with a random secret of this "
            "process that nobody can mint with; set AIM_AUTH_HS256_SECRET or AIM_AUTH_JWKS_URL"
        )
        return
    token = mint_dev_token(
        secret,
        subject="developer",
        scopes=ALL_SCOPES.split(),
        ttl_s=3600,
        now=time.time(),
        issuer=settings.auth_issuer,
        audience=settings.auth_audience,
    )
    print(
        "DEVELOPMENT MODE: AIM_AUTH_HS256_SECRET is not set, so this service signs development "
        "tokens with a random secret.\nA development token (sub=developer, all scopes, 1 h), for "
        f"development only:\n  {token}\nSet AIM_AUTH_HS256_SECRET to keep tokens valid across "
        "restarts; production (AIM_REQUIRE_REDIS=1) refuses to start without a configured key.",
        file=sys.stderr,
    )


def _serve(args: argparse.Namespace) -> int:
    settings = _settings(quiet=args.socket_fd is not None)
    workers = args.workers or supervisor.cpu_count()
    if workers > 1 and args.socket_fd is None:
        return _supervise(args, settings, workers)
    import uvicorn  # only the serve command needs the server

    from realtime.app import create_app
    from realtime.http_server import server_config

    if settings.auth_hs256_secret_generated and settings.auth_hs256_secret:
        _announce_dev_secret(settings, settings.auth_hs256_secret)
    app = create_app(settings, run_worker=not args.no_worker, settle_heap=True)
    server = uvicorn.Server(server_config(app, settings, host=args.host, port=args.port))
    sockets = [socket.socket(fileno=args.socket_fd)] if args.socket_fd is not None else None
    with contextlib.suppress(KeyboardInterrupt):
        server.run(sockets=sockets)
    return 0 if server.started else STARTUP_FAILURE


def _supervise(args: argparse.Namespace, settings: Settings, workers: int) -> int:
    from realtime.store.server import redis_server_available

    if settings.redis_url is None and not redis_server_available():
        print(
            f"serve --workers {workers} needs Redis: set AIM_REDIS_URL or install redis-server. "
            "The embedded store lives inside one process, so processes could not share it.",
            file=sys.stderr,
        )
        return 2
    env = supervisor.shared_secrets(
        dict(os.environ), livekit_secret_set=settings.livekit_api_secret is not None
    )
    if settings.auth_hs256_secret_generated:
        _announce_dev_secret(settings, env["AIM_AUTH_HS256_SECRET"])
    try:
        sock = supervisor.listening_socket(args.host, args.port)
    except OSError as exc:
        print(f"cannot listen on {args.host}:{args.port}: {exc.strerror}", file=sys.stderr)
        return STARTUP_FAILURE
    return supervisor.Supervisor(sock, env).run(
        workers, with_worker=not args.no_worker, host=args.host, port=args.port
    )


def _workers(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if not 0 <= value <= 256:
        raise argparse.ArgumentTypeError("must be from 0 (one per CPU) to 256")
    return value


def _port(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a port number: {text!r}") from None
    if not 1 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"must be from 1 to 65535, not {value}")
    return value


def _ttl(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number of seconds: {text!r}") from None
    if not 1 <= value <= TOKEN_TTL_MAX_S:
        raise argparse.ArgumentTypeError(
            f"must be from 1 to {TOKEN_TTL_MAX_S} seconds (30 days), not {value}"
        )
    return value


def _subject(text: str) -> str:
    if not text.strip():
        raise argparse.ArgumentTypeError("must not be empty: the service refuses a blank 'sub'")
    return text


def _scopes(text: str) -> str:
    names = text.split()
    if not names:
        raise argparse.ArgumentTypeError(f"name at least one of: {', '.join(KNOWN_SCOPES)}")
    if PROVIDER_SCOPE in names:
        raise argparse.ArgumentTypeError(
            f"{PROVIDER_SCOPE} tokens are minted by the service, one per session, for the agent "
            "it dispatches (docs/protocol.md, Provider API)"
        )
    unknown = [name for name in names if name not in KNOWN_SCOPES]
    if unknown:
        raise argparse.ArgumentTypeError(
            f"unknown scope {', '.join(map(repr, unknown))}; known: {', '.join(KNOWN_SCOPES)}"
        )
    return " ".join(names)


def _worker(args: argparse.Namespace) -> int:
    import signal

    from realtime.app import run_worker

    settings = _settings()

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        await run_worker(settings, stop)

    asyncio.run(main())
    return 0


def _token(args: argparse.Namespace) -> int:
    from realtime.auth import mint_dev_token

    settings = _settings()
    if settings.auth_hs256_secret_generated or not settings.auth_hs256_secret:
        print(
            "set AIM_AUTH_HS256_SECRET (at least 32 bytes) to the secret the service uses "
            "(scripts/token does so for the service scripts/serve runs)",
            file=sys.stderr,
        )
        return BAD_CONFIGURATION
    if args.ttl > settings.auth_max_token_lifetime_s:
        print(
            f"--ttl {args.ttl} is longer than the service accepts: at most "
            f"{settings.auth_max_token_lifetime_s} s (AIM_AUTH_MAX_TOKEN_LIFETIME_S)",
            file=sys.stderr,
        )
        return BAD_CONFIGURATION
    tenant_claim = settings.auth_tenant_claim
    if tenant_claim is not None and not (args.tenant or "").strip():
        print(
            f"AIM_AUTH_TENANT_CLAIM is {tenant_claim!r}: give the token's tenant with --tenant",
            file=sys.stderr,
        )
        return BAD_CONFIGURATION
    print(
        mint_dev_token(
            settings.auth_hs256_secret,
            subject=args.sub,
            scopes=args.scope.split(),
            ttl_s=args.ttl,
            now=time.time(),
            tenant_claim=tenant_claim,
            tenant=args.tenant if tenant_claim is not None else None,
            issuer=settings.auth_issuer,
            audience=settings.auth_audience,
        )
    )
    return 0


async def _check_async(settings: Settings) -> int:
    """One line per dependency: what it is (no credentials), then ready or why not."""
    from realtime.store.selection import open_store
    from realtime.store.server import RedisUnavailableError

    ok = True
    try:
        store, release = open_store(settings)
    except RedisUnavailableError as exc:
        print(f"redis: NOT READY ({exc})")
        ok = False
    else:
        try:
            reason = await store.probe()
        finally:
            await store.aclose()
            release()
        state = "reachable" if reason is None else f"NOT READY ({reason})"
        print(f"redis: {store.target}: {state}")
        ok = reason is None
    if settings.livekit_url is None:
        print("livekit: not configured (AIM_LIVEKIT_URL unset); media calls will fail")
    else:
        from realtime.livekit_adapter.api import LiveKitGateway, LiveKitRejected, LiveKitUnavailable

        target = f"{without_credentials(settings.livekit_url)} (AIM_LIVEKIT_URL)"
        gateway = LiveKitGateway(settings)
        try:
            await gateway.ping()
            print(f"livekit: {target}: reachable, credentials accepted")
        except (LiveKitUnavailable, LiveKitRejected) as exc:
            print(f"livekit: {target}: NOT READY ({exc})")
            ok = False
        finally:
            await gateway.aclose()
    for route in settings.events_routes:
        print(f"events: {route}")
    return 0 if ok else 1


def _check(args: argparse.Namespace) -> int:
    settings = _settings()
    print("configuration: valid")
    return asyncio.run(_check_async(settings))


def main(argv: Sequence[str] | None = None) -> int:
    handler = logging.StreamHandler()
    handler.setFormatter(JsonLogFormatter())
    logging.basicConfig(level=logging.INFO, handlers=[handler])
    args = build_parser().parse_args(argv)
    result: int = args.run(args)
    return result


def build_parser() -> argparse.ArgumentParser:
    """Every command and option, each with its help text and default."""
    helpful = argparse.ArgumentDefaultsHelpFormatter
    parser = argparse.ArgumentParser(
        prog="aim-realtime",
        description="The AIM realtime session orchestrator. Configuration comes from AIM_* "
        "environment variables (and a .env file), listed in docs/configuration.md. Exit "
        "codes: 0 done, 1 not ready (check) or failed, 2 bad configuration or arguments.",
        formatter_class=helpful,
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    serve = commands.add_parser(
        "serve",
        help="run the HTTP service",
        description="Serve /a2a, /provider, /livekit/webhook, the Agent Card, probes, /metrics "
        "and the operator console, with the worker loops (unless --no-worker).",
        formatter_class=helpful,
    )
    serve.add_argument("--host", default="127.0.0.1", help="address to listen on")
    serve.add_argument("--port", type=_port, default=8080, help="port to listen on")
    serve.add_argument(
        "--no-worker",
        action="store_true",
        help="leave effect retries, timers and the reconciler to `aim-realtime worker`",
    )
    serve.add_argument(
        "--workers",
        type=_workers,
        default=1,
        help="HTTP processes on this machine (0: one per CPU); with more than one, one extra "
        "process retries effects and fires timers for all of them",
    )
    serve.add_argument(
        "--socket-fd",
        type=int,
        default=None,
        metavar="FD",
        help="serve on this inherited listening socket instead of binding one (what --workers "
        "hands to its HTTP processes)",
    )
    serve.set_defaults(run=_serve)
    worker = commands.add_parser(
        "worker",
        help="retry effects, fire timers and reconcile LiveKit (no HTTP)",
        description="The background loops without HTTP: outbox retries, durable timers and the "
        "reconciler. Run one or more beside `serve --no-worker`.",
        formatter_class=helpful,
    )
    worker.set_defaults(run=_worker)
    token = commands.add_parser(
        "token",
        help="print a development bearer token",
        description="Sign a bearer token with AIM_AUTH_HS256_SECRET (with the issuer, audience "
        "and tenant claim the settings require) and print it.",
        formatter_class=helpful,
    )
    token.add_argument(
        "--sub", type=_subject, required=True, help="the subject (principal) of the token"
    )
    token.add_argument(
        "--scope",
        type=_scopes,
        default=ALL_SCOPES,
        help=f"space-separated scopes, of: {', '.join(KNOWN_SCOPES)} ({OPERATOR_SCOPE} opens "
        "the operator API and console, /ops)",
    )
    token.add_argument(
        "--ttl",
        type=_ttl,
        default=3600,
        help="lifetime in seconds, at most AIM_AUTH_MAX_TOKEN_LIFETIME_S (24 h unless set)",
    )
    token.add_argument(
        "--tenant",
        default=None,
        help="the tenant, when AIM_AUTH_TENANT_CLAIM names a claim (required then)",
    )
    token.set_defaults(run=_token)
    check = commands.add_parser(
        "check",
        help="validate configuration and reach dependencies",
        description="Validate the configuration, then reach Redis and LiveKit once each and say "
        "where session events go. Exit 0: ready; 1: a dependency is not ready; 2: the "
        "configuration is invalid.",
        formatter_class=helpful,
    )
    check.set_defaults(run=_check)
    commands.add_parser(
        "dev-secret",
        help="print the development token secret",
        description="Print the development token secret kept in AIM_DATA_DIR/dev-secret, made "
        "on first use, readable by the owner only.",
        formatter_class=helpful,
    ).set_defaults(run=_dev_secret)
    livekit_dev = commands.add_parser(
        "livekit-dev",
        help="a local LiveKit for development, when no LiveKit server is at hand",
        description=LIVEKIT_DEV_DESCRIPTION,
        formatter_class=helpful,
    )
    add_livekit_dev_arguments(livekit_dev)
    livekit_dev.set_defaults(run=run_livekit_dev)
    return parser


if __name__ == "__main__":
    sys.exit(main())
