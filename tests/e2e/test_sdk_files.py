"""The browser client library served by the service: `GET /sdk/<module>.js` (the ES modules of
the npm package in clients/js, `aim-realtime.js` its entry) and `/sdk/<module>.d.ts` (their
types), the package's very bytes, public, cacheable (a strong ETag, 304), HEAD, and CORS as for
the API (a module script from another origin needs it)."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import zipfile
from pathlib import Path

import pytest

from tests.e2e.realtime_helpers import plain_service

pytestmark = pytest.mark.e2e

APP = "https://app.example.com"
PACKAGE = Path(__file__).resolve().parents[2] / "clients" / "js"
JS = "text/javascript; charset=utf-8"
TS = "application/typescript; charset=utf-8"
FILES = {
    **{f"/sdk/{f.name}": (f, JS) for f in sorted((PACKAGE / "src").glob("*.js"))},
    **{f"/sdk/{f.name}": (f, TS) for f in sorted((PACKAGE / "types").glob("*.d.ts"))},
}


def test_every_module_of_the_package_and_its_types_are_served():
    names = {path.removeprefix("/sdk/") for path in FILES}
    for module in ("aim-realtime", "client", "session", "errors", "events", "wire", "sse"):
        assert {f"{module}.js", f"{module}.d.ts"} <= names, module
    assert {"livekit.js", "livekit.d.ts"} <= names


async def test_the_files_are_served_as_packaged_without_a_token(store):
    async with plain_service(store) as client:
        for path, (source, media_type) in FILES.items():
            answer = await client.get(path)
            assert answer.status_code == 200, path
            assert answer.headers["content-type"] == media_type
            assert answer.content == source.read_bytes()
            assert answer.headers["content-length"] == str(len(answer.content))
            etag = answer.headers["etag"]
            assert etag == '"' + hashlib.sha256(answer.content).hexdigest()[:32] + '"'  # strong
            assert answer.headers["cache-control"] == "public, max-age=300"
            assert answer.headers["x-content-type-options"] == "nosniff"
            assert "access-control-allow-origin" not in answer.headers
        js = (await client.get("/sdk/aim-realtime.js")).text
        assert 'export {AimClient} from "./client.js";' in js
        for missing in ("/sdk/other.js", "/sdk/package.json", "/sdk/../pyproject.toml"):
            assert (await client.get(missing)).status_code == 404, missing


async def test_a_current_copy_is_answered_304_and_head_has_no_body(store):
    async with plain_service(store) as client:
        first = await client.get("/sdk/aim-realtime.js")
        etag = first.headers["etag"]
        for sent in (etag, f"W/{etag}", f'"other", {etag}', "*"):
            again = await client.get("/sdk/aim-realtime.js", headers={"If-None-Match": sent})
            assert again.status_code == 304, sent
            assert again.content == b""
            assert again.headers["etag"] == etag
            assert again.headers["cache-control"] == "public, max-age=300"
        stale = await client.get("/sdk/aim-realtime.js", headers={"If-None-Match": '"old"'})
        assert (stale.status_code, stale.content) == (200, first.content)
        # the types have a tag of their own
        types = await client.get("/sdk/aim-realtime.d.ts", headers={"If-None-Match": etag})
        assert types.status_code == 200

        head = await client.head("/sdk/aim-realtime.js")
        assert head.status_code == 200
        assert head.content == b""
        assert head.headers["content-length"] == str(len(first.content))
        assert head.headers["content-type"] == "text/javascript; charset=utf-8"
        assert head.headers["etag"] == etag
        assert (await client.post("/sdk/aim-realtime.js")).status_code == 405


async def test_a_listed_origin_may_load_the_module(store):
    async with plain_service(store, cors_origins=(APP,)) as client:
        for path in FILES:
            answer = await client.get(path, headers={"Origin": APP})
            assert answer.status_code == 200
            assert answer.headers["access-control-allow-origin"] == APP
            assert "access-control-allow-credentials" not in answer.headers
            assert "origin" in answer.headers["vary"].lower()
            etag = answer.headers["etag"]
            current = await client.get(path, headers={"Origin": APP, "If-None-Match": etag})
            assert current.status_code == 304
            assert current.headers["access-control-allow-origin"] == APP
            head = await client.head(path, headers={"Origin": APP})
            assert head.headers["access-control-allow-origin"] == APP
        other = await client.get("/sdk/aim-realtime.js", headers={"Origin": "https://evil.example"})
        assert other.status_code == 200  # public bytes, but a browser there may not run them
        assert "access-control-allow-origin" not in other.headers


async def test_without_the_setting_no_other_origin_may_load_it(store):
    async with plain_service(store) as client:
        answer = await client.get("/sdk/aim-realtime.js", headers={"Origin": APP})
        assert answer.status_code == 200
        assert "access-control-allow-origin" not in answer.headers


def test_the_service_s_wheel_carries_the_package_s_files(tmp_path):
    """realtime/static/sdk and types are links to clients/js in the repository: the wheel (and
    the image built from it) holds copies of the very files."""
    uv = shutil.which("uv")
    if uv is None:
        if os.environ.get("CI"):
            pytest.fail("uv is needed to build the service's wheel (scripts/install installs it)")
        pytest.skip("uv is not installed")
    root = PACKAGE.parents[1]
    subprocess.run(
        [uv, "build", "--wheel", "--offline", "--out-dir", str(tmp_path), str(root)],
        check=True, capture_output=True, timeout=120,
    )  # fmt: skip
    [wheel] = tmp_path.glob("aim_realtime-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        packed = {
            name: archive.read(name)
            for name in archive.namelist()
            if name.startswith("realtime/static/")
        }
    expected = {
        f"realtime/static/{'sdk' if media == JS else 'types'}/{source.name}": source.read_bytes()
        for source, media in FILES.values()
    }
    assert packed == expected
