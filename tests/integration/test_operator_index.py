"""The operator's listing of a tenant reads an index of that tenant's own (profile §19): each
tenant's sessions under a key of its own, which expires."""

from __future__ import annotations

import pytest

from realtime.store import keys
from tests.conftest import service
from tests.e2e.operator_api_helpers import TENANT_CLAIM, start_sessions

pytestmark = pytest.mark.redis


async def test_a_tenants_sessions_are_indexed_under_a_key_of_its_own(livekit, store):
    async with service(livekit, store, auth_tenant_claim=TENANT_CLAIM) as http:
        await start_sessions(http, {"acme": 1, "globex": 3})

    assert await store.client.zcard(keys.operator_tenant_sessions_key("acme")) == 1
    assert await store.client.zcard(keys.operator_tenant_sessions_key("globex")) == 3
    assert await store.client.ttl(keys.operator_tenant_sessions_key("acme")) > 0
