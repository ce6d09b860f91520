"""Transcript retention (profile §7, §10, §13): with `retention.transcript: off` the words a user
types or the agent speaks reach the agent but are kept nowhere — not in the task, the operator's
timeline or the spans. That Redis holds them nowhere is tested at the storage layer
(tests/integration/test_transcript_retention.py)."""

from __future__ import annotations

import pytest

from tests.e2e.agent_operation_helpers import (
    get_task,
    interact,
    meta,
    open_session,
    quiet,
    type_and_speak,
    wait_for_data,
)
from tests.e2e.operator_api_helpers import timeline_of
from tests.e2e.realtime_helpers import new_id

pytestmark = pytest.mark.e2e


def spans_holding(span_exporter, marker: str) -> list[str]:
    hits = []
    for span in span_exporter.get_finished_spans():
        texts = [span.name, *(str(v) for v in (span.attributes or {}).values())]
        for event in span.events:
            texts.append(event.name)
            texts += [str(v) for v in (event.attributes or {}).values()]
        if span.status.description:
            texts.append(span.status.description)
        if any(marker in text for text in texts):
            hits.append(span.name)
    return hits


async def test_with_retention_off_the_words_are_kept_nowhere(
    rt_client, livekit, store, span_exporter
):
    words = await type_and_speak(rt_client, livekit, "off")
    typed, spoken, refused = words.typed, words.spoken, words.appended
    assert words.heard["payload"] == {"text": typed}  # the agent hears it
    assert refused["error"]["code"] == -31009, refused
    assert meta(refused)["missing"] == "transcript"
    assert spoken not in str(refused)
    task = await get_task(rt_client, words.live.task_id)
    assert typed not in str(task)
    assert spoken not in str(task)
    await quiet()  # let the outbox finish its work before looking
    timeline = str(await timeline_of(rt_client, words.live.sid))
    assert typed not in timeline
    assert spoken not in timeline
    assert spans_holding(span_exporter, typed) == []
    assert spans_holding(span_exporter, spoken) == []


async def test_with_retention_on_the_words_join_the_history(rt_client, livekit, store):
    """The positive control of the test above: the same scan finds kept words."""
    live = await open_session(rt_client, livekit, transcript="on")
    typed = f"typed-kept-{new_id()}"
    command_id = new_id()
    sent = await interact(rt_client, live.sid, "input.text", {"text": typed}, command_id=command_id)
    assert "result" in sent, sent
    await wait_for_data(livekit, live.room, "input.text")
    history = (await get_task(rt_client, live.task_id))["history"]
    assert history[-1]["role"] == "ROLE_USER"
    assert history[-1]["messageId"] == command_id
    assert history[-1]["parts"] == [{"text": typed}]
