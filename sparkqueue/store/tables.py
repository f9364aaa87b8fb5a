"""MERGE, UPDATE, DELETE and VACUUM of a Delta table, in SQL.

Each takes a session (whose ``userMetadata`` tags the commit) and the
table's reference: a path, or a catalog name (:func:`sql_table`). A MERGE's
clauses are data (:class:`When`), so the verbs above say what changes and
this module alone says how Delta is asked. The target is ``t`` and a MERGE's
source ``s`` in every condition and value.

SQL, not Delta's Python ``DeltaTable``: it is what a Spark Connect client
has (``DeltaTable`` over Connect needs Delta Connect's server plugin), and
Delta plans the two the same way.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from pyspark.sql import DataFrame, Row, SparkSession
from pyspark.sql import types as T

from ..errors import InvalidOption
from .frames import union
from .schema import MARKER, Cursor
from .sql import quoted, sql_type

__all__ = ["FEED", "ISOLATION", "SERIALIZABLE", "properties", "serializable", "RETENTION_CHECK",
           "When", "add_column", "feed_start", "ingest_frame",
           "is_path", "marker_row", "keep_feed", "keeps_feed", "merge", "update", "delete",
           "vacuum", "sql_table"]

#: The table property that makes Delta keep a table's change data feed.
FEED = "delta.enableChangeDataFeed"
#: The table property of Delta's isolation level, and the level tasks tables are
#: made with.
ISOLATION, SERIALIZABLE = "delta.isolationLevel", "Serializable"

#: Delta's check that refuses a VACUUM retention it deems unsafe, and its error.
RETENTION_CHECK = "spark.databricks.delta.retentionDurationCheck.enabled"
RETENTION_REFUSED = "DELTA_VACUUM_RETENTION_PERIOD_TOO_SHORT"

Values = Mapping[str, str]


@dataclass(frozen=True)
class When:
    """One MERGE clause, applied in the order given: ``update`` or ``delete`` a
    matched row, ``insert`` (``values``) or ``insert_all`` a source row with no match."""

    kind: Literal["update", "delete", "insert", "insert_all"]
    condition: str | None = None
    values: Values = field(default_factory=dict)


def is_path(ref: str) -> bool:
    """Whether a table reference is a path (``/x``, ``s3a://b/x``), not a catalog name."""
    return "/" in ref or ":" in ref


def sql_table(ref: str) -> str:
    """A table reference as SQL names it: ``delta.`path``` or the catalog name."""
    return f"delta.{quoted(ref)}" if is_path(ref) else ref


def _assignments(values: Values) -> str:
    return ", ".join(f"{k} = {v}" for k, v in values.items())


def _clause(c: When) -> str:
    cond = f" AND ({c.condition})" if c.condition else ""
    if c.kind == "update":
        return f"WHEN MATCHED{cond} THEN UPDATE SET {_assignments(c.values)}"
    if c.kind == "delete":
        return f"WHEN MATCHED{cond} THEN DELETE"
    if c.kind == "insert":
        names = ", ".join(c.values)
        vals = ", ".join(c.values.values())
        return f"WHEN NOT MATCHED{cond} THEN INSERT ({names}) VALUES ({vals})"
    return f"WHEN NOT MATCHED{cond} THEN INSERT *"


def merge(spark: SparkSession, ref: str, source: DataFrame, on: str,
          clauses: Sequence[When]) -> Row | None:
    """MERGE ``source`` (``s``) into the table ``ref`` (``t``) on ``on``; Delta's
    result (the counts of rows inserted, updated and deleted).

    The source is a global temporary view for the statement's length: it is
    seen by every session of the application (the tagged session runs the
    MERGE; the source may come from another) in classic Spark and over Spark
    Connect alike.

    With a NOT MATCHED clause, Delta joins the source to the target full
    outer, which Spark cannot broadcast: by default it sorts both sides
    (sort-merge join). The source is the small side (ids and arguments of
    the rows changed), so it is hashed instead: a shuffled hash join sorts
    neither side.
    """
    if any(c.kind in ("insert", "insert_all") for c in clauses):
        source = source.hint("shuffle_hash")
    view = f"sq_source_{uuid.uuid4().hex}"
    source.createGlobalTempView(view)
    try:
        text = (f"MERGE INTO {sql_table(ref)} t USING global_temp.{view} s ON {on} "
                + " ".join(_clause(c) for c in clauses))
        return spark.sql(text).first()
    finally:
        spark.catalog.dropGlobalTempView(view)


def update(spark: SparkSession, ref: str, condition: str, values: Values) -> None:
    """UPDATE the rows of the table ``ref`` (``t``) where ``condition`` holds."""
    spark.sql(f"UPDATE {sql_table(ref)} t SET {_assignments(values)} WHERE {condition}")


def delete(spark: SparkSession, ref: str, condition: str) -> None:
    """DELETE the rows of the table ``ref`` where ``condition`` (SQL) holds."""
    spark.sql(f"DELETE FROM {sql_table(ref)} WHERE {condition}")


def add_column(spark: SparkSession, ref: str, name: str, kind: T.DataType) -> None:
    """Add the column ``name`` of type ``kind`` (nullable in every part) to the table
    ``ref``: a commit of the schema alone."""
    spark.sql(f"ALTER TABLE {sql_table(ref)} ADD COLUMNS ({quoted(name)} {sql_type(kind)})")


def vacuum(spark: SparkSession, ref: str, retention_hours: float) -> None:
    """VACUUM the table ``ref`` (files unreferenced for ``retention_hours``).

    A retention that Delta's check (:data:`RETENTION_CHECK`) refuses is refused
    before anything is deleted: :class:`InvalidOption`, naming the retention and
    the check (Delta 4.4 refuses one that rounds to 0 hours).
    """
    try:
        spark.sql(f"VACUUM {sql_table(ref)} RETAIN {float(retention_hours)} HOURS")
    except Exception as e:
        if RETENTION_REFUSED not in str(e):
            raise
        raise InvalidOption(
            f"a VACUUM retention of {retention_hours:g} hours (the sweeper's "
            f"vacuum_retention_hours, conf [sweeper]) is refused by Delta's retention check "
            f"({RETENTION_CHECK}), which keeps the files of writers still in flight: raise "
            "it (168, a week, is Delta's default), or set the check false in [spark] where "
            "no writer runs longer") from e


def properties(spark: SparkSession, ref: str) -> dict[str, str]:
    """The table ``ref``'s properties now (a SQL command, no Spark job)."""
    # read whole here: a filter in Spark would start a job over the command's rows
    return {str(r[0]): str(r[1])
            for r in spark.sql(f"SHOW TBLPROPERTIES {sql_table(ref)}").collect()}


def keeps_feed(spark: SparkSession, ref: str) -> bool:
    """Whether the table ``ref`` keeps Delta's change data feed now."""
    return properties(spark, ref).get(FEED, "").lower() == "true"


def serializable(spark: SparkSession, ref: str) -> bool:
    """Whether the table ``ref``'s isolation level is Serializable by its property
    (:data:`ISOLATION`): a blind append then makes a concurrent commit that
    read the table conflict, on every Delta (open-source Delta has no other
    level; Databricks defaults to WriteSerializable, where it would not)."""
    return properties(spark, ref).get(ISOLATION, "") == SERIALIZABLE


def keep_feed(spark: SparkSession, ref: str) -> None:
    """Make the table ``ref`` keep its change data feed from its next commit on
    (one metadata commit; nothing is rewritten), unless it keeps one already.
    A commit racing it conflicts and is retried by whoever made it."""
    if not keeps_feed(spark, ref):
        spark.sql(f"ALTER TABLE {sql_table(ref)} SET TBLPROPERTIES ('{FEED}' = 'true')")


def feed_start(spark: SparkSession, ref: str) -> int:
    """The first version of the table ``ref`` (which keeps a change data feed)
    whose changes the feed holds: the newest commit that turned it on, else the
    oldest version its history still holds (it was on from the table's creation)."""
    turned_on = (f"operation = 'SET TBLPROPERTIES' AND lower(operationParameters['properties']) "
                 f"LIKE '%\"{FEED.lower()}\":\"true\"%'")
    row = spark.sql(f"DESCRIBE HISTORY {sql_table(ref)}").selectExpr(
        f"max(CASE WHEN {turned_on} THEN version END)", "min(version)").first()
    assert row is not None  # an aggregate has one row
    return int(row[0] if row[0] is not None else row[1])


def marker_row(cursor: Cursor) -> dict[str, Any]:
    """The tasks table's row that marks ``cursor`` (:func:`ingest_frame`): column
    name -> value, the others NULL."""
    return {"task_id": -1 - cursor.txn_version(), "status": MARKER,
            "inbox_version": cursor.version, "order_key": cursor.next_id,
            "taken_count": cursor.partial}


def ingest_frame(runs: list[DataFrame], cursor: Cursor) -> DataFrame:
    """``runs`` (ingested tasks, each a run of consecutive ids, or a take's chosen
    rows of such a run and the rest of it) laid out for the tasks table, with
    the marker of ``cursor`` (its version, next id and partial rows in
    ``inbox_version``, ``order_key`` and ``taken_count``; ``task_id`` below
    every earlier marker's: ``-1 - cursor.txn_version()``).

    One writer per run, ids in order: each run's files hold its ids in order,
    schema.TASK_FILE_ROWS each from the run's first (consecutive ids, but
    for the two parts of a run whose rows a take chose by id, which interleave),
    and the marker a file of its own. A take of whole such files then leaves files of its tasks
    only, which its ack removes whole; a writer fed rows of several runs
    would write files spanning the ids between them, which file statistics
    could no longer place in order. Runs are written side by side, one task
    each (the union keeps its inputs' partitions in writer sessions,
    ``paths.COMMIT_SETTINGS``).
    """
    row = marker_row(cursor)
    marker = runs[0].sparkSession.createDataFrame(  # one row: one partition
        [tuple(row.values())],
        "task_id long, status string, inbox_version long, order_key long, taken_count long",
    )
    frames = [run.coalesce(1).sortWithinPartitions("task_id") for run in runs]
    return union(frames).unionByName(marker, allowMissingColumns=True)
