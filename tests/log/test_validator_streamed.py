"""Issue 26: a record set validated with its compressed batches streamed (the path of a
batch whose expansion is large) finds what the in-memory validation finds: the same
KIP-467 ``RecordError`` indexes and messages, the same maxTimestamps (Kafka's
``LogValidator.validateRecord`` on every record, whichever iterator reads it)."""

from __future__ import annotations

import pytest

from kompakt.errors import InvalidRecordError, InvalidTimestampError
from kompakt.log import validator
from kompakt.log.config.topic import TopicConfig
from kompakt.record import codecs
from kompakt.record.decode import Record
from kompakt.record.encode import build_batch

NOW = 1_700_000_000_000
DAY = 86_400_000


def _record_set(null_key: bool, old: bool) -> bytes:
    out = b""
    for n, codec in enumerate([codecs.NONE, codecs.ZSTD, codecs.GZIP, codecs.LZ4]):
        recs = []
        for i in range(50):
            key = None if null_key and i % 9 == n else b"k%d" % i
            ts = NOW - 400 * DAY if old and i % 13 == n else NOW + i
            recs.append(Record(i, ts, key, b"v" * (i * 40), []))
        out += build_batch(recs, compression=codec)
    return out


def _outcome(data: bytes, cfg: TopicConfig):
    try:
        return validator.validate(data, cfg, "t-0", NOW)[1]
    except (InvalidRecordError, InvalidTimestampError) as exc:
        return type(exc).__name__, str(exc), exc.record_errors


@pytest.mark.parametrize(
    ("props", "null_key", "old"),
    [
        ({"cleanup.policy": "compact"}, True, False),
        ({"message.timestamp.before.max.ms": str(DAY)}, False, True),
        ({"cleanup.policy": "compact", "message.timestamp.before.max.ms": str(DAY)}, True, True),
        ({}, False, False),
    ],
)
def test_streamed_validation_matches_in_memory(monkeypatch, props, null_key, old):
    cfg = TopicConfig(props, {})
    data = _record_set(null_key, old)
    in_memory = _outcome(data, cfg)
    monkeypatch.setattr(validator, "IN_MEMORY_EXPANSION", 0)  # every compressed batch streams
    assert _outcome(data, cfg) == in_memory
    monkeypatch.setattr(validator, "IN_MEMORY_EXPANSION", 3000)  # some in memory, some not
    assert _outcome(data, cfg) == in_memory
