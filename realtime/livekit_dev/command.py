"""`aim-realtime livekit-dev`: the local LiveKit for development (`standin.LiveKitStandin`) run
on its own, as `livekit-server --dev` would be: its settings for the service printed, webhooks
sent to the service, the simulated agent worker on, until Ctrl-C or SIGTERM
(docs/local-livekit.md)."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ipaddress
import shlex
import signal
import sys
import warnings
from typing import Any

from realtime.livekit_dev.standin import LiveKitStandin

# the placeholder pair and the port of `livekit-server --dev`, so the printed settings match it
DEV_API_KEY, DEV_API_SECRET, DEV_PORT = "devkey", "secret", 7880
DEV_WEBHOOK_URL = "http://127.0.0.1:8080/livekit/webhook"  # scripts/serve's
STOP_HINT = "Ctrl-C or SIGTERM stops it."


def service_settings(standin: LiveKitStandin) -> dict[str, str]:
    """The service's LiveKit settings for a running stand-in (the webhook signers default to
    the API key pair, which is the pair the stand-in signs its webhooks with)."""
    host = standin.host or "127.0.0.1"
    with contextlib.suppress(ValueError):  # a name, not an address
        if ipaddress.ip_address(host).is_unspecified:  # everywhere: loopback reaches it too
            host = "127.0.0.1"
    url = f"ws://[{host}]:{standin.port}" if ":" in host else f"ws://{host}:{standin.port}"
    return {
        "AIM_LIVEKIT_URL": url,
        "AIM_LIVEKIT_PUBLIC_URL": url,
        "AIM_LIVEKIT_API_KEY": standin.api_key,
        "AIM_LIVEKIT_API_SECRET": standin.api_secret,
    }


def _port(text: str) -> int:
    try:
        port = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a port number: {text!r}") from None
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError("must be from 0 (any free port) to 65535")
    return port


DESCRIPTION = (
    "A local LiveKit for development, to run the service without a LiveKit server: LiveKit's "
    "server API (rooms, participants, agent dispatch, kept in memory), its signed webhooks sent "
    "to the service, a simulated agent worker, and a connect a client makes with its join token "
    "(POST /dev/connect). No media. It prints the service's AIM_LIVEKIT_* settings and runs "
    "until Ctrl-C or SIGTERM."
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of `aim-realtime livekit-dev` (the CLI's subcommand parser)."""
    parser.add_argument(
        "--host", default="127.0.0.1", help="address to listen on (default: %(default)s)"
    )
    parser.add_argument(
        "--port",
        type=_port,
        default=DEV_PORT,
        help="port to listen on, 0 for any free one (default: %(default)s, as livekit-server)",
    )
    parser.add_argument(
        "--api-key",
        default=DEV_API_KEY,
        help="the API key it accepts (default: %(default)s, as livekit-server --dev)",
    )
    parser.add_argument(
        "--api-secret",
        default=DEV_API_SECRET,
        help="that key's secret (default: %(default)s, as livekit-server --dev)",
    )
    parser.add_argument(
        "--webhook-url",
        default=DEV_WEBHOOK_URL,
        help="send LiveKit's webhooks there, signed with the API key pair (default: "
        "%(default)s, the service of scripts/serve); an empty value sends none",
    )
    parser.add_argument(
        "--agent-jobs",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="a simulated agent worker takes every dispatch that names an agent: its job "
        "starts and its agent joins, no media (default: on; --no-agent-jobs: dispatches wait "
        "for ever, as with no worker registered)",
    )
    parser.add_argument(
        "--job-start-delay",
        type=float,
        default=0.0,
        metavar="S",
        help="seconds the simulated worker takes to start a job (default: %(default)s)",
    )


def _say(text: str, stream: Any = None) -> None:
    stream = stream or sys.stdout
    stream.write(text + "\n")
    stream.flush()


async def _serve(args: argparse.Namespace) -> int:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    standin = LiveKitStandin(
        args.api_key,
        args.api_secret,
        webhook_url=args.webhook_url or None,
        auto_jobs=args.agent_jobs,
        agents_speak=args.agent_jobs,
        job_start_delay=args.job_start_delay,
    )
    standin.host, standin.port = args.host, args.port
    try:
        await standin.start()
    except OSError as exc:
        await standin.stop()
        _say(f"cannot listen on {args.host}:{args.port}: {exc.strerror or exc}", sys.stderr)
        return 1
    try:
        settings = service_settings(standin)
        _say(
            f"Local LiveKit for development on {settings['AIM_LIVEKIT_URL']}: not a LiveKit "
            "server. It answers LiveKit's server API (rooms, participants, agent dispatch) from "
            f"memory; {_what_it_does(args)} A client joins with its join token: POST "
            f'{standin.url}/dev/connect {{"token": …}}.'
        )
        _say("Settings for the service (paste them into the shell that runs scripts/serve):")
        for name, value in settings.items():
            _say(f"export {name}={shlex.quote(value)}")
        _say(STOP_HINT)
        await stop.wait()
    finally:
        await standin.stop()
    _say("Local LiveKit stopped.")
    return 0


def _what_it_does(args: argparse.Namespace) -> str:
    agents = (
        "no media; a simulated agent worker takes every dispatch (its job starts after "
        f"{args.job_start_delay:g} s and its agent joins, no real agent)"
        if args.agent_jobs
        else "no media, no real agents (dispatches are recorded, no agent joins)"
    )
    hooks = (
        f"webhooks are sent to {args.webhook_url}" if args.webhook_url else "webhooks are not sent"
    )
    return f"{agents}, and {hooks}."


def run(args: argparse.Namespace) -> int:
    """Serve until Ctrl-C or SIGTERM (the CLI's `livekit-dev`); exit code."""
    from jwt.warnings import InsecureKeyLengthWarning

    # livekit-server --dev's short secret is the default on purpose; the service's side warns
    warnings.filterwarnings("ignore", category=InsecureKeyLengthWarning)
    return asyncio.run(_serve(args))
