"""The accelerated store: Delta's transaction API (DeltaLog, OptimisticTransaction)
in the driver's JVM (:mod:`.protocol`).

Commits that Delta's public API cannot make: an ingest and a take in one
append that declares it read the whole table, removals of chosen files (an
ack of whole files, the inbox purge), a compaction of chosen files that
changes no data, and file statistics from a snapshot's state. All of it is
Delta's internal interface, tested on each supported line (:mod:`.lines`); the
calls whose form differs from one Delta release to another are :mod:`.dialect`'s.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from typing import Any

from py4j.protocol import Py4JError
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from ..errors import StorageError
from . import schema, smallfiles
from .dialect import Dialect
from .filelog import FileLog
from .files import LogFiles
from .filestats import FILE_STATS, stats_of
from .paths import settings
from .protocol import Files
from .schema import (
    CHANGE_TYPE,
    INGEST_TXN,
    CommitTag,
    Cursor,
    PutFile,
    nullable,
)
from .tables import FEED, ingest_frame, marker_row


class DeltaTransaction:
    """A :class:`~sparkqueue.store.protocol.Transaction`: Delta's
    OptimisticTransaction on a tasks table (``txn``, a JVM object that stays in
    here), begun by :meth:`AcceleratedStore.begin`."""

    def __init__(self, store: AcceleratedStore, path: str, txn: Any) -> None:
        self._store = store
        self._path = path
        self._txn = txn
        self.version = int(txn.snapshot().version())
        self._files: Files | None | bool = False  # read when first asked

    @property
    def files(self) -> Files | None:
        """The snapshot's data files with their statistics (:meth:`FileLog.files_at`):
        what the commit is checked against."""
        if self._files is False:
            self._files = self._store.log.files_at(self._path, self.version)
        return self._files  # type: ignore[return-value]

    @property
    def keeps_feed(self) -> bool:
        return _keeps_feed(self._txn)

    writes_feed = True

    def fits(self, frame: DataFrame) -> bool:
        """Whether ``frame`` has the table's columns, by name and type, or those and
        a payload (``data``, last) where the table has none yet (a new tube's
        first ingest: :meth:`ingest` adds it as ``mergeSchema`` would; an
        append in a transaction cannot evolve the schema otherwise)."""
        def fields(table: T.StructType) -> list[tuple[str, str]]:  # nullability aside
            return [(f.name, f.dataType.simpleString()) for f in table.fields]
        table, have = fields(_schema(self._txn)), fields(frame.schema)
        if "data" not in dict(table) and have and have[-1][0] == "data":
            have = have[:-1]
        return have == table

    def ingest(self, tube: str, since: Cursor, cursor: Cursor, runs: list[DataFrame],
               changes: DataFrame | None, tag: CommitTag, removed: Files | None = None,
               local: Sequence[dict[str, Any]] = (), like: T.StructType | None = None,
               ) -> tuple[int, list[dict[str, Any]]]:
        """:meth:`AcceleratedStore._commit_ingest` in this transaction, which then has
        read the whole table: the ingest's transaction id is written, not read,
        so it is any commit since the snapshot (another ingest's among them)
        that makes this one conflict."""
        self._txn.readWholeTable()
        return self._store._commit_ingest(self._txn, tube, since, cursor, runs, changes, tag,
                                          removed, local, like)

    def replace(self, removed: list[str], rows: DataFrame, tag: CommitTag, file_rows: int,
                updated_rows: int | None = None) -> tuple[int, list[dict[str, Any]]]:
        """:meth:`AcceleratedStore._replace_files` in this transaction."""
        files = self.files
        assert files is not None, "a replace needs the snapshot's file statistics"
        return self._store._replace_files(self._path, self._txn, files, removed, rows, tag,
                                          file_rows, updated_rows)


class AcceleratedStore:
    """The :class:`~sparkqueue.store.protocol.Store` of Delta's transaction API, for a
    root's tables on a classic session where Delta's classes are there
    (:func:`sparkqueue.store.jvm.delta_classes`); reads the log through that
    root's :class:`FileLog` (``log``), its small files through Hadoop's
    FileSystem (``files``)."""

    engine = "accelerated"
    commits_files = True

    def __init__(self, log: FileLog, files: LogFiles, jvm: Any) -> None:
        self.log = log
        self.files = files
        self.spark = log.spark
        self.jvm = jvm
        self._path_class = jvm.org.apache.hadoop.fs.Path  # looked up once: a py4j call a name
        self.dialect = Dialect(jvm)

    def begin(self, path: str, *, read_all: bool = False) -> DeltaTransaction:
        """A Delta transaction on the newest snapshot of ``path``; with ``read_all`` it
        has read all of it: any commit made after its snapshot then makes its
        own commit conflict (Delta's Serializable check: files added or removed
        that it read), so what it writes may rest on everything the snapshot
        held."""
        txn = self.start_transaction(path)
        if read_all:
            txn.readWholeTable()
        return DeltaTransaction(self, path, txn)

    def listed_files(self, path: str, version: int) -> list[str] | None:
        """The files the checksum of ``version`` lists (the log's files through the
        JVM, no Spark job); None where it lists none or a file has a deletion
        vector."""
        text = self.files.read(self.log.log_file(path, f"{version:020d}.crc"))
        listed = None if text is None else json.loads(text).get("allFiles")
        if listed is None or any(a.get("deletionVector") for a in listed):
            return None
        return [a["path"] for a in listed]

    def append_if(self, path: str, row: dict[str, Any], tag: CommitTag,
                  absent: Callable[[int], bool]) -> bool | None:
        """The one ``row`` appended in a transaction that has read the whole table,
        as a file written from the driver (:meth:`_write_small`): no Spark job
        but what ``absent`` runs, where an insert-if-absent MERGE runs Delta's
        state rebuild and its own jobs. None where the table's settings do not
        let :mod:`.smallfiles` write it."""
        txn = self.start_transaction(path)
        txn.readWholeTable()
        if not absent(int(txn.snapshot().version())):
            return False
        actions = self.jvm.java.util.ArrayList()
        configuration = json.loads(txn.metadata().json())["metaData"].get("configuration")
        if self._write_small(txn, _schema(txn), configuration or {}, [row], actions) is None:
            return None
        self._commit_actions(path, txn, actions, tag, appended=True)
        return True

    def _commit_ingest(self, txn: Any, tube: str, since: Cursor, cursor: Cursor,
                       runs: list[DataFrame], changes: DataFrame | None, tag: CommitTag,
                       removed: dict[str, dict[str, Any]] | None = None,
                       local: Sequence[dict[str, Any]] = (), like: T.StructType | None = None,
                       ) -> tuple[int, list[dict[str, Any]]]:
        """Commit in ``txn`` (begun with ``read_all``) the ingest of ``runs`` (task
        rows, each written apart as :func:`ingest_frame` lays them out) from
        ``since`` to ``cursor``, some maybe already changed by the same commit
        (then ``changes``: its change feed rows, with ``_change_type``, written
        when the table keeps a change feed); the version committed, and the
        statistics of the files written (as :meth:`_replace_files` gives them).
        On a table with no payload column yet
        (a new tube), the commit adds the rows' payload column, every part of
        it nullable, as an append with ``mergeSchema`` would.

        ``removed``: data files (their statistics, as :meth:`files_at` gives them)
        the same commit removes whole (a consumer's acked batch).

        ``local``: rows (column name -> value) written each to a file of its own
        (a take's lease record). With no ``runs`` and no change feed to write,
        they and the marker are written from the driver (:meth:`_write_small`),
        with no Spark job. ``like``: the task rows' schema, where no ``runs`` give
        it (the payload column a new tube's first ingest adds).

        It records the ingest transaction id as :meth:`write_marker` does, so
        an ingest from the same cursor by that way is skipped or conflicts.
        An ingest already committed from ``since`` is not looked for: the
        caller read the cursor after ``txn``'s snapshot, and any commit since
        makes this one conflict.
        """
        actions = self.jvm.java.util.ArrayList()
        actions.add(self._action({"txn": {"appId": INGEST_TXN, "version": since.txn_version(),
                                          "lastUpdated": int(time.time() * 1000)}}))
        meta = json.loads(txn.metadata().json())
        table = json.loads(meta["metaData"]["schemaString"])
        if all(f["name"] != "data" for f in table["fields"]):  # a new tube's first ingest
            shape = runs[0].schema if runs else like
            assert shape is not None, "a new tube's first ingest needs its rows' schema"
            table["fields"].append(nullable(shape["data"].jsonValue()))
            meta["metaData"]["schemaString"] = json.dumps(table)
            txn.updateMetadata(self._action(meta), False)
        struct = T.StructType.fromJson(table)
        feed = changes is not None and _keeps_feed(txn)
        written = None if runs or feed else self._write_small(
            txn, struct, meta["metaData"].get("configuration") or {},
            [*local, marker_row(cursor)], actions)
        if written is None:
            def frame_of(row: dict[str, Any]) -> DataFrame:
                return self.spark.createDataFrame([tuple(row.get(f.name) for f in struct.fields)],
                                                  struct)
            runs = [*runs, *[frame_of(row) for row in local]]
            # no rows at all (a truncate's): the marker alone
            frame = ingest_frame(runs, cursor) if runs else frame_of(marker_row(cursor))
            if changes is not None and feed:
                # one write: Delta sends the rows with a change type to the change feed's files
                frame = frame.withColumn(CHANGE_TYPE, F.lit(None).cast("string")).unionByName(
                    changes, allowMissingColumns=True)
            written = self._write(txn, frame, schema.TASK_FILE_ROWS, actions)
        for name, file in (removed or {}).items():
            actions.add(self._removal(name, file))
        return (self._commit_actions(self.log.tasks(tube), txn, actions, tag, appended=True),
                written)

    @staticmethod
    def _write(txn: Any, frame: DataFrame, file_rows: int, actions: Any,
               ) -> list[dict[str, Any]]:
        """Write ``frame`` in ``txn`` in files of at most ``file_rows`` rows, adding the
        ``add`` actions to ``actions``; the written data files' statistics
        (``stats_of``, and ``name``; not the change feed's files). The size
        is a session setting (Delta's ``writeFiles`` takes no options), set
        for this write only: the writer
        session's later MERGEs and UPDATEs write as they would have."""
        written = []
        with settings(frame.sparkSession, {"spark.sql.files.maxRecordsPerFile": str(file_rows)}):
            adds = txn.writeFiles(frame._jdf).iterator()
            while adds.hasNext():
                add = adds.next()
                actions.add(add)
                if add.getClass().getSimpleName() == "AddFile":
                    written.append({**stats_of(add.stats()), "name": add.path()})
        return written

    def _write_small(self, txn: Any, table: T.StructType, configuration: dict[str, str],
                     rows: list[dict[str, Any]], actions: Any) -> list[dict[str, Any]] | None:
        """Write ``rows`` in ``txn`` from the driver, each a one-row file of its own
        (:mod:`.smallfiles`), adding their ``add`` actions to ``actions``; their
        statistics as :meth:`_write` gives them. None, having written nothing,
        where one of them cannot be written so (then :meth:`_write` does)."""
        columns = smallfiles.stats_columns(configuration)
        files = []
        for row in rows:
            stats = smallfiles.stats_json(row, columns, table) if columns else None
            data = smallfiles.parquet_bytes(row, table) if stats else None
            if stats is None or data is None:
                return None
            files.append((smallfiles.file_name(), data, stats))
        log = txn.deltaLog()
        root = log.dataPath()
        fs = root.getFileSystem(log.newDeltaHadoopConf())
        written = []
        for name, data, stats in files:
            out = fs.create(self._path_class(root, name), False)
            try:
                out.write(bytearray(data))
            finally:
                out.close()
            actions.add(self._action({"add": {
                "path": name, "partitionValues": {}, "size": len(data),
                "modificationTime": int(time.time() * 1000), "dataChange": True,
                "stats": stats}}))
            written.append({**stats_of(stats), "name": name})
        return written

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
        jvm = self.jvm
        txn = self.start_transaction(path)
        wanted = set(names)
        old = [a for a in txn.snapshot().allFiles().collectAsList() if a.path() in wanted]
        if len(old) < 2:
            return 0
        rows = (self.log.read(path).where(F.element_at(F.split("_metadata.file_path", "/"), -1)
                                      .isin([a.path() for a in old]))
                .repartition(1).sortWithinPartitions("task_id"))
        written, actions = jvm.java.util.ArrayList(), jvm.java.util.ArrayList()
        self._write(txn, rows, schema.TASK_FILE_ROWS, written)
        for action in written:
            add = json.loads(action.json())
            add["add"]["dataChange"] = False
            actions.add(self._action(add))
        now = int(time.time() * 1000)
        for a in old:
            actions.add(a.removeWithTimestamp(now, False))
        self._commit_actions(path, txn, actions)
        return len(old)

    def _action(self, action: dict[str, Any]) -> Any:
        """A Delta log action (its JSON form as a dict) as Delta's own object."""
        return self.dialect.module("org.apache.spark.sql.delta.actions.Action").fromJson(
            json.dumps(action))

    def start_transaction(self, path: str) -> Any:
        """A Delta transaction on the newest snapshot of ``path`` (Delta's internal API)."""
        jvm = self.jvm
        log = getattr(jvm, "org.apache.spark.sql.delta.DeltaLog").forTable(
            self.spark._jsparkSession, self.log.table_path(path))
        txn = log.startTransaction()
        if int(txn.snapshot().version()) < 0:  # its commit would create a new table
            self.log.latest_version(path)  # says what is wrong
            raise StorageError(path, "no Delta table to commit to")
        return txn

    def _commit_actions(self, path: str, txn: Any, actions: Any, tag: CommitTag | None = None,
                        deleted_rows: int | None = None, appended: bool = False,
                        updated: bool = False, updated_rows: int | None = None) -> int:
        """Commit Delta ``actions`` in ``txn`` on the table at ``path``; ``tag``: its
        userMetadata. The version committed, which the log reader notes as
        read (:meth:`LogReader.note_version`): what this process reads next by
        :meth:`LogReader.known_version` is then at least its own commit, whose
        file statistics it holds (those of an older version are not moved
        back to, so a choice there would load the snapshot's state again).

        ``deleted_rows``: the actions only remove files, holding that many
        rows; the commit is then a DELETE (no predicate, its row and file
        counts in its operation metrics) rather than a manual update: Delta
        derives a DELETE's checksum file from the previous one, where after
        a manual update it rebuilds the table's whole state (four Spark jobs
        here, about a second). ``appended``: the actions add files; the commit
        is then an append (a WRITE), for the same reason. ``updated``: the
        actions replace files; the commit is then an UPDATE (no predicate),
        ``updated_rows`` of them updated when given (its operation metrics).
        """
        jvm, dialect = self.jvm, self.dialect
        ops = "org.apache.spark.sql.delta.DeltaOperations"
        if appended:
            operation = dialect.append_operation()
        elif updated:
            operation = dialect.module(f"{ops}$Update").apply(jvm.scala.Option.empty())
            if updated_rows is not None:
                self._metrics(txn, {"numUpdatedRows": updated_rows})
        elif deleted_rows is None:
            operation = dialect.module(f"{ops}$ManualUpdate")
        else:
            operation = dialect.module(f"{ops}$Delete").apply(dialect.seq([]))
            self._metrics(txn, {"numDeletedRows": deleted_rows, "numRemovedFiles": len(actions)})
        actions = dialect.seq(actions)
        if tag is None:
            version = int(txn.commit(actions, operation))
        else:
            sessions = dialect.session_class()
            with self.log.tagged(tag) as sess:
                # Delta takes commitInfo.userMetadata from the thread's active session
                sessions.setActiveSession(sess._jsparkSession)
                try:
                    version = int(txn.commit(actions, operation))
                finally:
                    sessions.setActiveSession(self.spark._jsparkSession)
        self.log.note_version(path, version)
        return version

    def _metrics(self, txn: Any, values: dict[str, int]) -> None:
        """Give ``txn``'s commit these operation metrics (what DESCRIBE HISTORY
        shows, and the call counts of ``engine.stats`` read)."""
        jvm = self.jvm
        metrics = jvm.java.util.HashMap()
        for name, value in values.items():
            metric = jvm.org.apache.spark.sql.execution.metric.SQLMetrics.createMetric(
                self.spark.sparkContext._jsc.sc(), name)
            metric.set(value)
            metrics.put(name, metric)
        txn.registerSQLMetrics(self.spark._jsparkSession, self.dialect.immutable_map(metrics))

    def purge_inbox(self, tube: str, cursor: Cursor, held: Sequence[PutFile] = ()) -> int:
        """Remove the inbox files of the puts up to ``cursor`` (ingested); rows removed.

        One commit of ``remove`` actions, tagged ``purge``, made through
        Delta's transaction API (as :meth:`rewrite_files`; a DELETE cannot
        name files): no data file is read or rewritten, so the files that
        remain, whose rows are not ingested yet, keep every row in its place
        (a row's place is half its task id). It reads no data, so by Delta's
        conflict rules concurrent puts (blind appends) do not abort it.
        ``held``: put files that lease records still read, kept.
        """
        inbox = self.log.inbox(tube)
        txn = self.start_transaction(inbox)
        newer, _ = self.log.put_files(tube, cursor, int(txn.snapshot().version()))
        keep = {f.name for f in [*newer, *held]}
        old = [a for a in txn.snapshot().allFiles().collectAsList()
               if a.path().rsplit("/", 1)[-1] not in keep]
        if not old:
            return 0
        now = int(time.time() * 1000)
        rows = sum(int(stats_of(a.stats())["rows"] or 0) for a in old)
        self._commit_actions(inbox, txn, [a.removeWithTimestamp(now, True) for a in old],
                             CommitTag.new("purge"), deleted_rows=rows)
        return rows

    def remove_files(self, path: str,
                     choose: Callable[[dict[str, dict[str, Any]]], list[str] | None],
                     tag: CommitTag, rows: int | None = None, read_all: bool = False,
                     ) -> int | None:
        """Remove whole the data files ``choose`` picks from the newest snapshot's
        (given their statistics, :meth:`files_at`), in one commit tagged ``tag``;
        the version committed, or None when it picked none (or the statistics
        are not known without a Spark job). ``rows``: how many rows the commit
        deletes, for its operation metrics, where the files' own counts do not
        say (a lease record's file stands for its tasks); by default theirs.

        No data file is read or written (a DELETE would read them and cannot
        name files). ``choose`` sees the files of the very snapshot the
        commit is checked against: a concurrent commit that changed one of
        them removed it, and then, by Delta's conflict rules (removing a
        file another commit removed), this one is refused as a conflict; no
        race test shows it. The change data feed reads removed files as
        deleted rows. ``read_all``: the commit has read the whole table, so
        any commit since its snapshot makes it conflict.
        """
        txn = self.start_transaction(path)
        if read_all:
            txn.readWholeTable()
        files = self.log.files_at(path, int(txn.snapshot().version()))
        names = choose(files) if files else None
        if not files or not names:
            return None
        actions = self.jvm.java.util.ArrayList()
        for name in names:
            actions.add(self._removal(name, files[name]))
        if rows is None:
            rows = sum(int(files[name]["rows"] or 0) for name in names)
        return self._commit_actions(path, txn, actions, tag, deleted_rows=rows)

    def _replace_files(self, path: str, txn: Any, files: dict[str, dict[str, Any]],
                       removed: list[str], rows: DataFrame, tag: CommitTag, file_rows: int,
                       updated_rows: int | None = None) -> tuple[int, list[dict[str, Any]]]:
        """Commit in ``txn`` (on the table at ``path``) the data files ``removed``
        (their statistics in ``files``, as :meth:`files_at` gives them) gone
        and ``rows`` written in their place, in files of at most ``file_rows``
        rows; the version committed, and the statistics of the files written
        (``stats_of``, and ``name``). Each of ``rows``' partitions is written
        to files of its own (a union keeps its inputs' partitions in writer
        sessions, ``paths.COMMIT_SETTINGS``). The commit is an UPDATE, checked
        as one: a concurrent commit that removed one of these files makes it
        conflict. ``updated_rows``: how many rows it changed, for its metrics.
        """
        actions = self.jvm.java.util.ArrayList()
        written = self._write(txn, rows, file_rows, actions)
        for name in removed:
            actions.add(self._removal(name, files[name]))
        return (self._commit_actions(path, txn, actions, tag, updated=True,
                                     updated_rows=updated_rows), written)

    def _removal(self, name: str, file: dict[str, Any]) -> Any:
        """The ``remove`` action of the data file ``name`` (``file``: its statistics)."""
        return self._action({"remove": {
            "path": name, "deletionTimestamp": int(time.time() * 1000), "dataChange": True,
            "extendedFileMetadata": True, "partitionValues": {}, "size": file["size"]}})

    def load_file_stats(self, path: str, latest: int | None = None,
                        ) -> tuple[int, Files] | None:
        """The newest snapshot's version (``latest`` or newer) and its files'
        statistics (as :meth:`files_at` gives them), from its state: a Spark
        job. None where Delta's ``DeltaLog`` cannot be reached."""
        jvm = self.jvm
        try:
            log = getattr(jvm, "org.apache.spark.sql.delta.DeltaLog").forTable(
                self.spark._jsparkSession, self.log.table_path(path))
            snapshot = self.dialect.updated_snapshot(log)
            version = int(snapshot.version())
            stats = DataFrame(snapshot.withStats(), self.spark)
        except Py4JError:
            return None
        vector = (F.col("deletionVector").isNotNull() if "deletionVector" in stats.columns
                  else F.lit(False))
        rows = stats.select(
            "path", "size", F.when(~vector, F.col("stats.numRecords")).alias("rows"),
            *[F.col(f"stats.{kind}.{col}").alias(key) for key, (kind, col) in FILE_STATS.items()],
        ).collect()
        return version, {r["path"]: {"rows": r["rows"], **{k: r[k] for k in FILE_STATS},
                                     "size": r["size"]} for r in rows}  # as file_entry


def _keeps_feed(txn: Any) -> bool:
    """Whether the table of ``txn``'s snapshot keeps a change data feed."""
    feed = txn.metadata().configuration().get(FEED)
    return bool(feed.isDefined() and str(feed.get()).lower() == "true")


def _schema(txn: Any) -> T.StructType:
    """The table schema of ``txn`` (its snapshot's, or what the transaction set)."""
    return T.StructType.fromJson(json.loads(txn.metadata().schema().json()))
