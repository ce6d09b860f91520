"""The per-process session cache: bounded, least recently used out first, never going back to
an older version of a session it holds."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from realtime.store.cache import Entry, SessionCache


def entry(version: int) -> Entry:
    record: Any = f"record at {version}"  # the cache keeps what it is given, as it is
    return Entry(record, version, None)


def test_the_least_recently_used_session_goes_first() -> None:
    cache = SessionCache(2)
    cache.put("a", entry(1))
    cache.put("b", entry(1))
    assert cache.get("a") == entry(1)  # now "b" is the least recently used
    cache.put("c", entry(1))
    assert cache.get("b") is None
    assert cache.get("a") == entry(1)
    assert cache.get("c") == entry(1)
    assert len(cache) == 2


def test_an_older_version_never_replaces_a_newer_one() -> None:
    cache = SessionCache(4)
    cache.put("a", entry(5))
    cache.put("a", entry(3))  # a slow read that started before the commit of version 5
    assert cache.get("a") == entry(5)
    cache.put("a", entry(6))
    assert cache.get("a") == entry(6)
    cache.drop("a")
    assert cache.get("a") is None
    cache.drop("a")  # dropping what is not there is nothing


def test_zero_entries_keeps_nothing() -> None:
    cache = SessionCache(0)
    cache.put("a", entry(1))
    assert cache.get("a") is None
    assert len(cache) == 0


@given(
    st.integers(min_value=1, max_value=8),
    st.lists(st.tuples(st.sampled_from("abcdefghij"), st.integers(0, 20)), max_size=60),
)
def test_the_cache_is_bounded_and_keeps_the_newest_version_it_holds(
    size: int, puts: list[tuple[str, int]]
) -> None:
    cache = SessionCache(size)
    for session_id, version in puts:
        held = cache.get(session_id)
        cache.put(session_id, entry(version))
        assert len(cache) <= size
        kept = version if held is None else max(held.version, version)
        assert cache.get(session_id) == entry(kept)
