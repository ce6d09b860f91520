"""Session events sent by `aim-realtime worker` processes (profile §21): a worker killed with
SIGKILL in the middle of its deliveries loses none and reorders none; the next worker sends the
event it was sending again, with the same webhook-id."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from realtime.app import create_app
from tests.conftest import serving
from tests.e2e.realtime_helpers import call, new_id
from tests.event_receivers import SECRET, receiver
from tests.worker_processes import create_ready, need_redis, outputs, settings_for

pytestmark = [pytest.mark.redis, pytest.mark.e2e, pytest.mark.slow]

SESSIONS = 4
# created, ready, then ended: each session's whole life
TYPES = ["session.created", "session.ready", "session.ended"]


async def test_a_worker_killed_mid_delivery_loses_and_reorders_nothing(
    store, livekit, workers, redis_url, tmp_path: Path
) -> None:
    need_redis(redis_url)
    async with receiver(tmp_path) as got:
        got.answer(200, delay_s=0.4)  # slow enough that the kill lands mid-delivery
        env = {
            "AIM_EVENTS_URL": got.url,
            "AIM_EVENTS_SECRET": SECRET,
            "AIM_EVENTS_TIMEOUT_S": "2",
        }
        settings = settings_for(livekit, events_url=got.url, events_secret=SECRET)
        app = create_app(settings, store=store, run_worker=False)
        async with serving(app) as base, httpx.AsyncClient(base_url=base, timeout=30) as http:
            session_ids = await create_ready(http, SESSIONS)
            for sid in session_ids:
                ended = await call(
                    http, "EndSession", sessionId=sid, commandId=new_id(), reason="done"
                )
                assert "result" in ended, ended
            first = await workers("a", env=env)
            await got.wait_for(lambda: len(got.requests()) >= 3, within=60)
            await first.kill()
            killed_after = len(got.requests())
            second = await workers("b", env=env)
            try:
                await got.wait_for(
                    lambda: all(
                        {e["seq"] for e in got.delivered(sid)} == {1, 2, 3} for sid in session_ids
                    ),
                    within=60,
                )
            except AssertionError:
                raise AssertionError(outputs(first, second)) from None
    assert killed_after < SESSIONS * len(TYPES), "the kill came after every delivery"
    # the killed worker may have been cut off in the middle of a body: that one request is
    # not whole (so not verified); every whole one is signed right
    whole = [r for r in got.requests() if r["complete"]]
    assert len(got.requests()) - len(whole) <= 1, got.requests()
    assert all(r["verified"] for r in whole)
    for sid in session_ids:
        arrived = got.delivered(sid)
        # in order: an event arrives only after every one before it; a repeat (the one the
        # killed worker was sending) comes right after itself, never after a later one
        seqs = [e["seq"] for e in arrived]
        assert seqs == sorted(seqs), arrived
        assert list(dict.fromkeys(seqs)) == [1, 2, 3], arrived
        assert [e["type"] for e in {e["seq"]: e for e in arrived}.values()] == TYPES
        ids = {r["webhookId"] for r in whole if r["event"]["sessionId"] == sid}
        assert ids == {f"{sid}:{n}" for n in (1, 2, 3)}
