"""The client guide's error table names every code the service answers, with its reason."""

from __future__ import annotations

import re
from pathlib import Path

from realtime.rpc.errors import AUTH_ROWS, TABLE

GUIDE = Path(__file__).resolve().parents[2] / "docs" / "client-guide.md"
_ROW = re.compile(r"^\| (-3\d{4}) \| ([A-Z_]+)", re.MULTILINE)


def test_the_guides_error_table_lists_every_code_with_its_reason() -> None:
    documented = dict(_ROW.findall(GUIDE.read_text()))
    answered = {str(row.code): row.reason for row in (*TABLE.values(), *AUTH_ROWS.values())}
    assert documented == answered
