"""The portable store: public Spark SQL and Spark's readers only (:mod:`.protocol`),
so that it runs as a Spark Connect client, where Python has no JVM.

It commits no chosen data files (Delta's SQL cannot name files): the take's
and the settling verbs' planners then choose the statements that every Delta
runs, a MERGE or an UPDATE; the inbox is purged by a DELETE of put tokens.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from functools import cached_property
from typing import TYPE_CHECKING, Any, NoReturn

from pyspark.sql import DataFrame
from pyspark.sql import types as T

from ..errors import NotSupported
from .failures import StaleChoice
from .files import LogFiles
from .protocol import Files, Transaction
from .schema import CommitTag, Cursor, PutFile, parse_tag
from .tables import delete, keeps_feed

if TYPE_CHECKING:
    from .layout import Layout

__all__ = ["AppendTransaction", "PortableStore", "PURGE_TOKENS"]

#: Puts named by one DELETE of a purge of the inbox (:meth:`PortableStore.purge_inbox`).
PURGE_TOKENS = 1_000


class AppendTransaction:
    """The portable store's :class:`~sparkqueue.store.protocol.Transaction`: an
    ingest's append, on the newest version of a tasks table as its log shows
    it last (``files``: that version's statistics, no Spark job; a take's plan
    has just read it).

    It reads no rows, so its commit conflicts with no commit that changed
    rows: only with another ingest from the same cursor (the ingest's
    transaction id, :meth:`~sparkqueue.store.layout.Layout.write_marker`),
    which is what keeps a put from being ingested, or leased, twice. It
    writes no change feed rows of its own (``writes_feed``) and removes no
    files; its one-row files (a lease record) Spark writes, in the append.
    """

    def __init__(self, log: Layout, path: str) -> None:
        self._log = log
        self._path = path
        self.version = log.known_version(path)
        self._files: Files | None | bool = False  # read when first asked

    @property
    def files(self) -> Files | None:
        """The statistics of the table's files at :attr:`version` (no Spark job)."""
        if self._files is False:
            self._files = self._log.files_at(self._path, self.version)
        return self._files  # type: ignore[return-value]

    @cached_property
    def keeps_feed(self) -> bool:
        """The table's property, read when first asked (a SQL command, no Spark job).
        Checked before the append, not within it: a feed turned on in between
        shows the tasks the append leases as put taken."""
        return keeps_feed(self._log.spark, self._path)

    writes_feed = False

    def fits(self, frame: DataFrame) -> bool:
        """Always: the append adds a payload column where the table has none and
        conforms the rest (``mergeSchema``), as every ingest's does."""
        return True

    def ingest(self, tube: str, since: Cursor, cursor: Cursor, runs: list[DataFrame],
               changes: DataFrame | None, tag: CommitTag, removed: Files | None = None,
               local: Sequence[dict[str, Any]] = (), like: T.StructType | None = None,
               ) -> tuple[int, list[dict[str, Any]]]:
        """Append ``runs``, the one-row files ``local`` (rows of the schema ``like``,
        a take's lease record) and the marker of ``cursor`` in the session that
        carries ``tag``, skipped by Delta where an ingest from ``since``
        committed first: then :class:`StaleChoice`. ``changes`` are not written
        (:attr:`writes_feed`). Each of ``local`` is a one-row frame of its own,
        so the append writes it a file of its own, as the accelerated store
        does from the driver."""
        if removed:
            raise NotSupported("the portable engine's ingest removes no files")
        log = self._log
        if local:
            if like is None:
                raise NotSupported("one-row files need the table's schema")
            with log.tagged(tag) as sess:
                runs = [*runs, *(sess.createDataFrame(
                    [tuple(row.get(f.name) for f in like.fields)], like) for row in local)]
        if not runs:
            raise NotSupported("the portable engine's ingest appends rows: it was given none")
        log.write_marker(tube, since, cursor, runs)
        found = log.commit_of(self._path, tag.token, self.version)
        if found is None:
            raise StaleChoice(f"an ingest from {since} into {self._path} committed first")
        version = found[0]
        files, names = log.files_at(self._path, version), log.commit_files(self._path, version)
        written = [] if files is None or names is None else [
            {**files[name], "name": name} for name in names[0] if name in files]
        return version, written

    def replace(self, removed: list[str], rows: DataFrame, tag: CommitTag, file_rows: int,
                updated_rows: int | None = None) -> tuple[int, list[dict[str, Any]]]:
        raise NotSupported(f"the portable engine cannot replace chosen files of {self._path}")


class PortableStore:
    """The :class:`~sparkqueue.store.protocol.Store` of public Spark SQL, over the
    root's log reader ``log`` (a :class:`~sparkqueue.store.layout.Layout`)."""

    engine = "portable"
    commits_files = False

    def __init__(self, log: Layout, files: LogFiles) -> None:
        self.log = log
        self.files = files

    def _cannot(self, what: str) -> NoReturn:
        raise NotSupported(f"the portable engine cannot {what}: Delta's SQL names no "
                           "data files (the planners never ask it to)")

    def begin(self, path: str, *, read_all: bool = False) -> Transaction:
        """An :class:`AppendTransaction` on the newest version of ``path``; not one
        that has read the whole table (``read_all``): SQL cannot say so."""
        if read_all:
            self._cannot(f"begin a transaction on {path} that has read all of it")
        return AppendTransaction(self.log, path)

    def remove_files(self, path: str, choose: Callable[[Files], list[str] | None],
                     tag: CommitTag, rows: int | None = None, read_all: bool = False,
                     ) -> int | None:
        self._cannot(f"remove chosen files of {path}")

    def rewrite_files(self, path: str, names: list[str]) -> int:
        return 0

    def load_file_stats(self, path: str, latest: int) -> tuple[int, Files] | None:
        """From the log alone: its last checkpoint moved on through the commits
        since (:meth:`FileLog.checkpoint_stats`)."""
        return self.log.checkpoint_stats(path, latest)

    def append_if(self, path: str, row: dict[str, Any], tag: CommitTag,
                  absent: Callable[[int], bool]) -> bool | None:
        return None  # SQL cannot say a commit read the whole table: the caller MERGEs

    def listed_files(self, path: str, version: int) -> list[str] | None:
        return None  # a checksum read is a Spark job here: the table's read costs no more

    def purge_inbox(self, tube: str, cursor: Cursor, held: Sequence[PutFile] = ()) -> int:
        """A DELETE names the puts by the token each of their rows carries
        (``put_token``): a put's rows fill whole files, so Delta removes those
        files and rewrites none, and the rows not yet ingested keep their
        places (half their task ids). The tokens deleted are those in the
        table less those of the puts after ``cursor``, whose commits are read
        after the table: a put the read saw is ingested or among them (and
        when one of those commits is gone from the log, nothing is purged).
        An inbox made before its rows carried tokens is left as it is.
        ``held``: put files that lease records still read, kept whatever the
        cursor."""
        log = self.log
        if not log.inbox_has_tokens(tube):
            return 0
        inbox = log.inbox(tube)
        present = {r[0] for r in log.read(inbox).where("put_token IS NOT NULL")
                   .select("put_token").distinct().collect()}
        latest = log.latest_version(inbox)
        since = min([cursor.version, *[f.version - 1 for f in held]])
        infos = log.commit_infos(inbox, since, upto=latest)
        if [v for v, _ in infos] != list(range(since + 1, latest + 1)):
            return 0  # a commit after the cursor is gone from the log: its puts unknown
        tags = [parse_tag(info.get("userMetadata")) for _, info in infos]
        pending = {t.get("tok") for t in tags if t is not None and t["sq"] == "put"}
        done = sorted(present - pending)
        removed = 0
        for at in range(0, len(done), PURGE_TOKENS):
            chunk = ", ".join(f"'{t}'" for t in done[at:at + PURGE_TOKENS]
                              if re.fullmatch(r"[0-9a-f]{32}", t))
            if not chunk:
                continue
            tag = CommitTag.new("purge")
            before = log.latest_version(inbox)
            with log.tagged(tag) as sess:
                delete(sess, inbox, f"put_token IN ({chunk})")
            found = log.commit_of(inbox, tag.token, before)
            removed += int(found[1].get("numDeletedRows", 0)) if found else 0
        return removed
