"""LiveKit webhooks: verified with livekit-api's receiver, reduced to what the service uses.

The receiver checks the JWT in the raw `Authorization` value (no Bearer prefix) against each
accepted signer (`AIM_LIVEKIT_WEBHOOK_KEYS`) and the `sha256` claim against the exact body.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import timedelta
from typing import Final

from livekit import api

from realtime.livekit_adapter.api import attempt_of
from realtime.settings import Settings
from state_machines.session_model import MAX_EPOCH

LEEWAY: Final = timedelta(seconds=60)  # LiveKit's own skew allowance on exp/nbf


class WebhookRejected(Exception):  # noqa: N818 - reads as a condition
    """Unsigned, wrongly signed, expired or hash-mismatched: answer 401, change nothing."""


@dataclass(frozen=True, slots=True)
class Notice:
    """A verified webhook, as plain values."""

    event: str
    event_id: str
    created_at: int
    room: str
    identity: str
    is_agent: bool
    participant_epoch: int | None  # sessionEpoch from the participant's token metadata
    track_source: str
    job: JobNotice | None = None  # agent_job_started / agent_job_ended


@dataclass(frozen=True, slots=True)
class JobNotice:
    """The agent job an `agent_job_*` webhook is about (livekit/protocol#1711)."""

    job_id: str
    dispatch_id: str
    agent_name: str
    attempt: int  # the dispatch's attempt, from the metadata the service gave it (1 if none)
    identity: str  # the identity its agent joins with ("" before LiveKit knows it)


def verify(settings: Settings, body: bytes, authorization: str) -> Notice:
    """The verified notice, or WebhookRejected."""
    if not authorization or not settings.livekit_webhook_keys:
        raise WebhookRejected("no webhook keys set" if authorization else "missing signature")
    try:
        text = body.decode()
    except UnicodeDecodeError:
        raise WebhookRejected("body is not UTF-8") from None
    event = None
    for key, secret in settings.livekit_webhook_keys:
        receiver = api.WebhookReceiver(api.TokenVerifier(key, secret, leeway=LEEWAY))
        try:
            event = receiver.receive(text, authorization)
            break
        except Exception:  # noqa: BLE001,S112 - any failure means "not this signer"
            continue
    if event is None:
        raise WebhookRejected("signature, expiry or body hash did not verify")
    participant = event.participant
    job = event.job if event.HasField("job") and event.job.id else None
    return Notice(
        event=event.event,
        event_id=event.id,
        created_at=int(event.created_at),
        # a job's webhook names its room in the job (and, from LiveKit, beside it too)
        room=event.room.name or (job.room.name if job is not None else ""),
        identity=participant.identity,
        is_agent=participant.kind == api.ParticipantInfo.Kind.AGENT,
        participant_epoch=_epoch_from_metadata(participant.metadata),
        track_source=_source_name(event.track.source) if event.track.sid else "",
        job=(
            JobNotice(
                job_id=job.id,
                dispatch_id=job.dispatch_id,
                agent_name=job.agent_name,
                attempt=attempt_of(job.metadata),
                identity=job.state.participant_identity,
            )
            if job is not None
            else None
        ),
    )


def _source_name(source: int) -> str:
    """`camera`, `microphone`, …; "" for a source newer than this livekit-api knows."""
    try:
        return api.TrackSource.Name(source).lower()
    except ValueError:
        return ""


def _epoch_from_metadata(metadata: str) -> int | None:
    """The token's `sessionEpoch` when it is one the service can have issued, else None."""
    try:
        value = json.loads(metadata).get("sessionEpoch") if metadata else None
    except (ValueError, AttributeError, RecursionError):
        return None  # not JSON, not an object, an integer past Python's digit limit, too deep
    valid = isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= MAX_EPOCH
    return value if valid else None
