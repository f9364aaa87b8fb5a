"""Storage: the only code that knows Delta.

- :mod:`.lines`: the supported Spark lines and what each needs (checked first);
- :mod:`.frames`: DataFrames of every line (classic, Spark Connect's), frozen;
- :mod:`.protocol`: the primitives whose way differs by engine (:class:`Store`);
- :mod:`.portable`: the portable store (public Spark SQL; a Connect client's);
- :mod:`.txn`: the accelerated store (Delta's transaction API in the JVM);
- :mod:`.dialect`: the accelerated store's JVM calls that differ by line;
- :mod:`.schema`: the tables' columns, the commit tag, shared names;
- :mod:`.sql`: query text over the tasks table's columns;
- :mod:`.filestats`: what per-file statistics say (pure functions);
- :mod:`.failures`: conflicts to retry, failed guards, missing tables;
- :mod:`.log`: the Delta log read directly (versions, tags, cursor, put files);
- :mod:`.files`: the log's files read through Spark (the portable way);
- :mod:`.jvm`: the driver's JVM: files through Hadoop, Spark's logging;
- :mod:`.tables`: MERGE, UPDATE and DELETE of a table;
- :mod:`.layout`: a root's tables: paths, creation, reads, results; its store.

Its public names are re-exported here.
"""

# ruff: noqa: E402  (the installed Spark is checked before the imports that need it)
from __future__ import annotations

from . import lines

lines.require()  # before any import of pyspark: a missing or unsupported one is one typed error

from .failures import (
    StaleChoice,
    first_line,
    guard_failure,
    is_conflict,
    is_missing_table,
    missing_table_error,
    retrying,
    storage_error,
    storage_guarded,
    typed_guard_error,
)
from .filestats import (
    FILE_STATS,
    STATS_COLUMNS,
    bound_sql,
    file_entry,
    head_bound,
    head_files,
    head_key,
    is_marker,
    live_files,
    may_hold,
    may_hold_ready,
    reaches,
    ready_ahead,
    ready_head,
    settled_records,
    stats_of,
    whole_files,
)
from .frames import (
    COLUMNS,
    DATAFRAMES,
    column_values,
    frozen,
    is_column,
    is_dataframe,
    try_cast,
    union,
)
from .layout import ENGINES, Layout
from .paths import append, read, read_changes, read_stream, shard_key
from .protocol import Store, Transaction
from .schema import (
    CHANGE_TYPE,
    FEW_FILES,
    INF,
    INGEST_TXN,
    LEASE,
    MARKER,
    PUBLIC_COLUMNS,
    RUNS_INLINE,
    SETTLED,
    TAKE_FILE_ROWS,
    TASK_COLUMNS,
    TASK_FILE_ROWS,
    TASK_TABLE_COLUMNS,
    USER_METADATA,
    CommitTag,
    Cursor,
    PutFile,
    file_rows,
    inbox_schema,
    nullable,
    parse_tag,
)
from .sql import (
    effective_status,
    id_frame,
    id_runs,
    next_event,
    quoted,
    raise_guard,
    raise_missing,
    ready_when,
    sql_literal,
    sql_num,
    with_ids,
    without_ids,
)
from .tables import (
    RETENTION_CHECK,
    When,
    add_column,
    delete,
    feed_start,
    is_path,
    keep_feed,
    keeps_feed,
    merge,
    update,
    vacuum,
)

__all__ = [
    "add_column", "append", "is_path", "read", "read_changes", "read_stream", "CHANGE_TYPE",
    "COLUMNS",
    "DATAFRAMES", "ENGINES", "FEW_FILES", "FILE_STATS", "INF", "INGEST_TXN", "LEASE", "MARKER",
    "SETTLED",
    "PUBLIC_COLUMNS", "RETENTION_CHECK", "RUNS_INLINE", "STATS_COLUMNS", "TAKE_FILE_ROWS",
    "TASK_COLUMNS",
    "TASK_FILE_ROWS", "TASK_TABLE_COLUMNS", "USER_METADATA", "CommitTag", "Cursor", "Layout",
    "PutFile", "StaleChoice", "Store", "Transaction", "When", "delete", "bound_sql",
    "column_values",
    "effective_status", "feed_start", "frozen", "is_column", "is_dataframe", "file_entry",
    "live_files", "settled_records",
    "file_rows", "first_line", "guard_failure", "head_bound", "head_files", "head_key",
    "is_marker",
    "id_frame", "id_runs",
    "inbox_schema", "is_conflict", "is_missing_table", "keep_feed", "keeps_feed", "may_hold",
    "may_hold_ready", "merge", "missing_table_error", "next_event", "nullable", "parse_tag",
    "quoted", "raise_guard", "raise_missing", "reaches", "ready_ahead", "ready_head", "ready_when",
    "retrying",
    "storage_error",
    "storage_guarded",
    "shard_key", "sql_literal", "sql_num", "stats_of", "try_cast", "typed_guard_error", "union",
    "update", "vacuum", "whole_files", "with_ids", "without_ids",
]
