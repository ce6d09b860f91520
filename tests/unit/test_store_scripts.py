"""The store's Lua scripts ship inside the package: one file per script under
`realtime/store/lua/`, read through the package's resources (as an installed wheel reads them),
each opening with what makes it atomic."""

from __future__ import annotations

import dataclasses
import re
from importlib import resources
from typing import Any, get_args

import pytest

from realtime.store.scripts import SOURCES, Scripts
from realtime.store.sessions import ClaimStatus, CommitStatus


def lua_files() -> dict[str, str]:
    folder = resources.files("realtime.store").joinpath("lua")
    return {
        entry.name.removesuffix(".lua"): entry.read_text("utf-8")
        for entry in folder.iterdir()
        if entry.name.endswith(".lua")
    }


def test_every_script_is_one_file_of_the_package_and_every_file_a_script() -> None:
    names = {field.name for field in dataclasses.fields(Scripts)}
    assert set(lua_files()) == names
    for name, source in lua_files().items():
        if "--! include" not in source:
            assert SOURCES[name] == source


def test_a_shared_function_is_written_once_and_included_where_it_is_named() -> None:
    shared = resources.files("realtime.store").joinpath("lua", "lib", "held_tasks.lua")
    library = shared.read_text("utf-8")
    including = {name for name, source in lua_files().items() if "--! include held_tasks" in source}
    assert including == {"claim_message", "claim_create", "list_tasks"}
    for name in including:
        assert library in SOURCES[name]
        assert "--! include" not in SOURCES[name]


def test_each_script_opens_with_a_comment_on_what_makes_it_atomic() -> None:
    for name, source in SOURCES.items():
        header = []
        for line in source.splitlines():
            if not line.startswith("--"):
                break
            header.append(line)
        assert header, f"{name}.lua does not open with a comment"
        assert any(line.startswith("-- Atomic:") for line in header), name
        assert "redis.call" in source, name


def test_registering_makes_one_script_object_per_file() -> None:
    registered: list[str] = []

    class Client:
        def register_script(self, source: str) -> str:
            registered.append(source)
            return f"script {len(registered)}"

    scripts = Scripts.register(Client())

    assert sorted(registered) == sorted(SOURCES.values())
    assert len({getattr(scripts, name) for name in SOURCES}) == len(SOURCES)


@pytest.mark.parametrize(
    ("script", "statuses"),
    [("commit", CommitStatus), ("remember", CommitStatus), ("claim_create", ClaimStatus)],
)
def test_the_typed_statuses_are_exactly_what_the_scripts_answer(script: str, statuses: Any) -> None:
    answered = set(re.findall(r"return \{'(\w+)'", SOURCES[script]))
    assert answered == set(get_args(statuses))
