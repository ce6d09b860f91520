"""A JWKS endpoint on 127.0.0.1 for the authentication tests: a `ThreadingHTTPServer` in a
thread serving a key set the test changes between calls, counting its requests, that can be
made to fail (503), to hold each request until released, or to answer with a redirect."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from jwt.algorithms import ECAlgorithm, RSAAlgorithm

from realtime.auth import Authenticator
from realtime.settings import Settings

NOW = 1_800_000_000.0
ISSUER = "https://issuer.example"
AUDIENCE = "aim-realtime"

PrivateKey = rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey


class Clock:
    """Injectable clock the tests move by hand."""

    def __init__(self, t: float = NOW) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def rsa_key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


def ec_key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def jwk(key: PrivateKey, kid: str) -> dict[str, Any]:
    """The public JWK of `key` under `kid`."""
    if isinstance(key, rsa.RSAPrivateKey):
        public = RSAAlgorithm.to_jwk(key.public_key(), as_dict=True)
    else:
        public = ECAlgorithm.to_jwk(key.public_key(), as_dict=True)
    return {**public, "kid": kid, "use": "sig"}


def signed(key: PrivateKey, kid: str, **claims: Any) -> str:
    """`Bearer <token>` signed with `key` (RS256 or ES256 by its type) naming `kid`."""
    alg = "RS256" if isinstance(key, rsa.RSAPrivateKey) else "ES256"
    payload = {
        "sub": "alice",
        "iss": ISSUER,
        "aud": AUDIENCE,
        "scope": "a2a.invoke",
        "iat": int(NOW),
        "exp": int(NOW) + 86_400,
        **claims,
    }
    return "Bearer " + jwt.encode(payload, key, algorithm=alg, headers={"kid": kid})


class JwksServer:
    """The endpoint's state, shared with its handler threads: `keys` served, `requests` seen,
    `down` to answer 503, `gate` cleared to hold requests, `arrived` set when one comes in,
    `redirect` (status, location) to answer with that redirect instead of the keys."""

    def __init__(self, keys: list[dict[str, Any]]) -> None:
        self.keys = keys
        self.requests = 0
        self.down = False  # answer 503
        self.redirect: tuple[int, str] | None = None
        self.gate = threading.Event()  # requests wait for it
        self.gate.set()
        self.arrived = threading.Event()  # set by each request as it comes in
        self._lock = threading.Lock()
        self._http = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._http.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._http.server_address[1]}/jwks"

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                with server._lock:
                    server.requests += 1
                server.arrived.set()
                server.gate.wait(10)
                if server.down:
                    self.send_error(503)
                    return
                if server.redirect is not None:
                    status, location = server.redirect
                    self.send_response(status)
                    self.send_header("Location", location)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                body = json.dumps({"keys": server.keys}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        return Handler

    @contextmanager
    def running(self) -> Iterator[JwksServer]:
        thread = threading.Thread(target=self._http.serve_forever, daemon=True)
        thread.start()
        try:
            yield self
        finally:
            self.gate.set()
            self._http.shutdown()
            self._http.server_close()
            thread.join(5)


@contextmanager
def jwks_server(keys: list[dict[str, Any]]) -> Iterator[JwksServer]:
    with JwksServer(keys).running() as server:
        yield server


def jwks_settings(server: JwksServer, **settings: Any) -> Settings:
    """The service's settings of JWKS mode: `server`'s key set, ISSUER and AUDIENCE."""
    return Settings(
        auth_jwks_url=server.url, auth_issuer=ISSUER, auth_audience=AUDIENCE, **settings
    )


def jwks_authenticator(
    server: JwksServer, clock: Clock | None = None, **settings: Any
) -> Authenticator:
    """An authenticator of `server`'s key set (`jwks_settings`), on `clock` (NOW unless given)."""
    return Authenticator(jwks_settings(server, **settings), now=clock or Clock())


class CountingDecode:
    """Counts signature verifications (calls of jwt.decode) made by the authenticator."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.calls = 0
        real = jwt.decode

        def decode(*args: Any, **kwargs: Any) -> Any:
            self.calls += 1
            return real(*args, **kwargs)

        monkeypatch.setattr(jwt, "decode", decode)
