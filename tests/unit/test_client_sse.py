"""The client's SSE parser: any chunking of a valid text/event-stream, with any of its line
endings, comments and multi-line data, gives the same events as the stream in one piece."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from aim_realtime_client.stream import SseEvent, SseParser

line_text = st.text(
    alphabet=st.characters(blacklist_characters="\r\n\0", blacklist_categories=("Cs",)),
    max_size=20,
)
events = st.lists(
    st.fixed_dictionaries(
        {
            "id": st.one_of(st.none(), st.from_regex(r"\A[0-9]{1,13}-[0-9]{1,3}\Z")),
            "event": st.one_of(st.none(), st.sampled_from(["message", "error"])),
            "data": st.lists(line_text, min_size=1, max_size=3),
            "comment": st.one_of(st.none(), line_text),
        }
    ),
    max_size=6,
)


def render(items: list[dict], newline: str) -> bytes:
    out = []
    for item in items:
        if item["comment"] is not None:
            out.append(f":{item['comment']}{newline}")
        if item["id"] is not None:
            out.append(f"id: {item['id']}{newline}")
        if item["event"] is not None:
            out.append(f"event: {item['event']}{newline}")
        out.extend(f"data: {line}{newline}" for line in item["data"])
        out.append(newline)
    out.append(f": keepalive{newline}{newline}")
    return "".join(out).encode()


def expected(items: list[dict]) -> list[SseEvent]:
    last = None
    found = []
    for item in items:
        last = item["id"] if item["id"] is not None else last
        found.append(SseEvent("\n".join(item["data"]), item["event"] or "message", last))
    return found


def parse(chunks: list[bytes]) -> list[SseEvent]:
    parser = SseParser()
    return [event for chunk in chunks for event in parser.feed(chunk)]


@given(events, st.sampled_from(["\n", "\r\n", "\r"]), st.data())
def test_any_chunking_gives_the_same_events(items, newline, data):
    raw = render(items, newline)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(raw)), max_size=12)))
    chunks = [raw[a:b] for a, b in zip([0, *cuts], [*cuts, len(raw)], strict=True)]
    assert parse([raw]) == expected(items)
    assert parse(chunks) == expected(items)


def test_bytes_one_at_a_time_with_multibyte_characters():
    raw = 'id: 1-0\ndata: {"text": "héllo ✓"}\n\n'.encode()
    assert parse([bytes([b]) for b in raw]) == [SseEvent('{"text": "héllo ✓"}', "message", "1-0")]


def test_the_id_persists_and_an_empty_one_clears_it():
    raw = b"id: 5-1\ndata: a\n\ndata: b\n\nid\ndata: c\n\n"
    assert [e.id for e in parse([raw])] == ["5-1", "5-1", None]


def test_fields_without_a_space_unknown_fields_and_blocks_without_data():
    raw = b"data:x\nretry: 10\nfoo: bar\n\nid: 2-0\n\n: only a comment\n\n"
    assert parse([raw]) == [SseEvent("x")]
