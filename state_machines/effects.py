"""Effects: what the shell must do after a transition commits (LiveKit calls, token minting).

Plain, frozen, tagged values (`{"type": "CreateRoom", ...}` on the wire). The LiveKit calls form
the `OutboxEffect` union the shell stores in its outbox and runs later; a join token
(`MintJoinToken`) and history entries (`AppendHistory`) are handled in the commit itself and
travel in their own fields of `Accepted`, so they can never reach the outbox. Publish sources
use LiveKit's exact names: an unknown name silently allows nothing (realtime-profile §9).
"""

from __future__ import annotations

from typing import Final, Literal

import msgspec

MICROPHONE: Final = "microphone"
CAMERA: Final = "camera"
SCREEN_SHARE: Final = "screen_share"
SCREEN_SHARE_AUDIO: Final = "screen_share_audio"


class CreateRoom(msgspec.Struct, frozen=True, tag=True):
    """Create room `room` for `epoch` (metadata `{sessionId, sessionEpoch}`). With `with_agent`,
    LiveKit dispatches the agent as it creates the room (one call provisions the session: the
    shell feeds `Provisioned(epoch)` back); without, a `DispatchAgent` follows it (outboxes
    stored before rooms were created with their agent). The agent it dispatches is the session's
    `generation`-th (its provider token says so)."""

    room: str
    epoch: int
    with_agent: bool = False
    generation: int = 1


class DispatchAgent(msgspec.Struct, frozen=True, tag=True):
    """Dispatch the agent into `room` once for `attempt`: the first (outboxes stored before
    rooms were created with their agent; the shell feeds `Provisioned(epoch)` back), or a
    replacement of an agent that never started or was lost (the shell feeds
    `AgentDispatched(epoch, attempt, dispatch_id)` back). The attempt is written into the
    dispatch's metadata, so a retry finds a dispatch it already made. The agent is the
    session's `generation`-th; with `successor_of`, it is dispatched as the successor of the
    serving agent of that generation (a rotation: profile §23)."""

    room: str
    epoch: int
    attempt: int = 1
    generation: int = 1
    successor_of: int = 0


class DeleteDispatch(msgspec.Struct, frozen=True, tag=True):
    """Delete the agent's dispatches in `room` older than `attempt` (their jobs end, their
    agents leave), or with `only`, the dispatch of `attempt` alone (a rotation's successor that
    failed, while the serving agent stays); one already gone counts as done."""

    room: str
    epoch: int
    attempt: int
    only: bool = False


class RemoveParticipant(msgspec.Struct, frozen=True, tag=True):
    """Remove participant `identity` from `room` (a missing participant counts as done). With
    `revoke_before` (an RFC 3339 instant: the decision's), LiveKit also refuses every token of
    that identity issued before it, so a superseded or ended device cannot connect again."""

    room: str
    identity: str
    revoke_before: str | None = None


class DeleteRoom(msgspec.Struct, frozen=True, tag=True):
    """Delete `room`; when done the shell feeds `RoomDeleted(epoch)` back."""

    room: str
    epoch: int


class UpdatePermissions(msgspec.Struct, frozen=True, tag=True):
    """Replace the full permission set of `identity` in `room` (LiveKit replaces every flag)."""

    room: str
    identity: str
    can_subscribe: bool
    publish_sources: tuple[str, ...]


class MintJoinToken(msgspec.Struct, frozen=True, tag=True):
    """A join token for `identity` into exactly `room`, carrying `epoch` in its metadata (never
    an outbox entry: the shell signs it into the command's result)."""

    room: str
    identity: str
    epoch: int
    can_subscribe: bool
    publish_sources: tuple[str, ...]


class SendData(msgspec.Struct, frozen=True, tag=True):
    """A reliable data message to `destination` in `room` (empty: every participant), topic
    `aim.realtime.v1`; `body` is the JSON the agent receives (de-duplicable by commandId)."""

    room: str
    destination: tuple[str, ...]
    body: str


class AppendHistory(msgspec.Struct, frozen=True, tag=True):
    """Append a message to the task history in the same commit (never an outbox entry):
    `role` user or agent, `parts_json` the message's A2A parts as JSON. The shell skips a
    `message_id` the history already holds, so appending is idempotent."""

    message_id: str
    role: Literal["user", "agent"]
    parts_json: str


# the LiveKit calls the outbox runner carries out, at least once each, in commit order
OutboxEffect = (
    CreateRoom
    | DispatchAgent
    | RemoveParticipant
    | DeleteRoom
    | UpdatePermissions
    | SendData
    | DeleteDispatch
)
