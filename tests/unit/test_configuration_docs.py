"""docs/configuration.md lists exactly the variables the service reads: a variable added to
`Settings.from_env` without a line in the table, or a line for one that is no longer read,
fails here."""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from pathlib import Path

from realtime.settings import Settings

DOC = Path(__file__).resolve().parents[2] / "docs" / "configuration.md"


class Recording(Mapping[str, str]):
    """An empty environment that remembers every name asked for."""

    def __init__(self) -> None:
        self.asked: set[str] = set()

    def __getitem__(self, name: str) -> str:
        self.asked.add(name)
        raise KeyError(name)

    def get(self, name: str, default: object = None) -> object:  # type: ignore[override]
        self.asked.add(name)
        return default

    def __contains__(self, name: object) -> bool:
        if isinstance(name, str):
            self.asked.add(name)
        return False

    def __iter__(self) -> Iterator[str]:
        return iter(())

    def __len__(self) -> int:
        return 0


def read_by_the_service() -> set[str]:
    environ = Recording()
    Settings.from_env(environ)
    return {name for name in environ.asked if name.startswith("AIM_")}


def documented() -> set[str]:
    """The AIM_* names in the first column of the table's rows."""
    names: set[str] = set()
    for line in DOC.read_text().splitlines():
        if line.startswith("| `AIM_"):
            first_column = line.split("|")[1]
            names |= set(re.findall(r"`(AIM_[A-Z0-9_]+)`", first_column))
    return names


def test_every_variable_the_service_reads_is_documented() -> None:
    missing = read_by_the_service() - documented()
    assert not missing, f"docs/configuration.md has no line for {sorted(missing)}"


def test_every_documented_variable_is_read() -> None:
    stale = documented() - read_by_the_service()
    assert not stale, f"docs/configuration.md lists {sorted(stale)}, which nothing reads"


def test_the_recording_sees_the_variables_it_should() -> None:
    # the two checks above are only as good as the recording: a few the service surely reads
    assert {"AIM_REDIS_URL", "AIM_ACCESS_LOG", "AIM_LIVEKIT_WEBHOOK_KEYS"} <= read_by_the_service()
