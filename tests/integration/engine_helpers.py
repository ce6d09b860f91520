"""Sessions created straight through the engine on a store, as SendMessage creates them."""

from __future__ import annotations

import time
import uuid

from realtime.a2a import types as wire
from realtime.a2a.projection import task_metadata
from realtime.engine.core import Engine
from realtime.engine.outcomes import Applied
from realtime.store import keys
from realtime.store.records import SessionRecord, TaskRecord
from state_machines import Provisioned
from state_machines import session as machine

OWNER = "0123456789abcdef0123456789abcdef"


def new_id() -> str:
    return str(uuid.uuid4())


async def new_session(engine: Engine, *, provisioned: bool = True) -> str:
    """Create a session like SendMessage does (version 1), optionally made ready (version 2)."""
    task_id = new_id()
    session_id = keys.tag_for_task(task_id)
    now = wire.timestamp(int(time.time() * 1000))
    decision = machine.new_session(
        session_id=session_id,
        task_id=task_id,
        context_id=new_id(),
        client_session_id=new_id(),
        requested=machine.Requested(
            user_video_sources=(), agent_video_sources=(), interactions=("text",)
        ),
        required_capabilities=("audio_input", "audio_output"),
        transcript="off",
        now=now,
    )
    session = decision.state
    task = TaskRecord(
        owner=OWNER,
        version=session.task_version,
        created_at=now,
        status_ms=int(time.time() * 1000),
        task=wire.Task(
            id=task_id,
            context_id=session.context_id,
            status=wire.TaskStatus(state=session.task_state, timestamp=now),
            metadata=task_metadata(session),
        ),
    )
    record = SessionRecord(owner=OWNER, principal_name="alice", session=session)
    assert await engine.create(record, decision, task)
    if provisioned:
        assert isinstance(await engine.execute(session_id, Provisioned(1)), Applied)
    return session_id
