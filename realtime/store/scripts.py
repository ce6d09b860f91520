"""The store's Lua scripts: one file each in `lua/` (each says what makes it atomic), read once
from the installed package and registered once per client by `RedisClient`.

A registered script is redis-py's `AsyncScript`: it runs as EVALSHA, and on NOSCRIPT (a restart
or a SCRIPT FLUSH emptied the server's cache) it loads itself and runs again; inside a pipeline
redis-py checks and loads the pipeline's scripts before sending it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Mapping, Sequence
from importlib import resources
from typing import Any, Final, Protocol

LUA_DIR: Final = "lua"


class Script(Protocol):
    """What the stores use of a registered script."""

    sha: str

    def __call__(
        self,
        keys: Sequence[Any] | None = None,
        args: Sequence[Any] | None = None,
        client: Any = None,
    ) -> Awaitable[Any]: ...


@dataclasses.dataclass(frozen=True, slots=True)
class Scripts:
    """Every script, registered on one client; a field's name is its file's name."""

    claim_message: Script  # SendMessage: a messageId claimed and its task indexed, once
    claim_create: Script  # session.create: claims by messageId and clientSessionId, the limits
    unclaim_create: Script  # …taken back when the tenant refused the session
    admit_tenant: Script  # a session admitted within its tenant's limits
    release_tenant: Script  # its end: its place freed and its usage counted, once
    tenant_usage: Script  # what a tenant used of its allowances, now
    list_tasks: Script  # ListTasks: an owner's task index, never a task
    commit: Script  # the one commit of a session
    remember: Script  # the outcome of a command that changed nothing
    compact: Script  # an ended session down to its final summary
    repack: Script  # its command outcomes, compressed in place
    renew_lease: Script
    release_lease: Script
    claim_timers: Script
    task_snapshot: Script  # a task and its event stream's bounds, at one instant
    card_modified: Script  # when the Agent Card's content last changed (Last-Modified)
    delivery_head: Script  # the next session event to send and how it fared so far
    delivery_note: Script  # how an attempt to send it fared
    redeliver: Script  # an operator's redelivery from a seq

    @classmethod
    def register(cls, client: Any) -> Scripts:
        """Register every script on `client` (nothing is sent until a script first runs)."""
        return cls(**{name: client.register_script(source) for name, source in SOURCES.items()})


_INCLUDE: Final = "--! include "


def _read(name: str) -> str:
    """A script's source, with each `--! include NAME` line replaced by `lua/lib/NAME.lua`
    (functions that several scripts share, written once)."""
    source = resources.files("realtime.store").joinpath(LUA_DIR, f"{name}.lua").read_text("utf-8")
    if _INCLUDE not in source:
        return source
    lines = [
        _read(f"lib/{line.removeprefix(_INCLUDE).strip()}") if line.startswith(_INCLUDE) else line
        for line in source.splitlines()
    ]
    return "\n".join(lines) + "\n"


# read once, at import: a missing file fails the start-up, not the first request that needs it
SOURCES: Final[Mapping[str, str]] = {
    field.name: _read(field.name) for field in dataclasses.fields(Scripts)
}
