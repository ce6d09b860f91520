"""The production key set travels only where nobody on the path can change it: `AIM_AUTH_JWKS_URL`
is https (http only to this machine), refused at start-up otherwise, and its fetch never follows
a redirect. Run as an operator runs the service: real processes, a real JWKS on loopback."""

from __future__ import annotations

import time
from pathlib import Path

import httpx
import pytest

from realtime.auth import Authenticator
from realtime.settings import Settings
from tests.cli_processes import call_cli, needs, serving
from tests.jwks_server import AUDIENCE, ISSUER, Clock, jwk, jwks_server, rsa_key, signed

pytestmark = pytest.mark.e2e

ISSUER_SETTINGS = {"AIM_AUTH_ISSUER": ISSUER, "AIM_AUTH_AUDIENCE": AUDIENCE}
LIST = b'{"jsonrpc":"2.0","id":1,"method":"ListTasks","params":{}}'


@pytest.mark.parametrize("command", ["check", "serve", "worker"])
def test_an_http_jwks_url_to_another_host_is_refused_at_start_up_in_one_line(
    tmp_path: Path, command: str
) -> None:
    result = call_cli(
        command,
        cwd=tmp_path,
        AIM_REDIS_URL="redis://127.0.0.1:9/0",  # never reached: the configuration is refused
        AIM_AUTH_JWKS_URL="http://idp.example.com/.well-known/jwks.json",
        **ISSUER_SETTINGS,
    )

    assert result.returncode == 2, result.stdout + result.stderr
    lines = [line for line in result.stderr.splitlines() if "AIM_AUTH_JWKS_URL" in line]
    assert lines == [
        "  AIM_AUTH_JWKS_URL is an http:// URL to a host other than this machine: use https:// "
        "(http:// is accepted only to this machine, for development)"
    ], result.stderr
    assert "configuration: valid" not in result.stdout
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize(
    "url", ["https://idp.example.com/.well-known/jwks.json", "http://127.0.0.1:9/jwks.json"]
)
def test_an_https_or_loopback_jwks_url_is_valid_configuration(
    tmp_path: Path, url: str, redis_url: str | None
) -> None:
    result = call_cli(
        "check", cwd=tmp_path, AIM_REDIS_URL=needs(redis_url), AIM_AUTH_JWKS_URL=url,
        **ISSUER_SETTINGS,
    )  # fmt: skip

    assert result.returncode == 0, result.stdout + result.stderr
    assert "configuration: valid" in result.stdout


@pytest.mark.slow
async def test_a_jwks_url_that_redirects_gives_the_service_no_key_from_the_target(
    tmp_path: Path, redis_url: str | None
) -> None:
    forged = rsa_key()  # whoever answers the redirect holds this key and signs with it
    with jwks_server([jwk(forged, "k")]) as target, jwks_server([]) as configured:
        # the redirect target is a working key set: the forged token verifies against it
        direct = Authenticator(
            Settings(auth_jwks_url=target.url, auth_issuer=ISSUER, auth_audience=AUDIENCE),
            now=Clock(),
        )
        assert (await direct.authenticate(signed(forged, "k"))).subject == "alice"
        await direct.aclose()
        target.requests = 0

        for status in (302, 307):
            configured.redirect = (status, target.url)
            with serving(
                tmp_path,
                AIM_REDIS_URL=needs(redis_url),
                AIM_AUTH_JWKS_URL=configured.url,
                **ISSUER_SETTINGS,
            ) as service:
                service.wait_until_ready()
                async with httpx.AsyncClient(base_url=service.base_url, timeout=10) as http:
                    now = int(time.time())  # `signed` dates tokens at a fixed instant
                    bearer = signed(forged, "k", iat=now, exp=now + 600)
                    answer = await http.post(
                        "/a2a",
                        content=LIST,
                        headers={"A2A-Version": "1.0", "Authorization": bearer},
                    )
                service.terminate()
            assert answer.status_code == 401, (status, answer.text)
            assert configured.requests >= 1
            assert target.requests == 0, f"a {status} was followed"
            assert f"the JWKS URL answered a redirect ({status})" in service.output()
            configured.requests = 0
