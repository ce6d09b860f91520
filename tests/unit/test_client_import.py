"""`aim_realtime_client` is usable without the service: importing it in a fresh interpreter loads
httpx and the standard library, and nothing of the service or its dependencies (its wheel,
installed alone: tests/e2e/test_client_wheel.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

SERVICE = ("realtime", "state_machines", "litestar", "redis", "fakeredis", "livekit",
           "opentelemetry", "uvicorn", "msgspec", "jwt", "rfc8785",
           "prometheus_client")  # fmt: skip
PROBE = """
import json, sys
import aim_realtime_client
print(json.dumps(sorted(sys.modules)))
"""


def test_importing_the_client_loads_nothing_of_the_service():
    out = subprocess.run([sys.executable, "-c", PROBE], check=True, capture_output=True,
                         text=True).stdout  # fmt: skip
    loaded = json.loads(out)
    assert "aim_realtime_client" in loaded
    assert not [m for m in loaded if m.split(".")[0] in SERVICE]
    assert "httpx" in loaded


def test_the_package_root_stays_empty():
    import realtime

    assert realtime.__file__ is not None
    with open(realtime.__file__) as source:
        assert source.read() == ""


def test_the_extension_urn_is_written_in_one_module():
    import aim_realtime_client

    package = Path(aim_realtime_client.__file__).parent
    holders = [path.name for path in sorted(package.glob("*.py"))
               if "urn:aim:a2a:realtime:v1" in path.read_text()]  # fmt: skip
    assert holders == ["rpc.py"]
