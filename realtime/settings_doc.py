"""The settings table of docs/configuration.md, written from the declarations in
`realtime/settings.py`: one row per setting, its variable, what it does, what it takes and its
default.

`uv run python -m realtime.settings_doc` rewrites the table between its two marker lines and
leaves the prose around it alone; a unit test fails when the committed table is stale.
"""

from __future__ import annotations

import sys
from pathlib import Path

from realtime.environment import decimal
from realtime.settings import DECLARED, Declared

DOC = Path(__file__).resolve().parents[1] / "docs" / "configuration.md"
REGENERATE = "uv run python -m realtime.settings_doc"
BEGIN = (
    f"<!-- generated from the declarations in realtime/settings.py by `{REGENERATE}`; "
    "edit those, not these rows -->"
)
END = "<!-- end of the generated table -->"
_HEADER = ("| variable | meaning | takes | default |", "|---|---|---|---|")
_DAY = 86400


def _duration(seconds: float) -> str:
    """` (24 h)` after a default of whole hours or days, for the reader who counts in them."""
    if seconds < 3600 or seconds % 3600:
        return ""
    if seconds > _DAY and not seconds % _DAY:
        return f" ({decimal(seconds // _DAY)} days)"
    return f" ({decimal(seconds // 3600)} h)"


def _default(declared: Declared) -> str:
    value = declared.default
    if declared.setting.default_doc is not None:
        return declared.setting.default_doc
    if value is None or value == ():
        return "unset"
    if isinstance(value, bool):
        return "`on`" if value else "`off`"
    if isinstance(value, frozenset):
        return "all of them"
    if isinstance(value, int | float):
        seconds = declared.setting.env.endswith("_S")
        return f"`{decimal(value)}`" + (_duration(value) if seconds else "")
    return f"`{value}`"


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def table() -> str:
    """The generated part of the document, its marker lines included."""
    rows = [
        "| "
        + " | ".join(
            _cell(cell)
            for cell in (
                f"`{declared.setting.env}`",
                declared.setting.doc,
                declared.setting.reading.takes,
                _default(declared),
            )
        )
        + " |"
        for declared in DECLARED
    ]
    return "\n".join((BEGIN, *_HEADER, *rows, END))


def render(document: str) -> str:
    """`document` with the table between its markers written anew."""
    before, found, rest = document.partition(BEGIN)
    _, ended, after = rest.partition(END)
    if not (found and ended):
        raise ValueError(
            f"the document has no generated table: its marker lines are\n{BEGIN}\n{END}"
        )
    return before + table() + after


def main() -> None:
    path = Path(sys.argv[1]) if len(sys.argv) > 1 else DOC
    path.write_text(render(path.read_text(encoding="utf-8")), encoding="utf-8")


if __name__ == "__main__":
    main()
