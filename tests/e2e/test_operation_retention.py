"""Transcript retention (profile §7, §10, §13): with `retention.transcript: off` the words a user
types or the agent speaks reach the agent but are kept nowhere — not in Redis, not in spans."""

from __future__ import annotations

import pytest

from realtime.store.redis_client import RedisClient
from tests.e2e.agent_operation_helpers import (
    get_task,
    interact,
    meta,
    open_session,
    provider_call,
    quiet,
    wait_for_data,
)
from tests.e2e.realtime_helpers import new_id

pytestmark = pytest.mark.e2e


async def redis_values(store: RedisClient) -> list[tuple[str, bytes]]:
    """(key, value) for every value in every key of the test's Redis, whatever its type."""
    client = store.client
    found: list[tuple[str, bytes]] = []
    async for raw_key in client.scan_iter(count=500):
        key = raw_key.decode() if isinstance(raw_key, bytes) else raw_key
        kind = await client.type(raw_key)
        kind = kind.decode() if isinstance(kind, bytes) else kind
        values: list = [raw_key]
        if kind == "string":
            values.append(await client.get(raw_key))
        elif kind == "hash":
            for field, value in (await client.hgetall(raw_key)).items():
                values += [field, value]
        elif kind == "list":
            values += await client.lrange(raw_key, 0, -1)
        elif kind == "set":
            values += list(await client.smembers(raw_key))
        elif kind == "zset":
            values += [member for member, _ in await client.zrange(raw_key, 0, -1, withscores=True)]
        elif kind == "stream":
            for entry_id, fields in await client.xrange(raw_key):
                values.append(entry_id)
                for field, value in fields.items():
                    values += [field, value]
        else:
            raise AssertionError(f"unexpected Redis type {kind} of {key}")
        found += [(key, v if isinstance(v, bytes) else str(v).encode()) for v in values]
    return found


async def keys_holding(store: RedisClient, marker: str) -> list[str]:
    needle = marker.encode()
    return sorted({key for key, value in await redis_values(store) if needle in value})


def spans_holding(span_exporter, marker: str) -> list[str]:
    hits = []
    for span in span_exporter.get_finished_spans():
        texts = [span.name, *(str(v) for v in (span.attributes or {}).values())]
        for event in span.events:
            texts.append(event.name)
            texts += [str(v) for v in (event.attributes or {}).values()]
        if span.status.description:
            texts.append(span.status.description)
        if any(marker in text for text in texts):
            hits.append(span.name)
    return hits


async def test_with_retention_off_the_words_are_kept_nowhere(
    rt_client, livekit, store, span_exporter
):
    live = await open_session(rt_client, livekit, transcript="off")
    typed = f"typed-secret-{new_id()}"
    spoken = f"spoken-secret-{new_id()}"
    sent = await interact(rt_client, live.sid, "input.text", {"text": typed})
    assert "result" in sent, sent
    (body,) = await wait_for_data(livekit, live.room, "input.text")
    assert body["payload"] == {"text": typed}  # the agent hears it
    _, refused, _ = await provider_call(
        rt_client,
        live.provider_token,
        "AppendTranscript",
        sessionId=live.sid,
        sessionEpoch=1,
        itemId=f"item-{new_id()}",
        role="agent",
        text=spoken,
    )
    assert refused["error"]["code"] == -31009, refused
    assert meta(refused)["missing"] == "transcript"
    assert spoken not in str(refused)
    task = await get_task(rt_client, live.task_id)
    assert typed not in str(task)
    assert spoken not in str(task)
    await quiet()  # let the outbox finish its work before looking
    assert await keys_holding(store, typed) == []
    assert await keys_holding(store, spoken) == []
    assert spans_holding(span_exporter, typed) == []
    assert spans_holding(span_exporter, spoken) == []


async def test_with_retention_on_the_words_join_the_history(rt_client, livekit, store):
    """The positive control of the test above: the same scan finds kept words."""
    live = await open_session(rt_client, livekit, transcript="on")
    typed = f"typed-kept-{new_id()}"
    command_id = new_id()
    sent = await interact(rt_client, live.sid, "input.text", {"text": typed}, command_id=command_id)
    assert "result" in sent, sent
    await wait_for_data(livekit, live.room, "input.text")
    history = (await get_task(rt_client, live.task_id))["history"]
    assert history[-1]["role"] == "ROLE_USER"
    assert history[-1]["messageId"] == command_id
    assert history[-1]["parts"] == [{"text": typed}]
    assert await keys_holding(store, typed) != []
