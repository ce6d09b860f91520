"""Session records as this process last read or committed them, each with its version: the
engine decides a command on one and commits it with that version as the expected one, so an
applied command costs the commit's round trip alone.

Nothing depends on an entry being current. The commit script checks the version (and the
commandId) before it writes; when another writer moved the session on, it answers the current
snapshot and task, which replace the entry, and the engine decides again. A decision that would
write nothing (a refusal, a missing session, a no-op) is never answered from an entry: the
engine reads the session again first (`Loaded.cached`).

It also keeps the commandIds this process committed or replayed lately: a command sent again
(a client's retry) is then answered from its stored outcome by a read, without deciding it
again first only for the commit script to find the outcome.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import NamedTuple

from realtime.store.records import SessionRecord, TaskRecord


class Entry(NamedTuple):
    record: SessionRecord
    version: int
    task: TaskRecord | None


class SessionCache:
    """At most `entries` sessions, the least recently used dropped first (0: none kept)."""

    def __init__(self, entries: int) -> None:
        self.entries = entries
        self._by_session: OrderedDict[str, Entry] = OrderedDict()
        self._commands: OrderedDict[tuple[str, str], None] = OrderedDict()

    def saw(self, session_id: str, command_id: str) -> None:
        """`command_id` was committed (or replayed) on the session by this process."""
        if self.entries <= 0:
            return
        self._commands[session_id, command_id] = None
        self._commands.move_to_end((session_id, command_id))
        while len(self._commands) > self.entries:
            self._commands.popitem(last=False)

    def seen(self, session_id: str, command_id: str) -> bool:
        return (session_id, command_id) in self._commands

    def __len__(self) -> int:
        return len(self._by_session)

    def get(self, session_id: str) -> Entry | None:
        found = self._by_session.get(session_id)
        if found is not None:
            self._by_session.move_to_end(session_id)
        return found

    def put(self, session_id: str, entry: Entry) -> None:
        """Keep `entry` unless an entry of a later version is kept already."""
        if self.entries <= 0:
            return
        kept = self._by_session.get(session_id)
        if kept is not None and kept.version > entry.version:
            return
        self._by_session[session_id] = entry
        self._by_session.move_to_end(session_id)
        while len(self._by_session) > self.entries:
            self._by_session.popitem(last=False)

    def keep(
        self, session_id: str, record: SessionRecord | None, version: int, task: TaskRecord | None
    ) -> None:
        """The session as a read or a commit found it (None: it is not there)."""
        if record is None:
            self.drop(session_id)
        else:
            self.put(session_id, Entry(record, version, task))

    def drop(self, session_id: str) -> None:
        self._by_session.pop(session_id, None)
