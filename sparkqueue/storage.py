"""The Delta table layout and every query text sparkqueue runs.

Layout of a queue root::

    ROOT/_registry          one row per tube: name, type, options (JSON)
    ROOT/_stats             the sweeper's statistics snapshots, one row per tube per pass
    ROOT/tubes/<tube>/inbox       append-only; put() writes here and nowhere else
    ROOT/tubes/<tube>/tasks       one row per live task; take/ack/... MERGE here

Why two tables: open-source Delta offers only Serializable isolation, under
which a blind append to a table aborts every concurrent MERGE that read it.
Puts therefore never touch the table that takes read. Task ids count the rows
put, in commit order (:meth:`Layout.put_files`): a row's id is the number of
rows the inbox's put commits added before it, known from the Delta log once
its commit landed, so concurrent appends never conflict over ids.

Inbox rows reach the tasks table through *ingest*: an idempotent append
(``txnAppId = sq-ingest``, ``txnVersion`` = the cursor it starts from) of
the inbox rows committed after the cursor, together with a marker row
recording the new cursor (markers have negative task ids; ``order_key``
holds the next task id). Cursors only grow, so Delta skips an ingest from a
cursor at or below one already ingested from: a task is never ingested
twice, even after it was acked and removed. A take that finds no ready task
in the tasks table may ingest and lease in one commit instead
(``ingest+take``, :meth:`Layout.commit_ingest`), which records the same
transaction id.

Every commit is tagged with ``commitInfo.userMetadata`` (JSON: the operation
and a token), which is how call statistics survive restarts and cover every
process, and how an operation finds the version it committed. The rows a
commit updates carry its token in ``change_token``: an operation reads its
result from the table at its version (:meth:`Layout.changed_at`), so the
change data feed serves only ``Tube.changes`` and a tube may keep none.
"""

from __future__ import annotations

import bisect
import json
import math
import random
import re
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, NamedTuple, TypeVar
from urllib.parse import unquote

from delta.tables import DeltaTable
from py4j.protocol import Py4JError
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from .errors import (
    InvalidState,
    NotOwner,
    QueueError,
    StorageError,
    TaskNotFound,
    Timeout,
    TubeNotFound,
)

__all__ = [
    "Layout",
    "INF",
    "TASK_COLUMNS",
    "PUBLIC_COLUMNS",
    "sql_num",
    "sql_literal",
    "effective_status",
    "ready_when",
    "head_bound",
    "id_frame",
    "without_ids",
    "CommitTag",
    "Cursor",
    "PutFile",
    "retrying",
]

INF = math.inf
#: How many commits back a new process looks for the last ingest before it reads
#: the cursor from the marker rows instead.
CURSOR_LOOKBACK = 50
MARKER = "_marker"
#: The Delta transaction id (``txnAppId``) of every ingest into a tasks table.
INGEST_TXN = "sq-ingest"
#: Operations (commit tags) that ingest, each tagged with the cursor it leaves.
INGESTS = frozenset({"ingest", "ingest+take"})
#: The column of change feed rows that says what changed (Delta's ``_change_type``).
CHANGE_TYPE = "_change_type"
#: Seconds a table creation that failed waits for a racing creator's table to appear.
CREATE_PATIENCE = 10.0
USER_METADATA = "spark.databricks.delta.commitInfo.userMetadata"

#: Columns of the tasks table, in order, besides the payload ``data`` struct.
TASK_COLUMNS: list[tuple[str, T.DataType]] = [
    ("task_id", T.LongType()),
    ("status", T.StringType()),
    ("pri", T.LongType()),
    ("order_key", T.LongType()),
    ("utube", T.StringType()),
    ("created", T.DoubleType()),
    ("ttl", T.DoubleType()),
    ("ttr", T.DoubleType()),
    ("delay_end", T.DoubleType()),
    ("ttl_end", T.DoubleType()),
    ("lease_end", T.DoubleType()),
    ("next_event", T.DoubleType()),
    ("owner", T.StringType()),
    ("lease_token", T.StringType()),
    ("taken_count", T.LongType()),
    ("buried_count", T.LongType()),
    ("inbox_version", T.LongType()),
    # the operation that last changed the row: the change feed's ``event``
    ("changed_by", T.StringType()),
    # the token of the commit that last updated the row: how an operation reads
    # back what its own commit changed, with or without a change feed
    ("change_token", T.StringType()),
]

#: Every column of the tasks table, once a put gave it the payload's.
TASK_TABLE_COLUMNS = [name for name, _ in TASK_COLUMNS] + ["data"]

#: Columns of the inbox table besides ``data``: the options a put gave as
#: Columns, one value per row (NULL: the put's tag has the value). task_id comes
#: from the row's place in the log (:meth:`Layout.put_files`), everything else
#: from the put's commit tag.
INBOX_COLUMNS: list[tuple[str, T.DataType]] = [
    ("pri", T.LongType()),
    ("utube", T.StringType()),
    ("ttl", T.DoubleType()),
    ("ttr", T.DoubleType()),
    ("delay", T.DoubleType()),
]

def inbox_schema(payload: T.StructType) -> T.StructType:
    """The inbox table's schema, for a tube whose payload struct is ``payload``."""
    return T.StructType([T.StructField(n, t) for n, t in INBOX_COLUMNS]
                        + [T.StructField("data", payload)])


#: Columns of the task DataFrames the API returns.
PUBLIC_COLUMNS = ["task_id", "status", "data", "pri", "utube", "owner", "created", "ttl", "ttr",
                  "taken_count", "buried_count"]

#: Rows per file of the tasks table, as ingest writes them. Without deletion
#: vectors a MERGE rewrites every file it touches, so small files keep the cost
#: of a take or ack following its batch, not the tube; ids are ingested in order,
#: so each file covers a narrow task_id range and MERGE bounds prune the rest.
TASK_FILE_ROWS = 20_000

#: Tables of at most this many files are read whole by a take: choosing files by
#: their statistics costs a Spark job, more than reading a few small files.
FEW_FILES = 8

#: Id lists of at most this many runs of consecutive ids are SQL range filters.
RUNS_INLINE = 64

#: What :func:`head_bound` reads of a data file's statistics: key -> (kind, column).
FILE_STATS = {
    "min_status": ("minValues", "status"),
    "max_status": ("maxValues", "status"),
    "status_nulls": ("nullCount", "status"),
    "min_pri": ("minValues", "pri"),
    "max_pri": ("maxValues", "pri"),
    "min_order_key": ("minValues", "order_key"),
    "max_order_key": ("maxValues", "order_key"),
    "min_ttl_end": ("minValues", "ttl_end"),
    # and what :func:`whole_files` reads
    "min_task_id": ("minValues", "task_id"),
    "max_task_id": ("maxValues", "task_id"),
    "min_owner": ("minValues", "owner"),
    "max_owner": ("maxValues", "owner"),
    "owner_nulls": ("nullCount", "owner"),
    "min_lease_end": ("minValues", "lease_end"),
}

#: The tasks table's columns whose per-file statistics Delta keeps: what FILE_STATS
#: reads, and the columns operations filter on (Delta skips files by them). Not
#: the payload, tokens, counters: collecting statistics costs every write, in
#: proportion to the columns it covers.
STATS_COLUMNS = sorted({col for _, col in FILE_STATS.values()}
                       | {"next_event", "delay_end", "change_token"})

CONFLICT_MARKERS = (
    "ConcurrentAppendException", "ConcurrentDeleteReadException",
    "ConcurrentDeleteDeleteException", "ConcurrentTransactionException",
    "MetadataChangedException", "ProtocolChangedException", "ConcurrentWriteException",
    "DELTA_CONCURRENT_", "DELTA_METADATA_CHANGED", "DELTA_PROTOCOL_CHANGED",
    "sparkqueue:Stale", "FileAlreadyExistsException",
)
GUARD = re.compile(r"sparkqueue:(\w+):(-?\d+)")


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


def may_hold_ready(f: dict[str, Any], now: float) -> bool:
    """Whether a data file's statistics (:meth:`Layout.files_at`) leave room for a
    row that :func:`ready_when` selects at ``now``: stored ``ready``, a delay
    that may have passed, or a lease that may have ended. Unknown statistics
    leave room. A take on a table where no file does finds nothing without
    reading it (a drain's last take, a consumer polling an empty tube).
    """
    lease = f["min_lease_end"]
    return may_hold(f, "ready") or may_hold(f, "delayed") or (
        may_hold(f, "taken") and (lease is None or lease <= now))


def may_hold(f: dict[str, Any], status: str) -> bool:
    """Whether a data file's statistics leave room for a row stored with ``status``
    (unknown statistics do)."""
    lo, hi = f["min_status"], f["max_status"]
    if f["rows"] is None or lo is None or hi is None or f["status_nulls"]:
        return True
    return bool(f["rows"]) and lo <= status <= hi


def head_bound(files: list[Any], now: float, n: int) -> str | None:
    """SQL bounding ``(pri, order_key)`` to where the ``n`` lowest ready tasks must be.

    ``files`` are the tasks table's file statistics (:meth:`Layout.file_stats`).
    A file whose rows are all stored ``ready`` with no ttl passed holds
    ``numRecords`` ready tasks, none above its ``(max pri, max order_key)``.
    Walking such files by that upper bound until they hold ``n`` tasks gives
    a key with at least ``n`` ready tasks at or below it: the ``n`` lowest are
    there too, and data skipping reads only the files that reach below it.
    None when the statistics show no such key (few files, or none all ready).
    """
    certain = sorted(
        (f["max_pri"], f["max_order_key"], f["rows"]) for f in files
        if f["rows"] and f["min_status"] == "ready" and f["max_status"] == "ready"
        and f["status_nulls"] == 0 and f["max_pri"] is not None
        and f["max_order_key"] is not None and f["min_ttl_end"] is not None
        and f["min_ttl_end"] > now
    )
    held = 0
    for pri, order_key, rows in certain:
        held += rows
        if held >= n:
            return f"(pri < {int(pri)} OR (pri = {int(pri)} AND order_key <= {int(order_key)}))"
    return None


def ready_head(files: Iterable[dict[str, Any]], now: float, n: int) -> tuple[int, int] | None:
    """The task ids ``lo..hi`` of the ``n`` lowest ``(pri, order_key, task_id)``
    tasks ready at ``now`` when file statistics alone show them: None otherwise.

    They show them when the lowest ready tasks fill whole files of every row
    stored ``ready`` (ttl running, so ready at ``now``) at one ``pri``, whose
    ids are each file's whole range and run on from file to file, ``n`` rows
    in all (or fewer when no other file can hold a ready task), and every
    other file that may hold a ready task (:func:`may_hold_ready`) comes
    after all of them: a higher ``pri``, or the same with ``order_key`` and
    ids above theirs. A drain's take on ingested files is so: it then needs
    no Spark job to choose, and the ids are one range (see ``Tube._update_range``).
    """
    keys = ("rows", "min_task_id", "max_task_id", "min_pri", "max_pri", "min_order_key",
            "max_order_key", "min_ttl_end")
    ready = sorted((f for f in files if may_hold_ready(f, now)),
                   key=lambda f: (f["min_task_id"] is None, f["min_task_id"] or 0))
    if not ready or any(ready[0][k] is None for k in keys):
        return None
    pri, lo = ready[0]["min_pri"], ready[0]["min_task_id"]
    hi, top_key, rows = lo - 1, None, 0
    for at, f in enumerate(ready):
        whole = (all(f[k] is not None for k in keys)
                 and f["min_status"] == "ready" == f["max_status"] and f["status_nulls"] == 0
                 and f["min_ttl_end"] > now and f["min_pri"] == pri == f["max_pri"]
                 and f["min_task_id"] == hi + 1
                 and f["max_task_id"] - f["min_task_id"] + 1 == f["rows"])
        if not whole or rows + f["rows"] > n:
            rest = ready[at:]
            break
        hi, rows = f["max_task_id"], rows + f["rows"]
        top_key = f["max_order_key"] if top_key is None else max(top_key, f["max_order_key"])
        if rows == n:
            rest = ready[at + 1:]
            break
    else:
        rest = []
    if not rows or (rows < n and rest):
        return None
    for f in rest:  # after every chosen task
        if f["min_pri"] is None or f["min_order_key"] is None or f["min_task_id"] is None:
            return None
        if not (f["min_pri"] > pri or (f["min_pri"] == pri and f["min_order_key"] >= top_key
                                       and f["min_task_id"] > hi)):
            return None
    return lo, hi


def whole_files(files: dict[str, dict[str, Any]], ids: list[int], owner: str,
                now: float) -> list[str] | None:
    """The data files whose rows are exactly the tasks ``ids``, all taken by
    ``owner`` with leases live at ``now``; None when ``ids`` are not such files'
    rows all together.

    An ack of ``ids`` may then remove those files whole, reading and writing
    no data (a take that flipped whole files, as a big take or a drain's does,
    leaves its tasks so). ``files``: the statistics per data file
    (:meth:`Layout.files_at`). A file qualifies when they show every row
    stored ``taken`` by ``owner`` (minimum = maximum; Delta keeps only a
    32-character prefix of strings, so a longer owner never matches), every
    lease and ttl ending after ``now``, and its task ids between a minimum and
    maximum with every id between them in ``ids``: then all its rows are in
    ``ids``. Ids are distinct across files, so when the files' rows add up to
    ``len(ids)``, they are ``ids`` exactly.
    """
    runs = id_runs(ids)
    starts = [lo for lo, _ in runs]
    names, covered = [], 0
    for name, f in files.items():
        lo, hi = f["min_task_id"], f["max_task_id"]
        if not (f["rows"] and lo is not None and hi is not None
                and f["min_status"] == "taken" == f["max_status"] and f["status_nulls"] == 0
                and f["min_owner"] == owner == f["max_owner"] and f["owner_nulls"] == 0
                and f["min_lease_end"] is not None and f["min_lease_end"] > now
                and f["min_ttl_end"] is not None and f["min_ttl_end"] > now):
            continue
        at = bisect.bisect_right(starts, lo) - 1
        if at >= 0 and hi <= runs[at][1]:
            names.append(name)
            covered += f["rows"]
    return names if names and covered == len(ids) else None


def next_event(status: str, delay_end: str, lease_end: str, ttl_end: str) -> str:
    """SQL for the earliest pending time event of a row (Tarantool's next_event)."""
    return (
        f"CASE WHEN {status} = 'delayed' THEN least({delay_end}, {ttl_end}) "
        f"WHEN {status} = 'taken' THEN least({lease_end}, {ttl_end}) "
        f"WHEN {status} = 'done' THEN CAST('Infinity' AS DOUBLE) ELSE {ttl_end} END"
    )


def id_runs(ids: list[int]) -> list[tuple[int, int]]:
    """``ids`` (sorted, distinct) as runs of consecutive ids, ``(first, last)`` each."""
    runs: list[tuple[int, int]] = []
    for i in ids:
        if runs and runs[-1][1] == i - 1:
            runs[-1] = (runs[-1][0], i)
        else:
            runs.append((i, i))
    return runs


def id_frame(spark: SparkSession, ids: list[int]) -> DataFrame:
    """``ids`` (sorted, distinct) as a one-column DataFrame ``task_id``.

    Shipped as runs of consecutive ids, expanded in Spark: a batch a
    consumer took is mostly one run, so 100,000 ids cross from Python as a
    few pairs instead of 100,000 pickled rows.
    """
    return spark.createDataFrame(id_runs(ids), "lo long, hi long").select(
        F.explode(F.sequence("lo", "hi")).alias("task_id"))


def without_ids(frame: DataFrame, ids: list[int], spark: SparkSession) -> DataFrame:
    """``frame`` without the rows whose ``task_id`` is in ``ids`` (sorted, distinct).

    Few runs of consecutive ids (a consumer's acked batch is mostly one) are
    a filter on ranges, which needs no Spark job; many are an anti-join.
    """
    runs = id_runs(ids)
    if len(runs) <= RUNS_INLINE:
        return frame.where(" AND ".join(
            f"NOT (task_id BETWEEN {lo} AND {hi})" for lo, hi in runs) or "TRUE")
    return frame.join(F.broadcast(id_frame(spark, ids)), "task_id", "left_anti")


class Cursor(NamedTuple):
    """How far ingest got: the last inbox version ingested, and the next task id."""

    version: int
    next_id: int


@dataclass(frozen=True)
class PutFile:
    """A data file a put added to the inbox (see :meth:`Layout.put_files`)."""

    name: str
    version: int  #: the inbox commit that added it
    first_id: int  #: the task id of its first row
    tag: dict[str, Any]  #: the put's tag: the values its rows do not carry


@dataclass(frozen=True)
class CommitTag:
    """What a commit says about itself in ``commitInfo.userMetadata``."""

    op: str
    token: str
    extra: tuple[tuple[str, Any], ...] = ()

    @classmethod
    def new(cls, op: str, **extra: Any) -> CommitTag:
        return cls(op, uuid.uuid4().hex, tuple(sorted(extra.items())))

    def json(self) -> str:
        return json.dumps({"sq": self.op, "tok": self.token, **dict(self.extra)})


def parse_tag(user_metadata: str | None) -> dict[str, Any] | None:
    """The tag of a commit, or None for commits sparkqueue did not make."""
    if not user_metadata:
        return None
    try:
        tag = json.loads(user_metadata)
    except ValueError:
        return None
    return tag if isinstance(tag, dict) and "sq" in tag else None


class StaleChoice(Exception):
    """A choice that a concurrent commit made stale before it committed anything:
    choose again (retried like a conflict)."""

    def __init__(self, what: str) -> None:
        super().__init__(f"stale choice: {what}")


def is_conflict(e: BaseException) -> bool:
    """Whether ``e`` is a Delta commit conflict (or a stale choice) worth retrying."""
    if isinstance(e, StaleChoice):
        return True
    text = f"{type(e).__name__} {e}"
    return any(m in text for m in CONFLICT_MARKERS)


def is_missing_table(e: BaseException) -> bool:
    text = str(e)
    return any(m in text for m in ("DELTA_MISSING_DELTA_TABLE", "DELTA_TABLE_NOT_FOUND",
                                   "is not a Delta table", "PATH_NOT_FOUND"))


def guard_failure(e: BaseException) -> tuple[str, int] | None:
    """The (kind, task_id) of a guard that failed inside a MERGE, if that is what ``e`` is."""
    m = GUARD.search(str(e))
    if m is None or m.group(1) == "Stale":
        return None
    return m.group(1), int(m.group(2))


R = TypeVar("R")


def retrying(fn: Callable[[], R], *, deadline: float, what: str) -> R:
    """Run ``fn`` until it does not hit a Delta conflict, with jittered backoff.

    Conflicts never reach the caller while ``deadline`` (monotonic seconds)
    allows; after it, :class:`Timeout` says what kept conflicting.
    """
    attempt = 0
    while True:
        try:
            return fn()
        except QueueError:
            raise
        except Exception as e:
            if not is_conflict(e):
                raise
            attempt += 1
            pause = min(2.0, 0.05 * (2 ** min(attempt, 6))) * (0.5 + random.random())
            if time.monotonic() + pause > deadline:
                raise Timeout(
                    f"{what} kept conflicting with concurrent commits ({attempt} attempts)"
                ) from e
            time.sleep(pause)


class Layout:
    """Paths and table handles of one queue root."""

    def __init__(self, spark: SparkSession, root: str) -> None:
        self.spark = spark
        self.root = root.rstrip("/")
        self._versions: dict[str, int] = {}
        self._cursors: dict[str, tuple[int, Cursor]] = {}  # tasks path: (version seen, cursor)
        # inbox path: (anchor, version read up to, its put files, next id), see put_files
        self._put_files: dict[str, tuple[Cursor, int, list[PutFile], int]] = {}
        # tasks path: (version, {data file: its statistics}), see file_stats
        self._stats_by_file: dict[str, tuple[int, dict[str, dict[str, Any]]]] = {}
        self._log_fs: dict[str, tuple[Any, Any]] = {}  # table path: see _fs
        # (table path, tag key): (version read up to, value), see last_tag_value
        self._tag_values: dict[tuple[str, str], tuple[int, int | None]] = {}

    @property
    def registry(self) -> str:
        return f"{self.root}/_registry"

    @property
    def stats(self) -> str:
        """The statistics snapshots the sweeper appends (one row per tube per pass)."""
        return f"{self.root}/_stats"

    def inbox(self, tube: str) -> str:
        return f"{self.root}/tubes/{tube}/inbox"

    def tasks(self, tube: str) -> str:
        return f"{self.root}/tubes/{tube}/tasks"

    def tube_dir(self, tube: str) -> str:
        return f"{self.root}/tubes/{tube}"

    # -- sessions -----------------------------------------------------------------

    @contextmanager
    def tagged(self, tag: CommitTag) -> Iterator[SparkSession]:
        """A session of its own whose commits carry ``tag`` (thread-safe tagging)."""
        sess = self.spark.newSession()
        sess.conf.set(USER_METADATA, tag.json())
        # MERGE sources here are checkpointed and deterministic: copying them is waste.
        sess.conf.set("spark.databricks.delta.merge.materializeSource", "none")
        yield sess

    # -- creation -------------------------------------------------------------------

    def create_registry(self) -> None:
        """Create the registry of a new root. A root whose registry is gone while its
        tubes' tables are there is damaged, not new: an empty registry would hide
        them (``TubeNotFound``) and let a new tube of the same name adopt their tasks."""
        if not self.exists(self.registry):
            orphans = self.tube_dirs()
            if orphans:
                raise StorageError(self.registry, (
                    "the registry of tubes is missing, but tube tables exist under "
                    f"{self.root}/tubes ({', '.join(orphans[:10])}): restore the registry "
                    "table, or move those tubes away to start an empty queue here"))
        _create_table(
            self.spark, self.registry,
            T.StructType([T.StructField("name", T.StringType()),
                          T.StructField("type", T.StringType()),
                          T.StructField("options", T.StringType()),
                          T.StructField("created", T.DoubleType())]),
            {},
        )

    def create_stats_table(self, schema: T.StructType) -> None:
        if self._versions.get(self.stats, -1) < 0:
            _create_table(self.spark, self.stats, schema, {})
            self.latest_version(self.stats)

    def create_tube_tables(self, tube: str, change_feed: bool = True) -> None:
        """Create the inbox and tasks tables (idempotent); the cursor starts at version 0.

        ``change_feed``: the tasks table keeps Delta's change data feed (what
        ``Tube.changes`` streams). It writes every changed row twice more
        (before and after images): the largest cost a big take pays beyond
        a plain MERGE.
        """
        _create_table(
            self.spark, self.inbox(tube),
            T.StructType([T.StructField(n, t) for n, t in INBOX_COLUMNS]),
            # Deletion vectors only for what they make Delta expose: a row's place in
            # its file (``_metadata.row_index``), half of its task id. Not row
            # tracking: it makes every append rebuild the snapshot's state (three
            # Spark jobs, whatever the put's size). Inbox files must never be
            # rewritten (ids would move): no auto compaction. Statistics: row counts
            # only (ids count rows): nothing filters the inbox, it is read by the
            # files the log names, and min/max per column would cost every put.
            {"delta.enableDeletionVectors": "true",
             "delta.autoOptimize.autoCompact": "false",
             "delta.dataSkippingNumIndexedCols": "0"},
        )
        _create_table(
            self.spark, self.tasks(tube),
            T.StructType([T.StructField(n, t) for n, t in TASK_COLUMNS]),
            {
                # Deletion vectors measured slower for the small MERGEs of a
                # take/ack here (2.5 s against 1.2 s), so files are rewritten.
                # No setTransactionRetentionDuration: ingests share one
                # transaction id (see write_marker), so there is nothing to expire.
                "delta.enableChangeDataFeed": str(change_feed).lower(),
                "delta.dataSkippingStatsColumns": ",".join(STATS_COLUMNS),
            },
        )

    def write_marker(self, tube: str, since: Cursor, cursor: Cursor, rows: DataFrame) -> None:
        """Append ``rows`` (ingested tasks) and the marker of the new ``cursor``,
        unless an ingest from ``since`` (or a later cursor) was committed.

        One transaction id for all ingests of a tube, its version the cursor
        the ingest starts from: Delta skips an append whose version is not
        above the last one committed, and refuses one that races another
        with the same id. One id, not one per cursor, so the table's state
        keeps one entry however many ingests ran, with no retention to set
        (an id that expired would let a late duplicate through). Finding the
        last version still makes Delta rebuild the snapshot's state (four
        Spark jobs, about 0.5 s of a 30,000-task ingest's 1.6 s here): Delta
        4.4 reads transaction ids from the state, not from its checksum files.
        """
        (self._ingest_frame(rows, cursor).write.format("delta").mode("append")
         .option("txnAppId", INGEST_TXN).option("txnVersion", since.version)
         .option("mergeSchema", "true")
         .option("maxRecordsPerFile", TASK_FILE_ROWS)
         .save(self.tasks(tube)))

    @staticmethod
    def _ingest_frame(rows: DataFrame, cursor: Cursor) -> DataFrame:
        """``rows`` (ingested tasks) laid out for the tasks table, with the marker of ``cursor``.

        One writer for the tasks, ids in order: their files hold consecutive
        ids, TASK_FILE_ROWS each from the ingest's first, and the marker a
        file of its own. A take of whole such runs then leaves files of its
        tasks only, which its ack removes whole; two writers would each start
        files where their input split started, and a take's rewrite of the
        file it ends in would mix ready rows into its files.
        """
        sess = rows.sparkSession
        marker = sess.createDataFrame(  # one partition, not one per core (an empty task)
            sess.sparkContext.parallelize(
                [(-1 - cursor.version, MARKER, cursor.version, cursor.next_id)], 1),
            "task_id long, status string, inbox_version long, order_key long",
        )  # not coalesce(1): a union of two single partitions is one (a shared file)
        return rows.coalesce(1).sortWithinPartitions("task_id").unionByName(
            marker, allowMissingColumns=True)

    def reading_all(self, path: str) -> Any:
        """A Delta transaction on the newest snapshot of ``path`` that has read all of it.

        Any commit made after its snapshot then makes its own commit conflict
        (Delta's Serializable check: files added or removed that it read), so
        what it writes may rest on everything the snapshot held.
        """
        txn = self._start_transaction(path)
        txn.readWholeTable()
        return txn

    @staticmethod
    def fits(txn: Any, frame: DataFrame) -> bool:
        """Whether ``frame`` has the columns of ``txn``'s table, by name and type (an
        append in ``txn`` cannot evolve the schema as ``mergeSchema`` does)."""
        table = T.StructType.fromJson(json.loads(txn.metadata().schema().json()))
        return _fields_of(table) == _fields_of(frame.schema)

    def commit_ingest(self, txn: Any, tube: str, since: Cursor, cursor: Cursor,
                      rows: DataFrame, changes: DataFrame | None, tag: CommitTag) -> int:
        """Commit in ``txn`` (see :meth:`reading_all`) the ingest of ``rows`` from
        ``since`` to ``cursor``, some maybe already changed by the same commit
        (then ``changes``: its change feed rows, with ``_change_type``, written
        when the table keeps a change feed); the version committed.

        It records the ingest transaction id as :meth:`write_marker` does, so
        an ingest from the same cursor by that way is skipped or conflicts.
        An ingest already committed from ``since`` is not looked for: the
        caller read the cursor after ``txn``'s snapshot, and any commit since
        makes this one conflict.
        """
        jvm = self.spark.sparkContext._jvm
        assert jvm is not None
        sess = rows.sparkSession
        sess.conf.set("spark.sql.files.maxRecordsPerFile", str(TASK_FILE_ROWS))
        actions = jvm.java.util.ArrayList()
        actions.add(self._action({"txn": {"appId": INGEST_TXN, "version": since.version,
                                          "lastUpdated": int(time.time() * 1000)}}))
        feed = txn.metadata().configuration().get("delta.enableChangeDataFeed")
        keeps_feed = feed.isDefined() and str(feed.get()).lower() == "true"
        frame = self._ingest_frame(rows, cursor)
        if changes is not None and keeps_feed:
            # one write: Delta sends the rows with a change type to the change feed's files
            frame = frame.withColumn(CHANGE_TYPE, F.lit(None).cast("string")).unionByName(
                changes, allowMissingColumns=True)
        written = txn.writeFiles(frame._jdf).iterator()
        while written.hasNext():
            actions.add(written.next())
        return self._commit_actions(txn, actions, tag, appended=True)

    # -- reads ----------------------------------------------------------------------

    def read(self, path: str, spark: SparkSession | None = None,
             version: int | None = None) -> DataFrame:
        reader = (spark or self.spark).read.format("delta")
        if version is not None:
            reader = reader.option("versionAsOf", version)
        return reader.load(path)

    def read_files(self, path: str, names: list[str], schema: T.StructType | None,
                   spark: SparkSession | None = None) -> DataFrame:
        """The data files ``names`` (as the log names them) of the table at ``path``,
        read as the Parquet files they are, with ``_metadata`` (``file_name``,
        ``row_index``).

        For files the caller found in the log (the puts an ingest moves, the
        files a commit added or removed): a Delta read of a version not read
        before would first rebuild that version's file list in a Spark job
        (about 0.5 s here) to find them. Only for files with no deletion
        vector. ``schema``: the table's, or None when the files share one
        (it is then read from a file's footer).
        """
        files = [re.sub(r"([\\{}\[\]*?])", r"\\\1", f"{path}/{unquote(n)}")  # not globs
                 for n in names]
        reader = (spark or self.spark).read
        return (reader if schema is None else reader.schema(schema)).parquet(*files)

    def file_stats(self, path: str) -> list[dict[str, Any]]:
        """Per data file of the newest snapshot, what :func:`head_bound` reads.

        The statistics Delta keeps per file (row count, min/max per column),
        from :meth:`files_at`; where that does not know them, from the
        snapshot's state through Delta's ``DeltaLog`` (as data skipping does):
        no data file opened, one small Spark job, plus the state's own rebuild
        when no read of this version has cached it yet; later calls replay
        only the commits made since. ``DeltaLog`` is an internal Delta
        interface (pinned with delta-spark); where it is missing, ``[]``:
        takes then read every ready task. A table of at most FEW_FILES files
        gets no statistics either: reading them all costs less than choosing
        among them.
        """
        files = self.files_at(path, self.latest_version(path))
        if files is None:
            if 0 <= self.file_count(path) <= FEW_FILES:
                return []
            files = self._load_file_stats(path)
        return [] if files is None or len(files) <= FEW_FILES else list(files.values())

    def files_at(self, path: str, version: int) -> dict[str, dict[str, Any]] | None:
        """Per data file of ``path`` at ``version``: its statistics (``rows`` and
        :data:`FILE_STATS`) and ``size``; None when they are not known without
        a Spark job.

        Known from this process's last look, moved on through the commit
        files since (each ``add`` carries its file's statistics, each
        ``remove`` names a file gone), or from the checksum file Delta writes
        beside the commit (it lists every file of a table of few enough
        files): no Spark job, so a consumer does not pay the state job once
        per batch.
        """
        cached = self._stats_by_file.get(path)
        files = self._replay(path, *cached, version) if cached is not None else None
        if files is None:
            files = self._checksum_files(path, version)
        if files is not None and (cached is None or version >= cached[0]):
            self._stats_by_file[path] = (version, files)
        return files

    def _load_file_stats(self, path: str) -> dict[str, dict[str, Any]] | None:
        """:meth:`files_at` for the newest snapshot, from its state (a Spark job)."""
        jvm = self.spark.sparkContext._jvm
        assert jvm is not None
        try:
            log = getattr(jvm, "org.apache.spark.sql.delta.DeltaLog").forTable(
                self.spark._jsparkSession, path)
            empty = jvm.scala.Option.empty()
            snapshot = log.update(False, empty, empty)
            version = int(snapshot.version())
            stats = DataFrame(snapshot.withStats(), self.spark)
        except Py4JError:
            return None
        rows = stats.select(
            "path", "size", F.col("stats.numRecords").alias("rows"),
            *[F.col(f"stats.{kind}.{col}").alias(key) for key, (kind, col) in FILE_STATS.items()],
        ).collect()
        files = {r["path"]: {"rows": r["rows"], **{k: r[k] for k in FILE_STATS},
                             "size": r["size"]} for r in rows}  # as _file_entry
        self._stats_by_file[path] = (version, files)
        return files

    def _checksum_files(self, path: str, version: int) -> dict[str, dict[str, Any]] | None:
        """:meth:`files_at` from the checksum file of ``version``, when it lists the files."""
        log, fs = self._fs(path)
        crc = log.suffix(f"/{version:020d}.crc")
        if not fs.exists(crc):
            return None
        summary = json.loads(self._read_text(fs, crc))
        listed = summary.get("allFiles")
        if listed is None or len(listed) != summary.get("numFiles"):
            return None
        return {a["path"]: _file_entry(a) for a in listed}

    def _replay(self, path: str, version: int, files: dict[str, dict[str, Any]],
                upto: int) -> dict[str, dict[str, Any]] | None:
        """``files`` (the statistics at ``version``) moved on to ``upto`` by the
        commits between; None when a commit file is gone (log retention) or
        the log is behind ``version`` (the table was made anew at this path)."""
        if upto < version:
            return None
        if upto == version:
            return files
        files = dict(files)
        log, fs = self._fs(path)
        for v in range(version + 1, upto + 1):
            text = self._commit_text(log, fs, v)
            if text is None:
                return None
            for line in text.splitlines():
                action = json.loads(line)
                if "remove" in action:
                    files.pop(action["remove"]["path"], None)
                elif "add" in action:
                    files[action["add"]["path"]] = _file_entry(action["add"])
        return files

    def file_count(self, path: str) -> int:
        """About how many data files the table has: the count in the newest of the
        last few commits' checksum files (-1: none of them has one).

        Delta writes ``<version>.crc`` with the table's file count beside most
        commits; reading it costs no Spark job (Delta's own accessor,
        ``numOfFilesIfKnown``, computes the snapshot's whole state for it).
        """
        log, fs = self._fs(path)
        latest = self.latest_version(path)
        for version in range(latest, max(-1, latest - 5), -1):
            crc = log.suffix(f"/{version:020d}.crc")
            if fs.exists(crc):
                return int(json.loads(self._read_text(fs, crc)).get("numFiles", -1))
        return -1

    def exists(self, path: str) -> bool:
        return bool(DeltaTable.isDeltaTable(self.spark, path))

    def delete_tube_dir(self, tube: str) -> None:
        """Delete a tube's folder (both its tables) and forget what was cached of it."""
        jvm = self.spark.sparkContext._jvm
        assert jvm is not None
        path = jvm.org.apache.hadoop.fs.Path(self.tube_dir(tube))
        path.getFileSystem(self.spark.sparkContext._jsc.hadoopConfiguration()).delete(path, True)
        self.forget(self.tube_dir(tube))

    def tube_dirs(self) -> list[str]:
        """The names of the tube folders under the root, sorted (any file system)."""
        jvm = self.spark.sparkContext._jvm
        assert jvm is not None
        folder = jvm.org.apache.hadoop.fs.Path(f"{self.root}/tubes")
        fs = folder.getFileSystem(self.spark.sparkContext._jsc.hadoopConfiguration())
        if not fs.exists(folder):
            return []
        return sorted(str(f.getPath().getName()) for f in fs.listStatus(folder) if f.isDirectory())

    # -- the Delta log, read directly (the commit files are Delta's public protocol) ----
    # Asking Delta (DESCRIBE HISTORY) costs one or two Spark jobs per call; an
    # operation needs the latest version and the version it committed, so the
    # JSON commit files are read through the Hadoop FileSystem instead.

    def _fs(self, path: str) -> tuple[Any, Any]:
        """The table's ``_delta_log`` Hadoop path and file system (kept: every
        operation reads the log, and each lookup is JVM round trips)."""
        found = self._log_fs.get(path)
        if found is None:
            jvm = self.spark.sparkContext._jvm
            assert jvm is not None
            log = jvm.org.apache.hadoop.fs.Path(f"{path}/_delta_log")
            found = log, log.getFileSystem(self.spark.sparkContext._jsc.hadoopConfiguration())
            self._log_fs[path] = found
        return found

    def latest_version(self, path: str) -> int:
        """The newest committed version of the table at ``path``.

        A table that is not there (its ``_delta_log`` gone: deleted outside
        sparkqueue) is a :class:`StorageError`: every verb reads this before
        it writes, and a Delta append to a missing table would make a new,
        empty one in its place, losing its tasks without a word.
        """
        log, fs = self._fs(path)
        known = self._versions.get(path)
        if known is None:
            known = -1
            last = log.suffix("/_last_checkpoint")
            if fs.exists(last):
                known = int(json.loads(self._read_text(fs, last))["version"])
        found = known
        while fs.exists(log.suffix(f"/{found + 1:020d}.json")):
            found += 1
        if found == known and not fs.exists(log):
            self._versions.pop(path, None)
            raise StorageError(path, "the Delta table is missing (no _delta_log): it was "
                               "deleted or moved outside sparkqueue, which never recreates "
                               "a tube's tables; restore it, or drop() the tube")
        self._versions[path] = found
        return found

    def forget(self, path_prefix: str) -> None:
        """Drop cached versions of tables under ``path_prefix`` (a dropped tube)."""
        for cache in (self._versions, self._cursors, self._stats_by_file, self._put_files,
                      self._log_fs):
            for key in [k for k in cache if k.startswith(path_prefix)]:
                del cache[key]
        for tagged in [k for k in self._tag_values if k[0].startswith(path_prefix)]:
            del self._tag_values[tagged]

    def _read_text(self, fs: Any, file: Any) -> str:
        jvm = self.spark.sparkContext._jvm
        assert jvm is not None
        stream = fs.open(file)
        try:
            return str(jvm.org.apache.commons.io.IOUtils.toString(stream, "UTF-8"))
        finally:
            stream.close()

    def rewrite_files(self, path: str, names: list[str]) -> int:
        """Rewrite the data files ``names`` of the table at ``path`` into one, changing no data.

        One commit whose adds and removes carry ``dataChange=false``, as an
        OPTIMIZE's do: Delta checks it only against commits that removed the
        same files (then it conflicts and the caller retries), so transactions
        that did not read these files are not aborted by it, and the change
        data feed has nothing for it. Delta's public API offers this only as
        OPTIMIZE, which cannot be pointed at chosen files, so this goes through
        its transaction API (DeltaLog, OptimisticTransaction, as OPTIMIZE does).
        Returns the number of files removed (0 when fewer than two were found).
        """
        jvm = self.spark.sparkContext._jvm
        assert jvm is not None
        txn = self._start_transaction(path)
        wanted = set(names)
        old = [a for a in txn.snapshot().allFiles().collectAsList() if a.path() in wanted]
        if len(old) < 2:
            return 0
        rows = (self.read(path).where(F.element_at(F.split("_metadata.file_path", "/"), -1)
                                      .isin([a.path() for a in old]))
                .repartition(1).sortWithinPartitions("task_id"))
        actions = jvm.java.util.ArrayList()
        written = txn.writeFiles(rows._jdf).iterator()
        while written.hasNext():
            add = json.loads(written.next().json())
            add["add"]["dataChange"] = False
            actions.add(self._action(add))
        now = int(time.time() * 1000)
        for a in old:
            actions.add(a.removeWithTimestamp(now, False))
        self._commit_actions(txn, actions)
        return len(old)

    def _action(self, action: dict[str, Any]) -> Any:
        """A Delta log action (its JSON form as a dict) as Delta's own object."""
        jvm = self.spark.sparkContext._jvm
        assert jvm is not None
        parse = getattr(getattr(jvm, "org.apache.spark.sql.delta.actions.Action$"), "MODULE$")
        return parse.fromJson(json.dumps(action))

    def _start_transaction(self, path: str) -> Any:
        """A Delta transaction on the newest snapshot of ``path`` (Delta's internal API)."""
        jvm = self.spark.sparkContext._jvm
        assert jvm is not None
        log = getattr(jvm, "org.apache.spark.sql.delta.DeltaLog").forTable(
            self.spark._jsparkSession, path)
        txn = log.startTransaction()
        if int(txn.snapshot().version()) < 0:  # its commit would create a new table
            self.latest_version(path)  # says what is wrong
            raise StorageError(path, "no Delta table to commit to")
        return txn

    def _commit_actions(self, txn: Any, actions: Any, tag: CommitTag | None = None,
                        deleted_rows: int | None = None, appended: bool = False) -> int:
        """Commit Delta ``actions`` in ``txn``; ``tag``: its userMetadata. The version
        committed.

        ``deleted_rows``: the actions only remove files, holding that many
        rows; the commit is then a DELETE (no predicate, its row and file
        counts in its operation metrics) rather than a manual update: Delta
        derives a DELETE's checksum file from the previous one, where after
        a manual update it rebuilds the table's whole state (four Spark jobs
        here, about a second). ``appended``: the actions add files; the commit
        is then an append (a WRITE), for the same reason.
        """
        jvm = self.spark.sparkContext._jvm
        assert jvm is not None
        ops = "org.apache.spark.sql.delta.DeltaOperations"
        scala = jvm.scala.jdk.javaapi.CollectionConverters
        if appended:
            write = getattr(getattr(jvm, f"{ops}$Write$"), "MODULE$")
            operation = write.apply(jvm.org.apache.spark.sql.SaveMode.Append,
                                    *[getattr(write, f"apply$default${i}")() for i in range(2, 10)])
        elif deleted_rows is None:
            operation = getattr(getattr(jvm, f"{ops}$ManualUpdate$"), "MODULE$")
        else:
            operation = getattr(getattr(jvm, f"{ops}$Delete$"), "MODULE$").apply(
                scala.asScala(jvm.java.util.ArrayList()).toSeq())
            metrics = jvm.java.util.HashMap()
            for name, value in (("numDeletedRows", deleted_rows),
                                ("numRemovedFiles", len(actions))):
                metric = jvm.org.apache.spark.sql.execution.metric.SQLMetrics.createMetric(
                    self.spark.sparkContext._jsc.sc(), name)
                metric.set(value)
                metrics.put(name, metric)
            immutable = getattr(getattr(jvm, "scala.collection.immutable.Map$"), "MODULE$")
            txn.registerSQLMetrics(self.spark._jsparkSession,
                                   getattr(immutable, "from")(scala.asScala(metrics)))
        actions = jvm.scala.jdk.javaapi.CollectionConverters.asScala(actions).toSeq()
        if tag is None:
            return int(txn.commit(actions, operation))
        sessions = SparkSession._get_j_spark_session_class(jvm)
        with self.tagged(tag) as sess:
            # Delta takes commitInfo.userMetadata from the thread's active session
            sessions.setActiveSession(sess._jsparkSession)
            try:
                return int(txn.commit(actions, operation))
            finally:
                sessions.setActiveSession(self.spark._jsparkSession)

    def _commit_text(self, log: Any, fs: Any, version: int) -> str | None:
        """The JSON commit file of ``version`` (None: not there)."""
        file = log.suffix(f"/{version:020d}.json")
        return self._read_text(fs, file) if fs.exists(file) else None

    def read_text(self, path: str) -> str:
        """A small text file at ``path`` (any Hadoop file system)."""
        jvm = self.spark.sparkContext._jvm
        assert jvm is not None
        file = jvm.org.apache.hadoop.fs.Path(path)
        fs = file.getFileSystem(self.spark.sparkContext._jsc.hadoopConfiguration())
        return self._read_text(fs, file)

    def commit_infos(self, path: str, after_version: int,
                     upto: int | None = None) -> list[tuple[int, dict[str, Any]]]:
        """``(version, commitInfo)`` of the commits after ``after_version``, oldest first."""
        log, fs = self._fs(path)
        last = self.latest_version(path) if upto is None else upto
        out = []
        for version in range(max(after_version + 1, 0), last + 1):
            text = self._commit_text(log, fs, version)
            if text is None:  # cleaned up by log retention
                continue
            for line in text.splitlines():
                if line.startswith('{"commitInfo"'):
                    out.append((version, json.loads(line)["commitInfo"]))
                    break
        return out

    def cursor(self, tube: str) -> Cursor:
        """The last inbox version ingested into the tasks table, and the next task id.

        Ingests chain (each starts from the cursor the previous one left), so
        the newest ingest commit's tag (``upto``, ``next_id``) is the cursor:
        read from the log, from where this process last looked or, in a new
        process, back from the newest commit. Only when the log no longer
        holds an ingest (log retention) is the newest marker row read, with
        Spark. A tube whose whole log holds no ingest (a new one) is at
        version 0 (its creation), id 0.
        """
        path = self.tasks(tube)
        latest = self.latest_version(path)
        seen, cursor = self._cursors.get(path, (-1, Cursor(0, 0)))
        if seen < latest:
            since = seen if seen >= 0 else max(-1, latest - CURSOR_LOOKBACK)
            found = [h["tag"] for h in self.history(path, since) if h["tag"]["sq"] in INGESTS]
            if found and "next_id" not in found[-1]:
                raise QueueError(f"tube {tube!r} was made by an earlier sparkqueue (task ids "
                                 "from Delta row tracking), which this one does not read")
            if found:
                cursor = Cursor(int(found[-1]["upto"]), int(found[-1]["next_id"]))
            elif since < 0 and self._commit_text(*self._fs(path), 0) is not None:
                cursor = Cursor(0, 0)  # the whole log read, no ingest in it: a new tube
            elif seen < 0:
                row = (self.read(path).where("task_id < 0").orderBy(F.desc("inbox_version"))
                       .select("inbox_version", "order_key").first())
                if row is not None:
                    cursor = Cursor(int(row[0]), int(row[1]))
            self._cursors[path] = (latest, cursor)
        return cursor

    def last_tag_value(self, path: str, key: str) -> int:
        """``key`` of the newest commit tag of the table at ``path`` that holds it; 0 when
        none does.

        Read back from the newest commit in a new process, then on from where
        this one last looked. Where log retention removed the commits before
        any that holds it, Delta's own state tells (the transaction id of that
        name, which every such commit records).
        """
        latest = self.latest_version(path)
        seen, value = self._tag_values.get((path, key), (-1, None))
        if seen >= 0:
            found = [h["tag"][key] for h in self.history(path, seen) if key in h["tag"]]
            value = int(found[-1]) if found else value
        else:
            log, fs = self._fs(path)
            for version in range(latest, -1, -1):
                text = self._commit_text(log, fs, version)
                if text is None:
                    value = self._delta_txn_version(path, key)
                    break
                info: dict[str, Any] = next((json.loads(line)["commitInfo"]
                                             for line in text.splitlines()
                                             if line.startswith('{"commitInfo"')), {})
                tag = parse_tag(info.get("userMetadata"))
                if tag is not None and key in tag:
                    value = int(tag[key])
                    break
        self._tag_values[(path, key)] = (latest, value)
        return int(value or 0)

    def _delta_txn_version(self, path: str, app_id: str) -> int:
        """The version Delta's state records for transaction id ``app_id`` (0: none)."""
        return max(0, int(self._start_transaction(path).txnVersion(app_id)))

    def put_files(self, tube: str, anchor: Cursor, upto: int) -> tuple[list[PutFile], int]:
        """The data files the inbox's put commits after ``anchor`` up to ``upto``
        added, in id order, each with its first task id; and the id after them.

        Ids count the rows put: the first file of a put commit starts where
        the previous commit's rows ended, files within a commit follow their
        names (Spark's part numbers: the DataFrame's partition order), a row's
        id is its file's first id plus its place in the file. All of it is in
        the commit files (each ``add`` carries its row count, unless Delta's
        statistics are off: then one Spark count), so ids cost no Spark job,
        and an append needs no table feature that makes Delta read
        state at commit (row tracking does). Remembered per inbox from the last
        anchor: a producer whose puts nobody ingests yet reads each commit once.
        """
        inbox = self.inbox(tube)
        known = self._put_files.get(inbox)
        if known is None or known[0] != anchor:
            known = (anchor, anchor.version, [], anchor.next_id)
        _, done, files, next_id = known
        if done >= upto:  # read further before: the files up to ``upto`` only
            later = [f.first_id for f in files if f.version > upto]
            return [f for f in files if f.version <= upto], (later[0] if later else next_id)
        files = list(files)
        log, fs = self._fs(inbox)
        for version in range(done + 1, upto + 1):
            text = self._commit_text(log, fs, version)
            if text is None:
                raise QueueError(f"commit {version} of {inbox} is gone from the Delta log "
                                 "(log retention) before its puts were ingested")
            actions = [json.loads(line) for line in text.splitlines()]
            info: dict[str, Any] = next(
                (a["commitInfo"] for a in actions if "commitInfo" in a), {})
            tag = parse_tag(info.get("userMetadata"))
            if any("remove" in a for a in actions) and (tag or {}).get("sq") != "purge":
                raise QueueError(
                    f"commit {version} of {inbox} ({info.get('operation')}) rewrote inbox files: "
                    "task ids are places in the files puts wrote, so the inbox must not be "
                    "compacted or changed outside sparkqueue")
            if tag is None or tag["sq"] != "put":
                continue
            adds = sorted((a["add"] for a in actions if "add" in a), key=lambda a: a["path"])
            counts = self._row_counts(inbox, version, adds)
            for add, rows in zip(adds, counts, strict=True):
                files.append(PutFile(add["path"].rsplit("/", 1)[-1], version, next_id, tag["put"]))
                next_id += rows
        self._put_files[inbox] = (anchor, upto, files, next_id)
        return files, next_id

    def _row_counts(self, path: str, version: int, adds: list[dict[str, Any]]) -> list[int]:
        """Rows in each added file: its statistics, or (statistics off) a count with Spark."""
        counts = [_stats_of(a.get("stats"))["rows"] for a in adds]
        if None not in counts:
            return [int(c) for c in counts]
        names = [a["path"].rsplit("/", 1)[-1] for a in adds]
        found: dict[str, int] = dict(self.read(path, version=version)
                     .where(F.col("_metadata.file_name").isin(names))
                     .groupBy("_metadata.file_name").count().collect())
        return [int(found.get(n, 0)) for n in names]

    def purge_inbox(self, tube: str, cursor: Cursor) -> int:
        """Remove the inbox files of the puts up to ``cursor`` (ingested); rows removed.

        One commit of ``remove`` actions, tagged ``purge``, made through
        Delta's transaction API (as :meth:`rewrite_files`; a DELETE cannot
        name files): no data file is read or rewritten, so the files that
        remain, whose rows are not ingested yet, keep every row in its place
        (a row's place is half its task id). It reads no data, so by Delta's
        conflict rules concurrent puts (blind appends) do not abort it.
        """
        txn = self._start_transaction(self.inbox(tube))
        newer, _ = self.put_files(tube, cursor, int(txn.snapshot().version()))
        keep = {f.name for f in newer}
        old = [a for a in txn.snapshot().allFiles().collectAsList()
               if a.path().rsplit("/", 1)[-1] not in keep]
        if not old:
            return 0
        now = int(time.time() * 1000)
        rows = sum(int(_stats_of(a.stats())["rows"] or 0) for a in old)
        self._commit_actions(txn, [a.removeWithTimestamp(now, True) for a in old],
                             CommitTag.new("purge"), deleted_rows=rows)
        return rows

    def remove_files(self, path: str,
                     choose: Callable[[dict[str, dict[str, Any]]], list[str] | None],
                     tag: CommitTag) -> int | None:
        """Remove whole the data files ``choose`` picks from the newest snapshot's
        (given their statistics, :meth:`files_at`), in one commit tagged ``tag``;
        the version committed, or None when it picked none (or the statistics
        are not known without a Spark job).

        No data file is read or written (a DELETE would read them and cannot
        name files). ``choose`` sees the files of the very snapshot the
        commit is checked against: a concurrent commit that changed one of
        them removed it, and then, by Delta's conflict rules (removing a
        file another commit removed), this one is refused as a conflict; no
        race test shows it. The change data feed reads removed files as
        deleted rows.
        """
        txn = self._start_transaction(path)
        files = self.files_at(path, int(txn.snapshot().version()))
        names = choose(files) if files else None
        if not files or not names:
            return None
        jvm = self.spark.sparkContext._jvm
        assert jvm is not None
        now = int(time.time() * 1000)
        actions = jvm.java.util.ArrayList()
        for name in names:
            actions.add(self._action({"remove": {
                "path": name, "deletionTimestamp": now, "dataChange": True,
                "extendedFileMetadata": True, "partitionValues": {},
                "size": files[name]["size"]}}))
        rows = sum(int(files[name]["rows"] or 0) for name in names)
        return self._commit_actions(txn, actions, tag, deleted_rows=rows)

    def commit_of(self, path: str, token: str,
                  after_version: int) -> tuple[int, dict[str, str]] | None:
        """The version and operation metrics of the commit tagged with ``token``, made
        after ``after_version``; None when there is none (Delta commits no UPDATE
        that changes nothing)."""
        for version, info in self.commit_infos(path, after_version):
            if token in (info.get("userMetadata") or ""):
                return version, dict(info.get("operationMetrics") or {})
        return None

    def history(self, path: str, after_version: int) -> list[dict[str, Any]]:
        """sparkqueue-tagged commits after ``after_version``: version, tag, operation metrics."""
        out = []
        for version, info in self.commit_infos(path, after_version):
            tag = parse_tag(info.get("userMetadata"))
            if tag is not None:
                out.append({"version": version, "tag": tag,
                            "metrics": dict(info.get("operationMetrics") or {})})
        return out

    def changed_at(self, tube: str, version: int, token: str, lo: int, hi: int, *,
                   updates: bool = True, removable: DataFrame | None = None) -> DataFrame:
        """The task rows the commit at ``version`` (tagged ``token``) changed, from the
        table itself (a tube may keep no change feed); rows it deleted read as ``done``.

        ``updates``: the rows it updated, which carry its token in
        ``change_token``. ``removable``: ids it may have deleted; those gone
        are read at the version before, as no commit between the operation's
        snapshot and its own changed them (its commit would have conflicted).
        ``lo``/``hi`` bound every id the commit touched, so reads skip the
        other files. Rows a commit updated are in the files it added, rows
        it deleted in the files it removed: those are read (:meth:`commit_files`).
        """
        bounds = f"task_id BETWEEN {lo} AND {hi}"
        spark = removable.sparkSession if removable is not None else self.spark
        path = self.tasks(tube)
        files = self.commit_files(path, version)

        def updated() -> DataFrame:
            return (self._files_or_table(path, files and files[0], version, spark)
                    .where(bounds).where(F.col("change_token") == token))

        if removable is None:
            return updated()
        removed = (self._files_or_table(path, files and files[1], version - 1, spark)
                   .where(bounds).join(removable.select("task_id"), "task_id", "left_semi"))
        if not updates:
            return removed.withColumn("status", F.lit("done"))
        changed = updated()
        removed = removed.join(changed.select("task_id"), "task_id", "left_anti")
        return changed.unionByName(removed.withColumn("status", F.lit("done")))

    def commit_files(self, path: str, version: int) -> tuple[list[str], list[str]] | None:
        """The data files the commit at ``version`` of ``path`` added and removed, as
        the log names them; None when its commit file is gone, or a file has
        a deletion vector (its rows are not all the file's)."""
        log, fs = self._fs(path)
        text = self._commit_text(log, fs, version)
        if text is None:
            return None
        found: tuple[list[str], list[str]] = ([], [])
        for line in text.splitlines():
            action = json.loads(line)
            for kind, names in zip(("add", "remove"), found, strict=True):
                if kind in action:
                    if action[kind].get("deletionVector"):
                        return None
                    names.append(action[kind]["path"])
        return found

    def _files_or_table(self, path: str, names: list[str] | None, version: int,
                        spark: SparkSession) -> DataFrame:
        """The rows of the data files ``names`` of ``path`` (at ``version``), or, when
        they are not known or none, the whole table at ``version``."""
        if not names:
            return self.read(path, spark, version)
        return self.read_task_files(path, names, spark)

    def read_task_files(self, path: str, names: list[str], spark: SparkSession) -> DataFrame:
        """:meth:`read_files` for data files of a tasks table: its columns only (files
        Delta wrote with a change feed on carry its change columns too)."""
        return self.read_files(path, names, None, spark).select(*TASK_TABLE_COLUMNS)


def _fields_of(schema: T.StructType) -> list[tuple[str, str]]:
    """A schema's columns as (name, type), nullability aside."""
    return [(f.name, f.dataType.simpleString()) for f in schema.fields]


def _file_entry(add: dict[str, Any]) -> dict[str, Any]:
    """What :meth:`Layout.files_at` keeps of an ``add`` action: statistics and size."""
    return {**_stats_of(add.get("stats")), "size": add.get("size")}


def _stats_of(stats_json: str | None) -> dict[str, Any]:
    """A file's :data:`FILE_STATS` from an ``add`` action's statistics JSON; no
    statistics: ``rows`` None. Delta writes non-finite doubles as the strings
    "Infinity", "-Infinity" and "NaN" (no status is spelled so)."""
    stats = json.loads(stats_json) if stats_json else {}
    out: dict[str, Any] = {"rows": stats.get("numRecords")}
    for key, (kind, col) in FILE_STATS.items():
        value = (stats.get(kind) or {}).get(col)
        out[key] = float(value) if value in ("Infinity", "-Infinity", "NaN") else value
    return out


def _create_table(spark: SparkSession, path: str, schema: T.StructType,
                  properties: dict[str, str]) -> bool:
    """Create a Delta table at ``path`` unless it exists; True if this call created it."""
    if DeltaTable.isDeltaTable(spark, path):
        return False
    builder = DeltaTable.createIfNotExists(spark).location(path).addColumns(schema)
    for key, value in properties.items():
        builder = builder.property(key, value)
    try:
        builder.execute()
    except Exception as e:  # another process created it first, or is creating it
        problem = f"cannot create a Delta table here: {first_line(e)}"
        if any(m in str(e) for m in NOT_WRITABLE):
            raise StorageError(path, problem) from e
        until = time.monotonic() + CREATE_PATIENCE
        while True:  # a creator that lost the race can fail before the winner commits
            if DeltaTable.isDeltaTable(spark, path):
                return False
            if time.monotonic() >= until:
                raise StorageError(path, problem) from e
            time.sleep(0.2)
    return True


#: What a file system says when a table cannot be written where it was asked for.
NOT_WRITABLE = ("DELTA_CANNOT_CREATE_LOG_PATH", "AccessDenied", "Permission denied",
                "ParentNotDirectory", "Not a directory", "Mkdirs failed", "Read-only file system")


def first_line(e: BaseException) -> str:
    """The first line of an error's message, without a Java stack (for a Java
    exception through py4j, the Java exception's own)."""
    java = getattr(e, "java_exception", None)
    text = str(java.toString() if java is not None else e).strip()
    return text.splitlines()[0][:300] if text else type(e).__name__


def raise_guard(kind_sql: str) -> str:
    """SQL that fails the whole MERGE with a typed guard message naming the task."""
    return (f"CAST(raise_error(concat('sparkqueue:', {kind_sql}, ':', "
            f"CAST(t.task_id AS STRING))) AS BIGINT)")


def raise_missing(kind: str = "TaskNotFound") -> str:
    """SQL that fails the whole MERGE for a source id with no task row."""
    return (f"CAST(raise_error(concat('sparkqueue:{kind}:', CAST(s.task_id AS STRING))) "
            "AS BIGINT)")


def typed_guard_error(tube: str, kind: str, ids: list[int], owner: str,
                      states: dict[int, str]) -> QueueError:
    """The API error for a failed guard, with every offending id found by diagnosis."""
    if kind == "TaskNotFound":
        return TaskNotFound(tube, ids)
    if kind == "NotOwner":
        return NotOwner(tube, ids, owner)
    found = ", ".join(f"{i}: {states.get(i, '?')}" for i in ids[:10])
    return InvalidState(f"task(s) in tube {tube!r} are not in a state that allows this "
                        f"({found})", ids)


def missing_table_error(tube: str, where: str, e: BaseException,
                        known: list[str]) -> QueueError:
    """The error for an operation on a tube whose tables are gone: dropped (it is no
    longer in ``known``, the registered tubes), or missing under a registered tube
    (``e`` a :class:`StorageError` naming the table, or Delta's own error)."""
    if tube not in known:
        return TubeNotFound(tube, known)
    if isinstance(e, StorageError):
        return StorageError(e.path, e.problem, tube)
    return StorageError(where, f"a table of the tube is missing: {first_line(e)}", tube)
