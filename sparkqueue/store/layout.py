"""The Delta tables of a queue root: paths, creation, reads and results.

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
(``ingest+take``, :meth:`Transaction.ingest`), which records the same
transaction id.

Every commit is tagged with ``commitInfo.userMetadata`` (JSON: the operation
and a token), which is how call statistics survive restarts and cover every
process, and how an operation finds the version it committed. The rows a
commit updates carry its token in ``change_token``: an operation reads its
result from the table at its version (:meth:`Layout.changed_at`), so the
change data feed serves only ``Tube.changes`` and a tube may keep none.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Sequence
from typing import Any
from urllib.parse import unquote

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from ..errors import NotSupported, StorageError
from . import schema
from .failures import NO_TABLE, NOT_WRITABLE, first_line
from .filelog import FileLog
from .files import SparkFiles
from .filestats import STATS_COLUMNS, live_files
from .frames import is_dataframe
from .jvm import HadoopFiles, delta_classes, jvm_of
from .paths import append, shard_key, tagging
from .portable import PortableStore
from .protocol import Store
from .schema import (
    CHECKPOINT_INTERVAL,
    COMMITS_PER_CHECKPOINT,
    CREATE_PATIENCE,
    INBOX_COLUMNS,
    INGEST_TXN,
    TASK_COLUMNS,
    TASK_TABLE_COLUMNS,
    CommitTag,
    Cursor,
    PutFile,
)
from .sql import with_ids
from .tables import (
    FEED,
    ISOLATION,
    RETENTION_CHECK,
    SERIALIZABLE,
    ingest_frame,
    serializable,
    sql_table,
)
from .txn import AcceleratedStore

#: The engines a Layout can run: Delta's SQL and Spark's readers only, or those
#: with Delta's transaction API and Hadoop's FileSystem in the driver's JVM.
ENGINES = ("portable", "accelerated")


class Layout(FileLog):
    """Paths, tables and reads of one queue root (its log part is
    :class:`~sparkqueue.store.log.LogReader` and
    :class:`~sparkqueue.store.filelog.FileLog`), with its
    :class:`~sparkqueue.store.protocol.Store`: the accelerated store where there
    is a JVM with Delta's classes, the portable store otherwise.

    ``engine``: None chooses, here and only here: ``accelerated`` when the
    session is classic (it has a JVM) and Delta's classes are in it,
    ``portable`` otherwise (Spark Connect). ``portable`` may be asked for on a
    classic session; ``accelerated`` where it cannot run is
    :class:`NotSupported`.
    """

    def __init__(self, spark: SparkSession, root: str, engine: str | None = None) -> None:
        if engine is not None and engine not in ENGINES:
            raise NotSupported(f"engine must be one of {', '.join(ENGINES)} (or None: "
                               f"chosen by the session), got {engine!r}")
        jvm = None if engine == "portable" else jvm_of(spark)
        if jvm is not None and not delta_classes(jvm):
            jvm = None
        if engine == "accelerated" and jvm is None:
            raise NotSupported("the accelerated engine needs a classic SparkSession with "
                               "open-source Delta's classes; use engine='portable'")
        files = SparkFiles(spark) if jvm is None else HadoopFiles(spark, jvm)
        super().__init__(spark, root, files)
        #: the primitives that differ by engine (:mod:`.protocol`), chosen here once
        self.store: Store = (PortableStore(self, files) if jvm is None
                             else AcceleratedStore(self, files, jvm))
        #: tasks tables known Serializable (:meth:`settles_by_append`)
        self._serializable: dict[str, bool] = {}

    @property
    def engine(self) -> str:
        """``accelerated`` or ``portable``: see the class."""
        return self.store.engine

    def create_registry(self) -> None:
        """Create the registry of a new root. A root whose registry is gone while its
        tubes' tables are there is damaged, not new: an empty registry would hide
        them (``TubeNotFound``) and let a new tube of the same name adopt their tasks."""
        if not self.exists(self.registry):
            orphans = self.tube_dirs()
            where = f"schema {self.root}" if self.catalog else f"{self.root}/tubes"
            if orphans:
                raise StorageError(self.registry, (
                    "the registry of tubes is missing, but tube tables exist under "
                    f"{where} ({', '.join(orphans[:10])}): restore the registry "
                    "table, or move those tubes away to start an empty queue here"))
            if self.catalog:
                self.spark.sql(f"CREATE SCHEMA IF NOT EXISTS {self.root}")
        # Plain files with statistics of the name alone: a new tube's row is then
        # one file written from the driver (Store.append_if), not a MERGE. A
        # checkpoint as rare as a tube's tables': each create and drop is a commit,
        # and the commit that writes a checkpoint costs many times a plain one.
        self._create(self.registry, REGISTRY_SCHEMA, {
            "delta.enableDeletionVectors": "false",
            "delta.dataSkippingStatsColumns": "name",
            CHECKPOINT_INTERVAL: str(COMMITS_PER_CHECKPOINT)})

    def read_registry(self, version: int | None = None) -> DataFrame:
        """The registry's rows at ``version`` (by default its newest): :meth:`registry_at`'s."""
        return self.registry_at(version)[1]

    def registry_at(self, version: int | None = None) -> tuple[int | None, DataFrame]:
        """The registry's rows at ``version`` (by default its newest), and the version
        they are read at (None: Delta's newest, where a plain read gives them).

        Where the store lists its files without a Spark job
        (:meth:`Store.listed_files`), read as those Parquet files, in one Spark
        job: a Delta read of a version not read before rebuilds that version's
        state first (two jobs more), and the registry changes at every create
        and drop.
        """
        at = self.latest_version(self.registry) if version is None else version
        listed = self.store.listed_files(self.registry, at)
        if listed is not None:
            if not listed:
                return at, self.spark.createDataFrame([], REGISTRY_SCHEMA)
            return at, self.read_files(self.registry, listed, REGISTRY_SCHEMA)
        if version is None:
            return None, self.read(self.registry)
        return at, self.spark.sql(
            f"SELECT * FROM {sql_table(self.registry)} VERSION AS OF {at}")

    def create_stats_table(self, schema: T.StructType) -> None:
        if self.noted_version(self.stats) is None:
            self._create(self.stats, schema, {CHECKPOINT_INTERVAL: str(COMMITS_PER_CHECKPOINT)})
            self.latest_version(self.stats)

    def create_tube_tables(self, tube: str, change_feed: bool = False) -> None:
        """Create the inbox and tasks tables (idempotent); the cursor starts at version 0.

        ``change_feed``: the tasks table keeps Delta's change data feed (what
        ``Tube.changes`` streams). It writes every changed row twice more
        (before and after images): the largest cost a big take pays beyond
        a plain MERGE.
        """
        self._create(
            self.inbox(tube),
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
             "delta.dataSkippingNumIndexedCols": "0",
             CHECKPOINT_INTERVAL: str(COMMITS_PER_CHECKPOINT)},
        )
        made = self._create(
            self.tasks(tube),
            T.StructType([T.StructField(n, t) for n, t in TASK_COLUMNS]),
            {
                # Deletion vectors measured slower for the small MERGEs of a
                # take/ack here (2.5 s against 1.2 s), so files are rewritten; off
                # by name, where a platform would turn them on for new tables.
                # No setTransactionRetentionDuration: ingests share one
                # transaction id (see write_marker), so there is nothing to expire.
                "delta.enableDeletionVectors": "false",
                FEED: str(change_feed).lower(),
                "delta.dataSkippingStatsColumns": ",".join(STATS_COLUMNS),
                CHECKPOINT_INTERVAL: str(COMMITS_PER_CHECKPOINT),
                # Serializable on every Delta (Databricks defaults to
                # WriteSerializable): an appended settle row then makes every
                # commit that read a lease record before it conflict
                ISOLATION: SERIALIZABLE,
            },
        )
        if made:
            self._serializable[self.tasks(tube)] = True
            self.note_first_cursor(self.tasks(tube))

    def settles_by_append(self, path: str) -> bool:
        """Whether a lease record of the tasks table ``path`` may be settled by an
        appended settle row (``engine.records``): the table is Serializable by
        its property, so that commit conflicts with every commit that read the
        record before it. Tables this Layout made are; another's property is
        read once (a SQL command)."""
        if path not in self._serializable:
            self._serializable[path] = serializable(self.spark, path)
        return self._serializable[path]

    def _create(self, path: str, schema: T.StructType, properties: dict[str, str]) -> bool:
        """Create a Delta table at ``path`` unless it exists (:func:`_create_table`);
        whether this call created it. A table this call created is at version
        0, written down: the first look for its newest version starts there
        (the portable engine: one Spark job for a put's two tables, where a
        table of no known version is asked of Delta, a command for each)."""
        made = _create_table(self.spark, path, schema, properties, self.exists)
        if made:
            self.note_version(path, 0)
        return made

    def write_marker(self, tube: str, since: Cursor, cursor: Cursor,
                     runs: list[DataFrame]) -> None:
        """Append ``runs`` (ingested tasks, :func:`ingest_frame`) and the marker of the
        new ``cursor``, unless an ingest from ``since`` (or a later cursor) was committed.

        One transaction id for all ingests of a tube, its version the cursor
        the ingest starts from (:meth:`Cursor.txn_version`): Delta skips an
        append whose version is not above the last one committed, and
        refuses one that races another
        with the same id. One id, not one per cursor, so the table's state
        keeps one entry however many ingests ran, with no retention to set
        (an id that expired would let a late duplicate through). Finding the
        last version still makes Delta rebuild the snapshot's state (four
        Spark jobs, about 0.5 s of a 30,000-task ingest's 1.6 s here): Delta
        4.4 reads transaction ids from the state, not from its checksum files.
        """
        append(ingest_frame(runs, cursor), self.tasks(tube), file_rows=schema.TASK_FILE_ROWS,
               txn=(INGEST_TXN, since.txn_version()), new_columns=True)

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
        where = self.table_path(path)
        files = [re.sub(r"([\\{}\[\]*?])", r"\\\1", f"{where}/{unquote(n)}")  # not globs
                 for n in names]
        reader = (spark or self.spark).read
        return (reader if schema is None else reader.schema(schema)).parquet(*files)

    def exists(self, path: str) -> bool:
        """Whether a Delta table is at ``path`` (its log has a commit), or by that name."""
        return self.newest_version(path) is not None

    def delete_tube_dir(self, tube: str, shards: int = 1) -> None:
        """Delete a tube's folder (its tables, its shards' too) and forget what was
        cached of it.

        Where storage cannot be reached but through Spark (the portable
        engine), its tables are emptied and vacuumed instead: their data files
        are deleted, their logs stay, and a new tube of the name gets a folder
        of its own (:meth:`free_folder`).
        """
        folder = self.tube_dir(tube)
        keys = [shard_key(tube, k) for k in range(shards)]
        tables = [ref for key in keys for ref in (self.inbox(key), self.tasks(key))]
        if self.catalog:  # managed tables: dropping one deletes its files
            for ref in tables:
                self.spark.sql(f"DROP TABLE IF EXISTS {sql_table(ref)}")
                self.forget(ref)
            return
        if not self.files.delete(folder):
            for path in tables:
                if self.exists(path):
                    self._empty(path)
        for key in keys:
            self.forget(self.tube_dir(key))

    def _empty(self, path: str) -> None:
        """Delete every row of the table at ``path`` and its data files, now."""
        with self.tagged(CommitTag.new("drop")) as sess:
            sess.sql(f"DELETE FROM {sql_table(path)}")
            sess.conf.set(RETENTION_CHECK, "false")
            try:
                sess.sql(f"VACUUM {sql_table(path)} RETAIN 0 HOURS")
            finally:
                sess.conf.unset(RETENTION_CHECK)

    def free_folder(self, tube: str) -> str:
        """The folder name for a new tube ``tube``: its own name, unless a dropped
        tube's tables are still there (:meth:`delete_tube_dir`); then the first
        of ``tube~1``, ``tube~2``, ... that holds none. (Where folders can be
        deleted, a tube's own: a leftover there is from a create cut short.)"""
        folder, n = tube, 0
        deletes = self.files.deletes or self.catalog
        while not deletes and self.exists(f"{self.root}/tubes/{folder}/inbox"):
            n += 1
            folder = f"{tube}~{n}"
        return folder

    def tube_dirs(self) -> list[str]:
        """The names of the tube folders under the root, sorted (any file system); in a
        catalog, of the tubes whose tables are in the schema."""
        if not self.catalog:
            return self.files.folders(f"{self.root}/tubes")
        try:
            names = [str(r["tableName"]) for r in self.spark.sql(
                f"SHOW TABLES IN {self.root}").collect() if not r["isTemporary"]]
        except Exception as e:
            if any(m in str(e) for m in NO_TABLE):
                return []
            raise
        return sorted(n.removesuffix("__inbox") for n in names if n.endswith("__inbox"))

    def file_stats(self, path: str, latest: int | None = None) -> list[dict[str, Any]]:
        """Per data file of the newest snapshot, what :func:`head_bound` reads.

        The statistics Delta keeps per file (row count, min/max per column),
        from :meth:`files_at`; where that does not know them, from the
        store (:meth:`Store.load_file_stats`: a snapshot's state, as data
        skipping reads it, or the log's last checkpoint): no data file opened,
        one small Spark job, plus the state's own rebuild when no read of this
        version has cached it yet; later calls replay only the commits made
        since. Where neither is known, ``[]``: takes
        then read every ready task. A table of at most schema.FEW_FILES files
        gets no statistics either: reading them all costs less than choosing
        among them. ``latest``: the version to read them at (None: the newest).
        """
        if latest is None:
            latest = self.latest_version(path)
        files = self.files_at(path, latest)
        if files is None:
            if 0 <= self.file_count(path, latest) <= schema.FEW_FILES:
                return []
            loaded = self.store.load_file_stats(path, latest)
            if loaded is not None:
                self.note_files(path, *loaded)
            files = None if loaded is None else live_files(loaded[1])
        return [] if files is None or len(files) <= schema.FEW_FILES else list(files.values())

    def purge_inbox(self, tube: str, cursor: Cursor, held: Sequence[PutFile] = ()) -> int:
        """Remove the inbox rows of the puts up to ``cursor`` (ingested) but those of
        the put files ``held`` (lease records read them, ``engine.records``);
        rows removed (:meth:`Store.purge_inbox`)."""
        return self.store.purge_inbox(tube, cursor, held)

    def changed_at(self, tube: str, version: int, token: str, lo: int, hi: int, *,
                   updates: bool = True, removable: DataFrame | list[int] | None = None,
                   step: int = 1) -> DataFrame:
        """The task rows the commit at ``version`` (tagged ``token``) changed, from the
        table itself (a tube may keep no change feed); rows it deleted read as ``done``.

        ``updates``: the rows it updated, which carry its token in
        ``change_token``. ``removable``: ids it may have deleted (a frame of
        ``task_id``, or a sorted list of one shard's ids, ``step`` apart); those
        gone are read at the version before, as no commit between the operation's
        snapshot and its own changed them (its commit would have conflicted).
        ``lo``/``hi`` bound every id the commit touched, so reads skip the
        other files. Rows a commit updated are in the files it added, rows
        it deleted in the files it removed: those are read (:meth:`commit_files`).
        """
        bounds = f"task_id BETWEEN {lo} AND {hi}"
        spark = removable.sparkSession if is_dataframe(removable) else self.spark
        path = self.tasks(tube)
        files = self.commit_files(path, version)

        def updated() -> DataFrame:
            return (self._files_or_table(path, files and files[0], version, spark)
                    .where(bounds).where(F.col("change_token") == token))

        if removable is None:
            return updated()
        removed = self._files_or_table(path, files and files[1], version - 1, spark).where(bounds)
        removed = (with_ids(removed, removable, spark, step) if isinstance(removable, list)
                   else removed.join(removable.select("task_id"), "task_id", "left_semi"))
        if not updates:
            return removed.withColumn("status", F.lit("done"))
        changed = updated()
        removed = removed.join(changed.select("task_id"), "task_id", "left_anti")
        return changed.unionByName(removed.withColumn("status", F.lit("done")))

    def _files_or_table(self, path: str, names: list[str] | None, version: int,
                        spark: SparkSession) -> DataFrame:
        """The rows of the data files ``names`` of ``path`` (at ``version``), or, when
        they are not known or none, the whole table at ``version``."""
        if not names:
            return self.read(path, spark, version)
        return self.read_task_files(path, names, spark)

    def read_pruned(self, path: str, version: int,
                    keep: Callable[[dict[str, Any]], bool]) -> DataFrame:
        """The rows of the tasks table at ``path`` as of ``version``, from the data files
        whose statistics ``keep`` passes (:meth:`files_at`), read as the Parquet
        files they are: no Spark job plans the scan, where a Delta read runs
        two over the version's file list. Where a file's statistics are not
        known (a deletion vector, or none without a Spark job) or the table's
        columns are not, the Delta table, newest, which Delta prunes itself.
        For reads whose every row is checked again by the statement that
        commits (a take's choice)."""
        files = self.files_at(path, version)
        schema = self.task_file_schema(path, self.spark) if files else None
        if files is None or schema is None or any(f["rows"] is None for f in files.values()):
            return self.read(path)
        names = [name for name, f in files.items() if keep(f)]
        if not names:
            return self.spark.createDataFrame([], schema).select(*TASK_TABLE_COLUMNS)
        return self.read_task_files(path, names, self.spark)

    def read_task_files(self, path: str, names: list[str], spark: SparkSession) -> DataFrame:
        """:meth:`read_files` for data files of a tasks table: its columns only (files
        Delta wrote with a change feed on carry its change columns too)."""
        return (self.read_files(path, names, self.task_file_schema(path, spark), spark)
                .select(*TASK_TABLE_COLUMNS))



#: The registry's columns: a tube's name, type, options (JSON) and creation time.
REGISTRY_SCHEMA = T.StructType([T.StructField("name", T.StringType()),
                                T.StructField("type", T.StringType()),
                                T.StructField("options", T.StringType()),
                                T.StructField("created", T.DoubleType())])


def _create_table(spark: SparkSession, path: str, schema: T.StructType,
                  properties: dict[str, str], exists: Callable[[str], bool]) -> bool:
    """Create a Delta table at ``path`` unless it exists; True if this call created it.
    Its first commit is tagged ``create``, as sparkqueue's others are (not with
    whatever ``userMetadata`` the caller's session holds)."""
    if exists(path):
        return False
    columns = ", ".join(f"`{f.name}` {f.dataType.simpleString()}" for f in schema.fields)
    props = ", ".join(f"'{k}' = '{v}'" for k, v in properties.items())
    try:
        with tagging(spark, CommitTag.new("create")) as sess:
            sess.sql(f"CREATE TABLE IF NOT EXISTS {sql_table(path)} ({columns}) USING delta"
                     + (f" TBLPROPERTIES ({props})" if props else ""))
    except Exception as e:  # another process created it first, or is creating it
        problem = f"cannot create a Delta table here: {first_line(e)}"
        if any(m in str(e) for m in NOT_WRITABLE):
            raise StorageError(path, problem) from e
        until = time.monotonic() + CREATE_PATIENCE
        while True:  # a creator that lost the race can fail before the winner commits
            if exists(path):
                return False
            if time.monotonic() >= until:
                raise StorageError(path, problem) from e
            time.sleep(0.2)
    return True
