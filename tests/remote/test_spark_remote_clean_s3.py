"""The Spark engine's remote clean against an S3 endpoint (moto's server; conftest.py
says what it does not prove): the executors open the bucket themselves from its URL and
endpoint, with the AWS credentials the driver's job carries, fetch the segments and
upload the cleaned ones through the real S3 client; the objects are byte for byte what
the in-process engine uploads to a folder bucket from the same input."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_remote_clean import CONFIGS, tiered
from test_remote_engine import TOPIC, all_objects, fill_mixed, remote_state, shape, spark_cleaner


@pytest.mark.slow
@pytest.mark.parametrize("single_task_bytes", [None, 0], ids=["one-task", "spread"])
def test_spark_remote_clean_on_s3_matches_the_in_process_one(
    spark, tmp_path: Path, s3_url: str, s3_endpoint: str, single_task_bytes: int | None
):
    logs, _plog, tier, local, _clock, want = tiered(tmp_path / "file", fill_mixed)
    logs.close()
    logs, _plog, s3, _local, clock, _want = tiered(tmp_path / "s3", fill_mixed, s3_url, s3_endpoint)
    logs.close()
    remote = spark_cleaner(s3, s3_url, clock, spark, single_task_bytes, s3_endpoint)
    a = local.clean(tier.metadata.load_partition(TOPIC, 0), CONFIGS, 0)
    b = remote.clean(s3.metadata.load_partition(TOPIC, 0), CONFIGS, 0)
    assert a is not None and b is not None
    assert shape(a.manifest.value) == shape(b.manifest.value)
    assert all_objects(s3, b.manifest.value) == all_objects(tier, a.manifest.value)
    assert remote_state(s3, b.manifest.value) == want
