"""Spark's Kafka source schema, and decoded columns turned into Arrow batches of it.

Since PySpark 4.2 an Arrow batch from a Python data source must equal the declared
schema exactly (types and nullability), so the Arrow schema is derived from the Spark
one with PySpark's own converter, exactly as its worker does (``timezone="UTC"``).
"""

from __future__ import annotations

from functools import cache

import numpy as np
import pyarrow as pa
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from kompakt.pipeline.columns import RecordColumns, Slices

MICROS_PER_MILLI = 1000  # Kafka timestamps are ms; Spark TimestampType is us

HEADERS_TYPE = ArrayType(
    StructType([StructField("key", StringType()), StructField("value", BinaryType())])
)


def kafka_schema(include_headers: bool = True) -> StructType:
    """Spark's ``KafkaRecordToRowConverter`` schema (every field nullable, as in Spark)."""
    fields = [
        StructField("key", BinaryType()),
        StructField("value", BinaryType()),
        StructField("topic", StringType()),
        StructField("partition", IntegerType()),
        StructField("offset", LongType()),
        StructField("timestamp", TimestampType()),
        StructField("timestampType", IntegerType()),
    ]
    if include_headers:
        fields.append(StructField("headers", HEADERS_TYPE))
    return StructType(fields)


@cache
def arrow_schema(include_headers: bool = True) -> pa.Schema:
    from pyspark.sql.pandas.types import to_arrow_schema

    return to_arrow_schema(kafka_schema(include_headers), timezone="UTC")


def _validity(null: np.ndarray) -> pa.Buffer | None:
    if not null.any():
        return None
    return pa.py_buffer(np.packbits(~null, bitorder="little"))


def binary_array(s: Slices, type_: pa.DataType = pa.binary()) -> pa.Array:
    n = len(s.null)
    return pa.Array.from_buffers(
        type_,
        n,
        [_validity(s.null), pa.py_buffer(s.offsets), pa.py_buffer(s.data)],
        null_count=int(s.null.sum()),
    )


def _constant_string(text: str, n: int) -> pa.Array:
    raw = text.encode()
    offsets = (np.arange(n + 1, dtype=np.int64) * len(raw)).astype(np.int32)
    data = np.frombuffer(raw * n, np.uint8) if n else np.empty(0, np.uint8)
    return pa.Array.from_buffers(pa.string(), n, [None, pa.py_buffer(offsets), pa.py_buffer(data)])


def to_record_batch(
    cols: RecordColumns, topic: str, partition: int, include_headers: bool = True
) -> pa.RecordBatch:
    """One Arrow batch in the exact Kafka-source schema, without per-record Python work."""
    schema = arrow_schema(include_headers)
    n = len(cols)
    arrays = [
        binary_array(cols.key),
        binary_array(cols.value),
        _constant_string(topic, n),
        pa.array(np.full(n, partition, np.int32)),
        pa.array(cols.offset),
        pa.array(cols.timestamp * MICROS_PER_MILLI, pa.timestamp("us", tz="UTC")),
        pa.array(cols.timestamp_type),
    ]
    if include_headers:
        list_type = schema.field("headers").type
        struct_type = list_type.value_type
        entries = pa.StructArray.from_arrays(
            [binary_array(cols.header_key, pa.string()), binary_array(cols.header_value)],
            fields=list(struct_type),
        )
        arrays.append(
            pa.ListArray.from_arrays(pa.array(cols.header_offsets), entries, type=list_type)
        )
    return pa.RecordBatch.from_arrays(arrays, schema=schema)
