"""The ``kompakt`` PySpark data source: topics of a data dir as Spark's Kafka schema.

Read::

    spark.read.format("kompakt").option("path", DATA_DIR).option("subscribe", "t1,t2").load()

with Spark's Kafka-source options (``subscribe``, ``subscribePattern``, ``assign``,
``startingOffsets``, ``endingOffsets``, ``failOnDataLoss``, ``minPartitions``,
``includeHeaders``) plus ``maxBytesPerPartition`` (segment bytes per input partition)
and ``kafka.isolation.level`` (``read_committed`` by default: as a READ_COMMITTED fetch,
up to the last stable offset and without aborted transactions). Planning (driver) and reading (executors) work on the files directly
and read-only, without the data dir's ``.lock``, so a running broker is not disturbed.

Deliberate difference from Spark's Kafka source: ``headers`` is part of the schema
unless ``includeHeaders=false`` (Spark adds it only with ``includeHeaders=true``),
because kompakt's DESIGN names it part of the schema.

Write: ``df.write.format("kompakt").option("path", DIR).option("topic", T)
.mode("append").save()``; see :mod:`kompakt.pipeline.write` for the commit protocol.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.types import StructType

from kompakt.pipeline import options as opt
from kompakt.pipeline.plan import plan_ranges, read_committed
from kompakt.pipeline.read import RangeToRead, read_range
from kompakt.pipeline.schema import kafka_schema
from kompakt.pipeline.write import KompaktWriter

NAME = "kompakt"


class RangePartition(InputPartition):
    """One offset range of one topic-partition (picklable, built on the driver)."""

    def __init__(self, value: RangeToRead):
        super().__init__(value)


def _include_headers(options) -> bool:
    return (opt.get_option(options, "includeHeaders", "true") or "").lower() != "false"


class KompaktDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return NAME

    def schema(self) -> StructType:
        return kafka_schema(_include_headers(self.options))

    def reader(self, schema: StructType) -> DataSourceReader:
        return KompaktReader(dict(self.options), schema)

    def writer(self, schema: StructType, overwrite: bool) -> KompaktWriter:
        return KompaktWriter(dict(self.options), overwrite)


class KompaktReader(DataSourceReader):
    def __init__(self, options: dict[str, str], schema: StructType):
        self.options = options
        self.include_headers = "headers" in schema.fieldNames()
        self.read_committed = read_committed(options)

    def partitions(self) -> Sequence[InputPartition]:
        ranges = plan_ranges(self.options)
        return [RangePartition(r) for r in ranges if r.end > r.start]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if partition.value is None:  # Spark's stand-in when there is nothing to read
            return iter(())
        return read_range(partition.value, self.include_headers, self.read_committed)
