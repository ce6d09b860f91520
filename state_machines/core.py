"""The one entry of the functional core: `decide(session, event, *, now)` for every event a
session meets — client commands, LiveKit webhooks, timers, effect follow-ups, provider calls.

Routing is one `match` over `AnyEvent` that ends in `assert_never`: an event added to a union
but handled nowhere fails type checking. Each family (`session_rules`, `interactions`,
`provider`) applies its own rules; what every accepted decision shares is done once, afterwards,
by `settle`.
"""

from __future__ import annotations

from typing import assert_never

from state_machines import interactions, provider, session_rules
from state_machines._base import Accepted, Rejected
from state_machines.interactions import (
    AgentMedia,
    Deliver,
    InteractionEvent,
    Resolve,
    TrackChanged,
    UserMedia,
)
from state_machines.provider import (
    AckInteractions,
    AppendTranscript,
    ProviderEvent,
    ReportAgentState,
    ReportDeadline,
    RequestOperation,
    SaveContext,
    UpdateOperation,
)
from state_machines.session_events import (
    AgentDeadline,
    AgentDispatched,
    AgentJobEnded,
    AgentJobStarted,
    AgentStartTimeout,
    Cancel,
    End,
    GraceExpired,
    IdleTimeout,
    Join,
    LeaveGrace,
    MaxDuration,
    ParticipantJoined,
    ParticipantLeft,
    Provisioned,
    ProvisioningFailed,
    ProvisioningTimeout,
    RegisterEndpoint,
    RoomDeleted,
    RoomLost,
    RotationDue,
    SessionEvent,
)
from state_machines.session_model import LIVE_STATES, Session, is_idle, replace, settle_task
from state_machines.usage import account

AnyEvent = SessionEvent | InteractionEvent | ProviderEvent


def decide(session: Session, event: AnyEvent, *, now: str) -> Accepted[Session] | Rejected:
    """Apply `event` to `session`: the next session with what the shell must do (outbox, join
    token, history), or a rejection that changes nothing. `now` is the shell's RFC 3339 time."""
    outcome: Accepted[Session] | Rejected
    match event:
        case (
            Provisioned()
            | ProvisioningFailed()
            | ProvisioningTimeout()
            | RegisterEndpoint()
            | Join()
            | ParticipantJoined()
            | ParticipantLeft()
            | GraceExpired()
            | IdleTimeout()
            | MaxDuration()
            | RoomLost()
            | End()
            | Cancel()
            | RoomDeleted()
            | AgentDispatched()
            | AgentJobStarted()
            | AgentJobEnded()
            | AgentStartTimeout()
            | RotationDue()
            | AgentDeadline()
            | LeaveGrace()
        ):
            outcome = session_rules.apply(session, event, now=now)
        case Deliver() | UserMedia() | AgentMedia() | Resolve() | TrackChanged():
            outcome = interactions.apply(session, event, now=now)
        case (
            RequestOperation()
            | UpdateOperation()
            | ReportAgentState()
            | AppendTranscript()
            | ReportDeadline()
            | SaveContext()
            | AckInteractions()
        ):
            outcome = provider.apply(session, event, now=now)
        case _:
            assert_never(event)
    if isinstance(outcome, Rejected):
        return outcome
    return settle(session, outcome, now, activity=isinstance(event, Deliver))


def settle(
    before: Session, decision: Accepted[Session], now: str, *, activity: bool = False
) -> Accepted[Session]:
    """What every accepted decision shares, applied once after the family's rules:

    - the task follows the session (`settle_task`): its state becomes `derive_task_state`, and
      `task_version` grows by one exactly when the task changes (its state, or the open
      requirement its status shows); a session that is over cancels its open operations;
    - becoming idle (ready, no active endpoint) is counted in `idles`, which names idle timers;
    - a session that is no longer live keeps no unacknowledged interaction (profile §23);
    - the usage clocks start and stop with the move (`state_machines.usage`, profile §24);
    - `updated_at = now` exactly when the session changed, or when the event is `activity` (a
      message delivered to the agent, which changes nothing else).
    """
    after = account(before, settle_task(decision.state, now), now)
    if after.unacked and after.state not in LIVE_STATES:
        after = replace(after, unacked=())  # no successor will need them: the words go
    if is_idle(after) and not is_idle(before):
        after = replace(after, idles=before.idles + 1)
    if after != before or activity:
        after = replace(after, updated_at=now)
    return replace(decision, state=after)
