"""A LiveKit call's timeline entry names the trace of the commit that stored it, whichever
runner carries it out (the request's own, or a worker's with no trace of its own)."""

from __future__ import annotations

import msgspec

from realtime.store.timeline import effect_entry

CAUSE = "00-" + "a" * 32 + "-" + "b" * 16 + "-01"


def test_an_effect_entry_carries_the_trace_of_the_commit_that_stored_it() -> None:
    entry = msgspec.json.decode(
        effect_entry(0, "SendData", attempt=2, result="retry", duration_ms=3, cause=CAUSE)
    )
    assert entry["traceId"] == "a" * 32
    untraced = msgspec.json.decode(
        effect_entry(0, "SendData", attempt=1, result="ok", duration_ms=1)
    )
    assert "traceId" not in untraced  # no span now and none stored: none is made up
