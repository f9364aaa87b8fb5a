"""The store's protocol: the storage primitives whose way differs between the two
engines, each with its contract.

A :class:`~sparkqueue.store.layout.Layout` holds one :class:`Store`, chosen once
when it is made (:func:`sparkqueue.store.layout.open_store`):

- :class:`~sparkqueue.store.portable.PortableStore`: public Spark SQL and
  Spark's readers only, so it runs as a Spark Connect client too;
- :class:`~sparkqueue.store.txn.AcceleratedStore`: Delta's transaction API
  and Hadoop's FileSystem in the driver's JVM, on a classic session.

What both do alike (MERGE, UPDATE and DELETE statements, reads, the Delta log
read as files) is the layout's own, through the store's :class:`LogFiles`.
The engine asks the store, never which store it is: where a primitive has no
portable form (:attr:`Store.commits_files` False), the take's and the
settling verbs' planners (:mod:`sparkqueue.engine.plan`) never choose the
strategies that need it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol

from pyspark.sql import DataFrame
from pyspark.sql import types as T

from .files import LogFiles
from .schema import CommitTag, Cursor, PutFile

__all__ = ["Files", "Store", "Transaction"]

#: A table's data files by name, each with its statistics (``FileLog.files_at``).
Files = dict[str, dict[str, Any]]


class Transaction(Protocol):
    """One Delta transaction on a tasks table, begun on a snapshot of it
    (:meth:`Store.begin`): Delta's newest (the accelerated store's), or the
    version its log was read at last (the portable store's append, which
    Delta checks from its own snapshot). Its commit is checked by Delta's
    rules: one that removed a file this commit removes conflicts; with
    ``read_all``, any commit at all."""

    @property
    def version(self) -> int:
        """The snapshot's version."""

    @property
    def files(self) -> Files | None:
        """The snapshot's data files with their statistics; None where not known
        without a Spark job."""

    @property
    def keeps_feed(self) -> bool:
        """Whether the table keeps a change data feed (its rows are Delta's to write)."""

    @property
    def writes_feed(self) -> bool:
        """Whether :meth:`ingest` writes the change feed rows it is given (where the
        table keeps a feed); if not, the feed shows the rows appended as inserts."""

    def fits(self, frame: DataFrame) -> bool:
        """Whether ``frame`` has the table's columns by name and type (or those and
        a payload, last, where the table has none yet: a new tube)."""

    def replace(self, removed: list[str], rows: DataFrame, tag: CommitTag, file_rows: int,
                updated_rows: int | None = None) -> tuple[int, list[dict[str, Any]]]:
        """Commit the data files ``removed`` (of :attr:`files`) gone and ``rows``
        written in their place, each partition of ``rows`` in files of its own
        of at most ``file_rows`` rows; the version committed, and the written
        files' statistics (with ``name``). An UPDATE in the table's history."""

    def ingest(self, tube: str, since: Cursor, cursor: Cursor, runs: list[DataFrame],
               changes: DataFrame | None, tag: CommitTag, removed: Files | None = None,
               local: Sequence[dict[str, Any]] = (), like: T.StructType | None = None,
               ) -> tuple[int, list[dict[str, Any]]]:
        """Commit the ingest of the puts from ``since`` (the cursor at :attr:`version`)
        to ``cursor`` (``runs``: task
        rows, some maybe leased by the same commit; ``changes``: their change
        feed rows), with the ingest's transaction id, the files ``removed``
        gone and the one-row files ``local``; the version committed and the
        written files' statistics. An append in the table's history. Of two
        ingests from ``since`` one commits: the other conflicts, or Delta
        skips it (then :class:`StaleChoice`)."""


class Store(Protocol):
    """The storage primitives of one queue root that differ by engine."""

    #: ``accelerated`` or ``portable``: the engine a Queue reports
    engine: str
    #: the log's small files (commits, checksums) and a table's newest version
    files: LogFiles
    #: whether it commits chosen data files (:meth:`remove_files`, :meth:`rewrite_files`,
    #: a transaction's ``replace`` and removals); the planners choose strategies that
    #: need it only then
    commits_files: bool

    def begin(self, path: str, *, read_all: bool = False) -> Transaction:
        """A transaction on a snapshot of the table at ``path`` (see
        :class:`Transaction`); with ``read_all`` it declares it read the whole
        table, which only a store that :attr:`commits_files` can."""

    def remove_files(self, path: str, choose: Callable[[Files], list[str] | None],
                     tag: CommitTag, rows: int | None = None, read_all: bool = False,
                     ) -> int | None:
        """Remove whole, in one commit reading no data, the files ``choose`` picks
        from the newest snapshot's; the version, or None when it picked none.
        ``rows``: the rows the commit deletes, for its metrics. ``read_all``: the
        commit has read the whole table (see :meth:`begin`). Only where
        :attr:`commits_files`."""

    def rewrite_files(self, path: str, names: list[str]) -> int:
        """Rewrite the files ``names`` into one in a commit that changes no data
        (as OPTIMIZE commits); the files removed (0 when fewer than two were
        there, and always where not :attr:`commits_files`)."""

    def purge_inbox(self, tube: str, cursor: Cursor, held: Sequence[PutFile] = ()) -> int:
        """Remove the inbox rows of the puts up to ``cursor`` (ingested) but those
        of the put files ``held``; the rows removed. Puts committing meanwhile
        are never lost: the files that stay keep every row in its place."""

    def load_file_stats(self, path: str, latest: int) -> tuple[int, Files] | None:
        """A snapshot's version (``latest``, or newer) and its files' statistics,
        where the log's commit files alone do not give them; None where
        unknown."""

    def append_if(self, path: str, row: dict[str, Any], tag: CommitTag,
                  absent: Callable[[int], bool]) -> bool | None:
        """Append the one ``row`` (column name -> value) to the table at ``path``, in a
        commit that has read all of it, where ``absent(version)`` holds of the
        snapshot that commit is checked against: True when committed, False
        when ``absent`` said no. None, having written nothing, where this
        store cannot (the caller then writes by SQL). A commit since that
        snapshot makes this one conflict, to be retried."""

    def listed_files(self, path: str, version: int) -> list[str] | None:
        """The data files of ``path`` at ``version`` as its checksum file lists
        them, where that costs no Spark job (a read of those files is then one
        job, against three for a version Delta has not read yet); None: read
        the table."""
