"""Small files of a queue root (the Delta log's commit and checksum files), read the
portable way: through Spark's own readers, which a Spark Connect client has.

:class:`LogFiles` is what the store asks of storage beyond Delta's SQL; the
JVM accelerator's version (Hadoop's FileSystem, no Spark job) is
:class:`sparkqueue.store.jvm.HadoopFiles`.
"""

from __future__ import annotations

from typing import Protocol

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from ..objectstore import is_s3

__all__ = ["LogFiles", "SparkFiles", "delta_log", "is_missing_path"]

MISSING_PATH = ("PATH_NOT_FOUND", "FileNotFoundException", "No such file")
#: Characters that a Hadoop path glob reads as a pattern: a table path holding one
#: is not probed through a glob (:meth:`SparkFiles.latest_version`)
GLOB_CHARS = "{}[]*?\\"
#: Commit files one probe of :meth:`SparkFiles.latest_version` looks for
PROBE = 16


def is_missing_path(e: BaseException) -> bool:
    """Whether a read failed because the file or folder is not there."""
    return any(m in str(e) for m in MISSING_PATH)


def delta_log(table: str, name: str = "") -> str:
    """A file of the Delta log of the table at ``table`` (or the log folder)."""
    return f"{table}/_delta_log/{name}" if name else f"{table}/_delta_log"


class LogFiles(Protocol):
    """Reads of small files, and a table's newest version, without Delta's state."""

    #: whether :meth:`delete` can delete a folder
    deletes: bool

    def read(self, file: str) -> str | None:
        """The text of ``file``; None when it is not there."""

    def read_many(self, files: list[str]) -> dict[str, str]:
        """The texts of those of ``files`` that are there, by file."""

    def latest_version(self, table: str, known: int,
                       texts: dict[int, str] | None = None) -> int | None:
        """The newest version of the Delta table at ``table``, looked for from
        ``known`` (-1: nothing known); None when it has no log. The commit
        files it read on the way, by version, go into ``texts`` when given."""

    def latest_versions(self, tables: dict[str, int],
                        texts: dict[str, dict[int, str]]) -> dict[str, int | None]:
        """:meth:`latest_version` of each table, from its known version, in one look
        where it can; the commit files it read go into ``texts`` by table."""

    def folders(self, folder: str) -> list[str]:
        """The names of the folders in ``folder`` ([] when it is not there)."""

    def delete(self, folder: str) -> bool:
        """Delete ``folder`` and everything in it; False when this cannot."""


class SparkFiles:
    """:class:`LogFiles` through Spark: each read is a Spark job.

    The newest version, when a version is already known, is the newest of the
    commit files from it on that a glob read finds (one Spark job, where
    Delta's own answer plans a command and reads its log); with none known,
    or none of those found (a table gone or made anew), Delta's own answer
    (``DESCRIBE HISTORY ... LIMIT 1``): there is no file listing for a
    client to make. On S3 always Delta's answer: Hadoop reads a glob by
    listing the whole folder (the log's every commit and checksum file kept),
    where Delta's own listing starts at the version it needs (sparkqueue's log
    store). A folder cannot be deleted this way.
    """

    deletes = False

    def __init__(self, spark: SparkSession) -> None:
        self.spark = spark

    def read(self, file: str) -> str | None:
        try:
            row = self.spark.read.text(file, wholetext=True).first()
        except Exception as e:
            if is_missing_path(e):
                return None
            raise
        return "" if row is None else str(row[0])

    def read_many(self, files: list[str]) -> dict[str, str]:
        if len(files) <= 1:
            found = {f: self.read(f) for f in files}
            return {f: t for f, t in found.items() if t is not None}
        try:
            rows = (self.spark.read.text(files, wholetext=True)
                    .select("value", F.col("_metadata.file_name")).collect())
        except Exception as e:
            if not is_missing_path(e):
                raise
            found = {f: self.read(f) for f in files}  # one is gone: each on its own
            return {f: t for f, t in found.items() if t is not None}
        texts = {str(r[1]): str(r[0]) for r in rows}
        return {f: texts[f.rsplit("/", 1)[-1]] for f in files if f.rsplit("/", 1)[-1] in texts}

    def latest_version(self, table: str, known: int,
                       texts: dict[int, str] | None = None) -> int | None:
        if self._probes(table, known):
            found = {table: texts if texts is not None else {}}
            newest = self._newest_commits({table: known}, found).get(table)
            while newest is not None and newest == known + PROBE - 1:  # all there: look on
                known = newest
                newest = self._newest_commits({table: known}, found).get(table)
            if newest is not None:
                return newest
            # not even ``known`` is there (the table is gone or made anew): ask Delta
        try:
            row = self.spark.sql(f"DESCRIBE HISTORY delta.`{table}` LIMIT 1").first()
        except Exception as e:
            text = str(e)
            if is_missing_path(e) or "DELTA_MISSING_DELTA_TABLE" in text \
                    or "is not a Delta table" in text:
                return None
            raise
        return None if row is None else int(row["version"])

    def latest_versions(self, tables: dict[str, int],
                        texts: dict[str, dict[int, str]]) -> dict[str, int | None]:
        """Tables probed from a known version (:meth:`latest_version`), all of them
        in one Spark job (a take's inbox and tasks table); each on its own where
        that probe finds one that is not there or all of its files there."""
        probed = {t: k for t, k in tables.items() if self._probes(t, k)}
        found = self._newest_commits(probed, texts) if probed else {}
        out: dict[str, int | None] = {}
        for table, known in tables.items():
            newest = found.get(table)
            if newest is None or newest == known + PROBE - 1:  # gone, or more may follow
                newest = self.latest_version(table, known if newest is None else newest,
                                             texts.setdefault(table, {}))
            out[table] = newest
        return out

    def _probes(self, table: str, known: int) -> bool:
        """Whether the newest version of ``table`` is looked for by reading the
        commit files after ``known`` (:meth:`latest_version`)."""
        return known >= 0 and not any(c in table for c in GLOB_CHARS) and not is_s3(table)

    def _newest_commits(self, tables: dict[str, int],
                        texts: dict[str, dict[int, str]]) -> dict[str, int | None]:
        """The newest of the commit files ``known`` .. ``known + PROBE - 1`` of each
        table (one Spark job naming them in a glob per table); {} where one of
        them has none there (each is then probed on its own). The texts of
        those after ``known`` go into ``texts``: a commit's reader next asks
        for them (the take that follows another's commit replays it, an
        ingest reads the puts since)."""
        try:  # a glob that finds nothing fails as the read is made (classic) or run
            frames = [self._probe_frame(table, known).select(F.lit(table).alias("table"), "*")
                      for table, known in tables.items()]
            union = frames[0]
            for frame in frames[1:]:
                union = union.unionByName(frame)
            rows = union.collect()
        except Exception as e:
            if is_missing_path(e):
                return {}
            raise
        out: dict[str, int | None] = {}
        for table, name, text in rows:
            version = int(str(name).split(".")[0])
            out[table] = max(version, out.get(table) or -1)
            if text is not None:
                texts.setdefault(table, {})[version] = str(text)
        return out

    def _probe_frame(self, table: str, known: int) -> DataFrame:
        """The commit files ``known`` .. ``known + PROBE - 1`` of ``table`` that are
        there, named in a glob: each one's name, and its text but ``known``'s."""
        names = ",".join(f"{v:020d}" for v in range(known, known + PROBE))
        return (self.spark.read.text(delta_log(table, f"{{{names}}}.json"), wholetext=True)
                .select(F.col("_metadata.file_name").alias("name"),
                        F.when(F.col("_metadata.file_name") != f"{known:020d}.json",
                               F.col("value")).alias("text")))

    def folders(self, folder: str) -> list[str]:
        """The tube folders under ``folder`` that hold a table, found by reading their
        first commit files (a client cannot list folders)."""
        try:
            rows = (self.spark.read.text(f"{folder}/*/*/_delta_log/00000000000000000000.json")
                    .select(F.col("_metadata.file_path")).distinct().collect())
        except Exception as e:
            if is_missing_path(e):
                return []
            raise
        return sorted({str(r[0]).split("/_delta_log/")[0].rsplit("/", 2)[-2] for r in rows})

    def delete(self, folder: str) -> bool:
        return False
