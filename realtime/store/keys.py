"""Every Redis key, prefix and TTL of the service, named here and nowhere else.

Hash tags: every key of one task/session carries `{<sessionId>}`, so one Lua script touches one
Cluster slot. A task's tag is derived from its id (`tag_for_task`), which lets GetTask find a
task in one round trip without a lookup; a realtime session's id *is* that tag. Per-principal
indexes carry `{o:<ownerKey>}` and are written idempotently next to (never inside) a task commit.
"""

from __future__ import annotations

import hashlib
import uuid
from typing import Final

PREFIX: Final = "aim"

# uuid5 namespace for the task → tag derivation; changing it orphans every stored task
_TAG_NAMESPACE: Final = uuid.UUID("5b0b8a5e-3f1c-4d7e-9a57-0d4c7f9e2a61")

# idempotency keys outlive the task they point at by a day, so a late retry still replays
IDEMPOTENCY_GRACE_S: Final = 24 * 3600


def tag_for_task(task_id: str) -> str:
    """The hash tag (and, for realtime tasks, the session id) that belongs to `task_id`."""
    return str(uuid.uuid5(_TAG_NAMESPACE, task_id.lower()))


def task_key(task_id: str) -> str:
    """String: the task record (msgspec JSON)."""
    return f"{PREFIX}:{{{tag_for_task(task_id)}}}:task"


def owner_tasks_key(owner: str) -> str:
    """Sorted set: the owner's task ids scored by their last status time (ms)."""
    return f"{PREFIX}:{{o:{owner}}}:tasks"


def owner_task_info_key(owner: str) -> str:
    """Hash: task id → what ListTasks filters on (`[state, contextId]`, JSON), beside
    `owner_tasks_key`: a listing reads the index and fetches only the tasks of its page."""
    return f"{PREFIX}:{{o:{owner}}}:tasks:info"


def owner_rejected_tasks_key(owner: str) -> str:
    """Sorted set: the owner's REJECTED task ids scored by when they expire (ms); they leave
    the task index then, sooner than tasks of sessions (AIM_REJECTED_TASK_TTL_S)."""
    return f"{PREFIX}:{{o:{owner}}}:tasks:rejected"


def owner_task_index_keys(owner: str) -> list[str]:
    """The keys of the owner's task index, in the order `lua/lib/held_tasks.lua` takes them."""
    return [owner_tasks_key(owner), owner_task_info_key(owner), owner_rejected_tasks_key(owner)]


def owner_message_key(owner: str, message_id: str) -> str:
    """String: the task a message id created (SendMessage replay by messageId)."""
    digest = hashlib.sha256(message_id.encode()).hexdigest()[:32]
    return f"{PREFIX}:{{o:{owner}}}:msg:{digest}"


def owner_client_task_key(owner: str, client_task_id: str) -> str:
    """String: the task an A2A 0.1 client's own task id names (the 0.1 id map), with the digest
    of the request that created it; stored by the id's hash."""
    digest = hashlib.sha256(client_task_id.encode()).hexdigest()[:32]
    return f"{PREFIX}:{{o:{owner}}}:a2a01:{digest}"


# --- realtime sessions: every key below carries the session's tag {<sessionId>} ---------------
# a session's snapshot, task and outbox live as long as its task (AIM_TASK_TTL_S after the last
# change); its command outcomes, event stream and timeline for the replay window (profile §20,
# `engine/schedule.window_s`)
EVENTS_MAXLEN: Final = 1000  # approximate cap of a session's event stream (XADD MAXLEN ~)


def session_key(session_id: str) -> str:
    """Hash: `v` (snapshot version), `s` (snapshot, msgspec JSON)."""
    return f"{PREFIX}:{{{session_id}}}:session"


def session_task_key(session_id: str) -> str:
    """The task record of the session's task (same key as `task_key(taskId)`)."""
    return f"{PREFIX}:{{{session_id}}}:task"


def commands_key(session_id: str) -> str:
    """Hash: commandId → stored outcome of an applied command."""
    return f"{PREFIX}:{{{session_id}}}:cmd"


def events_key(session_id: str) -> str:
    """Stream: one entry per committed state change (capped)."""
    return f"{PREFIX}:{{{session_id}}}:events"


def outbox_key(session_id: str) -> str:
    """Hash: effectId → pending effect (removed once carried out)."""
    return f"{PREFIX}:{{{session_id}}}:outbox"


def outbox_due_key() -> str:
    """Sorted set: session ids with pending effects, scored by when to look again (ms).
    Cross-slot by nature; written idempotently next to each commit."""
    return f"{PREFIX}:outbox:due"


def owner_client_session_key(owner: str, client_session_id: str) -> str:
    """String: the session a clientSessionId created, with the digest of its create payload."""
    return f"{PREFIX}:{{o:{owner}}}:csid:{client_session_id.lower()}"


def owner_live_sessions_key(owner: str) -> str:
    """Sorted set: the owner's live session ids (limit per principal), scored by creation ms."""
    return f"{PREFIX}:{{o:{owner}}}:live"


def deliveries_key(session_id: str) -> str:
    """Hash: the session's events for the app's backend, seq → the body sent (profile §21);
    written by the commit, kept for the replay window or the retry bound, the longer."""
    return f"{PREFIX}:{{{session_id}}}:deliveries"


def delivery_state_key(session_id: str) -> str:
    """Hash: how each of those events fared (seq → attempts, status, error, next try),
    `next`, the seq to send next, and the backlog's drops (`lasting`, `d<seq>`, `dt`,
    `dropped`: commit.lua)."""
    return f"{PREFIX}:{{{session_id}}}:deliveries:state"


def deliveries_due_key() -> str:
    """Sorted set: session ids with events to send, scored by when to look again (ms).
    Cross-slot by nature; written idempotently next to each commit."""
    return f"{PREFIX}:deliveries:due"


def delivery_lease_key(session_id: str) -> str:
    """String: the token of the worker sending the session's events (PX lease)."""
    return f"{PREFIX}:{{{session_id}}}:deliverer"


def runner_lease_key(session_id: str) -> str:
    """String: the token of the runner currently carrying out the session's outbox (PX lease)."""
    return f"{PREFIX}:{{{session_id}}}:runner"


def timers_due_key() -> str:
    """Sorted set: armed timers (`<sessionId>|<kind>|<version>|<epoch>|<endpointId>`) scored by
    when they are due (ms); a worker claims one by moving its score past a lease."""
    return f"{PREFIX}:timers:due"


def reconciler_lease_key() -> str:
    """String: the token of the worker that runs the reconciler (PX lease; one across replicas).
    Its own hash tag, so the key has a slot of its own on Redis Cluster."""
    return f"{PREFIX}:{{reconciler}}:lease"


def agent_card_key() -> str:
    """Hash: `etag` of the Agent Card last served and `modified`, the time (Unix seconds) it was
    first served after another card; shared by every process, so each serves the same
    Last-Modified for the same card, restarts included. Its own hash tag; no TTL (one small
    key for the lifetime of the deployment)."""
    return f"{PREFIX}:{{card}}:modified"


# --- the operator API (profile §17) ---------------------------------------------------------
# a session's timeline keeps what its commits do not carry (replays, rejections, duplicate
# webhooks, LiveKit calls, refused timers); capped like the event stream, and expiring with its
# command outcomes (the replay window)
TIMELINE_MAXLEN: Final = 1000  # approximate cap of a session's timeline stream (XADD MAXLEN ~)


def timeline_key(session_id: str) -> str:
    """Stream: timeline entries written beside the commits (field `e`: the entry's JSON)."""
    return f"{PREFIX}:{{{session_id}}}:timeline"


def archive_key(session_id: str) -> str:
    """Hash: a compacted session's event stream and timeline, each as one compressed list of
    its entries (`events`, `timeline`: `records.pack_entries`), and the bounds of its event
    stream (`newest` and `oldest` ids, `first`: the oldest entry) for SubscribeToTask; it lives
    as long as the streams it replaced had left to live (profile §20)."""
    return f"{PREFIX}:{{{session_id}}}:archive"


def session_timers_key(session_id: str) -> str:
    """Hash: the session's armed timers (`aim:timers:due` members) → due time (ms); written
    with the due entries, removed with them, so an operator sees one session's timers without
    scanning every session's."""
    return f"{PREFIX}:{{{session_id}}}:timers"


def timer_causes_key(session_id: str) -> str:
    """Hash: the session's armed timers → the span of the commit that armed them (a W3C
    traceparent), so the span of a timer that fires links back; written and removed with the
    timers, only when that commit was traced."""
    return f"{PREFIX}:{{{session_id}}}:timer-causes"


def operator_sessions_key() -> str:
    """Sorted set: every session id scored by its last commit (ms), newest the highest; its own
    hash tag, so it has a slot of its own on Redis Cluster. Written (ZADD GT) in each commit's
    pipeline; entries older than the task TTL are pruned when it is read."""
    return f"{PREFIX}:{{ops}}:sessions"


# --- tenants (profile §24): every key of one tenant carries `{t:<digest of its name>}` -----------
# (no tenant: the digest of ""), so admission, release and a month of usage are each one script
# or one read on one slot


def _tenant_tag(tenant: str | None) -> str:
    digest = hashlib.sha256((tenant or "").encode()).hexdigest()[:32]
    return f"{PREFIX}:{{t:{digest}}}"


def tenant_live_key(tenant: str | None) -> str:
    """Sorted set: the tenant's admitted sessions that have not ended, scored by when they were
    admitted (ms, Redis time); each leaves it once, when its end is released (or when the
    reconciler finds it over or never created). It expires a task TTL after the last
    admission."""
    return f"{_tenant_tag(tenant)}:live"


def tenant_since_key(tenant: str | None) -> str:
    """String: the sum of the admission times (ms) of the sessions in `tenant_live_key`, kept
    with it by every script that adds or removes one (and expiring with it), so the time they
    have run is read without going through them."""
    return f"{_tenant_tag(tenant)}:live:since"


def tenant_starts_key(tenant: str | None) -> str:
    """Sorted set: the sessions the tenant started in the last minute, scored by when (ms,
    Redis time); trimmed by each admission."""
    return f"{_tenant_tag(tenant)}:starts"


def tenant_used_key(tenant: str | None) -> str:
    """Hash: the session time (ms) of the tenant's sessions that ended in the current UTC day
    (`day`: days since the epoch, `dms`) and month (`month`: yyyymm, `mms`), by Redis time;
    what the allowances are measured against, with the time of the sessions still live."""
    return f"{_tenant_tag(tenant)}:used"


def usage_key(tenant: str | None, day: str) -> str:
    """Hash: the usage of every session of `tenant` (None: sessions with no tenant) that ended
    on UTC `day` (YYYY-MM-DD, by Redis time), field the session id, value its usage as JSON
    (profile §24). Written once (HSETNX) by the release of the session's end, repeated when it
    is compacted; it expires AIM_USAGE_RETENTION_DAYS after its day."""
    return f"{_tenant_tag(tenant)}:usage:{day}"


def operator_tenant_sessions_key(tenant: str) -> str:
    """Sorted set: a tenant's sessions, like `operator_sessions_key` (same slot), so a tenant's
    operator lists its own sessions at a cost that does not grow with the other tenants'.
    Written beside it when the session's record names its tenant; it expires a task TTL
    after its last write, with the newest of its entries."""
    digest = hashlib.sha256(tenant.encode()).hexdigest()[:32]
    return f"{PREFIX}:{{ops}}:tenant:{digest}:sessions"
