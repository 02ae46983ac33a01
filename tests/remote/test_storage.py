"""RemoteStorageManager on both backends: a segment's files go up whole (Kafka's
``RemoteStorageManager.copyLogSegmentData``), come back byte-identical as a range of the
``.log`` (``fetchLogSegment(metadata, startPosition, endPosition)``) or a whole index
(``fetchIndex``), are verified against the checksums recorded at upload, and are deleted
(``deleteLogSegmentData``)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from kompakt.log.producer_snapshot import SNAPSHOT_SUFFIX
from kompakt.log.segment import INDEX_SUFFIX, LOG_SUFFIX, TIMEINDEX_SUFFIX, TXNINDEX_SUFFIX
from kompakt.remote.cache import ChunkCache
from kompakt.remote.layout import segments_folder
from kompakt.remote.storage import LocalSegmentFiles, RemoteStorageManager
from kompakt.remote.store import ChecksumMismatchError, ObjectStore, RemoteStorageError

CHUNK = 1000
SegmentMaker = Callable[..., LocalSegmentFiles]  # the make_segment fixture


def test_copy_then_fetch_ranges_byte_identical(
    store: ObjectStore, make_segment: SegmentMaker
) -> None:
    local = make_segment(100, 199, log_bytes=4 * CHUNK + 321)
    rsm = RemoteStorageManager(store, chunk_bytes=CHUNK)
    seg = rsm.copy_segment("orders", 3, local)
    assert (seg.base_offset, seg.last_offset, seg.size) == (100, 199, 4 * CHUNK + 321)
    assert len(seg.chunk_crcs) == 5 and set(seg.files) == set(local.files)
    log = local.files[LOG_SUFFIX].read_bytes()
    for start, end in [(0, 1), (0, len(log)), (999, 1001), (1500, 3999), (4000, 10**9), (0, 0)]:
        assert rsm.fetch_log_range(seg, start, end) == log[start:end], (start, end)
    for suffix in (INDEX_SUFFIX, TIMEINDEX_SUFFIX, TXNINDEX_SUFFIX, SNAPSHOT_SUFFIX, LOG_SUFFIX):
        assert rsm.fetch_file(seg, suffix) == local.files[suffix].read_bytes()
    assert sorted(o.key for o in store.list(segments_folder("orders", 3))) == sorted(seg.keys())


def test_a_segment_without_txnindex_uploads_what_it_has(
    store: ObjectStore, make_segment: SegmentMaker
) -> None:
    rsm = RemoteStorageManager(store, chunk_bytes=CHUNK)
    seg = rsm.copy_segment("t", 0, make_segment(0, 9, txnindex=False))
    assert TXNINDEX_SUFFIX not in seg.files
    with pytest.raises(RemoteStorageError, match="no .txnindex object"):
        rsm.fetch_file(seg, TXNINDEX_SUFFIX)


def test_every_upload_gets_a_fresh_id_so_nothing_is_overwritten(
    store: ObjectStore, make_segment: SegmentMaker
) -> None:
    rsm = RemoteStorageManager(store, chunk_bytes=CHUNK)
    local = make_segment(0, 9)
    a, b = rsm.copy_segment("t", 0, local), rsm.copy_segment("t", 0, local)
    assert a.segment_id != b.segment_id and not set(a.keys()) & set(b.keys())


def test_a_corrupted_object_is_detected_not_served(
    store: ObjectStore, make_segment: SegmentMaker
) -> None:
    """Bytes changed in the store after upload (bit rot, a bad copy, a buggy writer)
    fail the recorded checksum: the chunk's CRC32C on a range read, the SHA-256 on a
    whole-file read."""
    rsm = RemoteStorageManager(store, chunk_bytes=CHUNK)
    seg = rsm.copy_segment("t", 0, make_segment(0, 9, log_bytes=3 * CHUNK))
    log_key, index_key = seg.files[LOG_SUFFIX].key, seg.files[INDEX_SUFFIX].key
    data = bytearray(store.get(log_key)[0])
    data[CHUNK + 5] ^= 0x01
    store.put(log_key, bytes(data))
    assert rsm.fetch_log_range(seg, 0, CHUNK) == bytes(data[:CHUNK])  # chunk 0 is intact
    with pytest.raises(ChecksumMismatchError, match="chunk 1 .* fails its CRC32C"):
        rsm.fetch_log_range(seg, 0, 2 * CHUNK)
    with pytest.raises(ChecksumMismatchError, match="SHA-256"):
        rsm.fetch_file(seg, LOG_SUFFIX)
    store.put(index_key, store.get(index_key)[0][:-1])  # truncated
    with pytest.raises(ChecksumMismatchError, match="the manifest recorded 96 bytes"):
        rsm.fetch_file(seg, INDEX_SUFFIX)


def test_delete_segment_removes_every_object_and_is_idempotent(
    store: ObjectStore, make_segment: SegmentMaker
) -> None:
    rsm = RemoteStorageManager(store, chunk_bytes=CHUNK)
    keep = rsm.copy_segment("t", 0, make_segment(0, 9))
    gone = rsm.copy_segment("t", 0, make_segment(10, 19))
    rsm.delete_segment(gone)
    rsm.delete_segment(gone)
    assert sorted(o.key for o in store.list(segments_folder("t", 0))) == sorted(keep.keys())


def test_reads_through_the_cache_hit_without_a_request(
    store: ObjectStore, make_segment: SegmentMaker
) -> None:
    cache = ChunkCache(10 * CHUNK)
    rsm = RemoteStorageManager(store, cache=cache, chunk_bytes=CHUNK)
    local = make_segment(0, 9, log_bytes=3 * CHUNK)
    seg = rsm.copy_segment("t", 0, local)
    first = rsm.fetch_log_range(seg, 500, 2500)
    gets = rsm.stats.by_kind["get"]
    assert gets == 3 and cache.stats().misses == 3
    assert rsm.fetch_log_range(seg, 0, 3 * CHUNK) == local.files[LOG_SUFFIX].read_bytes()
    assert first == local.files[LOG_SUFFIX].read_bytes()[500:2500]
    assert rsm.stats.by_kind["get"] == gets and cache.stats().hits == 3
    rsm.delete_segment(seg)
    assert cache.stats().entries == 0


def test_upload_refuses_files_it_does_not_know(
    store: ObjectStore, make_segment: SegmentMaker
) -> None:
    local = make_segment(0, 9)
    odd = type(local)(0, 9, 0, {**local.files, ".cleaned": local.files[LOG_SUFFIX]})
    with pytest.raises(RemoteStorageError, match="need a .log and only"):
        RemoteStorageManager(store).copy_segment("t", 0, odd)
    assert store.list("topics") == []


def test_a_segment_larger_than_a_multipart_part_round_trips(
    store: ObjectStore, make_segment: SegmentMaker
) -> None:
    """12 MiB: over obstore's 5 MiB part size, so S3 receives a multipart upload."""
    rsm = RemoteStorageManager(store)  # the default 4 MiB chunks
    local = make_segment(0, 9, log_bytes=12 * 1024 * 1024 + 7)
    seg = rsm.copy_segment("t", 0, local)
    log = local.files[LOG_SUFFIX].read_bytes()
    assert (
        rsm.fetch_log_range(seg, 4 * 1024 * 1024 - 3, 8 * 1024 * 1024 + 3)
        == log[4 * 1024 * 1024 - 3 : 8 * 1024 * 1024 + 3]
    )
    assert rsm.fetch_file(seg, LOG_SUFFIX) == log
