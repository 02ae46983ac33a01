"""Every record error of a refused record set is listed (KIP-467's ``RecordError`` per
offending record, as Kafka's ``LogValidator.processRecordErrors`` reports them), also
beyond the number the compiled pass keeps on its first walk."""

from __future__ import annotations

import pytest

from kompakt.errors import InvalidRecordError
from kompakt.log import validator
from kompakt.log.config.topic import TopicConfig
from kompakt.record import codecs
from kompakt.record.decode import Record
from kompakt.record.encode import build_batch

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
