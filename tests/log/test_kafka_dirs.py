"""kompakt opens log dirs shaped like Apache Kafka's, with segments built by another writer."""

from __future__ import annotations

from kafka.record.default_records import DefaultRecordBatchBuilder

from kompakt.log.manager import LogManager
from kompakt.record.encode import build_simple_batch
from kompakt.record.header import set_base_offset


def kafka_python_batch(base_offset: int, n: int, codec: int) -> bytes:
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=codec,
        is_transactional=False,
        producer_id=-1,
        producer_epoch=-1,
        base_sequence=-1,
        batch_size=1 << 20,
    )
    for i in range(n):
        builder.append(
            i, timestamp=1_700_000_000_000 + i, key=b"k%d" % i, value=b"v" * 40, headers=[]
        )
    data = bytearray(builder.build())
    set_base_offset(data, 0, base_offset)
    return bytes(data)


def test_opens_kafka_layout_without_indexes_or_kompakt_metadata(tmp_path):
    """Kafka LogLoader: missing indexes are rebuilt; a dir of .log files is a valid log."""
    part = tmp_path / "orders-0"
    part.mkdir(parents=True)
    seg0 = b"".join(kafka_python_batch(o, 5, c) for o, c in [(0, 0), (5, 1), (10, 2)])
    seg1 = b"".join(kafka_python_batch(o, 5, c) for o, c in [(15, 3), (20, 4)])
    (part / "00000000000000000000.log").write_bytes(seg0)
    (part / "00000000000000000015.log").write_bytes(seg1)
    (tmp_path / "meta.properties").write_text("version=1\nnode.id=1\ncluster.id=abc\n")
    m = LogManager(tmp_path)
    plog = m.get_log("orders", 0)
    assert plog.log_end_offset == 25
    assert [s.base_offset for s in plog.segments] == [0, 15]
    offsets = [r.offset for b in plog.iter_batches() for r in b.records()]
    assert offsets == list(range(25))
    assert plog.append(build_simple_batch([(b"x", b"y")], timestamp=1)).first_offset == 25
    assert m.cluster_id == "abc"
    m.close()


def test_roll_when_offsets_overflow_int32_relative_to_segment_base(tmp_path):
    """Kafka LogSegment.shouldRoll: !canConvertToRelativeOffset(maxOffsetInMessages)."""
    part = tmp_path / "t-0"
    part.mkdir(parents=True)
    far = 2**31 - 3  # a cleaned log can leave such gaps inside one segment
    data = bytearray(build_simple_batch([(b"a", b"1")], timestamp=1))
    set_base_offset(data, 0, far)
    (part / "00000000000000000000.log").write_bytes(bytes(data))
    m = LogManager(tmp_path)
    plog = m.get_log("t", 0)
    assert plog.log_end_offset == far + 1
    info = plog.append(build_simple_batch([(b"k%d" % i, b"v") for i in range(10)], timestamp=2))
    assert info.first_offset == far + 1
    assert [s.base_offset for s in plog.segments] == [0, far + 1]
    m.close()
