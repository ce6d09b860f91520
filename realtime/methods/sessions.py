"""Realtime sessions: session.create (via SendMessage), GetSession, RegisterEndpoint,
JoinSession, EndSession, and CancelTask of a realtime task (profile §3, §4, §6); GetCommand is
with the commands (`methods/commands`)."""

from __future__ import annotations

import asyncio
import hashlib
from typing import Any, Final

import msgspec

from realtime.a2a import params as p
from realtime.a2a import sessions as views
from realtime.a2a import types as wire
from realtime.a2a.projection import task_metadata
from realtime.engine.core import CreateClaim
from realtime.engine.entries import Note
from realtime.engine.outcomes import Decided, Denied, Missing
from realtime.errors import (
    AllowanceExhausted,
    CommandConflict,
    InternalError,
    InvalidState,
    LimitExceeded,
    NotConfigured,
    TaskNotCancelable,
    TaskNotFound,
    Unavailable,
    method_name,
    task_ref,
    task_state,
)
from realtime.methods import tasks
from realtime.methods.commands import (
    Rendered,
    applied,
    error_of,
    execute,
    join_media,
    load_own,
    run_client_command,
)
from realtime.methods.context import Call, SessionDeps
from realtime.settings import Settings
from realtime.store import keys
from realtime.store.admissions import Refused, next_day_ms, next_month_ms
from realtime.store.records import Cause, SessionRecord, TaskRecord
from state_machines import Capabilities, Session
from state_machines import session as machine

PROVISIONING_WAIT_S: Final = 5.0
PROVISIONING: Final = "provisioning"
_CANONICAL: Final = msgspec.json.Encoder(order="sorted")
_ENCODER: Final = msgspec.json.Encoder()


def session_result(settings: Settings, session: Session, version: int) -> dict[str, Any]:
    url = settings.livekit_public_url or ""
    result: dict[str, Any] = msgspec.to_builtins(
        views.session_view(session, version=version, media_url=url)
    )
    return result


def _endpoint(session: Session, endpoint_id: str) -> dict[str, Any]:
    found = next(e for e in session.endpoints if e.endpoint_id == endpoint_id)
    result: dict[str, Any] = msgspec.to_builtins(views.endpoint_view(found))
    return result


def missing_capabilities(settings: Settings, create: p.SessionCreate) -> list[str]:
    """What the provider lacks for this session (profile §3 capability check)."""
    available = settings.provider_capabilities
    missing: list[str] = [cap for cap in create.required_capabilities if cap not in available]
    if create.requested.user_video_sources and "vision_input" not in available:
        missing.append("vision_input")
    if create.retention.transcript == "on" and "transcript_history" not in available:
        missing.append("transcript_history")
    return sorted(set(missing))


async def create_session(
    deps: SessionDeps, call: Call[p.SendParams], create: p.SessionCreate, data: Any
) -> wire.SendMessageResult:
    """SendMessage with a session.create part (`create`, decoded from its JSON `data`):
    idempotent by clientSessionId and messageId."""
    params = call.params
    config = params.configuration
    history_length = config.history_length if config is not msgspec.UNSET else None
    wait = not (config is not msgspec.UNSET and config.return_immediately)
    missing = missing_capabilities(deps.settings, create)
    if missing:
        return await tasks.send_message_rejected(
            deps.tasks,
            call,
            reason={"reason": "capability_unavailable", "missing": missing},
            text=(
                "The agent cannot serve this session: it lacks "
                + ", ".join(missing)
                + ". Remove these from the request or ask the operator to enable them."
            ),
        )
    unset = deps.settings.livekit_unset
    if unset:
        # said at once, before anything is stored, rather than after the blocking wait as if
        # LiveKit were briefly down (profile §14: media calls fail with -31012); not retryable:
        # the same request fails the same way until the operator configures LiveKit
        raise NotConfigured(
            f"LiveKit is not configured on this service ({', '.join(unset)} unset), so no "
            "realtime session can start; nothing was stored, and repeating the request will "
            "not help. Its operator sets them (docs/local-livekit.md runs one locally).",
            service="livekit",
            unset=unset,
        )
    owner = call.principal.key
    tenant = call.principal.tenant
    engine = deps.commands.engine
    limits = engine.admission.limits(tenant)
    digest = "sha256:" + hashlib.sha256(_CANONICAL.encode(data)).hexdigest()
    task_id = deps.new_id()
    now_ms = deps.now_ms()
    claim = CreateClaim(
        message_id=params.message.message_id,
        client_session_id=create.client_session_id,
        task_id=task_id,
        session_id=keys.tag_for_task(task_id),
        digest=digest,
        now_ms=now_ms,
        live_limit=limits.per_principal,
    )
    status, earlier = await engine.claim_create(owner, claim)
    if status == "tasks":
        raise tasks.tasks_limit(deps.settings, int(earlier) if earlier else None, now_ms)
    if status == "limit":
        raise LimitExceeded(
            f"You already have {limits.per_principal} live sessions; "
            "end one before starting another.",
            limit="live_sessions_per_principal",
            retry_after=5,
            allowed=limits.per_principal,
            count=limits.per_principal,
            scope="principal",
        )
    if status == "client":
        assert earlier is not None  # noqa: S101 - the claim stores "taskId digest"
        task_id, earlier_digest = earlier.split(" ", 1)
        if earlier_digest != digest:
            raise CommandConflict(
                f"clientSessionId {create.client_session_id} was already used with a different "
                "session.create payload; use a new clientSessionId for a new session.",
                details={"commandId": create.client_session_id, "method": method_name(call.method)},
            )
    elif status == "message":
        assert earlier is not None  # noqa: S101
        task_id = earlier
    session_id = keys.tag_for_task(task_id)
    existing = await deps.tasks.reads.get(task_id)
    created = False
    if existing is None:  # first attempt (or one that stopped before its commit): create
        admitted = await engine.admission.admit(tenant, session_id, limits)
        if isinstance(admitted, Refused):
            if status == "ok":  # nothing of a refused create stays
                await engine.unclaim_create(owner, claim)
            raise refusal(tenant, admitted)
        existing = await _commit_new(
            deps, call, create, task_id, session_id, now_ms, limits.max_session_s
        )
        created = existing is not None
        if existing is None:
            existing = await deps.tasks.reads.get(task_id)
    if existing is None or existing.owner != owner:
        raise InternalError("The session could not be created; retry the request.")
    if status == "ok" or created:  # whoever commits the session starts its provisioning
        existing = await _provision(deps, session_id, wait=wait) or existing
    else:  # the same messageId or clientSessionId again: the first create's task
        deps.commands.notes.command(
            session_id, method=call.method, command_id=None, outcome="replayed"
        )
    return wire.SendMessageResult(task=tasks.view(existing.task, history_length))


async def _commit_new(
    deps: SessionDeps,
    call: Call[p.SendParams],
    create: p.SessionCreate,
    task_id: str,
    session_id: str,
    now_ms: int,
    max_s: int,
) -> TaskRecord | None:
    message = call.params.message
    context_id = message.context_id or deps.new_id()
    decision = machine.new_session(
        session_id=session_id,
        task_id=task_id,
        context_id=context_id,
        client_session_id=create.client_session_id,
        requested=machine.Requested(
            user_video_sources=tuple(create.requested.user_video_sources),
            agent_video_sources=tuple(create.requested.agent_video_sources),
            interactions=tuple(create.requested.interactions),
        ),
        required_capabilities=tuple(create.required_capabilities),
        transcript=create.retention.transcript,
        now=wire.timestamp(now_ms),
        rotate_after_s=deps.settings.agent_rotate_after_s,
        max_s=max_s,
    )
    session = decision.state
    task = TaskRecord(
        owner=call.principal.key,
        version=session.task_version,
        created_at=wire.timestamp(now_ms),
        status_ms=now_ms,
        task=wire.Task(
            id=task_id,
            context_id=context_id,
            status=wire.TaskStatus(state=session.task_state, timestamp=wire.timestamp(now_ms)),
            history=[tasks.user_message(message, task_id=task_id, context_id=context_id)],
            metadata=task_metadata(session),
        ),
    )
    record = SessionRecord(
        owner=call.principal.key,
        principal_name=call.principal.subject,
        session=session,
        tenant=call.principal.tenant,
    )
    created = await deps.commands.engine.create(
        record, decision, task, Note(Cause.CREATE, method=call.method)
    )
    return task if created else None


def refusal(tenant: str | None, refused: Refused) -> LimitExceeded | AllowanceExhausted:
    """The error of a session its tenant's limits refused (profile §24)."""
    whose = "This service" if tenant is None else f"Tenant {tenant}"  # no claim: one tenant
    if refused.by in ("day", "month"):
        period = "UTC day" if refused.by == "day" else "UTC month"
        resets_ms = (next_day_ms if refused.by == "day" else next_month_ms)(refused.at_ms)
        return AllowanceExhausted(
            f"{whose} has used its {refused.limit // 60_000} session minutes of this {period}; "
            f"no session starts before it resets at {wire.timestamp(resets_ms)}.",
            allowance=f"session_minutes_per_{refused.by}",
            allowed=refused.limit // 60_000,
            used=refused.reached // 60_000,
            resets_at=wire.timestamp(resets_ms),
            resets_in=max(1, -(-(resets_ms - refused.at_ms) // 1000)),
        )
    if refused.by == "live":
        return LimitExceeded(
            f"{whose} has {refused.reached} live sessions, as many as it may; "
            "end one before starting another.",
            limit="live_sessions",
            retry_after=5,
            allowed=refused.limit,
            count=refused.reached,
            scope="tenant",
        )
    wait_s = max(1, -(-refused.wait_ms // 1000))
    return LimitExceeded(
        f"{whose} started {refused.reached} sessions in the last minute, as many as it may; "
        f"retry after {wait_s} s.",
        limit="starts_per_minute",
        retry_after=wait_s,
        allowed=refused.limit,
        count=refused.reached,
        scope="tenant",
    )


async def _provision(deps: SessionDeps, session_id: str, *, wait: bool) -> TaskRecord | None:
    """Start provisioning now; when the caller waits, until ready/failed (at most 5 s: the
    worker's retries may land within it). Still provisioning after failures → -31012, and
    provisioning goes on in the background."""
    running = deps.commands.runner.start(session_id)
    if not wait:
        return None
    deadline = deps.clock() + PROVISIONING_WAIT_S
    # the run started here usually provisions the session: its end is when to look (without
    # cancelling it at the deadline); a run that left the work to another runner or a retry
    # ends early, and the session is then watched until the deadline
    await asyncio.wait({running}, timeout=PROVISIONING_WAIT_S)
    while True:
        loaded = await deps.sessions.load(session_id, with_outbox=True)
        state = loaded.record.session.state if loaded.record else None
        failing = any(entry.attempts > 0 for entry in loaded.outbox or ())
        if state != PROVISIONING or deps.clock() >= deadline:
            break
        await asyncio.sleep(0.05)
    if state == PROVISIONING and failing:
        raise Unavailable(
            "LiveKit is unreachable, so the session could not be provisioned yet; it is retried "
            "in the background. Repeat the same request to get the session's task.",
            service="livekit",
        )
    return loaded.task


async def get_session(deps: SessionDeps, call: Call[p.GetSessionParams]) -> Any:
    loaded = await load_own(deps, call.params.session_id, call.principal.key, with_outbox=True)
    assert loaded.record is not None  # noqa: S101
    view = session_result(deps.settings, loaded.record.session, loaded.version)
    outbox = loaded.outbox or []
    # LiveKit work still to do for this session; `retrying` > 0 means it has been failing
    view["effects"] = {
        "pending": len(outbox),
        "retrying": sum(1 for entry in outbox if entry.attempts > 0),
    }
    return {"session": view}


async def register_endpoint(deps: SessionDeps, call: Call[p.RegisterEndpointParams]) -> Any:
    params = call.params
    caps = params.capabilities
    event = machine.RegisterEndpoint(
        epoch=params.session_epoch,
        endpoint_id=deps.new_id(),
        client_endpoint_key=params.client_endpoint_key,
        capabilities=Capabilities(
            caps.audio_input, caps.audio_output, caps.camera, caps.screen, tuple(caps.interactions)
        ),
        max_endpoints=deps.settings.max_endpoints_per_session,
    )

    def render(decided: Decided) -> dict[str, Any]:
        session = decided.session
        endpoint = next(
            e for e in session.endpoints if e.client_endpoint_key == params.client_endpoint_key
        )
        return {
            "session": session_result(deps.settings, session, decided.version),
            "endpoint": _endpoint(session, endpoint.endpoint_id),
        }

    return await run_client_command(
        deps.commands, call, params.session_id, params.command_id, event, render
    )


async def join_session(deps: SessionDeps, call: Call[p.JoinSessionParams]) -> Any:
    params = call.params

    def render(decided: Decided) -> Rendered:
        join = join_media(deps.settings, decided)
        result = views.JoinResult(
            session=msgspec.Raw(
                _ENCODER.encode(session_result(deps.settings, decided.session, decided.version))
            ),
            endpoint=msgspec.Raw(_ENCODER.encode(_endpoint(decided.session, params.endpoint_id))),
            media=views.JoinMediaView(
                binding=views.MEDIA_BINDING,
                url=join.url,
                room=join.room,
                identity=join.identity,
                token="",  # not stored: signed from the stored claims into every reply
                expires_at=wire.timestamp(join.expires_at_ms),
            ),
        )
        return Rendered(result, join.claims)

    return await run_client_command(
        deps.commands,
        call,
        params.session_id,
        params.command_id,
        machine.Join(
            params.session_epoch,
            params.endpoint_id,
            max_handoffs_per_minute=deps.settings.max_handoffs_per_minute,
        ),
        render,
    )


async def end_session(deps: SessionDeps, call: Call[p.EndSessionParams]) -> Any:
    params = call.params

    def render(decided: Decided) -> dict[str, Any]:
        return {"session": session_result(deps.settings, decided.session, decided.version)}

    return await run_client_command(
        deps.commands,
        call,
        params.session_id,
        params.command_id,
        machine.End(params.reason),
        render,
    )


def _not_cancelable(record: TaskRecord) -> TaskNotCancelable:
    task, state = task_ref(record.task.id), task_state(record.task.status.state)
    return TaskNotCancelable(
        ("Task ", task, " is ", state, " and can no longer be canceled."),
        details={"taskId": task, "state": state},
    )


async def cancel_realtime_task(
    deps: SessionDeps, record: TaskRecord, owner: str, history_length: int | None
) -> wire.Task:
    """CancelTask of a realtime task ends its session (endReason `canceled`)."""
    metadata = record.task.metadata
    session_id = metadata[wire.REALTIME_EXTENSION]["sessionId"] if metadata else ""
    outcome = await execute(
        deps.commands,
        session_id,
        machine.Cancel(),
        owner=owner,
        note=Note(Cause.COMMAND, method="CancelTask"),
    )
    if isinstance(outcome, Missing):
        raise TaskNotFound(record.task.id)
    if isinstance(outcome, Denied) and isinstance(error_of(outcome), InvalidState):
        task = task_ref(record.task.id)
        raise TaskNotCancelable(
            ("Task ", task, " can no longer be canceled: its session is ending or over."),
            details={"taskId": task, "state": task_state(record.task.status.state)},
        )
    return tasks.view(applied(outcome).task.task, history_length)


async def cancel_task(deps: SessionDeps, call: Call[p.TaskParams]) -> wire.Task:
    """CancelTask (the task read once): a realtime task ends its session. A task without a
    session is only ever stored REJECTED (SendMessage refused it): terminal, like any task
    whose session is over."""
    record = await tasks.load_own_task(deps.tasks, call.principal.key, call.params.id)
    metadata = record.task.metadata
    realtime = metadata is not msgspec.UNSET and wire.REALTIME_EXTENSION in metadata
    if not realtime or record.task.status.state in wire.TERMINAL_STATES:
        raise _not_cancelable(record)
    return await cancel_realtime_task(deps, record, call.principal.key, call.params.history_length)
