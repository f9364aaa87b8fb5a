"""The tables' columns, the commit tag, and the names a queue root's tables share."""

from __future__ import annotations

import json
import math
import uuid
from dataclasses import dataclass
from typing import Any, NamedTuple

from pyspark.sql import types as T

INF = math.inf


#: How many commits back a new process looks for the last ingest before it reads
#: the cursor from the marker rows instead.
CURSOR_LOOKBACK = 50


MARKER = "_marker"

#: The status of a lease record's row (``engine.records``): it sorts below every
#: task's status, so file statistics tell a record's file from task files.
LEASE = "_lease"

#: The status of a settle row (``engine.records``): a lease record's ack or delete,
#: appended as one row whose ``change_token`` is the record's, in a file of its own.
#: It sorts below every task's status, as a record's does.
SETTLED = "_settled"


#: The Delta transaction id (``txnAppId``) of every ingest into a tasks table.
INGEST_TXN = "sq-ingest"


#: Operations (commit tags) that ingest, each tagged with the cursor it leaves (as
#: is a truncate that moved the cursor past the puts it dropped: ``upto`` in its tag).
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
#: from the put's commit tag. ``put_token`` is that tag's token, the same in every
#: row of a put: what a DELETE of ingested puts names (:meth:`Layout.purge_inbox`).
INBOX_COLUMNS: list[tuple[str, T.DataType]] = [
    ("put_token", T.StringType()),
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

#: Rows per file of the inbox, at most. A take of new puts reads the files that
#: hold the tasks it leases (``engine.fresh.ingest_taking``): whole files, as
#: Parquet cannot skip to a row, so a put's files bound what a take reads.
INBOX_FILE_ROWS = 100_000

#: Commits between Delta checkpoints of a root's tables (Delta's default: 10). A
#: queue commits often and small (two a batch for take and ack), and the commit
#: that writes a checkpoint rebuilds the table's state and writes it in Spark
#: jobs, many times a plain commit's cost. More commits between checkpoints
#: cost a longer replay of small JSON commits where a statement rebuilds the
#: state (release, bury) or a reader is new (docs/design.md, "Where a verb's time goes").
COMMITS_PER_CHECKPOINT = 100
CHECKPOINT_INTERVAL = "delta.checkpointInterval"

#: The fewest rows per file a take of the head files writes (see
#: ``engine.take.take_files``): a take of ``n`` writes files of
#: ``max(n, TAKE_FILE_ROWS)`` rows, at most ``TASK_FILE_ROWS``.
TAKE_FILE_ROWS = 1_000


def file_rows(n: int) -> int:
    """The most rows per file a head-file take of ``n`` writes: ``n``, at least
    ``TAKE_FILE_ROWS`` and at most ``TASK_FILE_ROWS``.

    When the files it read hold more than ``n`` tasks, its leased tasks then
    fill one file (up to that most), which their ack removes whole, and the
    ready ones it rewrites are cut into files of that size in their order,
    so that the next takes of ``n`` (from 1,000 to 20,000) take whole files:
    no window to choose within a file, and no ready rows rewritten beside
    the leased ones (a file of 20,000 drained 1,000 at a time was rewritten
    twenty times). The floor keeps small takes from cutting a tube into
    tiny files. A take of sub-queue heads writes alike: its leased tasks in
    files of their own, the other rows of the files it chose from cut so.
    """
    return min(max(n, TAKE_FILE_ROWS), TASK_FILE_ROWS)


#: Tables of at most this many files are read whole by a take: choosing files by
#: their statistics costs a Spark job, more than reading a few small files.
FEW_FILES = 8


#: A take of sub-queue heads reads every row of the files that may hold a ready
#: task when they hold at most this many rows; more, and it reads first those
#: near the head (``engine.take.sub_queue_plan``).
HEAD_READ_ROWS = 100_000


#: Data files per tasks table whose leased rows a process keeps in mind for their
#: ack (``FileLog.note_leased``): a consumer's batches in flight need a few.
LEASED_KNOWN = 1024

#: Commit files per table whose text a process keeps (``LogReader.commit_texts``):
#: the commits a verb reads again, its own and those since its last look.
TEXTS_KEPT = 64

#: Inbox commits a put may count its ids over from the cursor this process knows,
#: without looking at either log first (``LogReader.put_start``).
PUT_CURSOR_LAG = 64


#: Id lists of at most this many runs of consecutive ids are SQL range filters.
RUNS_INLINE = 64


class Cursor(NamedTuple):
    """How far ingest got: the last inbox version whose puts are all ingested, the
    next task id (counted in rows put: the first of the puts after it), and
    how many rows of those later puts are ingested already (``partial``: a
    take of new puts ingests only the tasks it leases, the lowest ids first,
    see ``engine.fresh.ingest_taking``)."""

    version: int
    next_id: int
    partial: int = 0

    @property
    def first_pending(self) -> int:
        """The first row (in id order) not ingested yet."""
        return self.next_id + self.partial

    def txn_version(self) -> int:
        """The ingest transaction version (``txnVersion`` of :data:`INGEST_TXN`) of an
        ingest starting here: it grows with the cursor, the version then the
        partial rows (below ``PARTIAL_ROWS``), so Delta skips an ingest from a
        cursor that another ingest has left behind. Above the bare inbox
        version that ingests recorded before cursors were partial."""
        return (self.version << 32) | self.partial


#: The most rows an ingest leaves ingested in part (``Cursor.partial``): they share
#: the ingest transaction version with the inbox version (``Cursor.txn_version``).
PARTIAL_ROWS = 1 << 31


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

    def adding(self, **extra: Any) -> CommitTag:
        """This tag, same token, with ``extra`` values added (or replaced)."""
        return CommitTag(self.op, self.token, tuple(sorted({**dict(self.extra), **extra}.items())))

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


def nullable(field: Any) -> Any:
    """A Delta schema's JSON (a field, a type, or a part of one) with every field,
    array element and map value nullable."""
    if isinstance(field, list):
        return [nullable(f) for f in field]
    if not isinstance(field, dict):
        return field
    flags = {k: True for k in ("nullable", "containsNull", "valueContainsNull") if k in field}
    return {k: nullable(v) for k, v in field.items()} | flags
