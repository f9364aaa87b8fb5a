"""MERGE, UPDATE, DELETE and VACUUM of a Delta table at a path.

Each takes a session (whose ``userMetadata`` tags the commit) and the table's
path; a MERGE's clauses are data (:class:`When`), so the verbs above say what
changes and this module alone says how Delta is asked. The target is ``t`` and
a MERGE's source ``s`` in every condition and value.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

from delta.tables import DeltaTable
from pyspark.sql import Column, DataFrame, SparkSession

__all__ = ["When", "merge", "update", "delete", "vacuum"]

Values = Mapping[str, str | Column]


@dataclass(frozen=True)
class When:
    """One MERGE clause, applied in the order given: ``update`` or ``delete`` a
    matched row, ``insert`` (``values``) or ``insert_all`` a source row with no match."""

    kind: Literal["update", "delete", "insert", "insert_all"]
    condition: str | None = None
    values: Values = field(default_factory=dict)


def merge(spark: SparkSession, path: str, source: DataFrame, on: str,
          clauses: Sequence[When]) -> DataFrame:
    """MERGE ``source`` (``s``) into the table at ``path`` (``t``) on ``on``; Delta's
    result (the counts of rows inserted, updated and deleted)."""
    builder = DeltaTable.forPath(spark, path).alias("t").merge(source.alias("s"), on)
    for c in clauses:
        if c.kind == "update":
            builder = builder.whenMatchedUpdate(condition=c.condition, set=dict(c.values))
        elif c.kind == "delete":
            builder = builder.whenMatchedDelete(condition=c.condition)
        elif c.kind == "insert":
            cond = c.condition
            builder = (builder.whenNotMatchedInsert(values=dict(c.values)) if cond is None
                       else builder.whenNotMatchedInsert(condition=cond, values=dict(c.values)))
        else:
            builder = builder.whenNotMatchedInsertAll()
    return builder.execute()


def update(spark: SparkSession, path: str, condition: str, values: Values) -> None:
    """UPDATE the rows of the table at ``path`` (``t``) where ``condition`` holds."""
    DeltaTable.forPath(spark, path).alias("t").update(condition=condition, set=dict(values))


def delete(spark: SparkSession, path: str, condition: str | Column) -> None:
    """DELETE the rows of the table at ``path`` where ``condition`` holds."""
    DeltaTable.forPath(spark, path).delete(condition)


def vacuum(spark: SparkSession, path: str, retention_hours: float) -> None:
    """VACUUM the table at ``path`` (files unreferenced for ``retention_hours``)."""
    DeltaTable.forPath(spark, path).vacuum(retention_hours)
