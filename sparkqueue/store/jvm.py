"""The JVM of a classic session: whether it is there, Spark's logging, and files read
through Hadoop's FileSystem (no Spark job).

Only a classic SparkSession (pyspark in the driver's process) has a JVM; a
Spark Connect client has none. :func:`jvm_of` is where the store finds out.
"""

from __future__ import annotations

import json
import re
from typing import Any
from urllib.parse import urlparse

from py4j.java_gateway import JavaClass
from py4j.protocol import Py4JJavaError
from pyspark.sql import SparkSession

from .files import delta_log

__all__ = ["HadoopFiles", "delta_classes", "jvm_of", "quiet_task_failures"]

#: the class of sparkqueue's log store for S3 (sparkqueue.objectstore.LOG_STORE), whose
#: ``listAfter`` lists a log folder from a key on (one S3 request, not the folder)
LISTER = "sparkqueue.delta.ConditionalPutLogStore"
S3A = "org.apache.hadoop.fs.s3a.S3AFileSystem"
COMMIT_FILE = re.compile(r"^(\d{20})\.json$")


def jvm_of(spark: SparkSession) -> Any | None:
    """The py4j gateway's JVM view of a classic session; None over Spark Connect."""
    try:
        return spark.sparkContext._jvm
    except Exception:  # Spark Connect: no SparkContext in the client
        return None


def delta_classes(jvm: Any) -> bool:
    """Whether Delta's internal classes the accelerator uses are on the JVM's class path
    (open-source Delta's names; other distributions name them otherwise)."""
    names = ("org.apache.spark.sql.delta.DeltaLog",
             "org.apache.spark.sql.delta.OptimisticTransaction")
    try:  # py4j names a class it can load a JavaClass, anything else a JavaPackage
        return all(isinstance(getattr(jvm, n), JavaClass) for n in names)
    except Exception:
        return False


def quiet_task_failures(spark: SparkSession) -> None:
    """Keep Spark from logging a stack trace per failed task.

    sparkqueue fails MERGEs on purpose (``raise_error`` guards: a batch with
    a task in the wrong state writes nothing) and reports them as typed errors.
    Over Spark Connect the server's logging is its own.
    """
    jvm = jvm_of(spark)
    if jvm is None:
        return
    spark.sparkContext.setLogLevel("ERROR")
    fatal = jvm.org.apache.logging.log4j.Level.FATAL
    for name in ("org.apache.spark.executor.Executor", "org.apache.spark.scheduler.TaskSetManager",
                 "org.apache.spark.scheduler.TaskSchedulerImpl",
                 "org.apache.spark.sql.delta", "org.apache.spark.util.Utils"):
        jvm.org.apache.logging.log4j.core.config.Configurator.setLevel(name, fatal)


class HadoopFiles:
    """:class:`~sparkqueue.store.files.LogFiles` through Hadoop's FileSystem in the
    driver's JVM: a few JVM round trips a file, no Spark job (every operation
    reads the log, so this is most of what the accelerator saves)."""

    deletes = True

    def __init__(self, spark: SparkSession, jvm: Any) -> None:
        self.spark = spark
        self.jvm = jvm
        self._fs: dict[tuple[str, str], Any] = {}  # (scheme, authority): FileSystem
        self._path_class = jvm.org.apache.hadoop.fs.Path  # looked up once: a py4j call a name
        # (scheme, authority): the log store class that lists S3A from a key, or None
        self._listers: dict[tuple[str, str], Any] = {}

    def _path(self, file: str) -> tuple[Any, Any]:
        path = self._path_class(file)
        parts = urlparse(file)
        fs = self._fs.get((parts.scheme, parts.netloc))
        if fs is None:
            fs = path.getFileSystem(self.spark.sparkContext._jsc.hadoopConfiguration())
            self._fs[(parts.scheme, parts.netloc)] = fs
        return path, fs

    def exists(self, file: str) -> bool:
        path, fs = self._path(file)
        return bool(fs.exists(path))

    def read(self, file: str) -> str | None:
        """Opened without asking first whether it is there: on S3 that question is a
        request of its own (two when the answer is no)."""
        path, fs = self._path(file)
        try:
            stream = fs.open(path)
        except Py4JJavaError as e:
            if "FileNotFoundException" in str(e.java_exception.getClass().getName()):
                return None
            raise
        try:
            return str(self.jvm.org.apache.commons.io.IOUtils.toString(stream, "UTF-8"))
        finally:
            stream.close()

    def read_many(self, files: list[str]) -> dict[str, str]:
        found = {f: self.read(f) for f in files}
        return {f: t for f, t in found.items() if t is not None}

    def latest_version(self, table: str, known: int,
                       texts: dict[int, str] | None = None) -> int | None:
        """From ``known`` (or the last checkpoint), the commit files that follow it:
        on S3A one listing from ``known``'s commit file on, elsewhere a probe of
        each next file. It reads no commit file, so ``texts`` stays as it was.
        A table made anew at the same place, whose newest commit is behind
        ``known``, is read from its start."""
        given = known
        if known < 0:
            last = self.read(delta_log(table, "_last_checkpoint"))
            known = -1 if last is None else int(json.loads(last)["version"])
        listed = self._listed_from(table, max(known, 0))
        if listed is not None:
            return listed
        found = known
        while self.exists(delta_log(table, f"{found + 1:020d}.json")):
            found += 1
        if found == known and not self.exists(delta_log(table)):
            return None
        if found == known == given >= 0 and not self.exists(
                delta_log(table, f"{known:020d}.json")):
            return self.latest_version(table, -1)  # made anew, behind ``known``: from its start
        return found

    def latest_versions(self, tables: dict[str, int],
                        texts: dict[str, dict[int, str]]) -> dict[str, int | None]:
        """:meth:`latest_version` of each table: no Spark job to share."""
        return {table: self.latest_version(table, known) for table, known in tables.items()}

    def _listed_from(self, table: str, version: int) -> int | None:
        """The newest commit file of ``table`` from ``version``'s on, by one S3
        listing (the log store's ``listAfter``); None when none was found or
        this is not S3A with sparkqueue's log store loaded (then probe)."""
        path, fs = self._path(delta_log(table, f"{version:020d}.json"))
        lister = self._lister(table, fs)
        if lister is None:
            return None
        entries = lister.listAfter(fs, fs.makeQualified(path))
        versions = [int(m.group(1)) for e in (entries or [])
                    if (m := COMMIT_FILE.match(str(e.getPath().getName())))]
        return max(versions, default=None)

    def _lister(self, table: str, fs: Any) -> Any | None:
        """The log store class whose ``listAfter`` lists ``fs`` (S3A's) from a key;
        None for another file system or where it is not loaded. Found once per
        file system (each look is a JVM round trip)."""
        parts = urlparse(table)
        key = (parts.scheme, parts.netloc)
        if key not in self._listers:
            lister = self.jvm
            for part in LISTER.split("."):
                lister = getattr(lister, part)
            self._listers[key] = lister if (isinstance(lister, JavaClass)
                                            and fs.getClass().getName() == S3A) else None
        return self._listers[key]

    def folders(self, folder: str) -> list[str]:
        path, fs = self._path(folder)
        if not fs.exists(path):
            return []
        return sorted(str(f.getPath().getName()) for f in fs.listStatus(path) if f.isDirectory())

    def delete(self, folder: str) -> bool:
        path, fs = self._path(folder)
        fs.delete(path, True)
        return True
