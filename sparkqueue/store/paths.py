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
        self._writers = threading.local()  # each thread's session for tagged commits

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

    @contextmanager
    def tagged(self, tag: CommitTag) -> Iterator[SparkSession]:
        """A session whose commits carry ``tag``: the calling thread's own, so that
        threads tag their commits apart (Delta reads ``userMetadata`` from the
        session's settings)."""
        sess = getattr(self._writers, "session", None)
        if sess is None:
            sess = new_session(self.spark)
            # MERGE sources here are checkpointed and deterministic: copying them is waste.
            sess.conf.set("spark.databricks.delta.merge.materializeSource", "none")
            self._writers.session = sess
        sess.conf.set(USER_METADATA, tag.json())
        yield sess

    def read(self, path: str, spark: SparkSession | None = None,
             version: int | None = None) -> DataFrame:
        reader = (spark or self.spark).read.format("delta")
        if version is not None:
            reader = reader.option("versionAsOf", version)
        return reader.load(path)


def new_session(spark: SparkSession) -> SparkSession:
    """A session of ``spark``'s application with settings of its own: a classic
    session's ``newSession``, a Spark Connect session's server-side clone."""
    clone = getattr(type(spark), "cloneSession", None)
    return clone(spark) if clone is not None else spark.newSession()
