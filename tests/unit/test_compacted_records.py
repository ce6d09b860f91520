"""Compacted records (profile §20): the summary keeps what GetSession shows, a packed record reads
back as the record, and records stored as JSON read as they always did."""

from __future__ import annotations

import zlib

import msgspec
from hypothesis import given
from hypothesis import strategies as st

from realtime.a2a.sessions import session_view
from realtime.store.records import (
    DICTIONARY,
    DICTIONARY_ID,
    SESSION_ENCODER,
    SessionRecord,
    decode_session,
    pack,
    summary,
)
from state_machines.operation import TERMINAL, Operation
from state_machines.session import EpochBump
from tests.unit.session_operation_helpers import created

T0 = "2026-12-01T00:00:00.000Z"
STATES = ("pending", "awaiting_confirmation", "running", *sorted(TERMINAL))


def ended_with(op_states: list[str], bumps: int) -> SessionRecord:
    session = created(required=("audio_input",), now=T0)
    operations = tuple(
        Operation(
            operation_id=f"op-{index}",
            kind="action",
            created_by="provider",
            state=state,  # type: ignore[arg-type]
            created_at=T0,
            updated_at=T0,
            action_json='{"type":"refund","amount":' + "9" * 200 + "}",
        )
        for index, state in enumerate(op_states)
    )
    session = msgspec.structs.replace(
        session,
        state="ended",
        ended_at=T0,
        end_reason="done",
        operations=operations,
        bumps=tuple(EpochBump(epoch, "superseded") for epoch in range(2, 2 + bumps)),
    )
    return SessionRecord(owner="o", principal_name="alice", session=session, caller="00-trace")


@given(st.lists(st.sampled_from(STATES), max_size=6), st.integers(0, 4))
def test_the_summary_shows_what_the_session_showed(op_states: list[str], bumps: int) -> None:
    record = ended_with(op_states, bumps)

    compacted = summary(record)

    def shown(r: SessionRecord) -> object:
        return msgspec.to_builtins(session_view(r.session, version=7, media_url="wss://m"))

    assert shown(compacted) == shown(record)
    assert (compacted.owner, compacted.principal_name, compacted.tenant) == ("o", "alice", None)
    kept = [op.state for op in compacted.session.operations]
    assert kept == [state for state in op_states if state not in TERMINAL]
    assert compacted.session.bumps == ()
    if set(op_states) & TERMINAL or bumps:
        assert len(SESSION_ENCODER.encode(compacted)) < len(SESSION_ENCODER.encode(record))


@given(st.lists(st.sampled_from(STATES), max_size=6), st.integers(0, 4))
def test_a_record_reads_back_packed_or_as_json(op_states: list[str], bumps: int) -> None:
    record = ended_with(op_states, bumps)
    encoded = SESSION_ENCODER.encode(record)

    assert decode_session(encoded) == record  # a record stored before compaction existed
    packed = pack(encoded)
    assert packed[:1] != b"{"
    assert decode_session(packed) == record
    assert len(packed) < len(encoded)


def test_the_dictionary_is_the_one_compacted_records_name() -> None:
    # changing the file would leave every record compacted with it unreadable: add another
    assert zlib.adler32(DICTIONARY) == DICTIONARY_ID
    packed = pack(b'{"schema":1}')
    assert int.from_bytes(packed[2:6], "big") == DICTIONARY_ID


def test_a_record_packed_without_a_dictionary_reads_too() -> None:
    record = ended_with(["succeeded"], 1)
    assert decode_session(zlib.compress(SESSION_ENCODER.encode(record))) == record
