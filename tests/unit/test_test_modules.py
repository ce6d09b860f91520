"""Test modules stand alone: shared factories and drivers live in helper modules (or a
conftest.py) named for what they drive, so no test module imports another."""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]


def _imports(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return found


def test_no_test_module_imports_another() -> None:
    offenders = {
        str(path.relative_to(TESTS)): sorted(
            name
            for name in _imports(path)
            if name.startswith("tests.") and name.split(".")[-1].startswith("test_")
        )
        for path in TESTS.rglob("*.py")
    }
    assert {path: names for path, names in offenders.items() if names} == {}
