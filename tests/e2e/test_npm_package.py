"""The browser library's npm package as an app developer installs it: the tarball `npm pack`
makes (its files, its version), installed into an app with npm, imported by name in Node, and
an app in TypeScript type-checked against the declarations it ships. The journey in headless
Chromium from the tarball's code is in test_examples.py."""

from __future__ import annotations

import json
import subprocess
import tomllib
from pathlib import Path

import pytest

from tests.npm_package import PACKAGE, pack, tool, unpacked

pytestmark = pytest.mark.e2e

ROOT = PACKAGE.parents[1]

APP_TS = """
import {AimClient, Events, SupersededError} from "aim-realtime-client";
import type {AgentEvent, JoinResult, Session, StateEvent} from "aim-realtime-client";
import {RoomBinding} from "aim-realtime-client/livekit";
import type {LiveKitRoom} from "aim-realtime-client/livekit";

export async function start(room: LiveKitRoom): Promise<JoinResult> {
  const client = new AimClient({baseUrl: "https://aim.example", token: async () => "t"});
  const session: Session = await client.createSession({endpointKey: "phone",
                                                       signal: AbortSignal.timeout(5000)});
  session.on(Events.STATE, (event: StateEvent) => console.log(event.state, event.epoch));
  session.once("agent", (event: AgentEvent) => console.log(event.generation));
  // @ts-expect-error: no such event
  session.on("statechange", () => {});
  // @ts-expect-error: a state event has no `generation`
  session.on(Events.STATE, (event) => event.generation);
  // @ts-expect-error: Session is a type only: sessions come from the client
  new Session();
  for await (const event of session.events({updates: true})) {
    if (event.name === "requirement") await session.confirm(event.operationId, "approve");
  }
  try {
    await session.sendText("hello", {signal: AbortSignal.timeout(1000)});
  } catch (error) {
    if (error instanceof SupersededError) console.log(error.currentEpoch);
  }
  const binding = new RoomBinding(session, room, {refreshBeforeMs: 30_000});
  return binding.connect();
}
"""


@pytest.fixture(scope="module")
def tarball(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return pack(tmp_path_factory.mktemp("npm"))


@pytest.fixture(scope="module")
def app(tarball: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An app with the package installed from the tarball (offline: it depends on nothing)."""
    where = tmp_path_factory.mktemp("app")
    (where / "package.json").write_text('{"name": "app", "private": true, "type": "module"}')
    subprocess.run(
        [tool("npm"), "install", "--offline", "--no-audit", "--no-fund", str(tarball)],
        cwd=where, capture_output=True, text=True, check=True, timeout=120,
    )  # fmt: skip
    return where


def test_the_tarball_holds_the_modules_their_types_and_nothing_else(tarball, tmp_path):
    package = unpacked(tarball, tmp_path)
    shipped = sorted(str(p.relative_to(package)) for p in package.rglob("*") if p.is_file())
    sources = sorted(f"src/{p.name}" for p in (PACKAGE / "src").glob("*.js"))
    types = sorted(f"types/{p.name}" for p in (PACKAGE / "types").glob("*.d.ts"))
    assert shipped == sorted(["README.md", "package.json", *sources, *types])
    for name in (*sources, *types):  # the very files the service serves at /sdk/
        assert (package / name).read_bytes() == (PACKAGE / name).read_bytes(), name


def test_the_package_says_what_it_is_and_its_version_is_the_service_s(tarball, tmp_path):
    manifest = json.loads((unpacked(tarball, tmp_path) / "package.json").read_text())
    service = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    client = tomllib.loads((ROOT / "clients/python/pyproject.toml").read_text())
    assert manifest["name"] == "aim-realtime-client"
    assert manifest["version"] == service == client["project"]["version"]
    assert tarball.name == f"aim-realtime-client-{service}.tgz"
    assert manifest["type"] == "module"
    assert manifest["exports"]["."] == {
        "types": "./types/aim-realtime.d.ts",
        "default": "./src/aim-realtime.js",
    }
    assert manifest["exports"]["./livekit"]["default"] == "./src/livekit.js"
    assert manifest.get("dependencies", {}) == {}
    assert manifest["peerDependenciesMeta"]["livekit-client"] == {"optional": True}


def test_node_imports_the_installed_package_by_name_and_nothing_private(app):
    script = (
        "import * as aim from 'aim-realtime-client';"
        "import {RoomBinding} from 'aim-realtime-client/livekit';"
        "console.log(JSON.stringify([Object.keys(aim).sort(), typeof RoomBinding,"
        " aim.Events.SUPERSEDED]));"
    )
    ran = subprocess.run(
        [tool("node"), "--input-type=module", "-e", script],
        cwd=app, capture_output=True, text=True, check=True, timeout=30,
    )  # fmt: skip
    names, binding, superseded = json.loads(ran.stdout)
    assert {"AimClient", "Events", "SupersededError"} <= set(names)
    assert not {"Session", "Wire", "Emitter"} & set(names)  # made by the client only
    assert (binding, superseded) == ("function", "superseded")
    private = subprocess.run(
        [tool("node"), "--input-type=module", "-e", "import 'aim-realtime-client/src/wire.js'"],
        cwd=app, capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    assert private.returncode != 0
    assert "ERR_PACKAGE_PATH_NOT_EXPORTED" in private.stderr


def test_a_typescript_app_is_checked_against_the_declarations_the_package_ships(app):
    (app / "app.ts").write_text(APP_TS)
    (app / "tsconfig.json").write_text(json.dumps({"compilerOptions": {
        "target": "ES2022", "module": "ES2022", "moduleResolution": "bundler", "strict": True,
        "noEmit": True, "lib": ["ES2022", "DOM", "DOM.Iterable", "ESNext.AsyncIterable"],
        "types": []}, "files": ["app.ts"]}))  # fmt: skip
    compiler = PACKAGE / "node_modules" / "typescript" / "bin" / "tsc"
    if not compiler.exists():
        tool("the TypeScript compiler in clients/js/node_modules (scripts/install)")
    checked = subprocess.run(
        [tool("node"), str(compiler), "-p", "tsconfig.json"],
        cwd=app, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert checked.returncode == 0, checked.stdout
    # and a mistake in the app is caught: the types are not `any`
    (app / "app.ts").write_text(APP_TS + '\nexport const wrong: "ended" = Events.STATE;\n')
    caught = subprocess.run(
        [tool("node"), str(compiler), "-p", "tsconfig.json"],
        cwd=app, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert caught.returncode != 0
    assert """Type '"state"' is not assignable to type '"ended"'""" in caught.stdout
