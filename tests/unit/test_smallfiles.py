"""One-row data files written from the driver: their statistics as Delta writes
them, what is refused, and the parquet Spark reads back. Pure logic, no JVM."""

from __future__ import annotations

import io
import json
import math

import pyarrow.parquet as pq
from pyspark.sql import types as T

from sparkqueue.store import STATS_COLUMNS, TASK_COLUMNS
from sparkqueue.store.smallfiles import parquet_bytes, stats_columns, stats_json

PAYLOAD = T.StructType([T.StructField("n", T.LongType()),
                        T.StructField("tags", T.ArrayType(T.StringType()))])
TABLE = T.StructType([T.StructField(n, t) for n, t in TASK_COLUMNS]
                     + [T.StructField("data", PAYLOAD)])
RECORD = {"status": "_lease", "utube": '{"files": ["a long description"]}' * 4,
          "lease_end": math.inf, "ttl_end": 1030.5, "next_event": 1030.5,
          "owner": "consumer-a", "change_token": "0123456789abcdef0123456789abcdef"}


def test_a_rows_statistics_are_its_values_and_null_counts_as_delta_writes_them() -> None:
    stats = json.loads(stats_json(RECORD, STATS_COLUMNS, TABLE) or "")
    values = {"status": "_lease", "lease_end": "Infinity", "ttl_end": 1030.5,
              "next_event": 1030.5, "owner": "consumer-a",
              "change_token": "0123456789abcdef0123456789abcdef"}
    assert stats == {"numRecords": 1, "minValues": values, "maxValues": values,
                     "nullCount": {c: int(c not in values) for c in STATS_COLUMNS}}


def test_what_delta_would_write_otherwise_is_refused() -> None:
    assert stats_json({**RECORD, "owner": "o" * 33}, STATS_COLUMNS, TABLE) is None, \
        "Delta keeps a prefix of a long string"
    assert stats_json({**RECORD, "ttl_end": math.nan}, STATS_COLUMNS, TABLE) is None
    assert stats_json(RECORD, [*STATS_COLUMNS, "data"], TABLE) is None, "a nested column"
    assert stats_columns({"delta.dataSkippingStatsColumns": "status, owner"}) == [
        "status", "owner"]
    assert stats_columns({}) is None, "Delta's default: the first 32 columns"
    assert stats_columns({"delta.dataSkippingStatsColumns": "status",
                          "delta.enableDeletionVectors": "true"}) is None
    assert stats_columns({"delta.dataSkippingStatsColumns": "status",
                          "delta.columnMapping.mode": "name"}) is None


def test_the_file_holds_the_row_in_the_tables_layout_the_rest_null() -> None:
    data = parquet_bytes(RECORD, TABLE)
    assert data is not None
    read = pq.read_table(io.BytesIO(data))
    assert read.column_names == TABLE.names
    row = read.to_pylist()[0]
    assert row == {c: RECORD.get(c) for c in TABLE.names}
    assert str(read.schema.field("data").type) == "struct<n: int64, tags: list<element: string>>"
    for odd in (T.CalendarIntervalType(), T.NullType(), T.DayTimeIntervalType(),
                T.ArrayType(T.MapType(T.StringType(), T.NullType()))):
        assert parquet_bytes(RECORD, T.StructType([T.StructField("data", odd)])) is None, odd
