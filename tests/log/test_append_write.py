"""How an append writes a produced record set: in place of a copy, each batch's new
offset and leader epoch are written beside its records (Kafka's ``LogValidator``
assigns them in the request's own buffer), the whole set in one write."""

from __future__ import annotations

from kompakt.record.decode import iter_batches
from kompakt.record.encode import build_simple_batch

TS = 1_700_000_000_000


def batches_of(n: int, first: int = 0, max_timestamp: int | None = None) -> bytes:
    return b"".join(
        build_simple_batch(
            [(b"k%d" % i, b"v%d" % i)],
            timestamp=TS + i,
            **({} if max_timestamp is None else {"max_timestamp": max_timestamp}),
        )
        for i in range(first, first + n)
    )


def test_the_produced_bytes_are_not_changed_by_the_append(manager):
    """The offsets stamped on disk are not written into the caller's buffer: a retry of
    the same bytes (an idempotent producer's) still carries the producer's offsets."""
    manager.create_topic("t", 1)
    plog = manager.get_log("t", 0)
    plog.append(batches_of(3))
    data = bytearray(batches_of(2, first=3))
    before = bytes(data)
    info = plog.append(data)
    assert (info.first_offset, info.last_offset) == (3, 4)
    assert data == before
    stored = list(iter_batches(plog.read(0, 1 << 20)))
    assert [b.header.base_offset for b in stored] == [0, 1, 2, 3, 4]
    assert all(b.is_valid() for b in stored)


def test_a_record_set_of_more_batches_than_one_vectored_write_takes_is_written_whole(manager):
    """700 batches make 1,400 pieces (new head, records), past the 1,024 buffers one
    ``pwritev`` takes on Linux: they are written joined, every batch at its offset."""
    manager.create_topic("t", 1)
    plog = manager.get_log("t", 0)
    plog.append(batches_of(1))
    info = plog.append(batches_of(700, first=1))
    assert (info.first_offset, info.last_offset, info.batch_count) == (1, 700, 700)
    seg = plog.active_segment
    assert seg.size == len(b"".join(b.buffer for b in seg.iter_batches()))
    stored = list(seg.iter_batches())
    assert [b.header.base_offset for b in stored] == list(range(701))
    assert all(b.is_valid() for b in stored)
    assert [r.value for b in stored[-2:] for r in b.records()] == [b"v699", b"v700"]


def test_batches_whose_max_timestamp_changes_and_those_kept_share_one_write(manager):
    """A batch whose maxTimestamp the producer set wrong is rewritten with a new CRC
    (Kafka's ``setMaxTimestamp``); its neighbours keep their bytes past the first 16."""
    manager.create_topic("t", 1)
    plog = manager.get_log("t", 0)
    data = batches_of(1) + batches_of(1, first=1, max_timestamp=TS + 99) + batches_of(1, 2)
    plog.append(data)
    stored = list(plog.active_segment.iter_batches())
    assert [b.header.max_timestamp for b in stored] == [TS, TS + 1, TS + 2]
    assert all(b.is_valid() for b in stored)
    given = list(iter_batches(data))
    for kept in (0, 2):
        assert bytes(stored[kept].buffer[16:]) == bytes(given[kept].buffer[16:])
    assert plog.active_segment.max_timestamp == TS + 2
