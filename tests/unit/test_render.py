"""docs/state-machines.md is generated from the transition tables and must not go stale."""

from __future__ import annotations

import runpy
import sys
from pathlib import Path

import pytest

from state_machines import endpoint, interactions, media, operation, provider, session, task
from state_machines.render import render_markdown

DOC = Path(__file__).resolve().parents[2] / "docs" / "state-machines.md"
REGENERATE = "uv run python -m state_machines.render > docs/state-machines.md"


def test_the_state_machine_document_matches_the_tables() -> None:
    assert DOC.read_text(encoding="utf-8") == render_markdown(), (
        f"docs/state-machines.md is stale; regenerate it with: {REGENERATE}"
    )


def test_the_document_has_a_diagram_and_a_table_per_machine() -> None:
    text = render_markdown()

    assert text.count("stateDiagram-v2") == 5
    for heading in ("## Session", "## Endpoint", "## Task", "## Operation", "## Media source"):
        assert heading in text


@pytest.mark.parametrize(
    "table",
    [
        session.TRANSITIONS,
        endpoint.TRANSITIONS,
        task.TRANSITIONS,
        operation.TRANSITIONS,
        media.TRANSITIONS,
    ],
    ids=["session", "endpoint", "task", "operation", "media"],
)
def test_every_transition_has_a_row(table: dict[tuple[str, str], str]) -> None:
    text = render_markdown()

    for (source, event), target in table.items():
        assert f"| {source} | `{event}` | {target} |" in text


def test_a_guarded_alternative_target_is_drawn() -> None:
    assert "    active --> failed : room_lost" in render_markdown()


def test_an_idempotent_operation_event_is_marked() -> None:
    assert "| running | `update` | running | unchanged (idempotent) |" in render_markdown()


def test_running_the_module_prints_the_document(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delitem(sys.modules, "state_machines.render")

    runpy.run_module("state_machines.render", run_name="__main__")

    assert capsys.readouterr().out == render_markdown()


def test_the_interaction_and_provider_tables_are_in_the_document() -> None:
    text = render_markdown()

    for heading in ("## Interactions", "## Provider calls"):
        assert heading in text


@pytest.mark.parametrize(
    ("allowed", "notes"),
    [(interactions.ALLOWED, interactions.NOTES), (provider.ALLOWED, provider.NOTES)],
    ids=["interactions", "provider"],
)
def test_every_event_that_keeps_the_state_has_a_row(
    allowed: dict[str, tuple[str, ...]], notes: dict[str, str]
) -> None:
    text = render_markdown()

    for event, states in allowed.items():
        assert f"| `{event}` | {', '.join(states)} | {notes[event]} |" in text
