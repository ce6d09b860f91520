"""docs/configuration.md lists exactly the variables the service reads: a variable added to
`Settings.from_env` without a line in the table, or a line for one that is no longer read,
fails here; and its table is the one `python -m realtime.settings_doc` writes from the
declarations in realtime/settings.py."""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

from realtime.environment import Whole
from realtime.settings import DECLARED, Settings
from realtime.settings_doc import BEGIN, END, REGENERATE, render, table

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


# --- the table is generated from the declarations in realtime/settings.py ----------------------


def test_the_table_is_the_one_the_declarations_give() -> None:
    committed = DOC.read_text(encoding="utf-8")
    assert committed == render(committed), (
        f"docs/configuration.md's table is stale; regenerate it with: {REGENERATE}"
    )


def test_every_declared_setting_has_a_row_with_its_bounds_and_default() -> None:
    rows = {
        line.split("|")[1].strip(): line
        for line in DOC.read_text(encoding="utf-8").splitlines()
        if line.startswith("| `AIM_")
    }
    for declared in DECLARED:
        row = rows.get(f"`{declared.setting.env}`")
        assert row is not None, f"docs/configuration.md has no row for {declared.setting.env}"
        assert declared.setting.reading.takes in row
        reading = declared.setting.reading
        if isinstance(reading, Whole):
            assert f"{reading.low}..{reading.high}" in row
            assert f"`{declared.default}`" in row


def test_the_prose_around_the_table_is_kept() -> None:
    document = "# Title\n\nbefore\n\n" + BEGIN + "\nold rows\n" + END + "\n\nafter\n"
    rendered = render(document)
    assert rendered.startswith("# Title\n\nbefore\n\n" + BEGIN + "\n| variable |")
    assert rendered.endswith(END + "\n\nafter\n")
    assert "old rows" not in rendered
    with pytest.raises(ValueError, match="marker lines"):
        render("# a document without the markers\n")


def test_running_the_module_rewrites_the_table(tmp_path: Path) -> None:
    stale = tmp_path / "configuration.md"
    stale.write_text(f"prose\n{BEGIN}\n| `AIM_GONE` | x | y | z |\n{END}\n", encoding="utf-8")
    subprocess.run(
        [sys.executable, "-m", "realtime.settings_doc", str(stale)], check=True, timeout=60
    )
    assert stale.read_text(encoding="utf-8") == f"prose\n{table()}\n"


# a setting named with its default in the other documents: "`AIM_IDLE_TIMEOUT_S` (300 s)",
# "`AIM_TASK_TTL_S` (7 days)", "`AIM_WORKER_LEASE_S` (default 30 s)", "(1,000)"
MENTION = re.compile(
    r"`(AIM_[A-Z0-9_]+)`,? \((?:default )?`?(\d[\d,]*(?:\.\d+)?)`?"
    r"(?: (s|h|hours?|days?|KiB))?(?=[),;:])"
)
UNITS = {
    None: 1,
    "s": 1,
    "h": 3600,
    "hour": 3600,
    "hours": 3600,
    "day": 86400,
    "days": 86400,
    "KiB": 1024,
}
# decisions.md records what was decided then, with the values of then
ELSEWHERE = [
    path
    for path in [*sorted(DOC.parent.glob("*.md")), DOC.parents[1] / "README.md"]
    if path.name not in ("configuration.md", "decisions.md")
]


def test_the_other_documents_give_each_setting_its_declared_default() -> None:
    defaults = {declared.setting.env: declared.default for declared in DECLARED}
    found, wrong = 0, []
    for path in ELSEWHERE:
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            for name, value, unit in MENTION.findall(line):
                found += 1
                said = float(value.replace(",", "")) * UNITS[unit or None]
                if name not in defaults or said != defaults[name]:
                    wrong.append(f"{path.name}:{number}: {name} ({value} {unit})")
    assert found > 50  # the pattern still finds what the documents say
    assert not wrong, f"a default other than the declared one (realtime/settings.py): {wrong}"
