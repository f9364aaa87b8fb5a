"""DataFrames as every supported line has them.

A Spark Connect client's DataFrame is a :class:`pyspark.sql.DataFrame` from
Spark 4 on; on Spark 3.5 it is a class of its own, without
``localCheckpoint``. Spark 3.5's DataFrames and Columns have no ``toArrow``
and no ``try_cast`` either. What the engine needs of any DataFrame or
Column that is not the same on every line goes through here.
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from functools import reduce
from typing import Any, TypeGuard

from pyspark.sql import Column, DataFrame

__all__ = ["COLUMNS", "DATAFRAMES", "column_values", "frozen", "is_column", "is_dataframe",
           "try_cast", "union"]


def _classes(base: type, module: str) -> tuple[type, ...]:
    """``base`` and, where it is a class apart (Spark 3.5), Spark Connect's class of
    the same name from ``module``."""
    try:  # Spark Connect's client packages may be missing: then there are no such objects
        connect = getattr(importlib.import_module(module), base.__name__)
    except ImportError:
        return (base,)
    return (base,) if issubclass(connect, base) else (base, connect)


#: The classes of a DataFrame: classic and Spark Connect (one class from Spark 4 on).
DATAFRAMES: tuple[type, ...] = _classes(DataFrame, "pyspark.sql.connect.dataframe")
#: The classes of a Column, likewise.
COLUMNS: tuple[type, ...] = _classes(Column, "pyspark.sql.connect.column")
#: Spark Connect's DataFrame where it is not a pyspark.sql.DataFrame (Spark 3.5).
_OWN_CONNECT = DATAFRAMES[1:]


def is_dataframe(value: object) -> TypeGuard[DataFrame]:
    """Whether ``value`` is a DataFrame, classic or Spark Connect's."""
    return isinstance(value, DATAFRAMES)


def is_column(value: object) -> TypeGuard[Column]:
    """Whether ``value`` is a Column, classic or Spark Connect's."""
    return isinstance(value, COLUMNS)


def frozen(frame: DataFrame, eager: bool = True) -> DataFrame:
    """``frame``'s rows computed once and kept: reading the result again gives the
    same rows, whatever the tables it read do since (``localCheckpoint``). A
    Spark 3.5 Connect client, which has no checkpoints, keeps them by
    collecting them and sending them back."""
    if _OWN_CONNECT and isinstance(frame, _OWN_CONNECT):
        return frame.sparkSession.createDataFrame(frame.collect(), frame.schema)
    return frame.localCheckpoint(eager=eager)


def union(frames: Sequence[DataFrame]) -> DataFrame:
    """The rows of all ``frames``, matched by column name: each frame's own
    ``unionByName``, which a Spark 3.5 Connect DataFrame has as a class of its own."""
    return reduce(lambda a, b: a.unionByName(b), frames)


def column_values(frame: DataFrame) -> list[list[Any]]:
    """The values of each of ``frame``'s columns, collected: through Arrow,
    columnar, with no Python Row per row (``toArrow``, Spark 4), else by
    ``collect``."""
    if hasattr(type(frame), "toArrow"):
        table = frame.toArrow()
        return [table.column(i).to_pylist() for i in range(table.num_columns)]
    rows = frame.collect()
    return [[row[i] for row in rows] for i in range(len(frame.columns))]


def try_cast(col: Column, kind: str) -> Column:
    """``col`` as ``kind``, NULL where a value is not one (``try_cast``). Spark 3.5's
    Column has no ``try_cast``: there it is a cast, the same unless the session
    runs in ANSI mode (not Spark 3.5's default), where a bad value fails the
    query instead of giving NULL."""
    if hasattr(type(col), "try_cast"):
        return col.try_cast(kind)
    return col.cast(kind)
