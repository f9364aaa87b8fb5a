"""A queue root's table paths, reads, and tagged sessions: what the rest of the store builds on."""

from __future__ import annotations

import re
import threading
import warnings
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from pyspark.sql import DataFrame, DataFrameWriter, SparkSession

from ..errors import InvalidOption, StorageError
from .failures import NO_TABLE
from .schema import USER_METADATA, CommitTag
from .tables import is_path, sql_table

#: A catalog root: ``schema`` or ``catalog.schema``, plain identifiers.
CATALOG_ROOT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)?")


def shard_key(tube: str, shard: int) -> str:
    """The name a tube's shard ``shard`` is known by here: the tube's own name for
    shard 0 (so a tube of one shard is stored as before shards existed), else
    ``<tube>#<shard>`` (``#`` is in no tube name, so no tube's key is taken)."""
    return tube if shard == 0 else f"{tube}#{shard}"


class Paths:
    """Where a root's tables are, and the sessions that write them.

    A root is a folder (a path or URI: tables by path, ``ROOT/tubes/<tube>/inbox``)
    or a catalog schema (``catalog.schema``: managed tables by name,
    ``<tube>__inbox``). Tables are named by *reference*, a path or a name, in
    every Delta statement, read and write (:func:`read`, :func:`append`);
    only the log's own files are read at a table's location (:meth:`location`).
    """

    def __init__(self, spark: SparkSession, root: str) -> None:
        self.spark = spark
        self.root = root.rstrip("/")
        self.catalog = not is_path(self.root)
        if self.catalog and not CATALOG_ROOT.fullmatch(self.root):
            raise InvalidOption(f"root {root!r} is neither a path or URI (/data/queues, "
                                "s3a://bucket/queues) nor a catalog schema (catalog.schema)")
        self._folders: dict[str, str] = {}  # tube: its folder's name, where not the tube's
        self._locations: dict[str, str] = {}  # table name: its location

    def place(self, tube: str, folder: str | None, shards: int = 1) -> None:
        """Where tube ``tube``'s tables are: ``tubes/<folder>`` (None: ``tubes/<tube>``).
        The registry row of a tube names its folder when a dropped tube of the
        same name left one behind (see :meth:`Layout.free_folder`).

        Shard ``k > 0`` of a sharded tube (:func:`shard_key`) has tables of its
        own inside the tube's folder, ``tubes/<folder>/shard<k>/inbox`` (in a
        catalog ``<folder>__shard<k>__inbox``); shard 0's are the tube's own.
        """
        base = folder or tube
        for k in range(shards):
            key = shard_key(tube, k)
            where = base if k == 0 else f"{base}{'__' if self.catalog else '/'}shard{k}"
            if where == key:
                self._folders.pop(key, None)
            else:
                self._folders[key] = where

    @property
    def registry(self) -> str:
        return f"{self.root}.sq_registry" if self.catalog else f"{self.root}/_registry"

    @property
    def stats(self) -> str:
        """The statistics snapshots the sweeper appends (one row per tube per pass)."""
        return f"{self.root}.sq_stats" if self.catalog else f"{self.root}/_stats"

    def inbox(self, tube: str) -> str:
        return self._table(tube, "inbox")

    def tasks(self, tube: str) -> str:
        return self._table(tube, "tasks")

    def _table(self, tube: str, kind: str) -> str:
        sep = "__" if self.catalog else "/"
        return f"{self.tube_dir(tube)}{sep}{kind}"

    def tube_dir(self, tube: str) -> str:
        """Where tube ``tube``'s tables are: its folder, or in a catalog the
        prefix of its tables' names."""
        folder = self._folders.get(tube, tube)
        return f"{self.root}.{folder}" if self.catalog else f"{self.root}/tubes/{folder}"

    def location(self, ref: str) -> str | None:
        """Where the files of the table ``ref`` are: a path is its own; a table
        name's is the catalog's answer (None: no such table), remembered."""
        if is_path(ref):
            return ref
        found = self._locations.get(ref)
        if found is None:
            try:
                rows = self.spark.sql(f"DESCRIBE TABLE EXTENDED {sql_table(ref)}").collect()
            except Exception as e:
                if any(m in str(e) for m in NO_TABLE):
                    return None
                raise
            found = next((str(r[1]) for r in rows if r[0] == "Location"), None)
            if found is None:
                raise StorageError(ref, "the catalog gives this table no location")
            self._locations[ref] = found
        return found

    def table_path(self, ref: str) -> str:
        """:meth:`location` of a table that must be there."""
        found = self.location(ref)
        if found is None:
            raise StorageError(ref, "the table is missing from the catalog: it was dropped "
                               "outside sparkqueue; restore it, or drop() the tube")
        return found

    def forget_location(self, ref: str) -> None:
        """Forget where table ``ref`` was (it was dropped, or may have moved)."""
        self._locations.pop(ref, None)

    @contextmanager
    def tagged(self, tag: CommitTag) -> Iterator[SparkSession]:
        """A session whose commits carry ``tag`` (see :func:`tagging`)."""
        with tagging(self.spark, tag) as sess:
            yield sess

    def read(self, ref: str, spark: SparkSession | None = None,
             version: int | None = None) -> DataFrame:
        """The Delta table ``ref`` (at ``version``, or the newest)."""
        return read(spark or self.spark, ref, version)


def read(spark: SparkSession, ref: str, version: int | None = None) -> DataFrame:
    """The Delta table ``ref`` (a path or a table name) at ``version`` (None: newest)."""
    reader = spark.read.format("delta")
    if version is not None:
        reader = reader.option("versionAsOf", version)
    return reader.load(ref) if is_path(ref) else reader.table(ref)


def read_stream(spark: SparkSession, ref: str, options: dict[str, str]) -> DataFrame:
    """A streaming read of the Delta table ``ref`` (a path or a table name) with ``options``."""
    reader = spark.readStream.format("delta").options(**options)
    return reader.load(ref) if is_path(ref) else reader.table(ref)


def read_changes(spark: SparkSession, ref: str, starting_version: int | None) -> DataFrame:
    """A streaming read of the change data feed of the Delta table ``ref``, from
    ``starting_version`` (None: the table's current state, then its changes):
    its rows with ``_change_type`` and ``_commit_version``."""
    options = {"readChangeFeed": "true"}
    if starting_version is not None:
        options["startingVersion"] = str(starting_version)
    return read_stream(spark, ref, options)


def append(frame: DataFrame, ref: str, *, tag: CommitTag | None = None,
           file_rows: int | None = None, txn: tuple[str, int] | None = None,
           new_columns: bool = False, existing: bool = False) -> None:
    """Append ``frame`` to the Delta table ``ref`` (a path or a table name).

    ``tag``: the commit's userMetadata; ``file_rows``: the most rows a file
    holds; ``txn``: (application id, version), which makes the append
    idempotent (Delta skips a version at or below one its log records for the
    application); ``new_columns``: the append may add columns (``mergeSchema``);
    ``existing``: the table must be there, and the append fails where it is
    not (an append through Spark's table writer), where otherwise it would
    make a new table.
    """
    options: dict[str, str] = {}
    if tag is not None:
        options["userMetadata"] = tag.json()
    if file_rows is not None:
        options["maxRecordsPerFile"] = str(file_rows)
    if txn is not None:
        options.update(txnAppId=txn[0], txnVersion=str(txn[1]))
    if new_columns:
        options["mergeSchema"] = "true"
    if existing:
        frame.writeTo(sql_table(ref)).options(**options).append()
    else:
        save(frame.write.format("delta").mode("append").options(**options), ref)


def save(writer: DataFrameWriter, ref: str) -> None:
    """Run ``writer`` (format, mode and options set) into the table ``ref``."""
    if is_path(ref):
        writer.save(ref)
    else:
        writer.saveAsTable(ref)


#: Each thread's session for tagged commits, per classic session: (id of the
#: session, thread id) -> (the session, its writer).
_WRITERS: dict[tuple[int, int], tuple[SparkSession, SparkSession]] = {}
#: Per Spark Connect session (by id): the lock its tagged commits hold.
_TAG_LOCKS: dict[int, threading.RLock] = {}
_LOCK = threading.Lock()

#: Settings a tagged commit runs with. MERGE sources here are checkpointed and
#: deterministic: copying them first is waste. A union keeps its inputs'
#: partitions apart (Spark would merge them pairwise where the inputs are
#: partitioned alike), so rows a write keeps in separate inputs get files of
#: their own: a take's leased tasks apart from the others (``Transaction.replace``).
#: Parquet without dictionaries: task ids (and many payloads) are unique per row,
#: and a file of 20,000 rows stays under the dictionary's size limit, so the
#: writer builds a dictionary as big as the column for nothing.
COMMIT_SETTINGS = {"spark.databricks.delta.merge.materializeSource": "none",
                   "spark.sql.unionOutputPartitioning": "false",
                   "parquet.enable.dictionary": "false"}


def is_connect(spark: SparkSession) -> bool:
    """Whether ``spark`` is a Spark Connect client's session."""
    return type(spark).__module__.startswith("pyspark.sql.connect")


def writer_session(spark: SparkSession) -> SparkSession:
    """The calling thread's session of classic ``spark``'s application for tagged
    commits (its ``newSession``), made once."""
    key = (id(spark), threading.get_ident())
    with _LOCK:
        found = _WRITERS.get(key)
    if found is not None and found[0] is spark:
        return found[1]
    writer = spark.newSession()
    for name, value in COMMIT_SETTINGS.items():
        writer.conf.set(name, value)
    with _LOCK:
        _WRITERS[key] = (spark, writer)
    return writer


@contextmanager
def tagging(spark: SparkSession, tag: CommitTag) -> Iterator[SparkSession]:
    """A session whose commits carry ``tag`` (Delta reads ``userMetadata`` from the
    session's settings), so that threads tag their commits apart.

    Classic: the thread's own session (:func:`writer_session`). Spark Connect:
    ``spark`` itself, its settings held for the block by one thread at a time;
    a DataFrame of one Connect session cannot meet another's, and the frames
    a commit writes come from the caller's.
    """
    if not is_connect(spark):
        with settings(writer_session(spark), {USER_METADATA: tag.json()}) as sess:
            yield sess
        return
    with _LOCK:
        lock = _TAG_LOCKS.setdefault(id(spark), threading.RLock())
    with lock, settings(spark, {USER_METADATA: tag.json(), **COMMIT_SETTINGS}) as sess:
        yield sess


@contextmanager
def settings(spark: SparkSession, values: dict[str, str]) -> Iterator[SparkSession]:
    """``spark`` with ``values`` set for the block, then as it was: a block inside
    another (an operation a callback or a test runs while one is under way, in
    the same thread) leaves the outer one's tag in place.

    A Spark Connect client reads, sets and restores them in one Config call
    each (:func:`_config`), where ``spark.conf`` sends a call per setting: a
    round trip to the server each."""
    if not is_connect(spark):
        previous = {name: spark.conf.get(name, None) for name in values}
        for name, value in values.items():
            spark.conf.set(name, value)
        try:
            yield spark
        finally:
            for name, was in previous.items():
                if was is None:
                    spark.conf.unset(name)
                else:
                    spark.conf.set(name, was)
        return
    from pyspark.sql.connect import proto

    def pairs(items: Mapping[str, str | None]) -> list[Any]:
        return [proto.KeyValue(key=k) if v is None else proto.KeyValue(key=k, value=v)
                for k, v in items.items()]
    request = proto.ConfigRequest
    previous = dict(_config(spark, request.Operation(
        get_with_default=request.GetWithDefault(pairs=pairs(dict.fromkeys(values))))))
    _config(spark, request.Operation(set=request.Set(pairs=pairs(values))))
    try:
        yield spark
    finally:
        kept = {k: v for k, v in previous.items() if v is not None}
        if kept:
            _config(spark, request.Operation(set=request.Set(pairs=pairs(kept))))
        if len(kept) < len(previous):
            _config(spark, request.Operation(unset=request.Unset(
                keys=[k for k in previous if k not in kept])))


def _config(spark: SparkSession, operation: Any) -> list[tuple[str, str | None]]:
    """One Config call of the Spark Connect client ``spark`` (a
    ``ConfigRequest.Operation``): the pairs it answers, its warnings raised
    as ``spark.conf`` raises them."""
    result = spark.client.config(operation)
    for warning in result.warnings:
        warnings.warn(warning, stacklevel=3)
    return list(result.pairs)
