"""Stored shapes. Snapshots evolve by adding defaulted fields; `schema` says which layout wrote
them, and a process that meets a newer layout than it knows refuses to write it back."""

from __future__ import annotations

import zlib
from enum import StrEnum
from importlib import resources
from typing import Any, Final, NamedTuple

import msgspec

from realtime.a2a.types import Task as Task  # what a task record holds (engine/ names it from here)
from state_machines import OutboxEffect, Session
from state_machines import operation as operations

TASK_SCHEMA: Final = 1


class NewerSchemaError(RuntimeError):
    """A record was written by a newer release; this process must not overwrite it."""


class TaskRecord(msgspec.Struct, kw_only=True, rename="camel"):
    """A task as stored: the wire Task plus what only the server needs."""

    schema: int = TASK_SCHEMA
    owner: str
    version: int = 0
    created_at: str
    status_ms: int
    task: Task

    def check_writable(self) -> None:
        if self.schema > TASK_SCHEMA:
            raise NewerSchemaError(
                f"task {self.task.id} was stored with schema {self.schema}; "
                f"this release writes {TASK_SCHEMA}"
            )


TASK_ENCODER: Final = msgspec.json.Encoder()
TASK_DECODER: Final = msgspec.json.Decoder(TaskRecord)


SESSION_SCHEMA: Final = 1


class SessionRecord(msgspec.Struct, kw_only=True, rename="camel"):
    """A session snapshot as stored (its version lives beside it in the hash, field `v`)."""

    schema: int = SESSION_SCHEMA
    owner: str
    principal_name: str
    session: Session
    # the span of the last client or agent call that changed the session (a W3C traceparent):
    # what a webhook's or the reconciler's span links to, as the request behind what LiveKit
    # reports (None when that call was not traced)
    caller: str | None = None
    # the principal's tenant when a tenant claim is configured: the session is then listed in
    # its tenant's own operations index too (None for sessions stored before it was kept)
    tenant: str | None = None
    # the seq of the last session event for the app's backend (profile §21); never written
    # while session events are not configured
    events_seq: int | msgspec.UnsetType = msgspec.UNSET

    def check_writable(self) -> None:
        if self.schema > SESSION_SCHEMA:
            raise NewerSchemaError(
                f"session {self.session.session_id} was stored with schema {self.schema}; "
                f"this release writes {SESSION_SCHEMA}"
            )


class CommandOutcome(msgspec.Struct, kw_only=True, rename="camel"):
    """The durable outcome of an applied command. `result` is the JSON result without any
    token; `tokenClaims` are re-signed into the identical join token on every read."""

    command_id: str
    method: str
    digest: str
    session_epoch: int
    created_at: str
    result: msgspec.Raw
    token_claims: dict[str, Any] | None = None


class PendingEffect(msgspec.Struct, kw_only=True, rename="camel"):
    """An outbox entry: one effect of one commit, carried out at least once."""

    effect: OutboxEffect
    epoch: int
    attempts: int = 0
    # the last failure, as LiveKit's answer or the kind of connection error (never a token or a
    # secret: the gateway's messages name status codes and exception classes), and when
    last_error: str | None = None
    last_attempt_at: str | None = None
    # the span of the commit that stored it (a W3C traceparent), linked from the span that
    # carries it out; None when that commit was not traced
    cause: str | None = None


SESSION_ENCODER: Final = msgspec.json.Encoder()
SESSION_DECODER: Final = msgspec.json.Decoder(SessionRecord)


# --- compacted records (profile §20): an ended session's final summary and its task are stored
# zlib-compressed once compacted, against a preset dictionary of the records' own field names
# (`records-1.zdict`; the stream names it by its Adler-32, so a later dictionary is added beside
# it, never in its place: the records compressed with it must still read). A zlib stream starts
# with 0x78, a JSON record with `{`, so a reader tells them apart by the first byte, and records
# written before compaction existed read as they always did.
_PACKED: Final = 0x78
_FDICT: Final = 0x20  # the header flag of a stream compressed against a preset dictionary
DICTIONARY: Final = resources.files("realtime.store").joinpath("records-1.zdict").read_bytes()
DICTIONARY_ID: Final = 3340497852  # zlib.adler32(DICTIONARY), what its streams name
_DICTIONARIES: Final = {DICTIONARY_ID: DICTIONARY}


def pack(encoded: bytes) -> bytes:
    """A record's JSON, compressed (what a compaction stores)."""
    packer = zlib.compressobj(9, zdict=DICTIONARY)
    return packer.compress(encoded) + packer.flush()


def _unpacked(raw: bytes) -> bytes:
    if not raw or raw[0] != _PACKED:
        return raw
    if raw[1] & _FDICT:
        dictionary = _DICTIONARIES[int.from_bytes(raw[2:6], "big")]
        unpacker = zlib.decompressobj(zdict=dictionary)
        return unpacker.decompress(raw) + unpacker.flush()
    return zlib.decompress(raw)


def decode_session(raw: bytes) -> SessionRecord:
    """A stored session snapshot, compacted or not."""
    return SESSION_DECODER.decode(_unpacked(raw))


def decode_task(raw: bytes) -> TaskRecord:
    """A stored task record, compacted or not."""
    return TASK_DECODER.decode(_unpacked(raw))


def summary(record: SessionRecord) -> SessionRecord:
    """What an ended session is compacted to: what GetSession, GetTask and the operations
    listing show of it. Its finished operations and its epoch bumps go, with the span of its
    last call; an operation still pending (GetSession lists its id) stays."""
    pending = tuple(op for op in record.session.operations if not operations.is_terminal(op.state))
    session = msgspec.structs.replace(record.session, operations=pending, bumps=())
    return msgspec.structs.replace(record, session=session, caller=None)


OUTCOME_DECODER: Final = msgspec.json.Decoder(CommandOutcome)


def decode_outcome(raw: bytes) -> CommandOutcome:
    """A stored command outcome, compacted (`pack`) or not."""
    return OUTCOME_DECODER.decode(_unpacked(raw))


# a compacted session's timeline: its entries (stream id, entry JSON) in one compressed string
_ARCHIVE_DECODER: Final = msgspec.msgpack.Decoder(list[tuple[str, bytes]])


def pack_entries(entries: list[tuple[str, bytes]]) -> bytes:
    return zlib.compress(msgspec.msgpack.encode(entries), 6)


def unpack_entries(raw: bytes) -> list[tuple[str, bytes]]:
    """What `pack_entries` packed; none for an empty (or missing) archive."""
    return _ARCHIVE_DECODER.decode(zlib.decompress(raw)) if raw else []


EFFECT_DECODER: Final = msgspec.json.Decoder(PendingEffect)


# --- the event stream (`aim:{<sessionId>}:events`): one entry per commit --------------------------


class Loaded(NamedTuple):
    """A session read in one round trip, with the outcome of the command being retried; or,
    `cached`, as this process last saw it (no outcome: the commit checks the commandId)."""

    record: SessionRecord | None
    version: int
    outcome: CommandOutcome | None
    task: TaskRecord | None
    outbox: list[PendingEffect] | None = None  # only when asked for (GetSession)
    cached: bool = False


class ClientTask(msgspec.Struct, frozen=True, omit_defaults=True):
    """An A2A 0.1 task id's record: the digest of the request that created it and, once that
    request has a task, the task's id."""

    d: str  # the creating request's digest
    t: str | None = None  # the server's task id: None while the first request is under way


class Cause(StrEnum):
    """What made a change (an event entry's `cause`, shown by the operations timeline; profile
    §17)."""

    CREATE = "create"  # the SendMessage that created the session
    COMMAND = "command"  # a client's call: a command with its commandId, or CancelTask
    PROVIDER = "provider"  # the agent's call on /provider
    WEBHOOK = "webhook"  # a LiveKit webhook
    TIMER = "timer"  # a durable timer that fired
    EFFECT = "effect"  # what a LiveKit call's completion feeds back (room ready, room deleted)
    RECONCILER = "reconciler"  # a correction of drift between LiveKit and the sessions


class WebhookRef(msgspec.Struct, frozen=True):
    """The LiveKit webhook behind a commit: its event name and id."""

    event: str
    id: str | None = None


class OperationMoved(msgspec.Struct, frozen=True, rename="camel"):
    """An operation a commit created or moved (ids, kinds and states: never its action)."""

    operation_id: str
    state: str
    operation_kind: str


class AgentMoved(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True, rename="camel"):
    """The agent's presence a commit changed: its state before and after, the current
    dispatch into the room, and what happened (`engine/presence.py`: started, joined, lost,
    not_started, unavailable, rotating, rotated); the serving agent's generation and, while a
    rotation is under way, the successor's generation and dispatch (profile §23)."""

    from_: str = msgspec.field(name="from")
    to: str
    dispatch_attempt: int
    changes: tuple[str, ...] = ()
    generation: int = 0
    successor: int = 0
    successor_attempt: int = 0


class EventEntry(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True, rename="camel"):
    """One entry of a session's event stream, written by the commit (`engine/entries.py`) and
    read by the same type: a subscriber renders the statusUpdate of any past event from it
    (`status` is the task's status as committed), and the operations timeline shows its cause,
    the call or webhook behind it, the operations it moved and the request's trace id."""

    from_: str | None = msgspec.field(name="from")  # None: the session was created
    to: str
    epoch: int
    version: int
    task_version: int
    at: str
    status: dict[str, Any]
    command_id: str | None = None
    method: str | None = None
    cause: Cause | None = None
    webhook: WebhookRef | None = None
    timer: str | None = None
    effect: str | None = None
    correction: dict[str, str] | None = None
    operations: tuple[OperationMoved, ...] = ()
    trace_id: str | None = None
    agent: AgentMoved | None = None  # written since the agent's presence is tracked
    generation: int = 0  # the agent generation that made a provider call (0: none)


EVENT_ENCODER: Final = msgspec.json.Encoder()
EVENT_DECODER: Final = msgspec.json.Decoder(EventEntry)
