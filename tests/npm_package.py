"""The browser library as its users get it: the tarball `npm pack` makes of clients/js,
unpacked. Without npm a test that needs it is skipped, except in CI (`CI` set), where it fails
(.ci/run installs Node.js)."""

from __future__ import annotations

import os
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "clients" / "js"


def tool(name: str) -> str:
    """node, npm or npx, or skip (fail in CI)."""
    found = shutil.which(name)
    if found:
        return found
    reason = f"the browser library's package needs {name} (Node.js 18 or newer)"
    if os.environ.get("CI"):
        pytest.fail(reason)
    pytest.skip(reason)


def pack(destination: Path) -> Path:
    """`npm pack` of clients/js into `destination`: the tarball (its types are checked by
    scripts/check, so its prepack script is not run again here)."""
    destination.mkdir(parents=True, exist_ok=True)
    made = subprocess.run(
        [tool("npm"), "pack", "--ignore-scripts", "--pack-destination", str(destination)],
        cwd=PACKAGE, capture_output=True, text=True, check=True, timeout=60,
    )  # fmt: skip
    return destination / made.stdout.strip().splitlines()[-1]


def unpacked(tarball: Path, destination: Path) -> Path:
    """The tarball's files under `destination`: its `package/` folder, as npm installs it."""
    with tarfile.open(tarball) as archive:
        archive.extractall(destination, filter="data")
    return destination / "package"
