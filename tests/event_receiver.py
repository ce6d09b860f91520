"""A receiver of session events, as an app's backend runs one: its own process, verifying every
delivery with the `standardwebhooks` package.

    python tests/event_receiver.py --secret whsec_… --log FILE --control FILE

It prints `listening <port>` once it listens on 127.0.0.1. Every POST is appended to `--log` as
one JSON line: `{webhookId, timestamp, verified, complete, answered, event}` (`event` the parsed
body when the signature verified). What it answers comes from the `--control` file, read per
request: `{"status": 200, "delay_s": 0}` (missing or unreadable: 200 at once).
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from standardwebhooks import Webhook, WebhookVerificationError

MAX_BODY = 64 * 1024


def _control(path: Path) -> dict[str, Any]:
    try:
        value = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Receive and verify AIM session events.")
    parser.add_argument("--secret", required=True, help="the whsec_ secret events are signed with")
    parser.add_argument("--log", required=True, type=Path, help="append one JSON line per POST")
    parser.add_argument("--control", required=True, type=Path, help="JSON: status and delay_s")
    options = parser.parse_args(argv)
    webhook = Webhook(options.secret)
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            size = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(min(size, MAX_BODY))
            headers = {name.lower(): value for name, value in self.headers.items()}
            try:
                event = webhook.verify(body, headers)
                verified = True
            except WebhookVerificationError:
                event, verified = None, False
            control = _control(options.control)
            time.sleep(float(control.get("delay_s", 0)))
            status = int(control.get("status", 200)) if verified else 401
            line = {
                "webhookId": headers.get("webhook-id"),
                "timestamp": headers.get("webhook-timestamp"),
                "verified": verified,
                # False when the sender was gone before its whole body came (a killed worker)
                "complete": len(body) == min(size, MAX_BODY),
                "answered": status,
                "event": event,
            }
            with lock, options.log.open("a") as log:
                log.write(json.dumps(line) + "\n")
            self.send_response(status)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    sys.stdout.write(f"listening {server.server_address[1]}\n")
    sys.stdout.flush()
    server.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())
