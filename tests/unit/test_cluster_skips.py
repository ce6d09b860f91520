"""Every test the cluster pass skips is named by a pattern that still matches a test: a renamed
test would otherwise run on the Cluster with the assumptions it cannot meet there."""

from __future__ import annotations

import ast
import fnmatch
from pathlib import Path

import pytest

from tests.cluster import SKIPPED_ON_CLUSTER

ROOT = Path(__file__).resolve().parents[2]


def functions_in(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    functions = ast.FunctionDef | ast.AsyncFunctionDef
    return [node.name for node in tree.body if isinstance(node, functions)]


@pytest.mark.parametrize("pattern", sorted(SKIPPED_ON_CLUSTER))
def test_each_cluster_skip_names_an_existing_test(pattern: str) -> None:
    file, _, name = pattern.partition("::")
    path = ROOT / file
    assert path.is_file(), f"{file} does not exist"
    found = fnmatch.filter(functions_in(path), name.split("[")[0])
    assert found, f"no test in {file} matches {name!r}"
