"""One-row data files written from the driver: an ingest's cursor marker and a
take's lease record, as parquet bytes with the statistics Delta would give
them, so that a commit of nothing else runs no Spark job.

A Spark write of a row or two still plans, schedules and runs a job, the
only one a recorded take ran; pyarrow writes the same file without one.
Whatever these functions cannot write exactly as Delta would (a type not
plain, a value Delta's statistics would truncate or spell otherwise, a
table that wants more than plain files) they refuse (None), and the
caller writes through Spark.
"""

from __future__ import annotations

import io
import json
import math
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from pyspark.sql import types as T

#: Delta keeps a string column's statistics to this many characters
#: (``delta.dataSkippingStringPrefixLength``); a longer value is refused here.
STRING_PREFIX = 32
#: Table settings under which Delta's files carry more than data and statistics.
PLAIN_FILES = {"delta.enableDeletionVectors": "false", "delta.columnMapping.mode": "none"}
#: The setting naming the columns whose statistics Delta keeps.
STATS_SETTING = "delta.dataSkippingStatsColumns"


def stats_columns(configuration: Mapping[str, str]) -> list[str] | None:
    """The columns a table's statistics cover, as its ``configuration`` names them;
    None where the files need more than this module writes (no such setting:
    Delta's default, the first 32 columns, nested fields apart; deletion vectors;
    column mapping)."""
    if any(configuration.get(k, v).lower() != v for k, v in PLAIN_FILES.items()):
        return None
    named = configuration.get(STATS_SETTING)
    return [c.strip() for c in named.split(",")] if named else None


def stats_json(row: Mapping[str, Any], columns: Sequence[str],
               table: T.StructType) -> str | None:
    """A one-row file's statistics as Delta writes them in its ``add`` action: the
    row count, min and max (the value itself) of non-null values, and null
    counts, for ``columns``. None where Delta would write something else: a
    column not flat or not a number or string, a string longer than
    :data:`STRING_PREFIX`, a NaN."""
    types = {f.name: f.dataType for f in table.fields}
    values: dict[str, Any] = {}
    for col in columns:
        kind, value = types.get(col), row.get(col)
        if not isinstance(kind, (T.LongType, T.IntegerType, T.DoubleType, T.StringType)):
            return None
        if value is None:
            continue
        if isinstance(kind, T.StringType):
            if len(value) > STRING_PREFIX:
                return None
        elif isinstance(kind, T.DoubleType):
            if math.isnan(value):
                return None
            value = value if math.isfinite(value) else ("Infinity" if value > 0 else "-Infinity")
        values[col] = value
    nulls = {col: int(row.get(col) is None) for col in columns}
    return json.dumps({"numRecords": 1, "minValues": values, "maxValues": values,
                       "nullCount": nulls}, separators=(",", ":"))


def parquet_bytes(row: Mapping[str, Any], table: T.StructType) -> bytes | None:
    """A parquet file of the one ``row`` (column name -> value; absent: NULL) laid
    out as the ``table``'s schema, as Spark's reader reads it; None when one of
    its columns is of a type not :func:`plain`, or Arrow has none for it."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    from pyspark.sql.pandas.types import to_arrow_schema

    if not plain(table):
        return None
    try:
        arrow = to_arrow_schema(table, timezone="UTC")
    except (TypeError, ValueError, NotImplementedError):
        return None
    batch = pa.table({f.name: pa.array([row.get(f.name)], type=f.type) for f in arrow},
                     schema=arrow)
    out = io.BytesIO()
    pq.write_table(batch, out, compression="snappy", use_dictionary=False)  # as the tube writes
    return out.getvalue()


#: Types whose parquet form from Arrow Spark reads back as the same type.
PLAIN_TYPES = (T.BooleanType, T.ByteType, T.ShortType, T.IntegerType, T.LongType, T.FloatType,
               T.DoubleType, T.DecimalType, T.StringType, T.BinaryType, T.DateType,
               T.TimestampType, T.TimestampNTZType)


def plain(kind: T.DataType) -> bool:
    """Whether ``kind`` is made of :data:`PLAIN_TYPES` alone (in structs, arrays, maps)."""
    if isinstance(kind, T.StructType):
        return all(plain(f.dataType) for f in kind.fields)
    if isinstance(kind, T.ArrayType):
        return plain(kind.elementType)
    if isinstance(kind, T.MapType):
        return plain(kind.keyType) and plain(kind.valueType)
    return isinstance(kind, PLAIN_TYPES) and not isinstance(kind, (T.CharType, T.VarcharType))


def file_name() -> str:
    """A new data file's name, as Spark names the files of a write."""
    return f"part-00000-{uuid.uuid4()}-c000.snappy.parquet"
