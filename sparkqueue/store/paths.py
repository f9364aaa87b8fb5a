"""A queue root's table paths, reads, and tagged sessions: what the rest of the store builds on."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

from pyspark.sql import DataFrame, SparkSession

from .schema import USER_METADATA, CommitTag


class Paths:
    """Where a root's tables are, and the sessions that write them."""

    def __init__(self, spark: SparkSession, root: str) -> None:
        self.spark = spark
        self.root = root.rstrip("/")
        self._folders: dict[str, str] = {}  # tube: its folder's name, where not the tube's

    def place(self, tube: str, folder: str | None) -> None:
        """Where tube ``tube``'s tables are: ``tubes/<folder>`` (None: ``tubes/<tube>``).
        The registry row of a tube names its folder when a dropped tube of the
        same name left one behind (see :meth:`Layout.free_folder`)."""
        if folder is None or folder == tube:
            self._folders.pop(tube, None)
        else:
            self._folders[tube] = folder

    @property
    def registry(self) -> str:
        return f"{self.root}/_registry"

    @property
    def stats(self) -> str:
        """The statistics snapshots the sweeper appends (one row per tube per pass)."""
        return f"{self.root}/_stats"

    def inbox(self, tube: str) -> str:
        return f"{self.tube_dir(tube)}/inbox"

    def tasks(self, tube: str) -> str:
        return f"{self.tube_dir(tube)}/tasks"

    def tube_dir(self, tube: str) -> str:
        return f"{self.root}/tubes/{self._folders.get(tube, tube)}"

    @contextmanager
    def tagged(self, tag: CommitTag) -> Iterator[SparkSession]:
        """A session whose commits carry ``tag`` (see :func:`tagging`)."""
        with tagging(self.spark, tag) as sess:
            yield sess

    def read(self, path: str, spark: SparkSession | None = None,
             version: int | None = None) -> DataFrame:
        reader = (spark or self.spark).read.format("delta")
        if version is not None:
            reader = reader.option("versionAsOf", version)
        return reader.load(path)


#: Each thread's session for tagged commits, per classic session: (id of the
#: session, thread id) -> (the session, its writer).
_WRITERS: dict[tuple[int, int], tuple[SparkSession, SparkSession]] = {}
#: Per Spark Connect session (by id): the lock its tagged commits hold.
_TAG_LOCKS: dict[int, threading.RLock] = {}
_LOCK = threading.Lock()

#: Settings a tagged commit runs with. MERGE sources here are checkpointed and
#: deterministic: copying them first is waste.
COMMIT_SETTINGS = {"spark.databricks.delta.merge.materializeSource": "none"}


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
        with _settings(writer_session(spark), {USER_METADATA: tag.json()}) as sess:
            yield sess
        return
    with _LOCK:
        lock = _TAG_LOCKS.setdefault(id(spark), threading.RLock())
    with lock, _settings(spark, {USER_METADATA: tag.json(), **COMMIT_SETTINGS}) as sess:
        yield sess


@contextmanager
def _settings(spark: SparkSession, settings: dict[str, str]) -> Iterator[SparkSession]:
    """``spark`` with ``settings`` for the block, then as it was: a block inside
    another (an operation a callback or a test runs while one is under way, in
    the same thread) leaves the outer one's tag in place."""
    previous = {name: spark.conf.get(name, None) for name in settings}
    for name, value in settings.items():
        spark.conf.set(name, value)
    try:
        yield spark
    finally:
        for name, was in previous.items():
            if was is None:
                spark.conf.unset(name)
            else:
                spark.conf.set(name, was)
