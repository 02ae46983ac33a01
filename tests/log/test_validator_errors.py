"""Every record error of a refused record set is listed (KIP-467's ``RecordError`` per
offending record, as Kafka's ``LogValidator.processRecordErrors`` reports them), also
beyond the number the compiled pass keeps on its first walk."""

from __future__ import annotations

import pytest

from kompakt.errors import CorruptRecordError, InvalidRecordError
from kompakt.log import validator
from kompakt.log.config.topic import TopicConfig
from kompakt.record import codecs
from kompakt.record.decode import Record
from kompakt.record.encode import assemble_batch, build_batch
from kompakt.record.header import CRC_POS
from kompakt.record.varint import write_varint

NOW = 1_700_000_000_000


@pytest.mark.parametrize("codec", [codecs.NONE, codecs.ZSTD])
def test_more_keyless_records_than_kept_at_first_are_all_listed(codec):
    n = validator.ERRORS_KEPT + 5
    recs = [Record(i, NOW, None if i % 2 else b"k", b"v", []) for i in range(2 * n)]
    data = build_batch(recs, compression=codec)
    cfg = TopicConfig({"cleanup.policy": "compact"}, {})
    with pytest.raises(InvalidRecordError) as err:
        validator.validate(data, cfg, "t-0", NOW)
    assert [i for i, _m in err.value.record_errors] == list(range(1, 2 * n, 2))
    assert f"due to {n} record errors in total" in str(err.value)


def _record(tail: bytes) -> bytes:
    """One record whose body after its value is ``tail`` (where the headers belong)."""
    body = bytearray(b"\x00")  # attributes
    write_varint(body, 0)  # timestamp delta
    write_varint(body, 0)  # offset delta
    write_varint(body, 1)
    body += b"k"
    write_varint(body, 1)
    body += b"v"
    body += tail
    out = bytearray()
    write_varint(out, len(body))
    return bytes(out + body)


def _one_record_batch(record: bytes, codec: int) -> bytes:
    payload = codecs.compress(codec, record) if codec else record
    return assemble_batch(0, -1, codec, 0, NOW, NOW, -1, -1, -1, 1, payload)


@pytest.mark.parametrize("codec", [codecs.NONE, codecs.ZSTD])
@pytest.mark.parametrize(
    ("tail", "why"),
    [
        (b"\x00\x07", "Invalid record size"),  # no headers, then a stray byte
        (b"\x02\x02h", "Found invalid record structure"),  # a header whose value is cut
        (b"", "Found invalid record structure"),  # the header count missing
    ],
)
def test_a_record_whose_headers_do_not_fill_it_is_refused(codec, tail, why):
    """Kafka's DefaultRecord.readFrom (and readPartiallyFrom for a compressed batch) reads
    the headers and requires them to end where the record's length says; a record with
    bytes after its headers, or headers overrunning it, is refused, nothing written."""
    data = _one_record_batch(_record(tail), codec)
    with pytest.raises(CorruptRecordError, match=why):
        validator.validate(data, TopicConfig({}, {}), "t-0", NOW)


def test_a_negative_header_count_is_refused_uncompressed():
    """Kafka's DefaultRecord.readFrom: "Found invalid number of record headers -1"."""
    data = _one_record_batch(_record(b"\x01"), codecs.NONE)
    with pytest.raises(CorruptRecordError, match="Found invalid number of record headers -1"):
        validator.validate(data, TopicConfig({}, {}), "t-0", NOW)


def test_well_formed_headers_are_accepted():
    data = _one_record_batch(_record(b"\x02\x02h\x02x"), codecs.NONE)  # one header h=x
    assert validator.validate(data, TopicConfig({}, {}), "t-0", NOW)[1] == [NOW]


def test_a_crc_mismatch_is_refused_though_every_record_is_well_formed():
    """Kafka's LogValidator.validateBatch (``batch.ensureValid()``): CORRUPT_MESSAGE for
    a stored CRC that does not match, whatever a pass over the records found first."""
    data = bytearray(build_batch([Record(i, NOW, b"k", b"v", []) for i in range(3)]))
    data[CRC_POS] ^= 0xFF
    with pytest.raises(CorruptRecordError, match="CRC mismatch"):
        validator.validate(bytes(data), TopicConfig({}, {}), "t-0", NOW)


@pytest.mark.parametrize("trusted", [False, True])
def test_an_empty_or_cut_record_set_is_refused_from_a_producer_and_the_broker_alike(
    manager, trusted
):
    """validator.batches_of is every append's first step: a coordinator's own append
    (Kafka's AppendOrigin.COORDINATOR, ``trusted``) skips the client checks, not this."""
    manager.create_topic("t", 1)
    plog = manager.get_log("t", 0)
    whole = build_batch([Record(offset=0, timestamp=1, key=b"k", value=b"v")])
    for bad in (b"", whole + whole[:20]):
        with pytest.raises(CorruptRecordError, match="empty or ends in a partial batch"):
            plog.append(bad, trusted=trusted)
    assert plog.log_end_offset == 0
