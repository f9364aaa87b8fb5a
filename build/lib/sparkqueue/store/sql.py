"""Query text: SQL expressions over the tasks table's columns, and id filters."""

from __future__ import annotations

import math
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from . import schema


def sql_num(x: float | int) -> str:
    """A numeric SQL literal (doubles as CAST so inf and exponents are valid SQL)."""
    if isinstance(x, bool):  # pragma: no cover - guarded by validation
        raise TypeError("bool is not a number here")
    if isinstance(x, int):
        return str(int(x))
    if math.isinf(x):
        return "CAST('Infinity' AS DOUBLE)" if x > 0 else "CAST('-Infinity' AS DOUBLE)"
    return f"CAST({float(x)!r} AS DOUBLE)"


def sql_literal(value: Any, kind: str) -> str:
    """A SQL literal of type ``kind`` (long, double or string); NULL for None."""
    if value is None:
        return f"CAST(NULL AS {kind.upper()})"
    if kind == "string":
        return "'" + str(value).replace("\\", "\\\\").replace("'", "\\'") + "'"
    return sql_num(float(value)) if kind == "double" else f"CAST({int(value)} AS BIGINT)"


def quoted(name: str) -> str:
    """A column or field name as a SQL identifier (backquoted, inner backquotes doubled)."""
    return "`" + name.replace("`", "``") + "`"


def sql_type(kind: T.DataType) -> str:
    """``kind`` as SQL spells a column's type (DDL), every field name quoted."""
    if isinstance(kind, T.StructType):
        fields = ", ".join(f"{quoted(f.name)}: {sql_type(f.dataType)}"
                           for f in kind.fields)
        return f"STRUCT<{fields}>"
    if isinstance(kind, T.ArrayType):
        return f"ARRAY<{sql_type(kind.elementType)}>"
    if isinstance(kind, T.MapType):
        return f"MAP<{sql_type(kind.keyType)}, {sql_type(kind.valueType)}>"
    return kind.simpleString()


def effective_status(now: float, prefix: str = "") -> str:
    """SQL for a row's state at time ``now``, whether or not the sweeper has run.

    An ended ttl makes a task ``expired`` (gone: it reads as not found); a
    passed delay and an ended lease make it ``ready``.
    """
    p, n = prefix, sql_num(now)
    return (
        f"CASE WHEN {p}status = 'done' THEN 'done' "
        f"WHEN {p}ttl_end <= {n} THEN 'expired' "
        f"WHEN {p}status = 'delayed' AND {p}delay_end <= {n} THEN 'ready' "
        f"WHEN {p}status = 'taken' AND {p}lease_end <= {n} THEN 'ready' "
        f"ELSE {p}status END"
    )


def ready_when(now: float) -> str:
    """SQL: the row's state at ``now`` is ``ready`` (as :func:`effective_status` says).

    Spelled out over stored columns, so that Delta's data skipping drops the
    files where no row can be ready: all taken with live leases, all
    delayed into the future, all buried, all past their ttl.
    """
    n = sql_num(now)
    return (f"ttl_end > {n} AND (status = 'ready' "
            f"OR (status = 'delayed' AND delay_end <= {n}) "
            f"OR (status = 'taken' AND lease_end <= {n}))")


def next_event(status: str, delay_end: str, lease_end: str, ttl_end: str) -> str:
    """SQL for the earliest pending time event of a row (Tarantool's next_event)."""
    return (
        f"CASE WHEN {status} = 'delayed' THEN least({delay_end}, {ttl_end}) "
        f"WHEN {status} = 'taken' THEN least({lease_end}, {ttl_end}) "
        f"WHEN {status} = 'done' THEN CAST('Infinity' AS DOUBLE) ELSE {ttl_end} END"
    )


def raise_guard(kind_sql: str) -> str:
    """SQL that fails the whole MERGE with a typed guard message naming the task."""
    return (f"CAST(raise_error(concat('sparkqueue:', {kind_sql}, ':', "
            f"CAST(t.task_id AS STRING))) AS BIGINT)")


def raise_missing(kind: str = "TaskNotFound") -> str:
    """SQL that fails the whole MERGE for a source id with no task row."""
    return (f"CAST(raise_error(concat('sparkqueue:{kind}:', CAST(s.task_id AS STRING))) "
            "AS BIGINT)")


def id_runs(ids: list[int], step: int = 1) -> list[tuple[int, int]]:
    """``ids`` (sorted, distinct) as runs of consecutive ids, ``(first, last)`` each:
    ids ``step`` apart (a shard's, see ``TubeContext.task_id``) are consecutive.
    With ``step`` above 1 the ids are one shard's (all equal modulo ``step``), as
    a sharded tube routes them: then ids spanning ``(len - 1) * step`` are one run."""
    if ids and ids[-1] - ids[0] == (len(ids) - 1) * step:  # one run (a take's, mostly)
        return [(ids[0], ids[-1])]
    runs: list[tuple[int, int]] = []
    for i in ids:
        if runs and runs[-1][1] == i - step:
            runs[-1] = (runs[-1][0], i)
        else:
            runs.append((i, i))
    return runs


def id_frame(spark: SparkSession, ids: list[int], step: int = 1) -> DataFrame:
    """``ids`` (sorted, distinct) as a one-column DataFrame ``task_id``.

    Shipped as runs of consecutive ids, expanded in Spark: a batch a
    consumer took is mostly one run, so 100,000 ids cross from Python as a
    few pairs instead of 100,000 pickled rows.
    """
    return spark.createDataFrame(id_runs(ids, step), "lo long, hi long").select(
        F.explode(F.sequence("lo", "hi", F.lit(step).cast("long"))).alias("task_id"))


def id_ranges(ids: list[int], step: int = 1) -> str | None:
    """A condition on ``task_id``: one of ``ids`` (sorted, distinct), as ranges of its
    runs of consecutive ids (``step`` apart); None for more than ``RUNS_INLINE`` runs.
    A frame of one shard's ids holds no other id within such a range."""
    runs = id_runs(ids, step)
    if len(runs) > schema.RUNS_INLINE:
        return None
    return " OR ".join(f"task_id BETWEEN {lo} AND {hi}" for lo, hi in runs) or "FALSE"


def with_ids(frame: DataFrame, ids: list[int], spark: SparkSession, step: int = 1) -> DataFrame:
    """``frame``'s rows whose ``task_id`` is in ``ids`` (sorted, distinct): a filter
    on ranges (:func:`id_ranges`), which builds no DataFrame of ids, or a
    semi-join for many runs."""
    ranges = id_ranges(ids, step)
    if ranges is not None:
        return frame.where(ranges)
    return frame.join(F.broadcast(id_frame(spark, ids, step)), "task_id", "left_semi")


def without_ids(frame: DataFrame, ids: list[int], spark: SparkSession,
                step: int = 1) -> DataFrame:
    """``frame`` without the rows whose ``task_id`` is in ``ids`` (sorted, distinct).

    Few runs of consecutive ids (a consumer's acked batch is mostly one) are
    a filter on ranges (:func:`id_ranges`), which needs no Spark job; many
    are an anti-join.
    """
    ranges = id_ranges(ids, step)
    if ranges is not None:
        return frame.where(f"NOT ({ranges})")
    return frame.join(F.broadcast(id_frame(spark, ids, step)), "task_id", "left_anti")
