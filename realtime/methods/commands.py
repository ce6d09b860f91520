"""Commands for the methods: applied exactly once through the engine, answered with their stored
result, and every outcome the engine does not apply turned into the error a caller acts on.

A command's result is rendered by its method from the engine's `Decided` (the session, version
and task as they will be committed; a JoinSession's render issues its token, `Rendered`) and
stored in the same commit; the reply is always the stored result, so the first answer, every
replay and GetCommand are the same bytes.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final, NamedTuple

import msgspec

from realtime.a2a import params as p
from realtime.a2a.sessions import JoinResult
from realtime.engine.core import AnyEvent, Engine, until_committed
from realtime.engine.entries import Command, Note, params_digest
from realtime.engine.outcomes import (
    Applied,
    Contended,
    Decided,
    Denied,
    Missing,
    Outcome,
    Replayed,
    Reused,
)
from realtime.errors import (
    CommandConflict,
    CommandNotFound,
    ServiceError,
    SessionNotFound,
    Unavailable,
    method_name,
)
from realtime.livekit_adapter.tokens import JoinMedia, issue_join, sign_join_token
from realtime.methods.context import Call, Commands, SessionDeps
from realtime.methods.rejections import reject
from realtime.settings import Settings
from realtime.store.records import CommandOutcome, Loaded

_JOIN: Final = msgspec.json.Decoder(JoinResult)
_ENCODER: Final = msgspec.json.Encoder()


class Rendered(NamedTuple):
    """A command's result, and the claims of the join token it issued (`issue_join`): stored
    with the outcome, and signed into every reply by `stored_result`."""

    result: Any
    token_claims: dict[str, Any] | None = None


# a command's result from the decision it is stored with (a Rendered when it issues a token)
Render = Callable[[Decided], Any]


def command_of(call: Call[Any], command_id: str) -> Command:
    return Command(call.method, command_id, params_digest(call.method, call.params))


async def load_own(
    deps: SessionDeps,
    session_id: str,
    owner: str,
    command_id: str | None = None,
    *,
    with_outbox: bool = False,
) -> Loaded:
    """The caller's session (another principal's is not found, like a missing one)."""
    loaded = await deps.sessions.load(session_id, command_id, with_outbox=with_outbox)
    if loaded.record is None or loaded.record.owner != owner:
        raise SessionNotFound(session_id)
    return loaded


def error_of(outcome: Denied | Missing | Contended | Reused) -> ServiceError:
    """The error an outcome that applied nothing is for the caller."""
    match outcome:
        case Denied(rejection, session):
            return reject(rejection, session)
        case Missing(session_id):
            return SessionNotFound(session_id)
        case Contended():
            return Unavailable(
                "The session is changing too fast to apply this command; retry it.",
                service="redis",
            )
        case Reused(stored, command):
            method = method_name(stored.method)
            return CommandConflict(
                (
                    f"commandId {command.command_id} was already used for a different ",
                    method,
                    " request; use a new commandId for a new command.",
                ),
                details={"commandId": command.command_id, "method": method},
            )


async def execute(
    commands: Commands,
    session_id: str,
    event: AnyEvent,
    *,
    owner: str | None = None,
    command: Command | None = None,
    result: bytes = b"",
    note: Note | None = None,
    context: bytes | None = None,
) -> Outcome:
    """Apply an event whose result is fixed (`Engine.execute`), and start the effects its
    commit stored."""
    outcome = await commands.engine.execute(
        session_id, event, owner=owner, command=command, result=result, note=note, context=context
    )
    return commands.runner.follow(outcome)


def applied(outcome: Outcome) -> Applied:
    """The applied event; any other outcome of an event without a command is raised."""
    if isinstance(outcome, Applied):
        return outcome
    if isinstance(outcome, Replayed):  # only commands replay, and they go through run_command
        raise TypeError("a replayed outcome for an event without a command")
    raise error_of(outcome)


def stored_result(settings: Settings, outcome: CommandOutcome) -> bytes:
    """A command's result as stored; a JoinSession's with its token signed from the claims."""
    if outcome.token_claims is None:
        return bytes(outcome.result)
    result = _JOIN.decode(outcome.result)
    media = msgspec.structs.replace(
        result.media, token=sign_join_token(settings, outcome.token_claims)
    )
    return _ENCODER.encode(msgspec.structs.replace(result, media=media))


async def get_command(deps: SessionDeps, call: Call[p.GetCommandParams]) -> Any:
    params = call.params
    await load_own(deps, params.session_id, call.principal.key)
    outcome = await deps.sessions.outcome(params.session_id, params.command_id)
    if outcome is None:
        raise CommandNotFound(
            f"No applied command {params.command_id} in this session. Only applied commands "
            "are stored, and only for the session's life and "
            f"{deps.settings.command_ttl_s} s after it ended; a rejected one can be sent "
            "again.",
            details={"commandId": params.command_id},
        )
    result = msgspec.Raw(stored_result(deps.settings, outcome))
    return {
        "command": {
            "commandId": outcome.command_id,
            "sessionId": params.session_id,
            "method": outcome.method,
            "status": "applied",
            "sessionEpoch": outcome.session_epoch,
            "createdAt": outcome.created_at,
            "result": result,
        }
    }


def join_media(settings: Settings, decided: Decided) -> JoinMedia:
    """The join token the decision asked for (a JoinSession's), as claims: its render stores
    them in `Rendered`, and `stored_result` signs them into each reply."""
    mint, record = decided.decision.token, decided.loaded.record
    if mint is None or record is None:  # an accepted Join always asks for a token
        raise TypeError("a join rendered without a token to issue")
    return issue_join(
        settings,
        mint,
        name=record.principal_name,
        session_id=decided.session_id,
        now_ms=decided.now_ms,
    )


async def apply_command(
    engine: Engine,
    session_id: str,
    event: AnyEvent,
    *,
    owner: str | None,
    command: Command,
    render: Render,
    note: Note | None = None,
) -> Applied | Replayed:
    """Apply a command exactly once: decide, render its result, commit both (again after a
    conflict). Applied (with its stored outcome) or Replayed; anything else is raised."""

    async def attempt() -> Outcome | None:
        decided = await engine.decide(session_id, event, owner=owner, command=command)
        if not isinstance(decided, Decided):
            return decided
        rendered = render(decided)
        if not isinstance(rendered, Rendered):
            rendered = Rendered(rendered)
        return await engine.commit(
            decided,
            result=_ENCODER.encode(rendered.result),
            token_claims=rendered.token_claims,
            note=note,
        )

    done: Outcome = await until_committed(session_id, attempt)
    if isinstance(done, Applied | Replayed):
        return done
    raise error_of(done)


async def run_command(
    commands: Commands,
    session_id: str,
    event: AnyEvent,
    *,
    owner: str | None,
    command: Command,
    render: Render,
    note: Note | None = None,
) -> msgspec.Raw:
    """Apply a command exactly once; its stored result, byte for byte. What no commit carries
    goes to the session's timeline: a replay, a command that applied without a change, and a
    rejection with its error (never one of a session that is not there or not the caller's, so
    nobody writes into a timeline they cannot see). Effects the commit stored are started."""
    notes = commands.notes
    try:
        done = await apply_command(
            commands.engine,
            session_id,
            event,
            owner=owner,
            command=command,
            render=render,
            note=note,
        )
    except ServiceError as error:
        if not isinstance(error, SessionNotFound):
            notes.command(
                session_id,
                method=command.method,
                command_id=command.command_id,
                outcome="rejected",
                error=error,
            )
        raise
    commands.runner.follow(done)
    if isinstance(done, Replayed) or not done.changed:
        notes.command(
            session_id,
            method=command.method,
            command_id=command.command_id,
            outcome="replayed" if isinstance(done, Replayed) else "applied",
        )
    return msgspec.Raw(stored_result(commands.settings, outcome_of(done)))


async def run_client_command(
    commands: Commands,
    call: Call[Any],
    session_id: str,
    command_id: str,
    event: AnyEvent,
    render: Render,
) -> msgspec.Raw:
    """A client's command on one of its own sessions (`run_command` with the caller as owner)."""
    return await run_command(
        commands,
        session_id,
        event,
        owner=call.principal.key,
        command=command_of(call, command_id),
        render=render,
    )


def outcome_of(done: Applied | Replayed) -> CommandOutcome:
    """The stored outcome of an applied command."""
    if done.outcome is None:  # the engine stores one with every command it applies
        raise TypeError("a command applied without an outcome")
    return done.outcome
