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

from realtime import supervisor
from realtime.settings import Settings, SettingsError
from realtime.telemetry import JsonLogFormatter

ALL_SCOPES = "a2a.invoke a2a.tasks.read a2a.tasks.cancel"
STARTUP_FAILURE = supervisor.STARTUP_FAILURE


def _load_dotenv(path: str = ".env") -> None:
    """Variables from `.env` fill in what the environment does not already set."""
    if not os.path.isfile(path):
        return
    with open(path, encoding="utf-8") as handle:
        for line in handle:
            name, sep, value = line.strip().partition("=")
            if sep and name and not name.startswith("#"):
                os.environ.setdefault(name.strip(), value.strip().strip('"').strip("'"))


def _settings() -> Settings:
    _load_dotenv()
    try:
        return Settings.from_env(os.environ)
    except SettingsError as exc:
        print(exc, file=sys.stderr)
        raise SystemExit(2) from None


def _announce_dev_secret(secret: str) -> None:
    from realtime.auth import mint_dev_token

    token = mint_dev_token(
        secret, subject="developer", scopes=ALL_SCOPES.split(), ttl_s=3600, now=time.time()
    )
    print(
        "AIM_AUTH_HS256_SECRET is not set: this service signs development tokens with a "
        "random secret.\nA development token (sub=developer, all scopes, 1 h):\n"
        f"  {token}\nSet AIM_AUTH_HS256_SECRET to keep tokens valid across restarts.",
        file=sys.stderr,
    )


def _serve(args: argparse.Namespace) -> int:
    settings = _settings()
    workers = args.workers or supervisor.cpu_count()
    if workers > 1 and args.socket_fd is None:
        return _supervise(args, settings, workers)
    import uvicorn  # only the serve command needs the server

    from realtime.app import create_app
    from realtime.http_server import server_config

    if settings.auth_hs256_secret_generated and settings.auth_hs256_secret:
        _announce_dev_secret(settings.auth_hs256_secret)
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
        _announce_dev_secret(env["AIM_AUTH_HS256_SECRET"])
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
            "set AIM_AUTH_HS256_SECRET (at least 32 bytes) to the secret the service uses",
            file=sys.stderr,
        )
        return 2
    print(
        mint_dev_token(
            settings.auth_hs256_secret,
            subject=args.sub,
            scopes=args.scope.split(),
            ttl_s=args.ttl,
            now=time.time(),
        )
    )
    return 0


async def _check_async(settings: Settings) -> int:
    from realtime.store.selection import open_store

    ok = True
    store, release = open_store(settings)
    try:
        if await store.ping():
            print("redis: reachable" + (" (embedded store)" if store.embedded else ""))
        else:
            print("redis: UNREACHABLE")
            ok = False
    finally:
        await store.aclose()
        release()
    if settings.livekit_url is None:
        print("livekit: not configured (AIM_LIVEKIT_URL unset); media calls will fail")
    else:
        from realtime.livekit_adapter.api import LiveKitGateway, LiveKitRejected, LiveKitUnavailable

        gateway = LiveKitGateway(settings)
        try:
            await gateway.ping()
            print("livekit: reachable, credentials accepted")
        except (LiveKitUnavailable, LiveKitRejected) as exc:
            print(f"livekit: NOT READY ({exc})")
            ok = False
        finally:
            await gateway.aclose()
    return 0 if ok else 1


def _check(args: argparse.Namespace) -> int:
    settings = _settings()
    print("configuration: valid")
    return asyncio.run(_check_async(settings))


def main(argv: Sequence[str] | None = None) -> int:
    handler = logging.StreamHandler()
    handler.setFormatter(JsonLogFormatter())
    logging.basicConfig(level=logging.INFO, handlers=[handler])
    parser = argparse.ArgumentParser(prog="aim-realtime")
    commands = parser.add_subparsers(dest="command", required=True)
    serve = commands.add_parser("serve", help="run the HTTP service")
    serve.add_argument(
        "--host", default="127.0.0.1", help="address to listen on (default: %(default)s)"
    )
    serve.add_argument(
        "--port", type=int, default=8080, help="port to listen on (default: %(default)s)"
    )
    serve.add_argument(
        "--no-worker", action="store_true", help="leave effect retries and timers to workers"
    )
    serve.add_argument(
        "--workers",
        type=_workers,
        default=1,
        help="HTTP processes on this machine (0: one per CPU; default: %(default)s); with more "
        "than one, one extra process retries effects and fires timers for all of them",
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
    worker = commands.add_parser("worker", help="retry effects and fire timers (no HTTP)")
    worker.set_defaults(run=_worker)
    token = commands.add_parser("token", help="print a development bearer token")
    token.add_argument("--sub", required=True, help="the subject (principal) of the token")
    token.add_argument(
        "--scope",
        default=ALL_SCOPES,
        help="space-separated scopes (default: the three client scopes; aim.operator opens the "
        "operations API and console, /ops)",
    )
    token.add_argument(
        "--ttl", type=int, default=3600, help="lifetime in seconds (default: %(default)s)"
    )
    token.set_defaults(run=_token)
    check = commands.add_parser("check", help="validate configuration and reach dependencies")
    check.set_defaults(run=_check)
    args = parser.parse_args(argv)
    result: int = args.run(args)
    return result


if __name__ == "__main__":
    sys.exit(main())
