"""`serve` freezes what start-up allocated (`create_app(settle_heap=True)`), so a full garbage
collection under load no longer walks the application's long-lived objects."""

from __future__ import annotations

import gc
import warnings

import httpx

from realtime.app import create_app
from realtime.settings import Settings
from tests.conftest import TEST_SECRET, serving


async def test_the_heap_is_frozen_once_the_app_has_started(store) -> None:
    gc.unfreeze()
    # what earlier tests left to the collector (their clients' sockets, closed as they are
    # collected) is collected now, not frozen with this app and said to be this test's
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResourceWarning)
        gc.collect()
    settings = Settings(auth_hs256_secret=TEST_SECRET, rate_limit_rps=0)
    app = create_app(settings, store=store, settle_heap=True)
    try:
        async with serving(app) as base_url, httpx.AsyncClient(base_url=base_url) as http:
            assert (await http.get("/healthz")).status_code == 200
            assert gc.get_freeze_count() > 0
    finally:
        gc.unfreeze()  # give the objects back to the collector: other tests build other apps


async def test_an_app_built_without_it_leaves_the_collector_alone(store) -> None:
    gc.unfreeze()
    settings = Settings(auth_hs256_secret=TEST_SECRET, rate_limit_rps=0)
    app = create_app(settings, store=store)
    async with serving(app) as base_url, httpx.AsyncClient(base_url=base_url) as http:
        assert (await http.get("/healthz")).status_code == 200
        assert gc.get_freeze_count() == 0
