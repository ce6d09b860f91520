"""The session value and the changes to it that cannot be refused (used by `session_rules`).

`session.py` holds the table and the guards; the functions here only build the next value once a
guard has let an event through, so none of them returns a rejection. Import the public names from
`state_machines.session`.
"""

from __future__ import annotations

import math
import re
from datetime import datetime, timedelta
from typing import Final, Literal, NamedTuple

import msgspec

from state_machines import endpoint as endpoints
from state_machines import operation as operations
from state_machines import task
from state_machines._base import Accepted, Rejected, RejectReason
from state_machines.effects import (
    CreateRoom,
    DeleteDispatch,
    DeleteRoom,
    DispatchAgent,
    MintJoinToken,
    RemoveParticipant,
)
from state_machines.endpoint import Capabilities, Endpoint, EndpointEvent
from state_machines.media import MediaSources, publish_sources
from state_machines.operation import Operation
from state_machines.task import TaskCore, TaskEvent, TaskState

SessionState = Literal[
    "provisioning", "ready", "joining", "active", "reconnecting", "ending", "ended", "failed"
]

PROVISIONING: Final = "provisioning"
READY: Final = "ready"
JOINING: Final = "joining"
ACTIVE: Final = "active"
RECONNECTING: Final = "reconnecting"
ENDING: Final = "ending"
ENDED: Final = "ended"
FAILED: Final = "failed"

LIVE_STATES: Final[tuple[SessionState, ...]] = (PROVISIONING, READY, JOINING, ACTIVE, RECONNECTING)
TERMINAL_STATES: Final[tuple[SessionState, ...]] = (ENDED, FAILED)
SESSION_STATES: Final[tuple[SessionState, ...]] = (*LIVE_STATES, ENDING, *TERMINAL_STATES)

_TASK_EVENTS: Final[dict[TaskState, TaskEvent]] = {
    task.COMPLETED: "complete",
    task.CANCELED: "cancel",
    task.FAILED: "fail",
    task.INPUT_REQUIRED: "require_input",
    task.WORKING: "resume",
}
AgentState = Literal[
    "dispatching", "dispatched", "started", "joined", "listening", "thinking", "speaking", "left"
]
# the agent's states before its job started: the start timer replaces a dispatch still in one
AWAITING_AGENT: Final[tuple[AgentState, ...]] = ("dispatching", "dispatched")


class Requested(msgspec.Struct, frozen=True):
    """What the client asked for when it created the session."""

    user_video_sources: tuple[str, ...]
    agent_video_sources: tuple[str, ...]
    interactions: tuple[str, ...]


class EpochBump(msgspec.Struct, frozen=True):
    """`epoch` is the epoch this bump created; `reason` says why the previous one ended."""

    epoch: int
    reason: Literal["superseded", "rebound"]


class AgentJob(msgspec.Struct, frozen=True):
    """The job LiveKit started for the current dispatch (agent_job_started): its id, the
    identity its agent joins the room with, and the dispatch it belongs to ("" when unsaid)."""

    job_id: str
    identity: str = ""
    dispatch_id: str = ""


DeadlineReason = Literal["provider_cap", "provider_goaway", "planned"]


class Deadline(msgspec.Struct, frozen=True):
    """When the serving agent's connection ends (`at`, RFC 3339) and why: reported by the
    agent, or `planned` by the configured rotation interval."""

    at: str
    reason: DeadlineReason


class Rotation(msgspec.Struct, frozen=True):
    """A successor under way (profile §23): generation `generation`, dispatched into the same
    room as dispatch `attempt` (0: none live, every try so far failed and no time is left to
    try again before the deadline), `misses` tries in a row that started no job, its job once
    LiveKit reported it, its dispatch's id once known, when the rotation began, and when the
    serving agent last wrote during it (the seam runs from there to the handover)."""

    generation: int
    attempt: int
    reason: DeadlineReason
    began_at: str
    misses: int = 0
    job: AgentJob | None = None
    dispatch_id: str | None = None
    last_word_at: str | None = None


class SavedContext(msgspec.Struct, frozen=True):
    """The context an agent saved for its successor (the bytes are stored beside the session,
    never in it): how large, by which generation, when."""

    size: int
    generation: int
    saved_at: str


class Unacked(msgspec.Struct, frozen=True):
    """An interaction sent to the agent that no agent has acknowledged yet: its commandId and
    the data message's body, which a successor receives again."""

    command_id: str
    body: str


# the endReason of a session its tenant's allowance of session minutes ended (profile §24)
ALLOWANCE_EXHAUSTED: Final = "allowance_exhausted"


class Session(msgspec.Struct, frozen=True, kw_only=True):
    """One realtime session and the task that follows it."""

    session_id: str
    task_id: str
    context_id: str
    client_session_id: str
    requested: Requested
    required_capabilities: tuple[str, ...]
    transcript: Literal["off", "on"]
    created_at: str
    updated_at: str
    epoch: int = 1
    state: SessionState = PROVISIONING
    task_state: TaskState = task.WORKING
    task_version: int = 1
    room: str = ""
    room_epoch: int = 1
    agent_state: AgentState = "dispatching"
    agent_identity: str | None = None
    active_endpoint_id: str | None = None
    endpoints: tuple[Endpoint, ...] = ()
    bumps: tuple[EpochBump, ...] = ()
    rebinds: int = 0
    canceled: bool = False
    ended_at: str | None = None
    end_reason: str | None = None
    media: MediaSources = MediaSources()
    disconnects: int = 0  # drops of active endpoints so far; a grace timer names the one it is for
    operations: tuple[Operation, ...] = ()
    idles: int = 0  # times the session became idle (ready, no active endpoint); names idle timers
    # the requirement the task's status message shows (INPUT_REQUIRED); a new one is a task change
    task_requirement: str | None = None
    # when the latest handoffs happened, while handoffs are bounded per minute: at most the
    # bound's count of them, none older than HANDOFF_WINDOW_S
    handoffs: tuple[str, ...] = ()
    # the agent's presence in the current room (profile §22): the current dispatch is the
    # `agent_attempt`-th into it; `agent_misses` dispatches in a row started no job; the job
    # LiveKit started for it, and the dispatch's id once known; the identities of the agents
    # replaced in this room, whose joins and leaves are fenced
    agent_attempt: int = 1
    agent_misses: int = 0
    agent_job: AgentJob | None = None
    agent_dispatch: str | None = None
    agents_replaced: tuple[str, ...] = ()
    # rotation across provider caps (profile §23): the serving agent's generation (every new
    # agent of the session gets the next one, and the provider token it is dispatched with
    # carries it), its deadline once known, the successor under way, the predecessor told to
    # leave (removed when the grace ends), the handovers done in this room and in the session,
    # the interactions no agent acknowledged yet (the newest MAX_UNACKED), and what is known of
    # the context saved for a successor
    agent_generation: int = 1
    agent_deadline: Deadline | None = None
    rotation: Rotation | None = None
    agent_leaving: str | None = None
    agent_handovers: int = 0
    rotations: int = 0
    unacked: tuple[Unacked, ...] = ()
    agent_context: SavedContext | None = None
    # AIM_AGENT_ROTATE_AFTER_S when the session was created (0: off): each agent's planned
    # deadline, counted from its join
    rotate_after_s: int = 0
    # the longest the session may last (s), fixed when it was created: AIM_MAX_SESSION_S, or its
    # tenant's maximum when shorter (profile §24); 0 in sessions created before it was kept
    max_s: int = 0
    # usage (profile §24, `state_machines.usage`): the milliseconds a device was connected and
    # the agent was in the room so far, and since when each clock runs (None: stopped)
    active_ms: int = 0
    active_since: str | None = None
    agent_ms: int = 0
    agent_since: str | None = None


replace = msgspec.structs.replace


def room_name(session_id: str, epoch: int) -> str:
    """The LiveKit room of `session_id` provisioned at `epoch`."""
    return f"aim-{session_id}-e{epoch}"


# the largest epoch a room name or a token may carry: a session that rebinds once a second
# would need 30 years to reach it, and it is safe to convert and to store in any integer type
MAX_EPOCH: Final = 999_999_999
# exactly what `room_name` writes for a session id (a lower-case UUID) and an epoch (no leading
# zero; MAX_EPOCH's nine digits at most)
_ROOM_NAME: Final = re.compile(
    r"aim-(?P<sid>[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})"
    rf"-e(?P<epoch>[1-9][0-9]{{0,{len(str(MAX_EPOCH)) - 1}}})",
    re.ASCII,
)


class RoomName(NamedTuple):
    """A room name of this service, taken apart."""

    session_id: str
    epoch: int


def parse_room_name(name: str) -> RoomName | None:
    """The session and epoch a room of this service is named after, or None for any other name
    (`parse_room_name(room_name(sid, epoch))` gives them back)."""
    match = _ROOM_NAME.fullmatch(name)
    return None if match is None else RoomName(match["sid"], int(match["epoch"]))


def limit_exceeded(session: Session, limit: str, detail: str, retry_after: int = 0) -> Rejected:
    """The refusal of a command that would pass one of the session's limits (named `limit`);
    `retry_after`: the seconds after which it would not (0: waiting does not help)."""
    return Rejected(
        reason=RejectReason.LIMIT_EXCEEDED,
        state=session.state,
        current_epoch=session.epoch,
        limit=limit,
        detail=detail,
        retry_after=retry_after,
    )


# handoffs are bounded per this many seconds (Join.max_handoffs_per_minute)
HANDOFF_WINDOW_S: Final = 60


def recent_handoffs(session: Session, now: str) -> tuple[str, ...]:
    """The session's handoffs of the last HANDOFF_WINDOW_S before `now`, oldest first."""
    since = datetime.fromisoformat(now) - timedelta(seconds=HANDOFF_WINDOW_S)
    return tuple(at for at in session.handoffs if datetime.fromisoformat(at) > since)


def handoff_wait(recent: tuple[str, ...], now: str, limit: int) -> int:
    """Whole seconds until one more handoff fits in the window (0: it fits now), given the
    `recent` handoffs and at most `limit` of them per window."""
    if len(recent) < limit:
        return 0
    frees = datetime.fromisoformat(recent[-limit]) + timedelta(seconds=HANDOFF_WINDOW_S)
    return max(1, math.ceil((frees - datetime.fromisoformat(now)).total_seconds()))


def open_requirement(session: Session) -> Operation | None:
    """The oldest operation awaiting the user's confirmation, while the session is live."""
    if session.state not in LIVE_STATES:
        return None
    return next(
        (op for op in session.operations if op.state == operations.AWAITING_CONFIRMATION), None
    )


def derive_task_state(session: Session) -> TaskState:
    """The task state the session implies: INPUT_REQUIRED while a live session has an
    operation awaiting confirmation."""
    if session.state in LIVE_STATES:
        return task.WORKING if open_requirement(session) is None else task.INPUT_REQUIRED
    if session.state == FAILED:
        return task.FAILED
    return task.CANCELED if session.canceled else task.COMPLETED


def advance_task(core: TaskCore, event: TaskEvent) -> TaskCore:
    """The task lifecycle's own table decides; a KeyError here is a bug in the session machine."""
    return TaskCore(state=task.TRANSITIONS[core.state, event], version=core.version + 1)


def is_idle(session: Session) -> bool:
    return session.state == READY and session.active_endpoint_id is None


def settle_task(session: Session, now: str) -> Session:
    """Move the task to the state the session implies, bumping task_version once. A session
    that is over cancels its open operations; another open requirement is a task change too."""
    if session.state not in LIVE_STATES:
        session = close_operations(session, now)
    target = derive_task_state(session)
    waiting = open_requirement(session)
    requirement = waiting.operation_id if waiting is not None else None
    if target == session.task_state and requirement == session.task_requirement:
        return session
    if target == session.task_state:
        core = TaskCore(session.task_state, session.task_version + 1)
    else:
        core = advance_task(
            TaskCore(session.task_state, session.task_version), _TASK_EVENTS[target]
        )
    return replace(
        session, task_state=core.state, task_version=core.version, task_requirement=requirement
    )


def close_operations(session: Session, now: str) -> Session:
    """Every operation that is not over is canceled (the session ended or failed)."""
    if all(operations.is_terminal(op.state) for op in session.operations):
        return session
    return replace(
        session,
        operations=tuple(
            op
            if operations.is_terminal(op.state)
            else replace(op, state=operations.CANCELED, updated_at=now)
            for op in session.operations
        ),
    )


def by_key(session: Session, key: str) -> Endpoint | None:
    return next((item for item in session.endpoints if item.client_endpoint_key == key), None)


def by_id(session: Session, endpoint_id: str) -> Endpoint | None:
    return next((item for item in session.endpoints if item.endpoint_id == endpoint_id), None)


def put(items: tuple[Endpoint, ...], updated: Endpoint) -> tuple[Endpoint, ...]:
    """`items` with the endpoint of the same id replaced by `updated`."""
    return tuple(updated if item.endpoint_id == updated.endpoint_id else item for item in items)


def moved(
    items: tuple[Endpoint, ...], event: EndpointEvent, ids: tuple[str, ...]
) -> tuple[Endpoint, ...]:
    """`items` with `event` applied to the endpoints named in `ids` (already known legal)."""
    return tuple(
        endpoints.transition(item, event) if item.endpoint_id in ids else item for item in items
    )


def device_sources(session: Session, caps: Capabilities) -> tuple[str, ...]:
    """What a device with `caps` may publish in `session` (its grants, its own sources)."""
    return publish_sources(
        session.media, audio_input=caps.audio_input, camera=caps.camera, screen=caps.screen
    )


def join_token(session: Session, joined: Endpoint) -> MintJoinToken:
    """The token for the active endpoint: microphone iff audio input, camera and screen only
    while the user has them granted."""
    caps = joined.capabilities
    return MintJoinToken(
        room=session.room,
        identity=joined.endpoint_id,
        epoch=session.epoch,
        can_subscribe=caps.audio_output,
        publish_sources=device_sources(session, caps),
    )


def hand_off(session: Session, previous: str, now: str) -> tuple[Session, RemoveParticipant]:
    """Another endpoint takes over: epoch + 1, the previous one superseded and removed, the
    tokens it was issued until `now` revoked."""
    epoch = session.epoch + 1
    superseded = replace(
        session,
        epoch=epoch,
        bumps=(*session.bumps, EpochBump(epoch, "superseded")),
        endpoints=moved(session.endpoints, "supersede", (previous,)),
    )
    return superseded, RemoveParticipant(session.room, previous, revoke_before=now)


# the endpoints that may hold a join token still valid for the room (a superseded one's were
# revoked when it was superseded)
_HOLDING_TOKENS: Final = (endpoints.JOINING, endpoints.CONNECTED, endpoints.DISCONNECTED)


def end(session: Session, target: SessionState, reason: str, now: str) -> Accepted[Session]:
    """Ending: the task is terminal from here; every device that holds a join token is removed
    with its tokens revoked, then the room is deleted behind them."""
    ending = replace(session, state=target, end_reason=reason)
    revoked = tuple(
        RemoveParticipant(session.room, item.endpoint_id, revoke_before=now)
        for item in session.endpoints
        if item.state in _HOLDING_TOKENS
    )
    return Accepted(ending, (*revoked, DeleteRoom(session.room, session.room_epoch)))


def finish(session: Session, target: SessionState, now: str) -> Session:
    """The session is over: every endpoint removed, none active."""
    ids = tuple(item.endpoint_id for item in session.endpoints if item.state != endpoints.REMOVED)
    return replace(
        session,
        state=target,
        ended_at=now,
        active_endpoint_id=None,
        endpoints=moved(session.endpoints, "remove", ids),
    )


def fail(session: Session, target: SessionState, reason: str, now: str) -> Accepted[Session]:
    """Failed: over at once, nothing left to clean up in LiveKit."""
    return Accepted(finish(replace(session, end_reason=reason), target, now))


def agent_started(session: Session) -> bool:
    """The current dispatch's agent has started: LiveKit reported its job, it joined, or (the
    room's first agent) it reported its state itself."""
    return session.agent_state not in AWAITING_AGENT


def replace_agent(session: Session, *, started: bool) -> Accepted[Session]:
    """The current dispatch's agent never `started`, or was lost: the next dispatch into the
    same room (same epoch), after the stale one is deleted. The agents known so far are
    replaced: their joins and leaves are fenced from now on. A lost agent had started, so the
    count of dispatches in a row that started nothing begins again."""
    retired = tuple(i for i in agent_identities(session) if i not in session.agents_replaced)
    attempt = next_attempt(session)
    generation = next_generation(session)
    replaced = replace(
        session,
        agent_attempt=attempt,
        agent_misses=0 if started else session.agent_misses + 1,
        agent_state="dispatching",
        agent_identity=None,
        agent_job=None,
        agent_dispatch=None,
        agents_replaced=(*session.agents_replaced, *retired),
        agent_generation=generation,
        agent_deadline=None,
        rotation=None,
    )
    room, epoch = session.room, session.room_epoch
    stale = DeleteDispatch(room, epoch, attempt)
    fresh = DispatchAgent(room, epoch, attempt, generation=generation)
    return Accepted(replaced, (stale, fresh))


def next_attempt(session: Session) -> int:
    """The attempt of the next dispatch into the room: after the serving agent's and the
    successor's."""
    rotating = session.rotation.attempt if session.rotation is not None else 0
    return max(session.agent_attempt, rotating) + 1


def next_generation(session: Session) -> int:
    """The generation of the next agent of the session: after the serving agent's and the
    successor's."""
    rotating = session.rotation.generation if session.rotation is not None else 0
    return max(session.agent_generation, rotating) + 1


def agent_identities(session: Session) -> tuple[str, ...]:
    """The identities the serving agent is known by (joined, or named by its job)."""
    known = (session.agent_identity, session.agent_job.identity if session.agent_job else None)
    return tuple(dict.fromkeys(i for i in known if i))


def give_up(session: Session, target: SessionState, reason: str, now: str) -> Accepted[Session]:
    """Failed while devices may be in the room (no agent could be had): over at once, the task
    FAILED, and the room cleaned up behind it as an end does (devices removed, their tokens
    revoked, the room deleted)."""
    ending = end(session, target, reason, now)
    return Accepted(finish(ending.state, target, now), ending.outbox)


def rebind(session: Session, target: SessionState, now: str) -> Accepted[Session]:
    """The room is lost: epoch + 1, a new room named with it, every device must join again.
    The agent that asked for the open operations is gone with the room: they are canceled."""
    epoch = session.epoch + 1
    room = room_name(session.session_id, epoch)
    ids = tuple(item.endpoint_id for item in session.endpoints if endpoints.accepts(item, "rebind"))
    reset = tuple(
        replace(item, joined_at=None, joined_epoch=None) if item.endpoint_id in ids else item
        for item in moved(session.endpoints, "rebind", ids)
    )
    rebound = replace(
        close_operations(session, now),
        epoch=epoch,
        bumps=(*session.bumps, EpochBump(epoch, "rebound")),
        rebinds=session.rebinds + 1,
        room=room,
        room_epoch=epoch,
        state=target,
        agent_state="dispatching",
        agent_identity=None,
        agent_attempt=1,
        agent_misses=0,
        agent_job=None,
        agent_dispatch=None,
        agents_replaced=(),
        agent_generation=next_generation(session),
        agent_deadline=None,
        rotation=None,
        agent_leaving=None,
        agent_handovers=0,
        active_endpoint_id=None,
        endpoints=reset,
    )
    create = CreateRoom(room, epoch, with_agent=True, generation=rebound.agent_generation)
    return Accepted(rebound, (create,))
